"""Pasted logs of growing size: `crashdoc explain FILE` and `crashdoc diagnose --file FILE`, peak RSS and time.

A log of SGLang's Decode batch lines ending in the rank's fatal traceback (the shape of a long run's log file)
at 1, 5 and 50 MB, each case a fresh process, interleaved round after round. Peak RSS is the process's
high-water mark (`ru_maxrss` of a wrapper's only child), beside bare Python's and the one-line explain's:
reading in blocks (sources/textinput.py) keeps the peak independent of the log's size. Target (issue 26):
`explain` of a 50 MB paste peaks <= 60 MB.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import CRASHDOC, PYTHON, ROOT, Results, bytecode_env, log, median

PEAK_TARGET_MB = 60.0
SIZES_MB = (1, 5, 50)
BATCH = (
    "[2026-12-01 10:{m:02d}:{s:02d} TP0] Decode batch, #running-req: 12, #token: 40312, token usage: 0.21, "
    "gen throughput (token/s): 1234.5, #queue-req: 0\n"
)
FATAL = """[2026-12-01 11:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 2100, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File "/usr/lib/python3/dist-packages/sglang/srt/model_executor/model_runner.py", line 400, in init_memory_pool
    raise RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
"""
# runs `argv` as its only child and prints the child's peak RSS (KB) and CPU seconds
_WRAPPER = (
    "import resource, subprocess, sys\n"
    "out = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "if out.returncode not in (0, 1): sys.exit(out.stderr.decode()[-800:])\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(u.ru_maxrss, u.ru_utime + u.ru_stime, out.returncode)\n"
)


def write_log(path: Path, megabytes: int) -> None:
    size, i = 0, 0
    with path.open("w", encoding="utf-8") as f:
        while size < megabytes * 1024 * 1024:
            line = BATCH.format(m=i // 60 % 60, s=i % 60)
            f.write(line)
            size += len(line)
            i += 1
        f.write(FATAL)


def measure(argv: list[str], env: dict[str, str], status: int = 0) -> tuple[float, float, float]:
    """(peak RSS MB, wall seconds, CPU seconds) of one run of `argv`, which must exit with `status` (1: the
    log's failure was found)."""
    started = time.perf_counter()
    out = subprocess.run([PYTHON, "-c", _WRAPPER, *argv], capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[2:])} failed: {out.stderr[-800:]}")
    kb, cpu, code = out.stdout.split()
    if int(code) != status:
        raise RuntimeError(f"{' '.join(argv[2:])} exited {code}, not {status}")
    return int(kb) / 1024, wall, float(cpu)


def run(results: Results, rounds: int = 3) -> dict[str, list[tuple[float, float, float]]]:
    work = Path(tempfile.mkdtemp(prefix="crashdoc-bench-paste-"))
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}:{ROOT / 'src'}" + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["XDG_CACHE_HOME"] = str(work / "cache")
    env = bytecode_env(env)
    try:
        one = work / "one-line.log"
        one.write_text(BATCH.format(m=0, s=0))
        cases: dict[str, list[str]] = {"bare Python (`python -c pass`)": [PYTHON, "-c", "pass"]}
        cases["explain, one line"] = [*CRASHDOC, "explain", str(one)]
        for mb in SIZES_MB:
            path = work / f"paste-{mb}mb.log"
            write_log(path, mb)
            cases[f"explain, {mb} MB paste"] = [*CRASHDOC, "explain", str(path)]
        big = work / f"paste-{SIZES_MB[-1]}mb.log"
        cases[f"diagnose --file, {SIZES_MB[-1]} MB text log"] = [*CRASHDOC, "diagnose", "--file", str(big)]
        measure(cases["explain, one line"], env)  # the library cache and bytecode in place
        got: dict[str, list[tuple[float, float, float]]] = {case: [] for case in cases}
        for _ in range(rounds):
            for case, argv in cases.items():
                got[case].append(measure(argv, env, 1 if "MB" in case else 0))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results.raw["paste"] = got
    for case, runs in got.items():
        peak = max(r[0] for r in runs)
        wall = median([r[1] for r in runs])
        cpu = median([r[2] for r in runs])
        row = results.add("paste", f"{case}: peak RSS", f"{peak:.1f} MB", note=f"wall {wall:.2f} s, CPU {cpu:.2f} s")
        if "paste" in case or "text log" in case:
            row.target = f"<= {PEAK_TARGET_MB:.0f} MB"
            row.ok = peak <= PEAK_TARGET_MB
        log(f"  {case}: peak {peak:.1f} MB, wall {wall:.2f} s, CPU {cpu:.2f} s")
    return got
