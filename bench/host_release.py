"""What knowing a unit's SGLang release costs: `python -m bench.host_release [SGLANG_DIR]`.

Measured in one run, each against its baseline:
- reading the release of a unit (its launch script, then its venv's files) against reading only its flags
  from the same script (what every new run already pays), per call;
- deriving an unshipped tree in a child process (once per tree and host) against reading it back from the
  cache (every later start).
SGLANG_DIR defaults to `.cache/sglang-0.5.23/sglang` (`scripts/fetch-sglang.sh`).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from crashdoc.authoring.hostrelease import derive_in_child, derived_for
from crashdoc.remedy.launch import unit_flags
from crashdoc.remedy.release import unit_install

ROOT = Path(__file__).resolve().parents[1]


def per_call(fn: Callable[[], object], rounds: int = 200) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    tree = Path(argv[0]) if argv else ROOT / ".cache/sglang-0.5.23/sglang"
    if not (tree / "__init__.py").exists():
        print(f"no SGLang tree at {tree} (scripts/fetch-sglang.sh unpacks one)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="crashdoc-bench-") as scratch:
        work = Path(scratch)
        site = work / "venv/lib/python3.11/site-packages"
        site.mkdir(parents=True)
        (work / "venv/bin").mkdir()
        (work / "venv/pyvenv.cfg").write_text(f"home = {Path(sys.executable).resolve().parent}\nversion = 3.11.7\n")
        (work / "venv/bin/python").symlink_to(Path(sys.executable).resolve())
        shutil.copytree(tree, site / "sglang", ignore=shutil.ignore_patterns("*.pyc", "__pycache__"))
        (site / "sglang/_version.py").write_text("__version__ = version = '0.5.99'\n")
        script = work / "launch.sh"
        script.write_text(f"#!/bin/bash\nsource {work}/venv/bin/activate\nexec python -m sglang.launch_server --tp 8\n")
        argv_ = (str(script),)
        flags = per_call(lambda: unit_flags(argv_))
        release = per_call(lambda: unit_install(argv_))
        print(
            f"release of a unit        {release * 1e3:8.3f} ms   flags of the same unit {flags * 1e3:8.3f} ms"
            f"   ratio {release / flags:5.2f}"
        )
        t = time.perf_counter()
        library, cached = derived_for(site / "sglang", "0.5.99", work / "cache", derive_in_child)
        derive = time.perf_counter() - t
        assert not cached
        t = time.perf_counter()
        _, cached = derived_for(site / "sglang", "0.5.99", work / "cache", derive_in_child)
        read = time.perf_counter() - t
        assert cached
        print(
            f"derive in a child        {derive:8.2f} s    cached read            {read:8.2f} s"
            f"    ratio {derive / read:5.1f}  ({len(library)} signatures)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
