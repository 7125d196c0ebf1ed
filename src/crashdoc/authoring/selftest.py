"""`crashdoc signatures test` and `lint`: the library checks itself.

Each example runs through the same assembly and root-cause code as a live crash
(`diagnosis.examples`), so an example that passes here is diagnosed the same way from the journal. Lint adds what one
signature cannot see alone: another signature that claims its examples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crashdoc.diagnosis.examples import diagnose_example
from crashdoc.matching.library import Example, Library, Signature
from crashdoc.matching.matcher import Matcher

RUNBOOK_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("why it happens", ("why",)),
    ("how to confirm", ("confirm",)),
    ("the safe fix", ("fix",)),
    ("how to roll back", ("roll back", "rollback", "roll-back")),
)
_GROUP = re.compile(r"\(\?P<(\w+)>")
_TEMPLATE = re.compile(r"\$\{([^{}]*)\}")


@dataclass(frozen=True, slots=True)
class Failure:
    signature: str
    where: str  # file:line of the example
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.signature}: {self.message}"


def _where(sig: Signature, example: Example) -> str:
    return f"{sig.origin.rsplit(':', 1)[0]}:{example.line}"


def test_library(library: Library, matcher: Matcher | None = None) -> tuple[int, list[Failure]]:
    """Run every example; returns (examples run, failures)."""
    matcher = matcher or Matcher(library)
    failures: list[Failure] = []
    count = 0
    for sig in library.signatures:
        for example in sig.examples:
            count += 1
            chosen, everything = diagnose_example(example, matcher)
            if chosen is None or chosen.signature_id != sig.id:
                got = chosen.signature_id if chosen else "nothing"
                mine = [m for m in everything if m.signature_id == sig.id]
                hint = " (it matched, but lost on score)" if mine else ""
                failures.append(Failure(sig.id, _where(sig, example), f"example diagnosed as {got}{hint}"))
                continue
            for name, expected in example.captures.items():
                actual = chosen.captures.get(name)
                if actual != expected:
                    failures.append(
                        Failure(sig.id, _where(sig, example), f"capture {name!r} is {actual!r}, expected {expected!r}")
                    )
        for example in sig.near_misses:
            count += 1
            _, everything = diagnose_example(example, matcher)
            if any(m.signature_id == sig.id for m in everything):
                failures.append(Failure(sig.id, _where(sig, example), "near-miss example matched"))
    return count, failures


def lint_signature(sig: Signature) -> list[Failure]:
    """Rules the schema cannot say: a runbook in four parts, a near-miss, templates that resolve."""
    problems: list[Failure] = []
    where = sig.origin
    text = sig.runbook.lower()
    missing = [name for name, words in RUNBOOK_SECTIONS if not any(w in text for w in words)]
    if missing:
        problems.append(Failure(sig.id, where, f"runbook lacks: {', '.join(missing)}"))
    if not sig.near_misses:
        problems.append(Failure(sig.id, where, "needs at least one no_match example (a near-miss)"))
    groups = set(_GROUP.findall(sig.message or sig.line or ""))
    for template in (sig.fix_summary, *(c.value or "" for c in sig.changes), *(c.flag for c in sig.changes)):
        for body in _TEMPLATE.findall(template):
            source = body.split("|", 1)[0].strip()
            if not source.startswith("flag:") and source not in groups:
                problems.append(Failure(sig.id, where, f"template ${{{body}}} names no capture of the pattern"))
    return problems


def lint_library(library: Library, matcher: Matcher | None = None) -> list[Failure]:
    """Problems a single signature cannot see: others that claim its examples."""
    matcher = matcher or Matcher(library)
    problems: list[Failure] = []
    for sig in library.signatures:
        problems.extend(lint_signature(sig))
        for example in sig.examples:
            _, everything = diagnose_example(example, matcher)
            own = max((m.score for m in everything if m.signature_id == sig.id), default=None)
            if own is None:
                continue  # `test` reports it
            rivals = sorted({m.signature_id for m in everything if m.signature_id != sig.id and m.score >= own})
            for rival in rivals:
                problems.append(
                    Failure(sig.id, _where(sig, example), f"{rival} matches this example with an equal or higher score")
                )
    return problems
