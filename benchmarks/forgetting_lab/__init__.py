"""forgetting_lab: the laboratory beside the ``forgetting`` library.

Benchmarks (``forgetting_lab.bench``), the paper's experiments and analyses, peers' baselines
used only for comparison (``forgetting_lab.baselines``: SISA, exact ridge, full retrain, the
approximate-unlearning methods MUNKEY is compared with), dataset loaders
(``forgetting_lab.datasets``), DurableUn's toy-LM study (``forgetting_lab.durableun``), the
dataset-driven audit commands (``forgetting_lab.audits``) and the end-to-end demo. It depends
on the library; the library never imports it. Results go to ``benchmarks/results``.
"""
