"""Real launch failures of SGLang 0.5.23 (`generate.py` makes them; `python -m bench.accepted` scores fixes)."""
