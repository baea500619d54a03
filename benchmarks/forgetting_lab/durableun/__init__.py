"""DurableUn at CPU scale: does LLM unlearning survive 4-bit deployment?

The seed paper's setting is an 8B LLM served as a frozen NF4 base plus BF16 LoRA adapters,
fine-tuned on TOFU (question/answer facts about fictitious authors) and then unlearned on ≈ 10 %
of the authors. This package rebuilds that setting small enough to run on two CPU cores in
minutes, with every piece explicit:

* :mod:`.corpus` — a TOFU-like corpus of fictitious authors generated from a fixed seed;
* :mod:`.model` — a small causal transformer whose linear layers carry LoRA adapters over a
  frozen base quantized to NF4 (QLoRA's layout), with exact-match evaluation;
* :mod:`.methods` — unlearning methods on the adapters: GA, GradDiff, NPO, SalUn, SCRUB, RMU
  and DURABLEUN-SAF (the quantization-aware forget loss through a straight-through INT4
  estimator);
* :mod:`.experiment` — pretrain → NF4 base → LoRA fine-tune → unlearn → FA / RA at
  BF16 / INT8 / INT4 adapters and the (ε, P)-durability certificate;
* :mod:`.minilm` — the same pipeline on a pretrained base (all-MiniLM-L6-v2, answers filled in
  at mask slots), with held-out rewordings of every forget question.
"""

from .corpus import Corpus, make_corpus
from .experiment import ExperimentConfig, prepare, run_method
from .methods import METHODS, UnlearnConfig
from .model import LoRALinear, TinyLM

__all__ = [
    "METHODS",
    "Corpus",
    "ExperimentConfig",
    "LoRALinear",
    "TinyLM",
    "UnlearnConfig",
    "make_corpus",
    "prepare",
    "run_method",
]
