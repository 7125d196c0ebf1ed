"""One run of a unit (systemd's INVOCATION_ID) and what it left behind.

A crash record is an invocation that ended badly: how it ended (exit code or signal, unit
result, OOM kill, core dump), how long it lived, whether SGLang said it was ready, and the
tracebacks, line matches and markers it logged. Everything kept here is bounded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crashdoc.events import LifecycleRecord, LogLine, Marker, Match, Traceback
from crashdoc.sources.lifecycle import describe_exit

MAX_TRACEBACKS = 16
MAX_LINE_MATCHES = 32
MAX_EVIDENCE_LINES = 40


@dataclass(slots=True)
class LineHit:
    match: Match
    line: LogLine


@dataclass(slots=True)
class Run:
    unit: str
    id: str
    started_at: float = 0.0
    ended_at: float | None = None
    first_line_at: float = 0.0
    last_line_at: float = 0.0
    lines: int = 0
    tracebacks: list[Traceback] = field(default_factory=list)
    tracebacks_dropped: int = 0
    line_hits: list[LineHit] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    ready_at: float | None = None
    sglang: bool = False  # it printed SGLang's server_args line
    server_flags: dict[str, str] = field(default_factory=dict)
    cmdline: tuple[str, ...] = ()
    exit_code: str | None = None
    exit_status: str | None = None
    result: str | None = None
    oom_killed: bool = False
    core_dumped: bool = False
    n_restarts: int | None = None
    start_limit_hit: bool = False
    deactivated: bool = False  # PID 1 said "Deactivated successfully"
    oom_message: str = ""
    good: bool = False  # lived through the recovery window (and was ready): its command line is known good
    flags: dict[str, str] | None = None  # its command-line flags, read when the run began
    ended_by_input: bool = False  # a one-shot read ran out of input before the unit said how it ended

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    @property
    def ready(self) -> bool:
        return self.ready_at is not None

    @property
    def crashed(self) -> bool:
        """Ended badly according to PID 1, or (pasted logs) left a fatal traceback behind.

        PID 1's verdict comes first: a run stopped on request ends "killed by SIGTERM" yet
        "Deactivated successfully", and that is no crash.
        """
        if self.oom_killed or self.core_dumped:
            return True
        if self.result is not None:
            return self.result not in ("success", "done")
        if self.deactivated:
            return False
        if self.exit_code is not None:
            return not (self.exit_code == "exited" and self.exit_status in ("0", "SUCCESS"))
        return bool(self.tracebacks)

    @property
    def lifetime(self) -> float | None:
        start = self.started_at or self.first_line_at
        end = self.ended_at or self.last_line_at
        return end - start if start and end else None

    def exit_text(self) -> str | None:
        text = describe_exit(self.exit_code, self.exit_status)
        if self.oom_killed:
            return f"{text}, OOM killer" if text else "killed by the OOM killer"
        return text

    # --- accumulation --------------------------------------------------------------------

    def add_line(self, line: LogLine) -> None:
        self.lines += 1
        if not self.first_line_at:
            self.first_line_at = line.timestamp
        self.last_line_at = line.timestamp or self.last_line_at

    def add_traceback(self, tb: Traceback) -> None:
        if len(self.tracebacks) < MAX_TRACEBACKS:
            self.tracebacks.append(tb)
        else:
            self.tracebacks_dropped += 1

    def add_line_hit(self, hit: LineHit) -> None:
        if len(self.line_hits) < MAX_LINE_MATCHES:
            self.line_hits.append(hit)

    def add_marker(self, marker: Marker) -> None:
        if marker.kind == "ready" and self.ready_at is None:
            self.ready_at = marker.timestamp or self.last_line_at or 1.0
        if len(self.markers) < 64:
            self.markers.append(marker)

    def apply(self, record: LifecycleRecord) -> None:
        """Fold one of PID 1's records into this run."""
        kind = record.kind.value
        if kind == "exited":
            self.exit_code, self.exit_status = record.exit_code, record.exit_status
            self.ended_at = record.timestamp or self.last_line_at
        elif kind == "failed":
            self.result = record.result
            if self.ended_at is None:
                self.ended_at = record.timestamp or self.last_line_at
            if record.result == "oom-kill":
                self.oom_killed = True
            if record.result == "start-limit-hit":
                self.start_limit_hit = True
        elif kind == "oom-kill":
            start = self.started_at or self.first_line_at
            if not record.timestamp or not start or record.timestamp >= start - 1.0:
                self.oom_killed = True  # the kernel's ring buffer replays old kills at journald start
                self.oom_message = record.message
        elif kind == "coredump":
            self.core_dumped = True
        elif kind == "restart-scheduled":
            self.n_restarts = record.n_restarts
            if self.ended_at is None:
                self.ended_at = record.timestamp or self.last_line_at
        elif kind == "start-limit-hit":
            self.start_limit_hit = True
        elif kind == "deactivated":
            self.deactivated = True
            if self.ended_at is None:
                self.ended_at = record.timestamp or self.last_line_at
