"""One run of a unit (systemd's INVOCATION_ID) and what it left behind.

A crash record is an invocation that ended badly: how it ended (exit code or signal, unit
result, OOM kill, core dump), how long it lived, whether SGLang said it was ready, and the
tracebacks, line matches and markers it logged. Everything kept here is bounded.

Not every traceback is fatal. SGLang logs some exceptions and carries on (`logger.warning(
"load-publisher disabled: ...", exc_info=True)`), and a server that says it is ready or logs
decode/prefill batches after a traceback survived it. Such a traceback is *handled*: it moves
from `tracebacks` to `handled` and is shown as a warning, never as a crash's cause. The
judgement is made as lines arrive: a traceback stays open until the run says ready or serves
(handled), or shows it is going down (SIGQUIT, the launcher's kill, a new start in the same
text: fatal, open no more). A traceback the scheduler wraps ("Scheduler hit an exception") or a
native crash dump is fatal from the start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crashdoc.assembly.fingerprint import fingerprint_traceback
from crashdoc.assembly.logline import split_prefix
from crashdoc.assembly.markers import TEARDOWN_KINDS, handled_wording
from crashdoc.assembly.traceback import FATAL_TYPE
from crashdoc.events import BAD_REQUEST, LifecycleRecord, LogLine, Marker
from crashdoc.sources.lifecycle import describe_exit
from crashdoc.text import LazyPattern

if TYPE_CHECKING:
    from crashdoc.diagnosis.failures import Handled, LineHit
    from crashdoc.failure_records import Traceback

MAX_TRACEBACKS = 16
MAX_LINE_MATCHES = 32
MAX_EVIDENCE_LINES = 40
MAX_HANDLED = 16
MAX_LOOSE = 400


# a working record, one object per run: compared by identity (no generated __eq__ to build at import)
@dataclass(slots=True, eq=False)
class Run:
    """One systemd run of a unit (one invocation, or one pasted log): its lines' evidence and how it ended."""

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
    handled: list[Handled] = field(default_factory=list)  # tracebacks it survived (bounded, grouped)
    handled_total: int = 0
    open_tracebacks: list[int] = field(default_factory=list)  # seqs of tracebacks whose fate is not yet known
    worded: dict[int, str] = field(default_factory=dict)  # open tracebacks whose record says SGLang went on
    tore_down: bool = False  # SGLang's teardown was logged (SIGQUIT from a child, the launcher's kill, ...)
    sglang_release: str = ""  # the SGLang release its interpreter imports, read when the run began
    sglang_release_from: str = ""  # where that was read
    logged_release: str = ""  # the release its own output named ("sglang version: X", pip's "sglang-X")
    # pasted logs only (`Engine(lone_lines=True)`): the lines no traceback, marker or line signature took, to
    # find a failure stated by a lone message line (no traceback, no exception type) when nothing else says
    loose: list[tuple[int, int, str]] = field(default_factory=list)  # (seq, pid, text), the last MAX_LOOSE
    serving_seq: int = 0  # the last decode/prefill batch or answered request: what came before was survived
    last_batch: str = ""  # the last "Decode batch"/"Prefill batch" line: how loaded the server was (pools actions)
    lone: list[Traceback] = field(default_factory=list)  # failures read from lone lines, as frameless tracebacks

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
        # a pasted log: a fatal traceback (a KeyboardInterrupt alone is the operator's Ctrl-C: a stop), a failure
        # stated by a lone line, or failure lines (NCCL's watchdog) and then SGLang's teardown
        fatal = any(tb.final.short_type != "KeyboardInterrupt" for tb in self.tracebacks)
        return fatal or bool(self.lone) or (self.tore_down and bool(self.line_hits))

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

    def add_traceback(self, tb: Traceback) -> list[Handled]:
        """Keep a traceback. One whose own log record says SGLang carried on stays open until the process
        logs anything else (handled) or the run goes down first (fatal: the words belonged to another
        record); without line numbers (a signature example) or past the bound, the words decide alone."""
        record = tb.logged_with or tb.header  # the record it was printed under, or the text before it on its line
        worded = not _fatal_by_nature(tb) and bool(record) and handled_wording(record)
        reason = f"logged as: {_record_text(record)}" if worded else ""
        if not _fatal_by_nature(tb) and request_level(tb):
            worded = True  # SGLang answers the one request with an error and carries on: settled like worded ones
            reason = f"{REQUEST_REASON}{f' (logged as: {_record_text(record)})' if record else ''}"
        if worded and (not tb.seq or len(self.tracebacks) >= MAX_TRACEBACKS):
            return [self._handle(tb, reason, "logged")]
        if len(self.tracebacks) < MAX_TRACEBACKS:
            self.tracebacks.append(tb)
            if not _fatal_by_nature(tb) and tb.seq:
                self.open_tracebacks.append(tb.seq)
                if worded:
                    self.worded[tb.seq] = reason
        else:
            self.tracebacks_dropped += 1
        return []

    def later_line(self, pid: int, seq: int) -> list[Handled]:
        """The process logged again after a traceback it said it handled: it did carry on."""
        chosen = [
            tb
            for tb in self.tracebacks
            if tb.seq in self.worded and tb.seq < seq and (tb.pid == pid or 0 in (tb.pid, pid))
        ]
        return [self._settle_open(tb, "", "logged") for tb in chosen]

    def settle_worded(self) -> list[Handled]:
        """The input ended (a paste): what SGLang said it handled, and nothing contradicted, was handled."""
        chosen = [tb for tb in self.tracebacks if tb.seq in self.worded]
        return [self._settle_open(tb, "", "logged") for tb in chosen]

    def _settle_open(self, tb: Traceback, reason: str, how: str) -> Handled:
        self.open_tracebacks.remove(tb.seq)
        self.tracebacks.remove(tb)
        worded = self.worded.pop(tb.seq, "")
        return self._handle(tb, worded or reason, "logged" if worded else how)

    def _handle(self, tb: Traceback, reason: str, how: str) -> Handled:
        self.handled_total += 1
        fingerprint = fingerprint_traceback(tb)
        who = tb.rank or split_prefix(tb.logged_with)[1] or f"pid {tb.pid}"  # the record's rank prefix
        for seen in self.handled:
            if seen.fingerprint == fingerprint:
                seen.count += 1
                if who not in seen.processes and len(seen.processes) < MAX_HANDLED:
                    seen.processes.append(who)
                return seen
        from crashdoc.diagnosis.failures import Handled  # a healthy log survives no traceback: never built

        entry = Handled(tb, reason, how, kept=len(self.handled) < MAX_HANDLED, fingerprint=fingerprint, processes=[who])
        if reason.startswith(REQUEST_REASON):
            entry.request, entry.kind = True, BAD_REQUEST
        if entry.kept:
            self.handled.append(entry)
        return entry

    def _resolve(self, marker: Marker, reason: str, how: str) -> list[Handled]:
        """The open tracebacks this marker shows the run survived: all of them for "ready", the same
        process's for serving lines, and only the latest of the process for a retry record."""
        chosen: list[Traceback] = []
        for seq in self.open_tracebacks:
            tb = next((t for t in self.tracebacks if t.seq == seq), None)
            if tb is None or seq >= marker.seq:
                continue
            if how == "ready" or 0 in (tb.pid, marker.pid) or tb.pid == marker.pid:
                chosen.append(tb)
        if how == "logged":
            chosen = chosen[-1:]
        return [self._settle_open(tb, reason, how) for tb in chosen]

    def survive_all(self, reason: str) -> list[Handled]:
        """The open tracebacks of a run that systemd says is still running: it survived them."""
        chosen = [tb for tb in self.tracebacks if tb.seq in self.open_tracebacks]
        return [self._settle_open(tb, reason, "running") for tb in chosen]

    def add_loose(self, line: LogLine, seq: int) -> None:
        """A line of a pasted log that nothing else took: kept (bounded) for the lone-line reading."""
        self.loose.append((seq, line.pid, line.text))
        if len(self.loose) > 2 * MAX_LOOSE:
            del self.loose[:MAX_LOOSE]

    def add_line_hit(self, hit: LineHit) -> None:
        if len(self.line_hits) < MAX_LINE_MATCHES:
            self.line_hits.append(hit)

    def add_marker(self, marker: Marker) -> list[Handled]:
        """Keep a marker; returns the open tracebacks it shows were handled."""
        done: list[Handled] = []
        kind = marker.kind
        if kind == "serving":  # frequent and only good for this: not kept
            if self.open_tracebacks:
                done = self._resolve(marker, "the server went on serving (decode/prefill batches) after it", "serving")
            return done
        if kind == "retrying":  # the traceback just printed is one failed try of several
            if self.open_tracebacks:
                done = self._resolve(marker, f"SGLang retried after it ({_record_text(marker.text)})", "logged")
            return done
        if kind == "ready":
            if self.ready_at is None:
                self.ready_at = marker.timestamp or self.last_line_at or 1.0
            if self.open_tracebacks:
                done = self._resolve(marker, "the server said it was ready after it", "ready")
        elif kind in TEARDOWN_KINDS or kind == "server-args":
            self.tore_down = self.tore_down or kind in TEARDOWN_KINDS
            self.open_tracebacks.clear()  # going down, or a new start in the same text: what came before was fatal
            self.worded.clear()
        if len(self.markers) < 64:
            self.markers.append(marker)
        return done

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


