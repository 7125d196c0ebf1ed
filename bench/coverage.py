"""How many of each release's flag-naming checks crashdoc answers usefully (`python -m bench.coverage`).

For every release in signatures/derived-releases.txt whose wheel is in the cache folder, every
mined raise/assert whose message names a `--flag` is given to `explain`'s pipeline (the shipped library:
reviewed signatures, then the derived ones) in each shape it reaches an operator in (SHAPES):

- the launcher's traceback, and a scheduler rank's ("Scheduler hit an exception:"), the way
  `signatures mine` builds its examples;
- the rank's traceback with the log prefix repeated on every line (a log shipper, a paste);
- the exception line alone (`ValueError: <message>`), and the message alone, with no type and no
  traceback (a lone line: what the scheduler logs before it raises, what a ticket quotes).

A shape is answered when the diagnosis (or, for an error SGLang answers per request, the warning)
names a signature that answers at most SPECIFIC distinct messages of the release, names one of the
message's flags (or SGLANG_ variables) and proposes a change to one of them; a message is answered when
every shape is. The issue that asked for this measured messages, not rebuilt tracebacks (0.4.10 24/28,
0.5.1 28/31, 0.5.23 743/792): its 792 are the raises of `srt/` that name a flag or an environment
variable (reference/sglang-0.5.23-errors.md), reported here too ("srt raises").

A message's flags are the `--flags` and SGLANG_ variables it writes, plus the ServerArgs fields it
writes snake_case (`Consider reducing tensor_parallel_size` names `--tp-size`): a word with an
underscore whose dashed form is a flag that release registers (a `"--x"` literal or a field of its
server_args.py and srt/arg_groups/) or an alias crashdoc knows, under its canonical name.

    PYTHONPATH=src python -m bench.coverage [--wheels DIR] [--out FILE] [--misses] [VERSION ...]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crashdoc.authoring.mine.candidates import Candidate
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


def prefixed_every_line(text: str) -> str:
    """The rank's traceback with the log prefix on every line (a log shipper's or a paste's shape)."""
    return "".join(
        (line if line.startswith("[") else f"[2026-05-01 12:00:03 TP0] {line}") + "\n" for line in text.splitlines()
    )


SHAPES: tuple[tuple[str, Callable[[Candidate], str]], ...] = (
    ("launcher", lambda c: c.traceback),
    ("rank", lambda c: rank_traceback(c.traceback)),
    ("prefixed", lambda c: prefixed_every_line(rank_traceback(c.traceback))),
    ("typed line", lambda c: f"{c.statement.printed_type}: {c.message}\n"),
    ("lone line", lambda c: c.message + "\n"),
)


def _answer(text: str, wanted: set[str], library: Library, matcher: Matcher) -> tuple[bool, str | None, bool, bool]:
    """(derived, signature, names one of `wanted`, changes one of them) for one shape of a message."""
    from crashdoc.commands.pipeline import explain_text_with_warnings
    from crashdoc.matching.flagnames import canonical

    diagnoses, warnings = explain_text_with_warnings(text, library, matcher)
    d = diagnoses[0] if diagnoses else (warnings[0] if warnings else None)
    if d is None or d.signature is None:
        return False, None, False, False
    named = bool(wanted & {canonical(f) for f in d.flags})
    changed = any(canonical(ch.flag) in wanted or (ch.new_flag or "") in wanted for ch in d.fix.changes)
    return d.derived, d.signature, named, changed


def release_row(version: str, wheel: Path, library: Library, matcher: Matcher) -> dict[str, object]:
    from crashdoc.authoring.mine import locate, make_candidate, mine_tree
    from crashdoc.matching.flagnames import canonical

    statements = [s for r in mine_tree(locate(str(wheel)), workers=1) for s in r.statements]
    taken: set[str] = set()
    every = [c for c in (make_candidate(s, taken) for s in statements) if c.flags and not c.problem]
    candidates = [c for c in every if any(f.startswith("--") for f in c.flags)]
    # the count: raises of srt/ that name a flag or an environment variable
    srt_raises = [c for c in every if c.statement.kind == "raise" and c.statement.path.startswith("srt/")]
    registered = registered_flags(wheel)
    answers: dict[tuple[str, str], tuple[bool, str | None, bool, bool]] = {}  # (candidate id, shape) -> answer
    for c in {c.id: c for c in [*candidates, *srt_raises]}.values():
        # its --flags and the SGLANG_ variables it names, and the ServerArgs fields it writes snake_case
        wanted = {canonical(f) for f in c.flags} | snake_flags(c.message, registered)
        for shape, build in SHAPES:
            answers[(c.id, shape)] = _answer(build(c), wanted, library, matcher)
    message_of = {c.id: c.message for c in [*candidates, *srt_raises]}
    per_signature: dict[str, set[str]] = {}
    for (cid, _), (_, sig, _, _) in answers.items():
        if sig is not None:
            per_signature.setdefault(sig, set()).add(message_of[cid])

    def ok(cid: str, shape: str) -> bool:
        _, sig, named, changed = answers[(cid, shape)]
        return sig is not None and len(per_signature[sig]) <= SPECIFIC and named and changed

    def answered(c: Candidate) -> bool:
        return all(ok(c.id, shape) for shape, _ in SHAPES)

    good = sum(answered(c) for c in candidates)
    by_shape = {shape: sum(ok(c.id, shape) for c in candidates) for shape, _ in SHAPES}
    srt_good = sum(answered(c) for c in srt_raises)
    ids = {c.id for c in candidates}
    kinds = Counter(  # over the answers of every shape
        "unknown" if sig is None else "derived" if derived else "curated"
        for (cid, _), (derived, sig, _, _) in answers.items()
        if cid in ids
    )
    misses = sorted(
        {
            (shape, answers[(c.id, shape)][1] or "unknown", c.message[:150])
            for c in candidates
            for shape, _ in SHAPES
            if not ok(c.id, shape)
        }
    )
    return {
        "misses": misses,
        "release": version,
        "messages": len(candidates),
        "answered": good,
        "share": good / len(candidates) if candidates else 1.0,
        "by_shape": by_shape,
        "srt": (srt_good, len(srt_raises)),
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
        "| release | flag-naming messages | answered in every shape | share | "
        + " | ".join(shape for shape, _ in SHAPES)
        + " | srt raises naming a flag or variable | curated | derived | unknown |",
        "|---|---|---|---|" + "---|" * len(SHAPES) + "---|---|---|---|",
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
        by_shape = row["by_shape"]
        srt_good, srt_all = row["srt"]  # type: ignore[misc]
        srt_share = 100 * srt_good / srt_all if srt_all else 100.0
        lines.append(
            f"| {version} | {row['messages']} | {row['answered']} | {100 * share:.1f} % | "
            + " | ".join(str(by_shape[shape]) for shape, _ in SHAPES)  # type: ignore[index]
            + f" | {srt_good}/{srt_all} ({srt_share:.1f} %) | {row['curated']} | {row['derived']} | {row['unknown']} |"
        )
        print(lines[-1], flush=True)
        if a.misses:
            for shape, sig, message in row["misses"]:  # type: ignore[attr-defined]
                print(f"    {shape}: {sig}: {message!r}", flush=True)
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
