"""``forgetting audit NAME`` commands that run the library's audits on the lab's datasets and
models (LiRA membership inference; quantization durability with DurableUn's toy LM).

Each module has ``configure(parser)`` and ``run(args) -> int`` and is registered in the
``forgetting.audits`` entry-point group (benchmarks/pyproject.toml).
"""