REQUEST_REASON = "one request failed and was answered with an error; the server went on"
# The records SGLang and uvicorn print around one request's error: serving_base.py's logger.exception("Error in
# request: ..."), http_server.py's "[http_server] Error: ...", uvicorn's "Exception in ASGI application", the
# tokenize endpoints' "Error during tokenization", serving_responses.py's background requests.
_REQUEST_RECORD = LazyPattern(
    r"Error in request:|\[http_server\] Error|Exception in ASGI application|Error during (?:de)?tokenization"
    r"|Error in preprocessing prompt inputs|Background request failed|Error handling VL reranker request"
)
# Frames of the code that serves one request: the OpenAI-compatible serving layer (0.4.x: openai_api/adapter.py),
# uvicorn/starlette/fastapi dispatching a request, and http_server.py's endpoints (not its launch and warm-up).
_REQUEST_FILES = LazyPattern(
    r"entrypoints/openai/serving_\w+\.py|openai_api/adapter\.py|uvicorn/protocols/http/|starlette/routing\.py"
    r"|fastapi/routing\.py"
)
_LAUNCH_FUNCTIONS = frozenset(
    {"launch_server", "_wait_and_warmup", "_execute_server_warmup", "main", "<module>", "run"}
)


def request_record(text: str) -> bool:
    """Whether a log record is one request's error answer ("[http_server] Error: ...", "Error in request: ...")."""
    return _REQUEST_RECORD.search(text[:300]) is not None


def request_level(tb: Traceback) -> bool:
    """Whether a traceback was raised while serving one request (the server answers it with an error and goes
    on): the record it was printed under says so, or a frame of a request handler is on its stack."""
    record = tb.logged_with or tb.header
    if record and _REQUEST_RECORD.search(record[:300]):
        return True
    for exc in tb.chain:
        for frame in exc.frames:
            if _REQUEST_FILES.search(frame.file):
                return True
            if frame.file.endswith("entrypoints/http_server.py") and frame.function not in _LAUNCH_FUNCTIONS:
                return True
    return False


def _fatal_by_nature(tb: Traceback) -> bool:
    """SGLang's process wrappers ("Scheduler hit an exception:") log right before the process tree is
    killed, and a native crash dump is the process dying: neither is ever handled."""
    return bool(tb.wrapper) or tb.final.type == FATAL_TYPE


def _record_text(record: str) -> str:
    return split_prefix(record)[2].strip()[:200]
