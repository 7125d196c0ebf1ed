"""What every action is made of: the failure, the run it happened in, and the result (summary, flag changes,
the reasons that show the arithmetic)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from crashdoc.diagnosis.rootcause import Finding
from crashdoc.diagnosis.views import RunView
from crashdoc.events import FlagChange, Frame, Marker, Traceback

_TP_RANK = re.compile(r"\bTP(\d+)\b")


def as_float(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "", "None") else None
    except ValueError:
        return None


def as_int(value: str | None) -> int | None:
    f = as_float(value)
    return int(f) if f is not None else None


@dataclass(slots=True)
class Action:
    summary: str | None  # None: the signature's own summary stands, the action adds changes and reasons
    changes: list[FlagChange]
    why: list[str]
    warnings: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Inputs:
    """What an action is computed from: the failure and the run it happened in."""

    finding: Finding
    flags: Mapping[str, str]
    run: RunView | None
    peers: tuple[tuple[str, Mapping[str, str]], ...] = ()  # the other watched units and their flags
    unit: str = ""
    release: str = ""  # the SGLang release the unit runs ("" when unknown): pins hold per release

    @property
    def traceback(self) -> Traceback | None:
        return self.finding.traceback

    @property
    def markers(self) -> list[Marker]:
        return list(self.run.markers) if self.run is not None else []

    @property
    def ranks(self) -> int:
        """The number of TP ranks the log shows (0 when it shows none): as many as the highest rank seen says
        there are (a paste of TP3's traceback alone shows four ranks)."""
        seen: set[str] = set()
        for m in self.markers:
            seen.update(_TP_RANK.findall(m.rank))
        if self.run is not None:
            for tb in self.run.tracebacks:
                seen.update(_TP_RANK.findall(tb.rank))
        return max(int(n) for n in seen) + 1 if seen else 0

    def tp_size(self) -> tuple[int, str]:
        tp = as_int(self.flags.get("--tp-size"))
        if tp:
            return tp, f"--tp-size {tp}"
        ranks = self.ranks
        if ranks:
            # a paste of some ranks (TP8-TP14 of a two-node TP16) shows a lower bound: TP sizes are powers of two
            size = 1 << (ranks - 1).bit_length()
            if size == ranks:
                return ranks, f"{ranks} TP rank{'s' if ranks > 1 else ''} in the log"
            return size, f"TP{ranks - 1} in the log: at least {ranks} ranks, --tp-size {size} taken (a power of two)"
        return 1, "no --tp-size known: 1 assumed"

    def int_flag(self, flag: str, default: int) -> int:
        value = as_int(self.flags.get(flag))
        return value if value is not None and value > 0 else default

    def rank_numbers(self, kind: str = "TP") -> set[int]:
        """The rank numbers (TPn) the run's markers and tracebacks show."""
        seen: set[int] = set()
        pattern = re.compile(rf"\b{kind}(\d+)\b")
        for m in self.markers:
            seen.update(int(n) for n in pattern.findall(m.rank))
        if self.run is not None:
            for tb in self.run.tracebacks:
                seen.update(int(n) for n in pattern.findall(tb.rank))
        return seen

    def frames(self) -> list[Frame]:
        tb = self.traceback
        return [f for exc in (tb.chain if tb else ()) for f in exc.frames]
