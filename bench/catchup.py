"""Catch-up and journal matches: the daemon and `diagnose` against the bare systemd-python loop, in one run.

Two generated journals of the same size: the usual one, where the watched SGLang units write about half
of the entries (`watched` 0.55), and one where they write a tenth (`--watched 0.1`; the noisy neighbours
the rest). On each, every case a fresh process, interleaved round after round:

- (a) the bare loop: systemd-python `_next()` + `_get()` of MESSAGE, _PID, _SYSTEMD_UNIT over every entry
  (bench/readers.py `floor`; the read loop only, no interpreter start-up);
- (d) `crashdoc diagnose --json --directory DIR`, the whole process;
- (r) `crashdoc run --directory DIR` with a saved cursor at the journal's head (a daemon that was down
  while all of it was written), from its start to its "caught up with the journal" line: interpreter
  start-up, library load, HTTP server and state saves included.

Rates are entries *in the files* per second. Targets (issue 26): (r) >= 0.75x (a) on the usual journal;
(d) >= 1.2x (a) when the units are half of it, >= 3x when they are a tenth. Judged on each case's fastest
run (the least disturbed on a shared VM), medians and CPU seconds beside them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import CRASHDOC, ROOT, Results, cpu_seconds, library_folders, log, median, proc_status
from bench.journal_gen import WATCHED, JournalSet, build
from bench.memory import _metrics, _port
from bench.throughput import READER_CPU, _env, run_crashdoc, run_reader

CASES = ("floor", "diagnose", "daemon")
LABELS = {
    "floor": "(a) bare loop",
    "diagnose": "(d) crashdoc diagnose",
    "daemon": "(r) crashdoc run, catch-up",
    "diagnose0": "(d0) diagnose, crashdoc from --before-src",
    "daemon0": "(r0) catch-up, crashdoc from --before-src",
}
TARGETS = {("daemon", WATCHED): 0.75, ("diagnose", WATCHED): 1.2, ("diagnose", 0.1): 3.0}


def head_cursor(js: JournalSet) -> str:
    from systemd import journal

    r = journal.Reader(files=[str(f) for f in js.files])
    r.seek_head()
    r._next()
    cursor = r._get_cursor()
    r.close()
    return cursor


def daemon_config(workdir: Path) -> Path:
    folders, note = library_folders()
    listed = ", ".join(json.dumps(str(f)) for f in folders)
    extra = "" if not note else "signatures: {builtin: false, folders: [" + listed + "]}\n"
    config = workdir / "catchup.yaml"
    config.write_text('units:\n  - {name: "sglang*.service", role: any}\ndbus: false\n' + extra)
    return config


@dataclass
class Started:
    """A `crashdoc run` catching up: its process, port, what it said so far, and whether it said it caught up."""

    proc: subprocess.Popen[str]
    port: int
    said: list[str]
    caught_up: threading.Event


def start_daemon(js: JournalSet, state: Path, config: Path, cursor: str, src: str | None = None) -> Started:
    """`crashdoc run` over the journal's folder with a saved cursor (a daemon that was down while the rest was
    written); the crashdoc of this tree, or of `src`, with compiled bytecode."""
    state.mkdir(parents=True, exist_ok=True)
    saved = {"version": 1, "cursor": cursor, "saved_at": time.time(), "data": {}}
    (state / "state.json").write_text(json.dumps(saved))
    port = _port()
    argv = [*CRASHDOC, "run", "--config", str(config), "--directory", str(js.folder)]
    argv += ["--state-directory", str(state), "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(src), cwd=ROOT)
    started = Started(proc, port, [], threading.Event())

    def listen() -> None:
        assert proc.stderr is not None
        for text in proc.stderr:
            started.said.append(text)
            if "caught up with the journal" in text:
                started.caught_up.set()

    threading.Thread(target=listen, daemon=True).start()
    return started


def stop_daemon(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_daemon(
    js: JournalSet, state: Path, config: Path, cursor: str, src: str | None = None, timeout: float = 900.0
) -> dict[str, float]:
    """One catch-up from the journal's head; the state folder's cache/ (compiled library, C reader) is kept
    between runs, as a restarted daemon finds it. Caught up: its "caught up with the journal" line, or for
    a crashdoc from `src` that does not say so (before issue 26), /metrics counting every entry read
    (polled every 20 ms)."""
    began = time.perf_counter()
    d = start_daemon(js, state, config, cursor, src)
    entries = int(js.meta["entries"])
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and d.proc.poll() is None:
            if src is None:
                done = d.caught_up.wait(0.5)
            else:
                m = _metrics(f"http://127.0.0.1:{d.port}")
                done = m.get("crashdoc_journal_entries_read_total", 0) >= entries - 1
                time.sleep(0 if done else 0.02)
            if done:
                seconds = time.perf_counter() - began
                status = proc_status(d.proc.pid)
                return {"seconds": seconds, "cpu": cpu_seconds(d.proc.pid), "hwm_kib": status.get("VmHWM", 0)}
        raise RuntimeError(f"crashdoc run did not catch up: {''.join(d.said)[-2000:]}")
    finally:
        stop_daemon(d.proc)


def run(
    entries: int,
    results: Results,
    rounds: int = 3,
    shares: tuple[float, ...] = (WATCHED, 0.1),
    before_src: str | None = None,
) -> dict:
    """`before_src`: also (d0) and (r0), the same commands from another source tree, in the same rounds."""
    cases = (*CASES, "diagnose0", "daemon0") if before_src else CASES
    journals = {share: build(entries, watched=share) for share in shares}
    folders, note = library_folders()
    signatures = [str(f) for f in folders]
    if note:
        results.notes.append(note)
    work = Path(os.environ.get("CRASHDOC_BENCH_DATA", ROOT / "bench" / "data")) / "catchup-work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config = daemon_config(work)
    cursors = {share: head_cursor(js) for share, js in journals.items()}
    times: dict[tuple[str, float], list[float]] = {(c, s): [] for c in cases for s in shares}
    cpu: dict[tuple[str, float], list[float]] = {(c, s): [] for c in cases for s in shares}
    hwm: dict[float, list[float]] = {s: [] for s in shares}
    found: dict[float, int] = {}
    try:
        for share, js in journals.items():  # warm-up: page cache, compiled library, the C reader's build
            run_reader("floor", [str(f) for f in js.files])
            run_crashdoc([str(f) for f in js.files], signatures)
            run_daemon(js, work / f"state-{share}", config, cursors[share])
            if before_src:
                run_crashdoc([str(f) for f in js.files], signatures, before_src)
                run_daemon(js, work / f"state0-{share}", config, cursors[share], before_src)
        for r in range(rounds):
            for share, js in journals.items():
                files = [str(f) for f in js.files]
                for case in cases:
                    if case == "floor":
                        n, seconds = run_reader("floor", files)
                        if n != js.meta["entries"]:
                            raise RuntimeError(f"the bare loop read {n} entries, the journal has {js.meta['entries']}")
                        used = READER_CPU["floor"][-1]
                    elif case in ("diagnose", "diagnose0"):
                        src = before_src if case == "diagnose0" else None
                        seconds, used, diagnoses = run_crashdoc(files, signatures, src)
                        found[share] = len(diagnoses) if src is None else found.get(share, 0)
                    else:
                        src, state = (before_src, "state0") if case == "daemon0" else (None, "state")
                        d = run_daemon(js, work / f"{state}-{share}", config, cursors[share], src)
                        seconds, used = d["seconds"], d["cpu"]
                        if src is None:
                            hwm[share].append(d["hwm_kib"] / 1024)
                    times[(case, share)].append(seconds)
                    cpu[(case, share)].append(used)
                    log(f"  round {r + 1}/{rounds} {share:.0%} watched, {case}: {seconds:.2f} s ({used:.2f} s CPU)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summarize(journals, results, times, cpu, hwm, found, cases)
    return {"times": times, "cpu": cpu}


def summarize(
    journals: dict[float, JournalSet],
    results: Results,
    times: dict[tuple[str, float], list[float]],
    cpu: dict[tuple[str, float], list[float]],
    hwm: dict[float, list[float]],
    found: dict[float, int],
    cases: tuple[str, ...] = CASES,
) -> None:
    raw: dict[str, object] = {}
    for share, js in journals.items():
        entries = int(js.meta["entries"])
        by_unit = js.meta["by_unit"]
        watched = sum(n for u, n in by_unit.items() if u.startswith("sglang"))  # type: ignore[union-attr]
        floor = times[("floor", share)]
        base_best, base_median, base_cpu = min(floor), median(floor), min(cpu[("floor", share)])
        where = f"{entries:,} entries, SGLang units {watched / entries:.0%}"
        raw[f"{share}"] = {
            "entries": entries,
            "watched": watched,
            "times": {c: times[(c, share)] for c in cases},
            "cpu": {c: cpu[(c, share)] for c in cases},
        }
        for case in cases:
            t, used = times[(case, share)], cpu[(case, share)]
            row = results.add(
                "catchup",
                f"{LABELS[case]} ({where})",
                f"{entries / min(t):,.0f}/s (fastest {min(t):.2f} s, median {median(t):.2f} s; CPU {min(used):.2f} s)",
            )
            if case == "floor":
                continue
            row.ratio = (
                f"{base_best / min(t):.2f} x (a) fastest, {base_median / median(t):.2f} x by medians, "
                f"{base_cpu / min(used):.2f} x in CPU s"
            )
            want = TARGETS.get((case, share))
            if want is not None:
                row.target = f">= {want} x (a)"
                row.ok = base_best / min(t) >= want * 0.999
            if case == "daemon":
                row.note = f"VmHWM when caught up: {max(hwm[share]):.1f} MB (max of {len(hwm[share])} runs)"
            elif case == "diagnose":
                row.note = f"{found.get(share, 0)} diagnoses"
    results.raw["catchup"] = raw
    results.notes.append(
        "catchup: (a) is the read loop alone; (d) and (r) are whole processes (start-up, library load, and for (r) "
        "the HTTP server and state saves, included). CPU s: least user+sys of each case's runs."
    )
