"""Single-process micro-benchmarks: diskcache_core against python-diskcache, side by side.

Run ``python -m benchmarks.micro`` from the repository root. The benchmarks live in
``bench_cache.py`` (named so that a plain ``pytest`` run never collects them); the implementations
compared are listed in ``implementations.py``; the operations and their speed targets in
``operations.py``; ``report.py`` turns pytest-benchmark's JSON into the comparison table.
"""
