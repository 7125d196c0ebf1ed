"""How many of each release's flag-naming checks crashdoc answers usefully (`python -m bench.coverage`).

For every release in signatures/derived-releases.txt whose wheel is in the cache folder, every
mined raise/assert whose message names a `--flag` is rebuilt as the two tracebacks a unit logs
(the launcher's own, and a scheduler rank's "Scheduler hit an exception:" one, the way
`signatures mine` builds its examples) and diagnosed by `explain`'s pipeline with the shipped
library (reviewed signatures, then the derived ones). A message counts as answered when the
diagnosis names a signature that answers at most SPECIFIC distinct messages of the release,
names one of the message's flags (or SGLANG_ variables) and proposes a change to one of them.

A message's flags are the `--flags` and SGLANG_ variables it writes, plus the ServerArgs fields it
writes snake_case (`Consider reducing tensor_parallel_size` names `--tp-size`): a word with an
underscore whose dashed form is a flag that release registers (a `"--x"` literal or a field of its
server_args.py and srt/arg_groups/) or an alias crashdoc knows, under its canonical name.

    PYTHONPATH=src python -m bench.coverage [--wheels DIR] [--out FILE] [VERSION ...]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crashdoc.matching.library import Library
    from crashdoc.matching.matcher import Matcher

ROOT = Path(__file__).resolve().parents[1]
SPECIFIC = 5  # "a handful": a signature answering more distinct messages is not specific
TARGET = 0.95


_OPTION = re.compile(r"""["'](--[a-z0-9][a-z0-9-]*)["']""")
_FIELD = re.compile(r"^    ([a-z][a-z0-9_]*)\s*:", re.M)  # a dataclass field of ServerArgs or an arg group
_SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")


def registered_flags(wheel: Path) -> frozenset[str]:
    """The flags a release registers, read from its wheel as text: option literals and ServerArgs fields."""
    found: set[str] = set()
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name == "sglang/srt/server_args.py" or (
                name.startswith("sglang/srt/arg_groups/") and name.endswith(".py")
            ):
                text = z.read(name).decode("utf-8", "replace")
                found.update(_OPTION.findall(text))
                found.update("--" + f.replace("_", "-") for f in _FIELD.findall(text))
    return frozenset(found)


def snake_flags(message: str, registered: frozenset[str]) -> set[str]:
    """`tensor_parallel_size` in a message -> `--tp-size`, when the release registers it (or an alias does)."""
    from crashdoc.matching.flagnames import ALIASES, canonical

    dashed = ("--" + w.replace("_", "-") for w in _SNAKE.findall(message))
    return {canonical(f) for f in dashed if f in registered or f in ALIASES}


def rank_traceback(launcher: str) -> str:
    """The same failure as a scheduler rank logs it: SGLang prefixes the traceback's first line."""
    return "[2026-05-01 12:00:03 TP0] Scheduler hit an exception: " + launcher


def release_row(version: str, wheel: Path, library: Library, matcher: Matcher) -> dict[str, object]:
    from crashdoc.authoring.mine import locate, make_candidate, mine_tree
    from crashdoc.commands.pipeline import explain_text
    from crashdoc.matching.flagnames import canonical

    statements = [s for r in mine_tree(locate(str(wheel)), workers=1) for s in r.statements]
    taken: set[str] = set()
    candidates = [make_candidate(s, taken) for s in statements]
    candidates = [c for c in candidates if any(f.startswith("--") for f in c.flags) and not c.problem]
    registered = registered_flags(wheel)
    answers: list[tuple[str, bool, str | None, bool, bool, bool]] = []  # message, derived, sig, named, changed
    for c in candidates:
        # its --flags and the SGLANG_ variables it names, and the ServerArgs fields it writes snake_case
        wanted = {canonical(f) for f in c.flags} | snake_flags(c.message, registered)
        for text in (c.traceback, rank_traceback(c.traceback)):
            found = explain_text(text, library, matcher)
            d = found[0] if found else None
            if d is None or d.signature is None:
                answers.append((c.message, False, None, False, False, False))
                continue
            named = bool(wanted & {canonical(f) for f in d.flags})
            changed = any(canonical(ch.flag) in wanted or (ch.new_flag or "") in wanted for ch in d.fix.changes)
            answers.append((c.message, d.derived, d.signature, named, changed, True))
    per_signature: dict[str, set[str]] = {}
    for message, _, sig, *_ in answers:
        if sig is not None:
            per_signature.setdefault(sig, set()).add(message)
    strict = [
        sig is not None and len(per_signature[sig]) <= SPECIFIC and named and changed
        for _, _, sig, named, changed, _ in answers
    ]
    good = sum(strict)
    # a reviewed signature's answer that changes another lever (the file of `--ssl-keyfile`, `--tp-size`
    # for a Marlin shape): right by review, but not counted as answered above
    reviewed_other = sum(
        1 for ok, (_, derived, sig, *_) in zip(strict, answers, strict=True) if not ok and sig and not derived
    )
    kinds = Counter(
        "unknown" if sig is None else "derived" if derived else "curated" for _, derived, sig, *_ in answers
    )
    misses = sorted(
        {(sig or "unknown", message[:150]) for ok, (message, _, sig, *_) in zip(strict, answers, strict=True) if not ok}
    )
    return {
        "misses": misses,
        "release": version,
        "messages": len(candidates),
        "tracebacks": len(answers),
        "answered": good,
        "share": good / len(answers) if answers else 1.0,
        "reviewed_other": reviewed_other,
        "curated": kinds["curated"],
        "derived": kinds["derived"],
        "unknown": kinds["unknown"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.coverage", description=__doc__.split("\n", 1)[0])
    p.add_argument("versions", nargs="*")
    p.add_argument("--wheels", default=str(ROOT / ".cache" / "sglang-wheels"))
    p.add_argument("--misses", action="store_true", help="list each release's unanswered messages")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "coverage.md")
    a = p.parse_args(argv)

    from crashdoc.commands.pipeline import load_library_or_fail
    from crashdoc.matching.derived import load_shipped, release_key
    from crashdoc.matching.matcher import Matcher

    listed = (ROOT / "signatures" / "derived-releases.txt").read_text().splitlines()
    versions = a.versions or [v.strip() for v in listed if v.strip() and not v.startswith("#")]
    library = load_library_or_fail(None)
    matcher = Matcher(library, load_shipped())
    lines = [
        "| release | flag-naming messages | tracebacks | answered (specific, names and changes a flag) | share | "
        "reviewed, other lever | curated | derived | unknown |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    short = []
    started = time.monotonic()
    for version in sorted(versions, key=release_key):
        wheels = sorted(Path(a.wheels).glob(f"sglang-{version}-*.whl"))
        if not wheels:
            print(f"{version}: no wheel in {a.wheels} (scripts/derive-releases.py downloads it)", file=sys.stderr)
            continue
        row = release_row(version, wheels[-1], library, matcher)
        share = float(row["share"])  # type: ignore[arg-type]
        if share < TARGET:
            short.append(version)
        lines.append(
            f"| {version} | {row['messages']} | {row['tracebacks']} | {row['answered']} | {100 * share:.1f} % | "
            f"{row['reviewed_other']} | {row['curated']} | {row['derived']} | {row['unknown']} |"
        )
        print(lines[-1], flush=True)
        if a.misses:
            for sig, message in row["misses"]:  # type: ignore[attr-defined]
                print(f"    {sig}: {message!r}", flush=True)
    target = f"{100 * TARGET:.0f} %"
    verdict = f"all releases >= {target}"
    if short:
        which = ", ".join(short) if len(short) <= 6 else f"{len(short)} releases, {short[0]} to {short[-1]}"
        verdict = f"below {target}: {which}"
    lines.append("")
    lines.append(f"{verdict} ({time.monotonic() - started:.0f} s)")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("\n".join(lines) + "\n")
    print(lines[-1])
    return 0 if not short else 1


if __name__ == "__main__":
    raise SystemExit(main())
