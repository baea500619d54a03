"""Benchmarks: scripts that print side-by-side tables and write them to benchmarks/results/."""
