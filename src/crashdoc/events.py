"""Data classes that cross module boundaries: the pipeline's events and the records the stages hand on.

The pipeline is sources -> assembly -> matching -> diagnosis -> remedy -> outputs; each stage takes
and returns these plain records so that stages can be tested, replayed and benchmarked without each
other. What the engine publishes about its own state (units, runs, its events) is in
`diagnosis.views`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crashdoc.diagnosis_records import Diagnosis as Diagnosis
    from crashdoc.diagnosis_records import Fix as Fix
    from crashdoc.diagnosis_records import FixTarget as FixTarget
    from crashdoc.diagnosis_records import RootCause as RootCause
    from crashdoc.failure_records import ExceptionInfo as ExceptionInfo
    from crashdoc.failure_records import Frame as Frame
    from crashdoc.failure_records import Match as Match
    from crashdoc.failure_records import Traceback as Traceback
    from crashdoc.gpu_events import GpuEvent as GpuEvent
    from crashdoc.gpu_events import GpuInfo as GpuInfo
    from crashdoc.gpu_events import GpuMap as GpuMap
    from crashdoc.gpu_events import HostGpus as HostGpus
    from crashdoc.gpu_events import UnitDevices as UnitDevices
    from crashdoc.unit_records import LaunchFacts as LaunchFacts
    from crashdoc.unit_records import UnitState as UnitState
    from crashdoc.unit_records import WatchRule as WatchRule

# Records only some paths make, named here too and imported at their first use (issue 26: `explain` of one line):
# a log without kernel lines never builds the GPU paths' classes (crashdoc.gpu_events), one without a failure
# never builds a diagnosis's (crashdoc.diagnosis_records), one without a traceback or a matched line never builds
# a traceback's or a match (crashdoc.failure_records), a paste never builds a unit's state, launch facts or watch
# rules (crashdoc.unit_records).
_ELSEWHERE = {
    **dict.fromkeys(("GpuEvent", "GpuInfo", "GpuMap", "HostGpus", "UnitDevices"), "crashdoc.gpu_events"),
    **dict.fromkeys(("Diagnosis", "Fix", "FixTarget", "RootCause"), "crashdoc.diagnosis_records"),
    **dict.fromkeys(("ExceptionInfo", "Frame", "Match", "Traceback"), "crashdoc.failure_records"),
    **dict.fromkeys(("LaunchFacts", "UnitState", "WatchRule"), "crashdoc.unit_records"),
}


def __getattr__(name: str) -> Any:
    module = _ELSEWHERE.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


CATEGORIES: tuple[str, ...] = (
    "flag-conflict",
    "memory",
    "hicache",
    "disaggregation",
    "distributed",
    "network",
    "model-load",
    "quantization",
    "attention-backend",
    "cuda-graph",
    "tokenizer",
    "speculative",
    "parallelism",
    "other",
)
# The second axis of a diagnosis: what kind of failure it is, whatever the subsystem (`category`) says. A crash
# the kernel's GPU fault caused is kind HARDWARE (decided by diagnosis.hardware from kernel lines), and
# never by a signature or for a traceback a run survived, so it is not among these (the warnings metric's kinds).
BAD_REQUEST = "bad request"  # one request failed and got an error answer; the server went on
KINDS: tuple[str, ...] = ("config", "resource", "environment", "bug", "hardware-network", BAD_REQUEST)
HARDWARE = "hardware"  # the kind of a crash a GPU fault caused (diagnosis.hardware decides it)
SEVERITIES: tuple[str, ...] = ("critical", "warning", "info")
ROLES: tuple[str, ...] = ("prefill", "decode", "router", "any")


# --- configuration shared by the layers ----------------------------------------------


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When crashes make a loop and when a loop is over: the configuration's `thresholds:`."""

    startup_crashes: int = 2  # consecutive crash-before-ready runs that make a loop
    runtime_crashes: int = 3  # crashes after ready, within runtime_window, that make a loop
    runtime_window: float = 600.0
    recovery: float = 120.0  # a run must live this long (and be ready) to end a loop
    flap_window: float = 600.0  # a loop that restarts this soon after recovery is the same loop
    failed_grace: float = 15.0  # journal-only: "failed" without a restart for this long means failed


# --- sources ---------------------------------------------------------------------------


@dataclass(slots=True)
class LogLine:
    """One line a watched unit wrote (one journal entry, or one line of a pasted log)."""

    unit: str
    pid: int
    text: str
    timestamp: float = 0.0  # seconds since the epoch; 0.0 when the source has no clock
    invocation: str = ""  # systemd's INVOCATION_ID, "" when unknown
    cmdline: str = ""  # the writer's command line (journal _CMDLINE), only on a process's first line


class Lifecycle(StrEnum):
    """What PID 1 reported about a unit."""

    STARTED = "started"
    EXITED = "exited"  # the main process exited: exit_code/exit_status say how
    RESTART_SCHEDULED = "restart-scheduled"
    FAILED = "failed"  # the unit entered the failed state: result says why
    JOB_FAILED = "job-failed"
    START_LIMIT_HIT = "start-limit-hit"
    OOM_KILL = "oom-kill"
    DEACTIVATED = "deactivated"  # stopped cleanly (manual stop, or exit 0 without restart)
    COREDUMP = "coredump"


@dataclass(slots=True)
class LifecycleRecord:
    """What PID 1 (or a core dump) logged about a unit: a start, an exit, a restart scheduled, a failure."""

    unit: str
    kind: Lifecycle
    timestamp: float = 0.0
    invocation: str = ""
    n_restarts: int | None = None
    exit_code: str | None = None  # systemd's EXIT_CODE: exited, killed, dumped
    exit_status: str | None = None  # systemd's EXIT_STATUS: "1", "9", "KILL", ...
    result: str | None = None  # UNIT_RESULT / JOB_RESULT: exit-code, signal, oom-kill, start-limit-hit, ...
    message: str = ""


# --- assembly (a traceback and its parts: crashdoc.failure_records) -----------------------


@dataclass(slots=True)
class Marker:
    """A log line that means something for crash-loop detection even when nothing raised."""

    unit: str
    pid: int
    kind: str  # ready, sigquit, server-args, kill-tree, scheduler-died, ...
    text: str
    timestamp: float = 0.0
    invocation: str = ""
    seq: int = 0  # the number of its line, in the order the engine read them
    rank: str = ""  # SGLang's rank prefix ("TP1"): pasted logs have no PID to tell the ranks' lines apart


# --- diagnosis -------------------------------------------------------------------------


@dataclass(slots=True)
class FlagChange:
    """One change a fix makes to a launch command: a flag replaced, removed, added or set."""

    action: str  # replace, remove, add, set
    flag: str
    value: str | None = None
    new_flag: str | None = None
    # the value is the operator's to choose (`<head-node-host>:<port>`): shown in the corrected command,
    # never written into a file, so no apply command is offered until it is filled in
    placeholder: bool = False
