"""Throughput on one generated journal: three baselines and `crashdoc diagnose` end to end.

(a) floor, (b) default iteration, (c) `journalctl -o json` into Python: bench/readers.py, each in
a fresh process. (d) the real CLI, `crashdoc diagnose --directory DIR --json`, timed as a whole process
(interpreter start-up, library load and output included; the baselines get only their read loop,
so the comparison leans against crashdoc). Cases run interleaved, round after round; medians.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from collections import Counter

from bench.common import CRASHDOC, DATA, PYTHON, ROOT, Results, bytecode_env, fmt_rate, library_folders, log, median
from bench.journal_gen import JournalSet

CASES = ("floor", "default", "json", "crashdoc")
LABELS = {
    "floor": "(a) floor: _next() + _get() x3",
    "default": "(b) systemd-python `for e in Reader`",
    "json": "(c) journalctl -o json | json.loads",
    "crashdoc": "(d) crashdoc diagnose --directory (CLI)",
}


def _env(src: str | None = None) -> dict[str, str]:
    """`src`: another source tree of crashdoc (a before/after comparison in the same run)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}:{src or ROOT / 'src'}" + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # the library cache, filled by the warm-up run; one per tree: the cache keeps one entry per library folder,
    # and two trees taking turns would each find the other's and validate the YAML again (+0.4 s a run)
    env["XDG_CACHE_HOME"] = str(DATA / ("xdg-cache-before" if src else "xdg-cache"))
    return bytecode_env(env)


def target_ratio(entries: int) -> float:
    """The issue's targets: >= 0.75 x the floor on 300k entries, >= 0.8 x on 2M (start-up weighs less)."""
    return 0.8 if entries >= 2_000_000 else 0.75


READER_CPU: dict[str, list[float]] = {}  # CPU seconds of each baseline's read loop, run by run


def run_reader(case: str, files: list[str]) -> tuple[int, float]:
    out = subprocess.run(
        [PYTHON, "-m", "bench.readers", case, *files], capture_output=True, text=True, check=True, env=_env(), cwd=ROOT
    )
    doc = json.loads(out.stdout)
    READER_CPU.setdefault(case, []).append(float(doc.get("cpu", 0.0)))
    return int(doc["entries"]), float(doc["seconds"])


def diagnose_argv(files: list[str], signatures: list[str]) -> list[str]:
    """`diagnose --directory` over the folder that holds exactly `files` (the generated journal)."""
    folders = {os.path.dirname(os.path.abspath(f)) for f in files}
    if len(folders) != 1:
        raise ValueError(f"the journal files are in {len(folders)} folders, --directory takes one")
    argv = [*CRASHDOC, "diagnose", "--json", "--directory", folders.pop()]
    for folder in signatures:
        argv += ["--signatures", folder]
    return argv


