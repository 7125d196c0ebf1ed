"""The coverage report: what mining found, how much of it the library recognises, candidate files."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crashdoc.authoring.mine.base import DEFINITION, PACKAGE
from crashdoc.authoring.mine.candidates import Candidate, CandidateDumper, candidate_entry, make_candidate
from crashdoc.authoring.mine.source import Failure, Statement
from crashdoc.authoring.mine.tree import locate, mine_tree
from crashdoc.diagnosis.examples import diagnose_example
from crashdoc.matching.library import Example, Library
from crashdoc.matching.matcher import Matcher

# --- the whole run -------------------------------------------------------------------------


@dataclass(slots=True)
class MineReport:
    """What mining found and how much of it the library recognises."""

    source: str
    version: str
    candidates: list[Candidate]
    failures: list[Failure]
    counts: Counter[str]
    parse_errors: list[tuple[str, str]]
    matched: dict[str, str] = field(default_factory=dict)  # candidate id -> signature id
    library: tuple[str, ...] = ()

    @property
    def unmatched(self) -> list[Candidate]:
        return [c for c in self.candidates if c.id not in self.matched]

    def by_category(self) -> dict[str, tuple[int, int]]:
        table: dict[str, list[int]] = {}
        for c in self.candidates:
            row = table.setdefault(c.category, [0, 0])
            row[0] += 1
            row[1] += c.id in self.matched
        return {k: (v[0], v[1]) for k, v in sorted(table.items(), key=lambda kv: (-kv[1][0], kv[0]))}

    def by_kind(self) -> dict[str, int]:
        counts = Counter(f"{c.statement.kind} naming {c.kind}" for c in self.candidates)
        return dict(sorted(counts.items()))

    def by_scope(self) -> dict[str, dict[str, int]]:
        """Mined statements per top-level folder: `srt/` is the LLM runtime, the rest is not served."""
        table: dict[str, dict[str, int]] = {}
        for c in self.candidates:
            scope = c.statement.path.split("/", 1)[0] if "/" in c.statement.path else "(top)"
            row = table.setdefault(scope, {"raise": 0, "assert": 0})
            row[c.statement.kind] += 1
        return dict(sorted(table.items(), key=lambda kv: -sum(kv[1].values())))

    def same_message(self) -> dict[str, list[Candidate]]:
        """Candidate id -> the other candidates raising the same exception with the same message."""
        groups: dict[tuple[str, str], list[Candidate]] = {}
        for c in self.candidates:
            groups.setdefault((c.statement.exception.rsplit(".", 1)[-1], c.pattern), []).append(c)
        return {c.id: [o for o in group if o is not c] for group in groups.values() if len(group) > 1 for c in group}

    def top_unmatched_files(self, limit: int = 10) -> list[tuple[str, int]]:
        return Counter(c.statement.path for c in self.unmatched).most_common(limit)


def mine(path_or_name: str, workers: int | None = None) -> MineReport:
    tree = locate(path_or_name)
    results = mine_tree(tree, workers)
    counts: Counter[str] = Counter()
    statements: list[Statement] = []
    failures: list[Failure] = []
    errors: list[tuple[str, str]] = []
    for result in results:
        counts.update(result.counts)
        statements.extend(result.statements)
        failures.extend(result.failures)
        if result.error:
            errors.append((result.path, result.error))
    taken: set[str] = set()
    candidates = [make_candidate(s, taken) for s in statements]
    return MineReport(tree.label, tree.version(), candidates, failures, counts, errors)


def measure_coverage(report: MineReport, library: Library, matcher: Matcher | None = None) -> None:
    """Diagnose every candidate's example traceback with the library, as a live crash would be."""
    matcher = matcher or Matcher(library)
    report.library = library.folders
    report.matched = {}
    for candidate in report.candidates:
        chosen, _ = diagnose_example(Example(text=candidate.traceback), matcher)
        if chosen is not None:
            report.matched[candidate.id] = chosen.signature_id


