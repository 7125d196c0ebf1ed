"""What the engine publishes: immutable views of its units, runs and events.

The engine's working records (`UnitRecord`, `Run`, `LoopTracker`, ...) change with every line and belong to
it alone; outputs, the runtime and remedy read these views instead, made when asked for and never changed
afterwards. A field renamed in a working record then touches the engine and its view, not four packages
(tests/unit/test_layers.py fails when code outside `diagnosis/` imports a working record).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crashdoc.diagnosis.run import Run
from crashdoc.events import Diagnosis, LogLine, Marker, Match, Traceback, UnitState

if TYPE_CHECKING:  # made by the GPU paths alone (crashdoc.gpu_events)
    from crashdoc.gpu_events import GpuMap


@dataclass(frozen=True, slots=True)
class EngineEvent:
    """Something the engine decided, for the outputs (journal records, alerts, the daemon's log)."""

    kind: str  # crash | loop-started | loop-updated | recovered | failed | stopped | line-failure
    unit: str
    at: float
    diagnosis: Diagnosis | None = None


@dataclass(frozen=True, slots=True)
class LineHitView:
    """A line a line-level signature matched, and the match (its `line` is where the failure is said)."""

    line: LogLine
    match: Match


@dataclass(frozen=True, slots=True)
class RunView:
    """One run of a unit (systemd's INVOCATION_ID) as far as it went: what fixes are computed from."""

    unit: str
    id: str
    started_at: float
    ended_at: float | None
    ready_at: float | None
    crashed: bool
    good: bool  # lived through the recovery window (and was ready)
    exit: str | None  # "killed by SIGKILL", "exit status 1"
    lifetime: float | None
    cmdline: tuple[str, ...]
    flags: Mapping[str, str]  # its command line's flags (launch script included) over SGLang's server_args line
    markers: tuple[Marker, ...]
    tracebacks: tuple[Traceback, ...]
    line_hits: tuple[LineHitView, ...]  # the lines line-level signatures matched
    last_batch: str  # its last "Decode batch"/"Prefill batch" line: how loaded the server was
    sglang_release: str  # as its interpreter's files said when it began ("" when unknown)


@dataclass(frozen=True, slots=True)
class UnitView:
    """One watched unit: its loop state, counters and diagnoses (what metrics, pages and alerts show)."""

    name: str
    role: str
    loop_state: str  # healthy | crash-looping | failed | recovered | stopped
    crashloop: bool  # crash-looping, or failed after a loop
    failed: bool
    restarts_total: int  # PID 1's restart-scheduled records seen
    n_restarts: int | None  # systemd's NRestarts (since the last manual start/reset)
    crashes_total: int
    crashes_by_signature: Mapping[str, int]
    last_crash_at: float | None
    loop_started_at: float | None  # while crash-looping
    diagnosis: Diagnosis | None  # the current loop's
    last_diagnosis: Diagnosis | None  # the last loop's, once it is over
    line_failures: Mapping[str, int]  # failures that do not end the process, by signature
    warnings_by_kind: Mapping[str, int]  # tracebacks the runs survived, by kind of failure
    systemd: UnitState | None  # what D-Bus last said of it


@dataclass(frozen=True, slots=True)
class GpuView:
    """The host's GPU faults as the engine counted them (what /metrics shows beside the units)."""

    xids: Mapping[tuple[str, str, str], int]  # (gpu, xid, unit) -> Xids the kernel logged ("" unit: none uses it)
    host: GpuMap  # the host's GPUs as the runtime last read them
    kept: int  # kernel GPU events kept for the crashes they may explain


def run_view(run: Run, flags: Mapping[str, str]) -> RunView:
    return RunView(
        unit=run.unit,
        id=run.id,
        started_at=run.started_at,
        ended_at=run.ended_at,
        ready_at=run.ready_at,
        crashed=run.crashed,
        good=run.good,
        exit=run.exit_text(),
        lifetime=run.lifetime,
        cmdline=run.cmdline,
        flags=dict(flags),
        markers=tuple(run.markers),
        tracebacks=tuple(run.tracebacks),
        line_hits=tuple(LineHitView(hit.line, hit.match) for hit in run.line_hits),
        last_batch=run.last_batch,
        sglang_release=run.sglang_release,
    )
