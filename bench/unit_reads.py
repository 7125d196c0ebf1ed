"""Reading the units' D-Bus state while PID 1 restarts them: pystemd against busread.c (issue 26, 5).

    python -m bench.unit_reads [--units 20] [--rounds 20]

On a private systemd whose `--units` units crash and restart every 0.2 s (PID 1 busy, as beside twenty looping
SGLang units), one process reads every unit's state (`UnitWatcher.state`, what the daemon does for each unit PID 1
spoke of) `--rounds` times with each reader, the readers interleaved round by round: through pystemd (which keeps
the GIL while PID 1 answers), through busread.c one unit at a time (the GIL released), and through busread.c's
`states()` (every unit's GetAll calls sent together, one round trip). Meanwhile a second thread wakes every 0.5 ms
and notes how long it waited: what a reading thread costs the daemon's other threads (the HTTP server's /metrics).
"""

from __future__ import annotations

import argparse
import json

from bench.common import PYTHON, log

PROBE = r"""
import json, sys, threading, time
from pathlib import Path
from crashdoc.events import WatchRule
from crashdoc.sources.journal import UnitFilter
from crashdoc.sources.units import UnitWatcher

build_dir, rounds, units = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
watchers = {}
for mode in ("pystemd", "busread.c", "busread.c states()"):
    w = UnitWatcher(UnitFilter([WatchRule("bench-loop*.service")]), build_dir=None if mode == "pystemd" else build_dir)
    assert w.connect(), w.last_error
    assert mode == "pystemd" or w.fast_bus is not None, w.fast_reads
    watchers[mode] = w
took = {mode: [] for mode in watchers}
gaps = {mode: [] for mode in watchers}
current = [None]
stop = threading.Event()


def spin():
    last = time.perf_counter()
    while not stop.is_set():
        time.sleep(0.0005)
        now = time.perf_counter()
        if current[0] is not None:
            gaps[current[0]].append(now - last)
        last = now


t = threading.Thread(target=spin)
t.start()
for _ in range(rounds):
    for mode, w in watchers.items():
        current[0] = mode
        t0 = time.perf_counter()
        if mode.endswith("states()"):
            assert all(s is not None for s in w.states(units).values())
        else:
            assert all(w.state(u) is not None for u in units)
        took[mode].append(time.perf_counter() - t0)
        current[0] = None
        time.sleep(0.01)
stop.set()
t.join()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000


print(json.dumps({m: {"round_p50_ms": pct(took[m], 0.5), "round_max_ms": pct(took[m], 1.0),
                      "stall_p99_ms": pct(gaps[m], 0.99), "stall_max_ms": pct(gaps[m], 1.0)} for m in watchers}))
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.unit_reads", description=__doc__.split("\n\n")[0])
    p.add_argument("--units", type=int, default=20, help="units crash-looping beside the reads")
    p.add_argument("--rounds", type=int, default=20, help="reads of every unit with each reader")
    a = p.parse_args(argv)
    from crashdoc.sandbox.systemd import PrivateSystemd, make_workdir

    looping = "[Service]\nExecStart=/bin/sh -c 'sleep 0.2; exit 1'\nRestart=always\nRestartSec=0.2\n"
    units = {f"bench-loop{i:02d}.service": looping for i in range(a.units)}
    workdir = make_workdir()
    sandbox = PrivateSystemd(units, workdir, start_units=list(units), keep_workdir=False)
    sandbox.start()
    try:
        probe = workdir / "probe.py"
        probe.write_text(PROBE)
        log(f"unit_reads: {a.units} looping units, {a.rounds} rounds of reads per reader ...")
        argv_ = [PYTHON, str(probe), str(workdir / "cache"), str(a.rounds), *units]
        out = json.loads(sandbox.run(argv_, check=True).stdout)
    finally:
        sandbox.stop()
    print("| reader | all units read, p50 | max | another thread's wait, p99 | max |")
    print("|---|---|---|---|---|")
    for mode, got in out.items():
        print(
            f"| {mode} | {got['round_p50_ms']:.1f} ms | {got['round_max_ms']:.1f} ms "
            f"| {got['stall_p99_ms']:.1f} ms | {got['stall_max_ms']:.1f} ms |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
