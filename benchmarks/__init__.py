"""Side-by-side benchmarks of pytest-failover against the tools users would pick instead.

Run ``python -m benchmarks --help``. Benchmarks are never tests: they print figures
(and write them to ``benchmarks/results/``), they assert nothing about timing.
"""