def write_candidates(report: MineReport, out: Path) -> list[Path]:
    """One file per category; files of categories with no candidate are left alone."""
    out.mkdir(parents=True, exist_ok=True)
    grouped: dict[str, list[Candidate]] = {}
    for c in report.candidates:
        if not c.problem:
            grouped.setdefault(c.category, []).append(c)
    same = report.same_message()
    written: list[Path] = []
    for category, candidates in sorted(grouped.items()):
        path = out / f"{category}.yaml"
        header = (
            f"# Candidate signatures mined from {PACKAGE} {report.version or '(unknown version)'} by "
            "`crashdoc signatures mine`.\n"
            "# Unreviewed: every TODO(review) needs a human; a shipped signature needs a real fix and a near-miss.\n"
        )
        body = yaml.dump(
            {"signatures": [candidate_entry(c, report.version, same.get(c.id, ())) for c in candidates]},
            Dumper=CandidateDumper,
            sort_keys=False,
            allow_unicode=True,
            width=120,
        )
        tmp = path.with_suffix(".yaml.tmp")
        tmp.write_text(header + body, encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    return written


# --- reports -------------------------------------------------------------------------------


def report_json(report: MineReport) -> dict[str, Any]:
    matched = len(report.matched)
    return {
        "source": report.source,
        "sglang": report.version,
        "definition": DEFINITION,
        "library": list(report.library),
        "counts": {
            "files": report.counts["files"],
            "files_read": report.counts["files_parsed"],
            "files_parsed_whole": report.counts["files_parsed_whole"],
            "raise": report.counts["raise"],
            "raise_constructing": report.counts["raise_call"],
            "raise_by_helper": report.counts["raise_helper"],
            "assert": report.counts["assert"],
            "assert_with_message": report.counts["assert_message"],
            "mined": len(report.candidates),
            "mined_raise": report.counts["raise_mined"],
            "mined_assert": report.counts["assert_mined"],
        },
        "by_kind": report.by_kind(),
        "matched": matched,
        "unmatched": len(report.candidates) - matched,
        "by_category": {k: {"mined": v[0], "matched": v[1]} for k, v in report.by_category().items()},
        "top_unmatched_files": [{"file": f, "unmatched": n} for f, n in report.top_unmatched_files()],
        "by_scope": report.by_scope(),
        "rebuild_failures": [
            {"source": f.source, "reason": f.reason, "names_flag": f.names_flag, "mined": f.mined}
            for f in report.failures
        ],
        "same_message": {k: [o.id for o in v] for k, v in sorted(report.same_message().items())},
        "parse_errors": [{"file": p, "error": e} for p, e in report.parse_errors],
        "example_problems": [{"id": c.id, "problem": c.problem} for c in report.candidates if c.problem],
        # `--Foo`, `--foo_bar`: named in a message but not in argparse's spelling, so not in `flags`
        "odd_flags": [{"id": c.id, "flags": list(c.odd_flags)} for c in report.candidates if c.odd_flags],
        "matches": [{"id": k, "signature": v} for k, v in sorted(report.matched.items())],
        "unmatched_ids": [c.id for c in report.unmatched],
    }


def report_text(report: MineReport) -> str:
    total = len(report.candidates)
    matched = len(report.matched)
    lines = [
        f"{PACKAGE} {report.version or '(unknown version)'} at {report.source}",
        f"files: {report.counts['files']} ({report.counts['files_parsed']} mention a flag or SGLANG_ and were read; "
        f"{report.counts['files_parsed_whole']} had to be parsed whole)",
        f"statements read in definitions that name a flag: {report.counts['raise']} raise "
        f"({report.counts['raise_call']} construct an exception, {report.counts['raise_helper']} via a helper), "
        f"{report.counts['assert']} assert ({report.counts['assert_message']} with a message)",
        f"mined: {total} ({report.counts['raise_mined']} raise, {report.counts['assert_mined']} assert)",
    ]
    for kind, n in report.by_kind().items():
        lines.append(f"  {kind:<24} {n:>5}")
    scopes = ", ".join(f"{scope}/ {v['raise']} raise + {v['assert']} assert" for scope, v in report.by_scope().items())
    lines.append(f"  by folder: {scopes}")
    failures = report.failures
    naming = [f for f in failures if f.names_flag]
    lines.append(
        f"not rebuilt: {len(failures)} statements with a message ({len(naming)} show a flag or SGLANG_ variable "
        f"in text they could be built from; {sum(f.mined for f in failures)} mined with a hole)"
    )
    for reason, n in Counter(_reason_kind(f.reason) for f in failures).most_common(8):
        lines.append(f"  {reason:<44} {n:>5}")
    for f in naming[:20]:
        lines.append(f"  {'mined' if f.mined else 'missed'}: {f.source}: {f.reason}")
    if report.parse_errors:
        lines.append(f"files that do not parse: {len(report.parse_errors)}")
    same = report.same_message()
    if same:
        groups = {frozenset([c, *(o.id for o in others)]) for c, others in same.items()}
        lines.append(f"same message raised in several places: {len(same)} statements, {len(groups)} messages")
    problems = [c for c in report.candidates if c.problem]
    if problems:
        lines.append(f"examples that do not match their own pattern: {len(problems)}")
    pct = f"{100 * matched / total:.1f}%" if total else "-"
    lines.append("")
    lines.append(
        f"coverage by the library ({', '.join(report.library) or 'built-in'}): {matched} of {total} matched "
        f"({pct}), {total - matched} not matched"
    )
    lines.append(f"  {'category':<18} {'mined':>6} {'matched':>8} {'unmatched':>10}")
    for category, (n, m) in report.by_category().items():
        lines.append(f"  {category:<18} {n:>6} {m:>8} {n - m:>10}")
    top = report.top_unmatched_files()
    if top:
        lines.append("top unmatched files:")
        for path, n in top:
            lines.append(f"  {n:>5}  {path}")
    return "\n".join(lines) + "\n"


def _reason_kind(reason: str) -> str:
    first = reason.split(";", 1)[0]
    return re.sub(r"\d+ places", "N places", re.sub(r"`[^`]*`", "`...`", first))[:44]


def run(
    path: str,
    library: Library,
    out: str | None = None,
    as_json: bool = False,
    stream: Any = None,
) -> int:
    """`crashdoc signatures mine`: mine, measure coverage, write candidates, print the report."""
    stream = stream or sys.stdout
    report = mine(path)
    measure_coverage(report, library)
    if out:
        written = write_candidates(report, Path(out))
        if not as_json:
            stream.write(f"wrote {len(written)} candidate file(s) to {out}\n")
    if as_json:
        stream.write(json.dumps(report_json(report), indent=1) + "\n")
    else:
        stream.write(report_text(report))
    return 0
