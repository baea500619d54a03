"""Real-data evaluation: the QSS paper's tables, reproduced side by side in one run.

    python -m forgetting_lab.bench.paper \\
        --datasets digits,mnist,fashion_mnist,adult,sentiment,letter,diabetes,diamonds --seeds 3 \\
        --out benchmarks/results

Why one command: a reviewer of the QSS paper asks for five things — accuracy against the
baselines, the cost of a deletion, proof that deletions are exact, the ρ trade-off and the
width-versus-depth ablation. Measured separately they cannot be compared (another machine,
another load, another subsample), so this harness measures all of them on the same data, in
the same process, one after the other, and writes every table with the command that made it:

1. **Accuracy** (mean ± std over seeds). A seed is the estimators' ``random_state``: it moves
   D° (QSS) and the shards (SISA); the test split and any training subsample are fixed. Rows:
   g-only (QSS with α = 0), QSS-E, QSS-L, SISA (5 shards, logistic/ridge regression — the
   family of g), exact ridge. Regression reports Pearson r and RMSE.
2. **Deletion cost** (the paper's Table 6): t_fast (p50 and p95 of single-id forgets outside
   every D° *with* the first predict after it), t_rebuild (a measured background rebuild after
   a D° hit), the expected cost (1−q)·t_fast + q·t_rebuild with q = 1−(1−ρ)^p (ρ = the
   measured |D°|/n), SISA's per-deletion shard retrain and QSS's own fit (both measured in the
   run), and the speedups; the blocking comparison states that our SISA blocks during a
   shard retrain while QSS serves from its other instances.
3. **Exactness**: 100 random deletions in 5 batches (3 of them forced into D°), wait for
   rebuilds, refit without the rows; ``numpy.array_equal`` of test predictions and equal
   state digests. Always measured, never assumed.
4. **ρ sweep**: accuracy gap to SISA against expected-cost speedup (PNG).
5. **Width vs depth**: accuracy over b × ℓ (label mode, one instance) and level-1 cell purity
   (PNG + table).
6. **Cell purity** of every classification set and mode (RQ: level-1 cells; flat partitions:
   every table, averaged), from the public ``engine_.schema_of(r).transform``.

Nothing is ever chosen on the test split: ρ is raised above 0.5 % only by a rule on the
training size (``resolve_rho``), everything else is fixed in advance. ``--quick`` runs tiny
subsamples with one seed (for tests). See ``--help`` for every option.

Layout: :mod:`.data` (settings, the ρ rule, features), :mod:`.models` (estimator builders and
scores), :mod:`.stages` (the measurements), :mod:`.tables` (summaries, targets, CSV schemas),
:mod:`.prose` (the notes, generated from the results), :mod:`.command` (options and ``main``).
"""

from __future__ import annotations

from .command import build_parser, main, run
from .data import (
    LGBM_SUFFIX,
    PAPER_RHO,
    RHO_LADDER,
    Data,
    load_data,
    min_schema_rows,
    parse_mapping,
    resolve_rho,
)
from .models import g_only_outputs, make_qss, make_ridge, make_sisa, model_scores, score
from .stages import Results, cell_purity, evaluate, level1_purity
from .tables import (
    ACCURACY_COLUMNS,
    ALL_MODELS,
    ANCHOR_COLUMNS,
    DELETION_COLUMNS,
    EXACT_COLUMNS,
    MODELS,
    PURITY_COLUMNS,
    REGRESSION_COLUMNS,
    RUN_COLUMNS,
    RUNTIME_COLUMNS,
    SWEEP_COLUMNS,
    TARGET_COLUMNS,
    WIDTH_DEPTH_COLUMNS,
    write_tables,
)

EXPECTED_DURATION = "33-60 min on 2 cores (results/paper.md)"
"""How long a run at the defaults took (`forgetting bench` lists it)."""

__all__ = [
    "ACCURACY_COLUMNS", "ALL_MODELS", "ANCHOR_COLUMNS", "DELETION_COLUMNS", "EXACT_COLUMNS",
    "LGBM_SUFFIX", "MODELS",
    "PAPER_RHO", "PURITY_COLUMNS", "REGRESSION_COLUMNS", "RHO_LADDER", "RUNTIME_COLUMNS",
    "RUN_COLUMNS", "SWEEP_COLUMNS", "TARGET_COLUMNS", "WIDTH_DEPTH_COLUMNS", "Data", "Results",
    "build_parser", "cell_purity", "evaluate", "g_only_outputs", "level1_purity", "load_data",
    "main", "make_qss", "make_ridge", "make_sisa", "min_schema_rows", "model_scores",
    "parse_mapping", "resolve_rho", "run", "score", "write_tables",
]  # fmt: skip
