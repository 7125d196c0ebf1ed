"""crashdoc's benchmarks: `python -m bench` runs them all and prints one table.

Every figure is a ratio against a baseline measured in the same run on the same data (the VM is
noisy: absolute rates drift by up to 2x between runs, ratios much less). Nothing here asserts a
time; `tests/unit/test_bench_smoke.py` only checks that the code runs on a tiny input.
"""