def run_crashdoc(files: list[str], signatures: list[str], src: str | None = None) -> tuple[float, float, list[dict]]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(diagnose_argv(files, signatures), capture_output=True, text=True, env=_env(src), cwd=ROOT)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode not in (0, 1):  # 1: a failure found
        raise RuntimeError(f"crashdoc diagnose failed ({out.returncode}): {out.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu, json.loads(out.stdout)["diagnoses"]


def run(
    js: JournalSet,
    results: Results,
    rounds: int = 2,
    cases: tuple[str, ...] = CASES,
    warm: bool = True,
    before_src: str | None = None,
) -> dict[str, float]:
    files = [str(f) for f in js.files]
    entries = int(js.meta["entries"])
    folders, note = library_folders()
    signatures = [str(f) for f in folders]  # the same library for (d) and (d0)
    if note:
        results.notes.append(note)
    if before_src:
        cases = (*cases, "before")
        LABELS["before"] = f"(d0) the same, crashdoc from {before_src}"
    times: dict[str, list[float]] = {c: [] for c in cases}
    diagnoses: list[dict] = []
    cpu: list[float] = []
    for c in ("floor", "crashdoc") if warm else ():  # warm the page cache
        if c in cases:
            (run_reader(c, files) if c != "crashdoc" else run_crashdoc(files, signatures))
    fast = ("floor", "crashdoc", "before")  # the ratio that matters is (d)/(a): measure those more often
    fast_rounds = 2 * rounds + 1
    for r in range(fast_rounds):
        for case in cases:
            if case not in fast and r >= rounds:
                continue
            if case == "crashdoc":
                seconds, used, diagnoses = run_crashdoc(files, signatures)
                cpu.append(used)
            elif case == "before":
                seconds, _, old = run_crashdoc(files, signatures, before_src)
                if [(d["unit"], d["signature"], d["crashes"]) for d in old] != [
                    (d["unit"], d["signature"], d["crashes"]) for d in diagnoses
                ]:
                    results.notes.append("(d0) found other diagnoses than (d)")
            else:
                n, seconds = run_reader(case, files)
                if n != entries:
                    raise RuntimeError(f"{case} read {n} entries, the journal has {entries}")
            times[case].append(seconds)
            log(f"  round {r + 1}/{fast_rounds} {case}: {seconds:.2f} s ({entries / seconds:,.0f} entries/s)")
    summarize(js, results, times, diagnoses, cpu, rounds, fast_rounds)
    return {c: entries / median(t) for c, t in times.items()}


def summarize(
    js: JournalSet,
    results: Results,
    times: dict[str, list[float]],
    diagnoses: list[dict],
    cpu: list[float],
    rounds: int,
    fast_rounds: int,
) -> None:
    """Rows: each case's median rate; ratios to (a) by medians and by each case's fastest run.

    On a shared VM one round can run 2x slower than the next; the fastest run of each case is
    its least disturbed measurement, so the target is judged on the ratio of those (the medians
    are shown beside it)."""
    entries = int(js.meta["entries"])
    files = js.files
    cases = tuple(times)
    rate = {c: entries / median(t) for c, t in times.items()}
    best = {c: entries / min(t) for c, t in times.items()}
    crashed = Counter(c["unit"] for c in js.meta["crashes"])  # type: ignore[union-attr]
    counted = {d["unit"]: d["crashes"] for d in diagnoses}
    found = ", ".join(f"{d['unit'].split('.')[0]}: {d['signature'] or 'unknown'} x{d['crashes']}" for d in diagnoses)
    results.raw["throughput"] = {
        "entries": entries,
        "files": len(files),
        "seconds": times,
        "rate": rate,
        "best": best,
        "crashdoc_cpu": cpu,
        "diagnoses": diagnoses,
        "crashes_injected": dict(crashed),
    }
    base, base_best = rate.get("floor"), best.get("floor")
    for case in cases:
        ratio = f"{rate[case] / base:.2f} x (a); fastest runs {best[case] / base_best:.2f}" if base_best else ""
        row = results.add(
            "throughput",
            LABELS[case],
            f"{fmt_rate(rate[case])} ({median(times[case]):.1f} s, fastest {min(times[case]):.1f} s)",
            ratio,
        )
        if case == "crashdoc" and base and base_best:
            want = target_ratio(entries)
            row.target = f">= {want} x (a)"
            row.ok = best[case] >= want * base_best
            extra = []
            for other, letter, want in (("default", "b", 3.0), ("json", "c", 6.0)):
                if other in rate:
                    got = best[case] / best[other]
                    extra.append(f"{got:.1f} x ({letter}) (target >= {want:.0f}: {'yes' if got >= want else 'NO'})")
            row.note = "; ".join(extra)
    floor_cpu = READER_CPU.get("floor", [])[-len(times.get("floor", [])) :]
    if cpu and floor_cpu:
        # on a shared VM the wall clock of both sides is disturbed; CPU seconds much less so
        results.raw["throughput"]["floor_cpu"] = floor_cpu
        results.add(
            "throughput",
            "(d) vs (a) in CPU seconds",
            f"{min(cpu):.2f} s whole process vs {min(floor_cpu):.2f} s read loop",
            f"{min(floor_cpu) / min(cpu):.2f} x (a)",
            note="least CPU of each case's runs: (d)'s user+sys (start-up included), (a)'s loop (process_time)",
        )
    if diagnoses or "crashdoc" in cases:
        results.add(
            "throughput",
            "(d) did the work",
            f"{len(diagnoses)} diagnoses",
            note="crashes counted / injected: "
            + ", ".join(f"{u.split('.')[0]} {counted.get(u, 0)}/{n}" for u, n in sorted(crashed.items()))
            + f"; found: {found[:300]}",
        )
    results.notes.append(
        f"throughput: {entries:,} entries in {len(files)} journal files ({js.meta.get('bytes', 0) / 1e6:.0f} MB); "
        f"(a), (d), (d0) run {fast_rounds} times, (b), (c) {rounds} times, interleaved; (d) is a whole CLI process "
        "(start-up and library load included), the baselines only their read loop."
    )
