"""Does the presented fix pass SGLang's own checks? Scored on real launch failures (`bench/launch_failures/`).

    python -m bench.accepted [--set DIR ...] [--python PATH] [--limit N]

For each log (the failing command pasted above the real launcher's output), crashdoc explains it three ways:
- baseline: the engine's own fix (before the remedy stage), applied to the pasted command;
- crashdoc alone: `explain --sglang-version 0.5.23` (candidates ranked with the release's argument facts);
- with SGLang: `explain --sglang-version 0.5.23 --sglang-python PATH` (candidates checked by SGLang, searched on).
The presented corrected command (`fix.command`) is then run through SGLang 0.5.23's own argument checks (the
bench's own checker, apart from crashdoc's): it passes, fails with the same error, or fails with another.
Printed per set: the share that passes for each way, the same-error count, and the time to a checked fix
(wall time of the `--sglang-python` explain, one log at a time).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT, log

SETS = (ROOT / "bench" / "launch_failures" / "set",)
RELEASE = "0.5.23"


@dataclass
class Scored:
    name: str
    way: str
    outcome: str  # pass | same | other | none
    error: str = ""
    seconds: float = 0.0
    fix: str = ""


def explain_json(path: Path, extra: Sequence[str]) -> tuple[dict[str, object], float]:
    from crashdoc.cli import main

    out = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out):
        main(["explain", "--json", "--sglang-version", RELEASE, *extra, str(path)])
    return json.loads(out.getvalue()), time.monotonic() - started


def baseline_args(path: Path) -> tuple[list[str] | None, str]:
    """The engine's own first fix (no remedy stage) applied to the pasted command."""
    from crashdoc.commands.pipeline import explain_text, load_library_or_fail
    from crashdoc.remedy.fix import apply_changes, describe
    from crashdoc.remedy.pasted import command_in_paste

    text = path.read_text(encoding="utf-8", errors="replace")
    pasted = command_in_paste(text)
    found = explain_text(text, load_library_or_fail(None), release=(RELEASE, "--sglang-version"))
    if pasted.command is None or not found or not found[0].fix.changes:
        return None, ""
    changes = [c for c in found[0].fix.changes if not c.placeholder]
    if not changes:
        return None, ""
    return list(apply_changes(pasted.command, changes).after.sglang_args), "; ".join(map(describe, changes))


def presented_args(doc: dict[str, object]) -> tuple[list[str] | None, str]:
    from crashdoc.remedy.pasted import parse_command

    diagnoses = doc.get("diagnoses") or []
    if not diagnoses:
        return None, ""
    fix = diagnoses[0]["fix"]  # type: ignore[index]
    command = fix.get("command")
    if not command or not fix.get("changes"):
        return None, ""
    parsed = parse_command(command).command
    shown = "; ".join(f"{c['action']} {c['flag']} {c.get('value') or ''}".strip() for c in fix["changes"])
    return (list(parsed.sglang_args) if parsed is not None else None), shown


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.accepted", description=__doc__.split("\n", 1)[0])
    p.add_argument("--set", action="append", type=Path, help="a folder of launch-failure logs (repeatable)")
    p.add_argument("--python", help="SGLang 0.5.23's interpreter (default: the test environment's)")
    p.add_argument("--limit", type=int, default=0, help="score only the first N logs of each set")
    p.add_argument("--alone-only", action="store_true", help="skip the --sglang-python explains (quicker)")
    p.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    from bench.launch_failures.generate import tiny_model
    from crashdoc.remedy.checker import Request, SGLangChecker
    from support.sglang_env import ensure_sglang_venv  # type: ignore[import-not-found]

    python = a.python or str(ensure_sglang_venv())
    tiny_model()
    rows: list[str] = []
    raw: dict[str, list[dict[str, object]]] = {}
    for folder in a.set or SETS:
        logs = sorted(folder.glob("*.log"))[: a.limit or None]
        scored: list[Scored] = []
        with SGLangChecker(python, parallel=2) as judge:
            for path in logs:
                text = path.read_text(encoding="utf-8", errors="replace")
                first = text.split("\n", 1)[0].removeprefix("$ ")
                from crashdoc.remedy.pasted import parse_command

                original = parse_command(first).command
                if original is None:
                    log(f"{path.name}: no command on its first line: skipped")
                    continue
                [before] = judge.check([Request(tuple(original.sglang_args))])
                ways: list[tuple[str, list[str] | None, str, float]] = []
                args, shown = baseline_args(path)
                ways.append(("baseline", args, shown, 0.0))
                doc, seconds = explain_json(path, [])
                args, shown = presented_args(doc)
                ways.append(("alone", args, shown, seconds))
                if not a.alone_only:
                    doc, seconds = explain_json(path, ["--sglang-python", python])
                    args, shown = presented_args(doc)
                    ways.append(("checked", args, shown, seconds))
                answers = judge.check([Request(tuple(w[1])) for w in ways if w[1] is not None])
                it = iter(answers)
                for way, args, shown, secs in ways:
                    if args is None:
                        scored.append(Scored(path.name, way, "none", "", secs, shown))
                        continue
                    answer = next(it)
                    if answer.passes:
                        outcome = "pass"
                    elif answer.rejected and before.rejected and answer.error == before.error:
                        outcome = "same"
                    else:
                        outcome = "other"
                    scored.append(Scored(path.name, way, outcome, answer.error[:160], secs, shown))
                line = "  ".join(f"{s.way}={s.outcome}" for s in scored[-len(ways) :])
                log(f"{path.name}: {line}  ({scored[-1].seconds:.1f} s)  {before.error[:90]}")
                for s in scored[-len(ways) :]:
                    if s.outcome != "pass":
                        log(f"    {s.way}: {s.fix or '(no fix)'} -> {s.outcome}: {s.error[:140]}")
        n = len({s.name for s in scored})
        raw[str(folder)] = [s.__dict__ for s in scored]

        def share(way: str, outcome: str = "pass", scored: list[Scored] = scored) -> int:
            return sum(1 for s in scored if s.way == way and s.outcome == outcome)

        times = sorted(s.seconds for s in scored if s.way == "checked" and s.outcome == "pass")
        base = share("baseline")
        shown_ways = (("alone", "crashdoc alone"),) + (
            (("checked", "with --sglang-python"),) if not a.alone_only else ()
        )
        for way, label in shown_ways:
            passed = share(way)
            ratio = f"{passed / base:.2f}x baseline" if base else "baseline 0"
            rows.append(
                f"| {folder.name} | {label} | {passed}/{n} ({100 * passed / max(n, 1):.0f} %) | {ratio} | "
                f"same error: {share(way, 'same')}, no fix: {share(way, 'none')} |"
            )
        rows.append(
            f"| {folder.name} | baseline (the engine's first fix) | {base}/{n} ({100 * base / max(n, 1):.0f} %) "
            f"| 1.00x | same error: {share('baseline', 'same')}, no fix: {share('baseline', 'none')} |"
        )
        if times:
            rows.append(
                f"| {folder.name} | time to a checked fix | median {statistics.median(times):.1f} s, "
                f"max {times[-1]:.1f} s | | {len(times)} fixes |"
            )
    table = "| set | case | value | ratio | note |\n|---|---|---|---|---|\n" + "\n".join(rows)
    print(table)
    a.results.mkdir(parents=True, exist_ok=True)
    (a.results / "accepted.txt").write_text(table + "\n")
    (a.results / "accepted.json").write_text(json.dumps(raw, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
