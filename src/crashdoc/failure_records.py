"""What a failure leaves in a log: a Python traceback put back together (`Traceback`, its chain of `ExceptionInfo`
and their `Frame`s), and a signature that recognised it or a line (`Match`). Apart from `events` so that a log
without a traceback or a matched line never builds their classes (issue 26: `explain` of one line); `crashdoc.events`
still names them (imported there at first use)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Frame:
    """One frame of a Python traceback: where the code was and what it ran."""

    file: str
    line: int
    function: str
    code: str = ""


@dataclass(slots=True)
class ExceptionInfo:
    """One exception of a (possibly chained) traceback."""

    type: str  # as printed: "ValueError", "torch.OutOfMemoryError"
    message: str  # str(exc); may span several lines
    frames: tuple[Frame, ...] = ()
    line: str = ""  # the "Type: first line of message" line as printed

    @property
    def short_type(self) -> str:
        return self.type.rsplit(".", 1)[-1]


@dataclass(slots=True)
class Traceback:
    """A Python traceback put back together from one process's journal lines."""

    unit: str
    pid: int
    chain: tuple[ExceptionInfo, ...]  # in printed order: the last one is what was raised
    timestamp: float = 0.0
    invocation: str = ""
    wrapper: str = ""  # "Scheduler" for "Scheduler hit an exception: ...", "" when bare
    rank: str = ""  # SGLang's rank prefix ("TP3", "DP1 TP3 EP3"), "" for the main process
    header: str = ""  # the line that introduced it
    text: str = ""  # the traceback as printed (bounded)
    truncated: bool = False
    seq: int = 0  # the number of the line it began on, in the order the engine read them (0: not counted)
    logged_with: str = ""  # the SGLang log record it was printed under (`logger.warning(..., exc_info=True)`)

    @property
    def final(self) -> ExceptionInfo:
        return self.chain[-1]


@dataclass(slots=True)
class Match:
    """A signature that recognised a traceback or a line."""

    signature_id: str
    captures: dict[str, str]
    line: str  # the printed line where the match begins: the root-cause line
    score: int = 0  # higher wins when several signatures match one failure
