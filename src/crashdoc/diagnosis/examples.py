"""A signature's example diagnosed the way the engine diagnoses a run: its lines assembled and scanned into one
run, its exit applied, its root cause chosen. What `crashdoc signatures test` and the miner's report check the
library with, kept here so that nothing outside the engine's package builds its working records.
"""

from __future__ import annotations

import re

from crashdoc.assembly.traceback import TracebackAssembler
from crashdoc.diagnosis.failures import LineHit
from crashdoc.diagnosis.rootcause import is_consequence, line_findings, root_cause
from crashdoc.diagnosis.run import Run
from crashdoc.events import Match
from crashdoc.matching.library import Example
from crashdoc.matching.matcher import Facts, Matcher
from crashdoc.sources.textlog import parse_text

_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


def example_run(example: Example, matcher: Matcher) -> Run:
    """Build the run an example describes: its lines, tracebacks, line matches and exit."""
    run = Run("example", "example")
    assembler = TracebackAssembler()
    for seq, line in enumerate(parse_text(example.text).lines, 1):  # numbered as the engine numbers them
        run.add_line(line)
        for tb in assembler.feed(line, seq):
            run.add_traceback(tb)
        if not assembler.consumed and matcher.has_line_signatures:
            match = matcher.match_line(line.text)
            if match is not None:
                run.add_line_hit(LineHit(match, line, seq))
    for tb in assembler.flush():
        run.add_traceback(tb)
    if example.exit:
        run.exit_code = example.exit.get("code")
        run.exit_status = example.exit.get("status")
        run.result = example.exit.get("result")
        run.oom_killed = run.result == "oom-kill"
    return run


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
    run = example_run(example, matcher)
    facts = example_facts(example)
    everything: list[Match] = []
    for tb in run.tracebacks:
        if not is_consequence(tb):
            everything.extend(matcher.match_traceback(tb, facts))
    everything.extend(h.match for h in run.line_hits)
    if run.exit_code or run.result:
        everything.extend(matcher.match_exit(run.exit_code, run.exit_status, run.result))
    finding = root_cause(run, matcher, facts)
    chosen = finding.match if finding is not None else None
    if chosen is None:
        lines = line_findings(run, matcher)
        chosen = lines[0].match if lines else None
    return chosen, everything
