"""What the engine keeps of what went wrong: the lines a line signature matched (`LineHit`), the tracebacks a run
survived (`Handled`), the crashes a loop counts (`Crash`) and a loop's changes of state (`Transition`). Working records
like the run's (`run.py`) and the loop tracker's (`crashloop.py`), apart from them because only a failure makes one: a
healthy log never builds their classes (issue 26: `explain` of one line)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crashdoc.diagnosis.crashloop import LoopState
    from crashdoc.diagnosis.rootcause import Finding
    from crashdoc.events import LogLine
    from crashdoc.failure_records import Match, Traceback


@dataclass(slots=True)
class LineHit:
    """A line a line-level signature matched, with where it came in the run."""

    match: Match
    line: LogLine
    seq: int = 0  # the number of the line, in the order the engine read them


@dataclass(slots=True)
class Handled:
    """A traceback the run survived: a warning, not a crash."""

    traceback: Traceback
    reason: str  # in words, for the output
    how: str  # logged (SGLang said it carries on) | ready | serving (the run went on) | running (systemd says so)
    count: int = 1  # the same error again (same fingerprint: another rank, port or request)
    kind: str = ""  # its kind of failure, once the engine has matched it
    kept: bool = True  # False past MAX_HANDLED distinct errors: counted, not kept
    request: bool = False  # raised while serving one request (a request handler's error answer): kind "bad request"
    fingerprint: str = ""
    processes: list[str] = field(default_factory=list)  # the ranks or PIDs that logged it (bounded)


@dataclass(slots=True)
class Crash:
    """One crash the loop tracker counts: when, whether before ready, how it ended and its root cause."""

    invocation: str
    at: float
    before_ready: bool
    finding: Finding | None
    exit: str | None
    lifetime: float | None
    hardware: str = ""  # the hardware diagnosis' signature when a GPU fault caused it (gpu-fault-<family>)


@dataclass(slots=True)
class Transition:
    """A change of a unit's loop state, for the verdicts and the events others act on."""

    unit: str
    old: LoopState
    new: LoopState
    at: float
    new_loop: bool = False  # a loop began (not a continuation after a short recovery)
