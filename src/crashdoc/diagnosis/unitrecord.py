"""Everything the engine knows about one unit: its runs, loop state, counters and diagnoses (working state).

Only the engine changes a `UnitRecord`; what others may read of it is `view()` (diagnosis.views).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from crashdoc.diagnosis.crashloop import LoopState, LoopTracker
from crashdoc.diagnosis.run import Run

if TYPE_CHECKING:  # imported where they are made: `explain` of a healthy log makes none of them
    from crashdoc.diagnosis.configchange import FileChange
    from crashdoc.diagnosis.failures import Handled
    from crashdoc.diagnosis.views import UnitView
    from crashdoc.diagnosis_records import Diagnosis
    from crashdoc.unit_records import LaunchFacts, UnitState

MAX_LAUNCHES = 8  # commands whose launch facts a unit keeps (its ExecStart, the argv its processes logged)


# a working record, one object per unit: compared by identity (no generated __eq__ to build at import)
@dataclass(slots=True, eq=False)
class UnitRecord:
    """The engine's working record of one watched unit: its runs, loop, state and counts."""

    name: str
    role: str
    loop: LoopTracker
    runs: OrderedDict[str, Run] = field(default_factory=OrderedDict)  # by invocation (INVOCATION_ID), oldest first
    current: Run | None = None
    restarts_total: int = 0  # PID 1's restart-scheduled records seen
    n_restarts: int | None = None  # systemd's NRestarts (since the last manual start/reset)
    state: UnitState | None = None
    crashes_by_signature: Counter[str] = field(default_factory=Counter)
    crashes_total: int = 0
    last_crash_at: float | None = None
    diagnosis: Diagnosis | None = None  # the current loop's diagnosis
    last_diagnosis: Diagnosis | None = None
    last_good: Run | None = None  # the last run that lived through the recovery window
    file_changes: list[FileChange] = field(default_factory=list)
    line_failures: Counter[str] = field(default_factory=Counter)
    warnings_by_kind: Counter[str] = field(default_factory=Counter)  # handled tracebacks, by kind of failure
    pending_end: Run | None = None  # ended, waiting for PID 1's verdict
    sglang: bool = False
    stop_seen_at: float | None = None  # systemd said inactive (dead) during a loop: a stop, unless a start follows
    launches: dict[tuple[str, ...], LaunchFacts] = field(default_factory=dict)  # by command line, newest last
    # verdicts the lines left due (diagnosis.verdicts.Verdicts.judge): never saved, judged before a snapshot
    late: set[str] = field(default_factory=set)  # runs a traceback reached after they were judged
    unjudged: list[tuple[Handled, Run]] = field(default_factory=list)  # survived tracebacks, one per occurrence

    @property
    def crashloop(self) -> bool:
        return self.loop.looping

    @property
    def failed(self) -> bool:
        return self.loop.state is LoopState.FAILED

    def learn(self, facts: LaunchFacts) -> None:
        """Keep what the runtime read of one of the unit's commands (bounded, newest wins)."""
        self.launches.pop(facts.cmdline, None)
        self.launches[facts.cmdline] = facts
        while len(self.launches) > MAX_LAUNCHES:
            del self.launches[next(iter(self.launches))]

    def view(self) -> UnitView:
        from crashdoc.diagnosis.views import UnitView

        loop = self.loop
        return UnitView(
            name=self.name,
            role=self.role,
            loop_state=loop.state.value,
            crashloop=loop.looping,
            failed=loop.state is LoopState.FAILED,
            restarts_total=self.restarts_total,
            n_restarts=self.n_restarts,
            crashes_total=self.crashes_total,
            crashes_by_signature=MappingProxyType(dict(self.crashes_by_signature)),
            last_crash_at=self.last_crash_at,
            loop_started_at=loop.loop_started_at if loop.looping else None,
            diagnosis=self.diagnosis,
            last_diagnosis=self.last_diagnosis,
            line_failures=MappingProxyType(dict(self.line_failures)),
            warnings_by_kind=MappingProxyType(dict(self.warnings_by_kind)),
            systemd=self.state,
        )


def begin(rec: UnitRecord, run: Run, cmdline: tuple[str, ...]) -> None:
    """The command a run starts with, with its flags and release as last read (before anyone edits it)."""
    run.cmdline = cmdline
    facts = rec.launches.get(cmdline)
    run.flags = dict(facts.flags) if facts is not None else {}
    if facts is not None and facts.sglang_release:
        run.sglang_release, run.sglang_release_from = facts.sglang_release, facts.sglang_release_from
