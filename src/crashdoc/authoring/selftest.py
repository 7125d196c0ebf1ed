"""`crashdoc signatures test` and `lint`: the library checks itself.

Each example runs through the same assembly and root-cause code as a live crash, so an
example that passes here is diagnosed the same way from the journal. Lint adds what one
signature cannot see alone: another signature that claims its examples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crashdoc.assembly.traceback import TracebackAssembler
from crashdoc.diagnosis.rootcause import is_consequence, line_findings, root_cause
from crashdoc.diagnosis.run import LineHit, Run
from crashdoc.events import Match
from crashdoc.matching.library import Example, Library, Signature
from crashdoc.matching.matcher import Facts, Matcher
from crashdoc.sources.textlog import parse_text

RUNBOOK_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("why it happens", ("why",)),
    ("how to confirm", ("confirm",)),
    ("the safe fix", ("fix",)),
    ("how to roll back", ("roll back", "rollback", "roll-back")),
)
_GROUP = re.compile(r"\(\?P<(\w+)>")
_TEMPLATE = re.compile(r"\$\{([^{}]*)\}")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


@dataclass(frozen=True, slots=True)
class Failure:
    signature: str
    where: str  # file:line of the example
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.signature}: {self.message}"


def example_invocation(example: Example, matcher: Matcher) -> Run:
    """Build the run an example describes: its lines, tracebacks, line matches and exit."""
    inv = Run("example", "example")
    assembler = TracebackAssembler()
    for seq, line in enumerate(parse_text(example.text).lines, 1):  # numbered as the engine numbers them
        inv.add_line(line)
        for tb in assembler.feed(line, seq):
            inv.add_traceback(tb)
        if not assembler.consumed and matcher.has_line_signatures:
            match = matcher.match_line(line.text)
            if match is not None:
                inv.add_line_hit(LineHit(match, line, seq))
    for tb in assembler.flush():
        inv.add_traceback(tb)
    if example.exit:
        inv.exit_code = example.exit.get("code")
        inv.exit_status = example.exit.get("status")
        inv.result = example.exit.get("result")
        inv.oom_killed = inv.result == "oom-kill"
    return inv


def example_facts(example: Example) -> Facts:
    ctx = example.context
    return Facts(
        flags={k: v for k, v in ctx.items() if k.startswith("--") or _ENV_NAME.fullmatch(k)},
        model=ctx.get("model", ""),
        disaggregation_mode=ctx.get("disaggregation_mode", ""),
        role=ctx.get("role", ""),
        platform=ctx.get("platform", ""),
    )


def diagnose_example(example: Example, matcher: Matcher) -> tuple[Match | None, list[Match]]:
    """(the match the diagnosis would report, every match any failure in the example got)."""
    inv = example_invocation(example, matcher)
    facts = example_facts(example)
    everything: list[Match] = []
    for tb in inv.tracebacks:
        if not is_consequence(tb):
            everything.extend(matcher.match_traceback(tb, facts))
    everything.extend(h.match for h in inv.line_hits)
    if inv.exit_code or inv.result:
        everything.extend(matcher.match_exit(inv.exit_code, inv.exit_status, inv.result))
    finding = root_cause(inv, matcher, facts)
    chosen = finding.match if finding is not None else None
    if chosen is None:
        lines = line_findings(inv, matcher)
        chosen = lines[0].match if lines else None
    return chosen, everything


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
