"""A signature's example diagnosed the way the engine diagnoses a run: its lines assembled and scanned into one
run, its exit applied, its root cause chosen. What `crashdoc signatures test` and the miner's report check the
library with, kept here so that nothing outside the engine's package builds its working records.
"""

from __future__ import annotations

import re

from crashdoc.assembly.traceback import TracebackAssembler
from crashdoc.diagnosis.rootcause import is_consequence, line_findings, root_cause
from crashdoc.diagnosis.run import LineHit, Run
from crashdoc.events import Match
from crashdoc.matching.library import Example
from crashdoc.matching.matcher import Facts, Matcher
from crashdoc.sources.textlog import parse_text

_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


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
