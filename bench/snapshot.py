"""The engine's saved snapshot while units loop: its bytes per looping unit and what a save costs the reading
thread (issue 26, 6), side by side with a baseline tree.

    python -m bench.snapshot [--units 20] [--crashes 18] [--baseline main] [--rounds 5]

Each tree builds, in a child of its own (`PYTHONPATH` its src), an engine with the shipped library and feeds it
what the daemon would for `--units` units crash-looping on a real SGLang 0.5.23 launch failure
(`bench/launch_failures/set/064.log`, its lines and PID 1's records, `--crashes` runs each). Then it times the two
parts of a save on the reading thread: the engine's snapshot under the daemon's lock (`Engine.snapshot()`, or
`diagnosis.engine.snapshot_text` where the tree has it: the daemon's) and the state file's `CursorStore.encode`;
first with every unit encoded (the first save after a start), then a save after one more crash of one unit (what a
save costs while twenty units loop: between two saves one or two units changed). The baseline is a clean
`git worktree` of `--baseline` in /var/tmp (made once, removed with `--clean`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAILURE = ROOT / "bench" / "launch_failures" / "set" / "064.log"


def _lines() -> list[str]:
    text = FAILURE.read_text()
    return [line for line in text.splitlines() if not line.startswith("$ ")]


def measure(units: int, crashes: int, rounds: int) -> dict[str, Any]:
    """In the child: the engine of the tree on sys.path, fed the loops; the saves' costs."""
    from crashdoc.commands.pipeline import build_engine
    from crashdoc.events import Lifecycle, LifecycleRecord, LogLine
    from crashdoc.matching.derived import load_shipped
    from crashdoc.matching.library import builtin_signature_dirs, load_library
    from crashdoc.matching.matcher import Matcher
    from crashdoc.sources.cursor import CursorStore

    matcher = Matcher(load_library(builtin_signature_dirs()), load_shipped())
    engine = build_engine(matcher, role_of=lambda unit: "any")
    lines = _lines()
    t = 1_800_000_000.0
    runs = [0] * units

    def crash(u: int) -> None:
        nonlocal t
        unit = f"sglang-loop-{u:02d}.service"
        runs[u] += 1
        inv = f"{u:08x}{runs[u]:024x}"
        engine.on_lifecycle(LifecycleRecord(unit, Lifecycle.STARTED, t, invocation=inv))
        pid = 1000 + runs[u]
        for text in lines:
            engine.on_line(LogLine(unit, pid, text, t, inv))
        t += 0.2
        engine.on_lifecycle(
            LifecycleRecord(unit, Lifecycle.EXITED, t, invocation=inv, exit_code="exited", exit_status="1")
        )
        engine.on_lifecycle(LifecycleRecord(unit, Lifecycle.FAILED, t, invocation=inv, result="exit-code"))
        t += 0.1
        engine.on_lifecycle(LifecycleRecord(unit, Lifecycle.RESTART_SCHEDULED, t, invocation=inv, n_restarts=runs[u]))
        engine.tick(t)

    for _ in range(crashes):
        for u in range(units):
            crash(u)
    engine.events()
    looping = sum(1 for v in engine.units().values() if v.crashloop)

    from crashdoc.diagnosis import engine as engine_module

    texts = getattr(engine_module, "snapshot_text", None)  # the daemon's save since issue 26, 6: kept units' text

    def save(everything: bool = False) -> tuple[float, float, int]:
        if everything and texts:
            engine._saved = None  # as after a start: every unit encoded
        start = time.perf_counter()
        snap = texts(engine) if texts else engine.snapshot()
        walked = time.perf_counter()
        payload = CursorStore.encode("cursor", engine=snap)
        return walked - start, time.perf_counter() - walked, len(payload)

    full = [save(everything=True) for _ in range(rounds)]
    changed = []
    for r in range(rounds):
        crash(r % units)
        engine.events()
        changed.append(save())
    doc = engine.snapshot()["data"]
    per_unit = [len(json.dumps(v, separators=(",", ":"))) for v in doc["units"]["__dict__"].values()]
    return {
        "looping": looping,
        "units": len(per_unit),
        "bytes": full[-1][2],
        "unit_bytes_median": statistics.median(per_unit),
        "full_snapshot_ms": statistics.median(f[0] for f in full) * 1000,
        "full_json_ms": statistics.median(f[1] for f in full) * 1000,
        "changed_snapshot_ms": statistics.median(c[0] for c in changed) * 1000,
        "changed_json_ms": statistics.median(c[1] for c in changed) * 1000,
    }


def baseline_tree(ref: str) -> Path:
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True)
    sha.check_returncode()
    path = Path(f"/var/tmp/crashdoc-bench-snapshot-{sha.stdout.strip()}")
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), ref], check=True)
    return path


def run_tree(tree: Path, units: int, crashes: int, rounds: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    code = (
        f"import sys, json; sys.path.insert(0, {str(tree / 'src')!r}); sys.path.insert(0, {str(ROOT)!r});"
        f"from bench.snapshot import measure; print(json.dumps(measure({units}, {crashes}, {rounds})))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=str(ROOT))
    if out.returncode:
        raise SystemExit(f"{tree}: {out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.snapshot", description=__doc__.split("\n\n")[0])
    p.add_argument("--units", type=int, default=20)
    p.add_argument("--crashes", type=int, default=18, help="runs each unit crashed")
    p.add_argument("--rounds", type=int, default=5, help="saves timed of each kind (the median is shown)")
    p.add_argument("--baseline", default="main", help="the git ref measured beside this tree ('' for none)")
    p.add_argument("--clean", action="store_true", help="remove the baseline's worktree afterwards")
    args = p.parse_args(argv)
    sides = [("this tree", ROOT)]
    if args.baseline:
        sides.insert(0, (f"baseline {args.baseline}", baseline_tree(args.baseline)))
    results = {name: run_tree(tree, args.units, args.crashes, args.rounds) for name, tree in sides}
    print(f"{args.units} units, {args.crashes} crashes each; median of {args.rounds} saves")
    head = "| tree | looping | state | per unit | every unit: snapshot + encode | one unit changed: snapshot + encode |"
    print(head + "\n|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['looping']} | {r['bytes'] / 1e6:.2f} MB | {r['unit_bytes_median'] / 1e3:.0f} KB | "
            f"{r['full_snapshot_ms']:.1f} + {r['full_json_ms']:.1f} ms | "
            f"{r['changed_snapshot_ms']:.1f} + {r['changed_json_ms']:.1f} ms |"
        )
    if len(results) == 2:
        (base, new) = results.values()
        for key, what in (("full", "save, every unit encoded"), ("changed", "save after one crash")):
            b = base[f"{key}_snapshot_ms"] + base[f"{key}_json_ms"]
            n = new[f"{key}_snapshot_ms"] + new[f"{key}_json_ms"]
            print(f"{what}: {n:.1f} ms vs {b:.1f} ms, {n / b:.2f}x; bytes {new['bytes'] / base['bytes']:.2f}x")
    if args.clean and args.baseline:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(sides[0][1])], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
