"""The diagnosis engine: lines, PID 1's records and unit state in; crash records, loop state and
diagnoses out.

The same engine serves the daemon (fed live from journald and D-Bus, ticked by a timer),
`crashdoc diagnose` (fed from journal files, then finished) and `crashdoc explain` (fed
from pasted text). It does no I/O: outputs drain `events()` and read `units()`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from crashdoc.assembly.fingerprint import fingerprint_traceback
from crashdoc.assembly.markers import SERVING_LITERALS, find_marker, logged_release, parse_server_args
from crashdoc.assembly.traceback import TracebackAssembler
from crashdoc.diagnosis import snapshot
from crashdoc.diagnosis.category import failure_kind, guess_category, guess_kind
from crashdoc.diagnosis.configchange import FileChange, correlate
from crashdoc.diagnosis.crashloop import LoopState, LoopTracker, Transition
from crashdoc.diagnosis.report import DiagnosisBuilder, UnitContext
from crashdoc.diagnosis.rootcause import Finding, judge_lone, line_findings, root_cause, traceback_finding
from crashdoc.diagnosis.run import Handled, LineHit, Run
from crashdoc.events import (
    BAD_REQUEST,
    Diagnosis,
    Lifecycle,
    LifecycleRecord,
    LogLine,
    Thresholds,
    Traceback,
    UnitState,
)
from crashdoc.matching.matcher import Facts, Matcher

MAX_INVOCATIONS = 16
MAX_FILE_CHANGES = 20
SETTLE_GRACE = 1.0  # seconds a crash that logged nothing waits for its last lines
QUIET_SECONDS = 1.0  # a process with an unfinished traceback that stays quiet this long is done
STOP_GRACE = 3.0  # a unit inactive this long was stopped; started again sooner, it was restarted


@dataclass(slots=True)
class EngineEvent:
    kind: str  # crash | loop-started | loop-updated | recovered | failed | stopped | line-failure
    unit: str
    at: float
    diagnosis: Diagnosis | None = None
    transition: Transition | None = None


@dataclass(slots=True)
class UnitRecord:
    """Everything the engine knows about one unit."""

    name: str
    role: str
    loop: LoopTracker
    invocations: OrderedDict[str, Run] = field(default_factory=OrderedDict)
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

    @property
    def crashloop(self) -> bool:
        return self.loop.looping

    @property
    def failed(self) -> bool:
        return self.loop.state is LoopState.FAILED


class Engine:
    def __init__(
        self,
        matcher: Matcher | Callable[[], Matcher],
        *,
        thresholds: Thresholds | None = None,
        role_of: Callable[[str], str | None] = lambda unit: "any",
        builder: DiagnosisBuilder | None = None,
        quiet_seconds: float = QUIET_SECONDS,
        lone_lines: bool = False,
    ) -> None:
        self._matcher = matcher if callable(matcher) and not isinstance(matcher, Matcher) else (lambda: matcher)
        self.thresholds = thresholds or Thresholds()
        self.role_of = role_of
        self.builder = builder or DiagnosisBuilder()
        self.quiet_seconds = quiet_seconds
        # pasted logs: a failure may be stated by a lone message line (the journal's daemon never guesses so)
        self.lone_lines = lone_lines
        self.assembler = TracebackAssembler()
        self._units: dict[str, UnitRecord] = {}
        self._events: list[EngineEvent] = []
        self._synthetic = 0  # numbers runs of text logs, which have no INVOCATION_ID
        self._seq = 0  # numbers the lines read: what a run logged after a traceback decides whether it was fatal
        self.now = 0.0

    @property
    def matcher(self) -> Matcher:
        return self._matcher()

    # --- inputs --------------------------------------------------------------------------

    def watch(self, unit: str) -> UnitRecord | None:
        """The unit's record, created on first sight when the unit is watched."""
        rec = self._units.get(unit)
        if rec is None:
            role = self.role_of(unit)
            if role is None:
                return None
            rec = self._units[unit] = UnitRecord(unit, role, LoopTracker(unit, self.thresholds))
        return rec

    def on_line(self, line: LogLine) -> None:
        """The hot path: runs for every line of every watched unit."""
        rec = self._units.get(line.unit) or self.watch(line.unit)
        if rec is None:
            return
        if line.timestamp > self.now:
            self.now = line.timestamp
        inv = rec.current
        if inv is None or inv.ended or (line.invocation and line.invocation != inv.id):
            inv = self._run_for(rec, line.invocation, line.timestamp)
        inv.add_line(line)
        if line.cmdline and _launches_sglang(line.cmdline):  # a process's first line says who it is
            rec.sglang = True
            if not inv.cmdline:
                inv.cmdline = tuple(line.cmdline.split())  # journald joins argv with spaces: good without D-Bus
                inv.flags = self.builder.flags_of(inv.cmdline)
                self._read_release(inv)
        self._seq += 1
        seq = self._seq
        done = self.assembler.feed(line, seq)
        for tb in done:
            self._add_traceback(rec, tb)
        if self.assembler.consumed:
            return
        matcher = self.matcher
        # one RE2 pass for the marker literals and the line signatures; find_marker is told the literal
        literal, match = matcher.scan_line(line.text)
        if literal in SERVING_LITERALS:
            inv.serving_seq = seq
            if literal[-5:] == "batch":  # "Decode batch" / "Prefill batch": the load a pool failure happened at
                inv.last_batch = line.text
            if not inv.open_tracebacks:
                return  # a batch or access line with no traceback to resolve: what add_marker would conclude
        marker = find_marker(line, literal or None) if literal is not None else None
        if marker is not None:
            marker.seq = seq
            if marker.kind in ("loading", "kv-cache", "ready"):
                rec.sglang = True
            if marker.kind == "server-args":
                inv.server_flags = parse_server_args(line.text)
                inv.sglang = rec.sglang = True
                inv.add_marker(marker)
                return  # a very long line that no line signature is about
            if marker.kind == "sglang-version":
                inv.logged_release = logged_release(line.text) or inv.logged_release
            handled = inv.add_marker(marker)
            if handled:
                self._count_handled(rec, inv, handled)
            if marker.kind == "serving":
                return  # a batch line is no failure
        if inv.worded and line.text.strip():
            handled = inv.later_line(line.pid, seq)
            if handled:
                self._count_handled(rec, inv, handled)
        if self.lone_lines and match is None and marker is None:
            inv.add_loose(line, seq)
        if match is not None:
            inv.add_line_hit(LineHit(match, line, seq))
            sig = matcher.library.get(match.signature_id)
            if sig is not None and sig.severity != "critical":
                rec.line_failures[match.signature_id] += 1
                self._events.append(EngineEvent("line-failure", rec.name, line.timestamp))

    def on_lifecycle(self, record: LifecycleRecord) -> None:
        rec = self.watch(record.unit)
        if rec is None:
            return
        if record.timestamp:
            self.now = max(self.now, record.timestamp)
        kind = record.kind
        if kind is Lifecycle.STARTED:
            rec.stop_seen_at = None  # a stop followed by a start is a restart, not a stop
            self._settle(rec)
            self._new_invocation(rec, record.invocation, record.timestamp)
            return
        if kind is Lifecycle.RESTART_SCHEDULED:
            rec.restarts_total += 1
            if record.n_restarts is not None:
                rec.n_restarts = record.n_restarts
        inv = self._invocation_for(rec, record.invocation, record.timestamp, create=False)
        if inv is None:
            inv = rec.pending_end or rec.current
        if kind in (Lifecycle.OOM_KILL, Lifecycle.COREDUMP):
            # about a process of the run in progress (or the one that just ended); never starts a run:
            # journald replays the kernel's old OOM lines when it starts
            if inv is not None and (not inv.ended or inv is rec.pending_end):
                inv.apply(record)
            return
        if inv is None:
            inv = self._new_invocation(rec, record.invocation, record.timestamp)
        if kind in (Lifecycle.EXITED, Lifecycle.FAILED, Lifecycle.DEACTIVATED):
            for tb in self.assembler.flush(unit=rec.name):
                self._add_traceback(rec, tb)
        inv.apply(record)
        if kind in (Lifecycle.EXITED, Lifecycle.DEACTIVATED) or (kind is Lifecycle.FAILED and not inv.ended):
            rec.pending_end = inv
        if kind in (Lifecycle.FAILED, Lifecycle.RESTART_SCHEDULED):
            self._settle(rec, wait_for_output=True)
        elif kind in (Lifecycle.DEACTIVATED, Lifecycle.JOB_FAILED):
            self._settle(rec)
        if kind is Lifecycle.START_LIMIT_HIT or (kind is Lifecycle.FAILED and record.result == "start-limit-hit"):
            self._transition(rec, rec.loop.on_failed(record.timestamp or self.now))

    def on_unit_state(self, state: UnitState) -> None:
        rec = self.watch(state.unit)
        if rec is None:
            return
        previous = rec.state
        rec.state = state
        if state.timestamp:
            self.now = max(self.now, state.timestamp)
        if state.n_restarts is not None:
            rec.n_restarts = state.n_restarts  # may drop to 0 (manual restart); restarts_total keeps counting
        current = rec.current
        if current is not None and current.id == state.invocation and state.active_enter_timestamp:
            current.started_at = current.started_at or state.active_enter_timestamp
        if state.exec_start and rec.current is not None and rec.current.cmdline != state.exec_start:
            rec.current.cmdline = state.exec_start
            rec.current.flags = self.builder.flags_of(state.exec_start)
            if rec.current.flags:
                rec.sglang = True  # the command starts SGLang: it will say when it is ready
            if rec.diagnosis is not None and rec.diagnosis.fix.changes and not rec.diagnosis.fix.command:
                self._refresh_loop_diagnosis(rec, "loop-updated")  # now the fix can show the real command
        if state.active_state == "failed" and (previous is None or previous.active_state != "failed"):
            self._settle(rec)
            if rec.loop.looping or rec.crashes_total:
                self._transition(rec, rec.loop.on_failed(state.timestamp or self.now))
        elif state.active_state == "inactive" and state.sub_state == "dead":
            self._settle(rec)
            if rec.loop.looping and rec.stop_seen_at is None:
                # a stop, or the stop half of a restart (`systemctl restart` after applying a fix): which one
                # shows once STOP_GRACE has passed without a new start
                rec.stop_seen_at = state.timestamp or self.now
        elif state.active_state in ("active", "activating", "reloading"):
            rec.stop_seen_at = None

    def tick(self, now: float) -> None:
        """Time passes: finish quiet tracebacks, settle ended runs, check recovery."""
        self.now = max(self.now, now)
        for tb in self.assembler.flush_idle(now, self.quiet_seconds):
            rec = self._units.get(tb.unit)
            if rec is not None:
                self._add_traceback(rec, tb)
        for rec in self._units.values():
            if rec.stop_seen_at is not None and now - rec.stop_seen_at >= STOP_GRACE:
                self._stopped(rec)
        for rec in self._units.values():
            if rec.pending_end is not None and now - (rec.pending_end.ended_at or now) >= SETTLE_GRACE:
                self._settle(rec)
            inv = rec.current
            if inv is not None and not inv.ended:
                self._judge_alive(rec, inv, now)
            elif (
                inv is not None
                and inv.ended
                and rec.loop.looping
                and rec.loop.state is not LoopState.FAILED
                and rec.state is None
                and now - (inv.ended_at or now) >= self.thresholds.failed_grace
            ):
                # journal only: the unit ended and nothing started it again
                if inv.crashed:
                    self._transition(rec, rec.loop.on_failed(now))
                else:
                    self._transition(rec, rec.loop.on_stopped(now))

    def on_file_changed(self, unit: str, path: str, at: float) -> None:
        """One of the unit's files (unit file, drop-in, environment file, launch script) changed."""
        rec = self._units.get(unit)
        if rec is None:
            return
        rec.file_changes.append(FileChange(path, at))
        del rec.file_changes[:-MAX_FILE_CHANGES]

    def _judge_alive(self, rec: UnitRecord, inv: Run, now: float) -> None:
        """A run that lived through the recovery window (and is ready, for SGLang) is good: remember its
        command line for config-change reports, and end a loop if there is one."""
        started = inv.started_at or inv.first_line_at
        if not inv.good and started and now - started >= self.thresholds.recovery and (inv.ready or not rec.sglang):
            inv.good = True
            rec.last_good = inv
        if inv.good:
            # dated by the run, not by the clock, so that a restarted crashdoc names the event the same way
            since = max(started, inv.ready_at or 0.0)
            self._transition(rec, rec.loop.on_good_run(since + self.thresholds.recovery))

    def _stopped(self, rec: UnitRecord) -> None:
        at, rec.stop_seen_at = rec.stop_seen_at, None
        self._transition(rec, rec.loop.on_stopped(at if at is not None else self.now))

    def finish(self) -> None:
        """End of a one-shot input: whatever is still open is judged on what was seen."""
        for pending in self._units.values():
            if pending.stop_seen_at is not None:
                self._stopped(pending)
        for tb in self.assembler.flush():
            rec = self._units.get(tb.unit)
            if rec is not None:
                self._add_traceback(rec, tb)
        for rec in self._units.values():
            current = rec.current
            state = rec.state
            if (
                current is not None
                and not current.ended
                and state is not None
                and state.active_state in ("active", "reloading")
                and state.invocation == current.id
            ):
                # systemd says this run is still going: a traceback whose fate was open did not end it
                handled = current.survive_all("systemd says the run is still active")
                if handled:
                    self._count_handled(rec, current, handled)
            if current is not None and not current.ended and current.worded:
                self._count_handled(rec, current, current.settle_worded())
            if self.lone_lines and current is not None and not current.ended:
                judge_lone(current, self.matcher)
            if rec.current is not None and not rec.current.ended and rec.current.crashed:
                rec.current.ended_by_input = True
                rec.current.ended_at = rec.current.last_line_at
                rec.pending_end = rec.current
            self._settle(rec)

    # --- persistence ---------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything the engine knows, as versioned JSON data (`diagnosis.snapshot`), to resume
        exactly where a killed or upgraded crashdoc stopped.

        Only data is saved (no matcher, builder or callables): units with their runs, loop
        state and diagnoses, the tracebacks still being assembled, and the events not yet
        drained: saved before the outputs act on them, they are an outbox that a restarted
        crashdoc hands out again (its outputs skip what they already did), so that a decision
        taken on a D-Bus change or a tick, which a replay of the journal would not redo, is
        never lost and never redone.
        """
        state = {
            "units": self._units,
            "pending": self.assembler.export(),
            "synthetic": self._synthetic,
            "seq": self._seq,
            "now": self.now,
            "events": self._events,
        }
        return snapshot.dump(state, _CODEC)

    def restore(self, doc: dict[str, Any]) -> None:
        """Load a snapshot made by `snapshot` (this schema or an older one); raises ValueError otherwise."""
        self._adopt(snapshot.load(doc, _CODEC))

    def restore_legacy(self, blob: bytes) -> None:
        """Load the pickle crashdoc 0.1.0 saved (once, on the first start after the upgrade)."""
        self._adopt(snapshot.from_legacy_pickle(blob, _CODEC))

    def _adopt(self, state: dict[str, Any]) -> None:
        try:
            units = dict(state["units"])
            pending = state["pending"]
            synthetic, now = int(state["synthetic"]), float(state["now"])
            seq = int(state.get("seq", 0))
            events = list(state.get("events", ()))
            if not all(isinstance(r, UnitRecord) for r in units.values()):
                raise TypeError("units are not unit records")
        except (KeyError, TypeError, ValueError) as exc:
            raise snapshot.SnapshotError(f"damaged snapshot: {exc}") from exc
        for rec in units.values():
            rec.loop.thresholds = self.thresholds  # the configuration may have changed meanwhile
            rec.role = self.role_of(rec.name) or rec.role
        self._units = units
        self.assembler.import_(pending)
        self._synthetic = synthetic
        self._seq = seq
        self.now = now
        self._events = events

    def forget_loops(self) -> None:
        """The journal the state came from is gone (a new journal, a re-imaged host): no loop that it
        showed can be going on now. Counters keep their totals; runs in progress are forgotten."""
        for rec in self._units.values():
            rec.loop.reset()
            rec.diagnosis = None
            rec.current = None
            rec.pending_end = None
        self._events = [e for e in self._events if e.kind not in ("loop-started", "loop-updated", "failed")]

    # --- configuration changes while running -------------------------------------------------------

    def set_thresholds(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        for rec in self._units.values():
            rec.loop.thresholds = thresholds

    def set_roles(self, role_of: Callable[[str], str | None]) -> list[str]:
        """New watch rules: units no longer watched are forgotten (their metrics and alerts go); the
        others take the role the rules give them. Returns the forgotten units."""
        self.role_of = role_of
        gone = [name for name in self._units if role_of(name) is None]
        for name in gone:
            del self._units[name]
        for name, rec in self._units.items():
            rec.role = role_of(name) or rec.role
        return gone

    # --- outputs -------------------------------------------------------------------------

    def units(self) -> dict[str, UnitRecord]:
        return self._units

    def events(self) -> list[EngineEvent]:
        """Drain what happened since the last call (for alerts and journal records)."""
        out, self._events = self._events, []
        return out

    def pending(self) -> tuple[EngineEvent, ...]:
        """What `events()` would drain now, left in place (and in the snapshot)."""
        return tuple(self._events)

    def diagnoses(self, units: Iterable[str] | None = None) -> list[Diagnosis]:
        """Every current diagnosis, the most likely root cause first.

        A unit in a loop gives the loop's diagnosis; otherwise each distinct crash gives one,
        and non-fatal failures that line-level signatures saw follow.
        """
        wanted = set(units) if units is not None else None
        result: list[tuple[tuple[int, int, float], Diagnosis]] = []
        for rec in self._units.values():
            if wanted is not None and rec.name not in wanted:
                continue
            if rec.diagnosis is not None:
                live = dataclasses.replace(rec.diagnosis, restarts=rec.n_restarts)  # NRestarts moves on
                result.append(((0, 0, -live.crashes), live))
                continue
            for rank, diagnosis in enumerate(self._crash_diagnoses(rec)):
                result.append(((1, rank, -diagnosis.crashes), diagnosis))
            for diagnosis in self._line_diagnoses(rec):
                result.append(((2, 0, -diagnosis.crashes), diagnosis))
        severity = {"critical": 0, "warning": 1, "info": 2}
        result.sort(key=lambda item: (item[0][0], severity.get(item[1].severity, 3), item[0][2], item[0][1]))
        return [d for _, d in result]

    def warnings(self, units: Iterable[str] | None = None) -> list[Diagnosis]:
        """Tracebacks the runs survived, one per unit and error, most frequent first: shown, never a crash.

        A traceback SGLang logged as handled is left out when its run then died with nothing else to
        show: it is that crash's root cause.
        """
        wanted = set(units) if units is not None else None
        out: list[Diagnosis] = []
        matcher = self.matcher
        for rec in self._units.values():
            if wanted is not None and rec.name not in wanted:
                continue
            groups: dict[str, tuple[Handled, Run, int, list[str]]] = {}
            for inv in rec.invocations.values():
                cause_of_crash = inv.crashed and not inv.tracebacks
                for h in inv.handled:
                    if cause_of_crash and h.how == "logged":
                        continue
                    key = h.fingerprint or fingerprint_traceback(h.traceback)
                    first, _, count, who = groups.get(key, (h, inv, 0, []))
                    who.extend(p for p in h.processes if p not in who)
                    groups[key] = (first, inv, count + h.count, who)
            for h, inv, count, who in groups.values():
                finding = traceback_finding(h.traceback, matcher, self._facts(rec, inv))
                finding.processes = who[:16]
                finding.evidence.append(f"handled: {h.reason}")
                if len(who) > 1:
                    finding.evidence.append(f"the same error in {len(who)} processes: {', '.join(who[:16])}")
                if h.traceback.logged_with and h.how != "logged":
                    finding.evidence.append(f"logged as: {h.traceback.logged_with[:200]}")
                frames = h.traceback.final.frames
                if frames:
                    finding.evidence.append(f"raised at {frames[-1].file}:{frames[-1].line} in {frames[-1].function}")
                d = self._build(rec, inv, finding, crashes=1, confidence=1.0)
                d.crashes = count  # times seen; not crashes of a loop
                if d.signature is None:
                    d.fix.summary = (
                        "SGLang carried on after this error: nothing to do unless the part that failed "
                        "(see the root-cause line) is needed."
                    )
                d.severity = "warning"
                d.handled = h.reason
                if h.request:
                    d.kind = BAD_REQUEST
                out.append(d)
        out.sort(key=lambda d: -d.crashes)
        return out

    # --- internals -----------------------------------------------------------------------

    def _run_for(self, rec: UnitRecord, invocation: str, timestamp: float) -> Run:
        """The run a line belongs to, started on first sight."""
        run = self._invocation_for(rec, invocation, timestamp)
        assert run is not None  # create=True always gives one
        return run

    def _invocation_for(self, rec: UnitRecord, invocation: str, timestamp: float, create: bool = True) -> Run | None:
        if invocation:
            inv = rec.invocations.get(invocation)
            if inv is not None:
                return inv
            if not create:
                return None
            self._settle(rec)
            return self._new_invocation(rec, invocation, timestamp)
        inv = rec.current
        if inv is not None and (not inv.ended or not create):
            return inv
        if not create:
            return inv
        self._settle(rec)
        return self._new_invocation(rec, "", timestamp)

    def _new_invocation(self, rec: UnitRecord, invocation: str, timestamp: float) -> Run:
        if not invocation:
            self._synthetic += 1
        inv_id = invocation or f"run-{self._synthetic}"
        current = rec.current
        if current is not None and not invocation and not current.ended and not current.lines:
            current.started_at = current.started_at or timestamp  # "Started" before any line: same run
            return current
        inv = Run(rec.name, inv_id, started_at=timestamp)
        state = rec.state
        if state is not None and state.exec_start:
            inv.cmdline = state.exec_start
            inv.flags = self.builder.flags_of(inv.cmdline)  # what this run starts with, before anyone edits it
            self._read_release(inv)
        if state is not None and state.invocation == inv_id and state.active_enter_timestamp and not timestamp:
            inv.started_at = state.active_enter_timestamp
        rec.invocations[inv_id] = inv
        while len(rec.invocations) > MAX_INVOCATIONS:
            rec.invocations.popitem(last=False)
        rec.current = inv
        return inv

    def _add_traceback(self, rec: UnitRecord, tb: Traceback) -> None:
        inv = rec.invocations.get(tb.invocation) if tb.invocation else None
        if inv is None:
            inv = rec.current or self._new_invocation(rec, tb.invocation, tb.timestamp)
        kept = len(inv.tracebacks)
        handled = inv.add_traceback(tb)
        if handled:
            self._count_handled(rec, inv, handled)
        if inv.ended and inv is not rec.pending_end and len(inv.tracebacks) > kept:  # at most MAX_TRACEBACKS times
            self._rejudge(rec, inv)

    def _count_handled(self, rec: UnitRecord, inv: Run, handled: list[Handled]) -> None:
        """Tracebacks the run survived: counted by kind of failure, never a crash."""
        for entry in handled:
            if not entry.kind:
                if entry.kept:  # matched once per distinct error: a flood of the same warning costs a lookup
                    matcher = self.matcher
                    finding = traceback_finding(entry.traceback, matcher, self._facts(rec, inv))
                    sig = matcher.library.get(finding.signature_id) if finding.signature_id else None
                    entry.kind = failure_kind(finding, sig)
                else:  # past the bound of distinct errors kept: the cheap guess, no matching
                    exc = entry.traceback.final
                    entry.kind = guess_kind(exc.type, exc.message, guess_category(exc))
            rec.warnings_by_kind[entry.kind] += 1

    def _rejudge(self, rec: UnitRecord, inv: Run) -> None:
        """A traceback that completed after its run was judged: journald reads a unit's output lazily,
        so under a flood (or for a 10,000-frame traceback) a run's last lines arrive after PID 1's
        record of its end, and the crash was settled without them (after SETTLE_GRACE). Its root cause
        is decided again and a loop's diagnosis follows; its count stays where it was first put."""
        crash = next((c for c in reversed(rec.loop.crashes) if c.invocation == inv.id), None)
        if crash is None:
            return
        finding = root_cause(inv, self.matcher, self._facts(rec, inv))
        if finding is None or (crash.finding is not None and crash.finding.fingerprint == finding.fingerprint):
            return
        crash.finding = finding  # crashdoc_crashes_total keeps its first count: a counter never goes down
        if rec.loop.looping:
            self._refresh_loop_diagnosis(rec, "loop-updated")

    def _flags(self, rec: UnitRecord, inv: Run) -> dict[str, str]:
        """The run's SGLang flags: its command line (script included, as read when the run began) over
        SGLang's own server_args line."""
        flags = dict(inv.server_flags)
        flags.update(inv.flags if inv.flags is not None else self.builder.flags_of(inv.cmdline))
        return flags

    def _read_release(self, inv: Run) -> None:
        """The SGLang release the run's interpreter imports, as the builder reads it (files, read once per run)."""
        found = self.builder.release_of(inv.cmdline)
        if found is not None:
            inv.sglang_release, inv.sglang_release_from = found

    def _release(self, inv: Run | None) -> tuple[str, str]:
        """(release, where it came from) for a run: an option given to crashdoc, then what the run's own
        output named, then its interpreter's files; ("", "") when none says."""
        forced = self.builder.forced_release
        if forced is not None:
            return forced
        if inv is not None and inv.logged_release:
            return inv.logged_release, "the unit's log"
        if inv is not None and inv.sglang_release:
            return inv.sglang_release, inv.sglang_release_from
        return "", ""

    def _facts(self, rec: UnitRecord, inv: Run) -> Facts:
        flags = self._flags(rec, inv)
        return Facts(
            flags=flags,
            model=flags.get("--model-path", "") or flags.get("--model", ""),
            disaggregation_mode=flags.get("--disaggregation-mode", ""),
            role=rec.role if rec.role != "any" else "",
            sglang_version=self._release(inv)[0],
        )

    def _settle(self, rec: UnitRecord, wait_for_output: bool = False) -> None:
        """Judge the run that ended: a crash updates the loop state and the diagnosis.

        journald reads a unit's output lazily, so PID 1's record of the end can arrive before the
        run's last lines: a crash with nothing logged yet waits up to SETTLE_GRACE (the tick or the
        next run settles it), so that it is counted under the right signature once and for all.
        """
        inv = rec.pending_end
        if inv is None:
            return
        if (
            wait_for_output
            and inv.crashed
            and not (inv.tracebacks or inv.line_hits or inv.oom_killed or inv.core_dumped)
            and self.now - (inv.ended_at or self.now) < SETTLE_GRACE
        ):
            return
        rec.pending_end = None
        if not inv.crashed:
            return
        matcher = self.matcher
        finding = root_cause(inv, matcher, self._facts(rec, inv))
        at = inv.ended_at or inv.last_line_at or self.now
        rec.crashes_total += 1
        rec.last_crash_at = at
        key = finding.signature_id if finding is not None and finding.signature_id else "unknown"
        rec.crashes_by_signature[key] += 1
        transition = rec.loop.on_crash(inv, finding, at)
        crash_diagnosis = self._build(rec, inv, finding, crashes=1, confidence=1.0) if finding else None
        self._events.append(EngineEvent("crash", rec.name, at, crash_diagnosis))
        self._transition(rec, transition)
        if rec.loop.looping and transition is None:
            self._refresh_loop_diagnosis(rec, "loop-updated")

    def _transition(self, rec: UnitRecord, transition: Transition | None) -> None:
        if transition is None:
            return
        new = transition.new
        if new in (LoopState.LOOPING, LoopState.FAILED):
            kind = "loop-started" if transition.new_loop else ("failed" if new is LoopState.FAILED else "loop-updated")
            self._refresh_loop_diagnosis(rec, kind, transition)
        elif new in (LoopState.RECOVERED, LoopState.STOPPED):
            rec.last_diagnosis = rec.diagnosis or rec.last_diagnosis
            rec.diagnosis = None
            self._events.append(
                EngineEvent(
                    "recovered" if new is LoopState.RECOVERED else "stopped",
                    rec.name,
                    transition.at,
                    rec.last_diagnosis,
                    transition,
                )
            )

    def _refresh_loop_diagnosis(self, rec: UnitRecord, kind: str, transition: Transition | None = None) -> None:
        finding, confidence, crashes = rec.loop.dominant()
        inv = self._invocation_of(rec, finding)
        if finding is None:
            diagnosis = self.builder.unexplained(rec.name, self._context(rec, inv), crashes)
        else:
            diagnosis = self._build(rec, inv, finding, crashes=crashes, confidence=confidence)
        changed = rec.diagnosis is None or (rec.diagnosis.signature, rec.diagnosis.fingerprint) != (
            diagnosis.signature,
            diagnosis.fingerprint,
        )
        rec.diagnosis = diagnosis
        if kind != "loop-updated" or changed:
            at = transition.at if transition is not None else self.now
            self._events.append(EngineEvent(kind, rec.name, at, diagnosis, transition))

    def _invocation_of(self, rec: UnitRecord, finding: Finding | None) -> Run | None:
        if finding is not None and finding.traceback is not None:
            inv = rec.invocations.get(finding.traceback.invocation)
            if inv is not None:
                return inv
        for inv in reversed(rec.invocations.values()):
            if inv.crashed:
                return inv
        return rec.current

    def _context(self, rec: UnitRecord, inv: Run | None) -> UnitContext:
        facts = self._facts(rec, inv) if inv is not None else Facts()
        cmdline = (inv.cmdline if inv is not None else ()) or (rec.state.exec_start if rec.state else ())
        change = None
        if rec.loop.looping and rec.loop.loop_started_at is not None:
            good = rec.last_good
            change = correlate(
                rec.file_changes,
                rec.loop.loop_started_at,
                (good.started_at or good.first_line_at) if good is not None else None,
                good.flags if good is not None else None,
                (inv.flags if inv is not None and inv.flags is not None else facts.flags),
            )
        release, release_from = self._release(inv)
        return UnitContext(
            unit=rec.name,
            role=rec.role,
            n_restarts=rec.n_restarts,
            facts=facts,
            cmdline=cmdline,
            invocation=inv,
            state=rec.state,
            config_change=change,
            sglang_version=release,
            sglang_version_from=release_from,
            peers=self._peers(rec),
        )

    def _peers(self, rec: UnitRecord) -> tuple[tuple[str, dict[str, str]], ...]:
        """The other units' flags (their last run's): a PD unit's counterpart, the workers behind a router."""
        return tuple(
            (other.name, self._flags(other, other.current))
            for other in self._units.values()
            if other is not rec and other.current is not None
        )

    def _build(self, rec: UnitRecord, inv: Run | None, finding: Finding, crashes: int, confidence: float) -> Diagnosis:
        return self.builder.build(finding, self._context(rec, inv), self.matcher.library, crashes, confidence)

    def _crash_diagnoses(self, rec: UnitRecord) -> list[Diagnosis]:
        groups: dict[str, tuple[Finding, Run, int]] = {}
        matcher = self.matcher
        for inv in rec.invocations.values():
            if not inv.crashed or (not inv.ended and not inv.ended_by_input):
                continue
            finding = root_cause(inv, matcher, self._facts(rec, inv))
            if finding is None:
                continue
            key = finding.signature_id or finding.fingerprint
            count = groups[key][2] + 1 if key in groups else 1
            groups[key] = (finding, inv, count)
        return [self._build(rec, inv, f, crashes=n, confidence=1.0) for f, inv, n in groups.values()]

    def _line_diagnoses(self, rec: UnitRecord) -> list[Diagnosis]:
        matcher = self.matcher
        found: dict[str, tuple[Finding, Run, int]] = {}
        for inv in rec.invocations.values():
            for finding in line_findings(inv, matcher):
                if inv.crashed and finding.match is not None:
                    sig = matcher.library.get(finding.match.signature_id)
                    if sig is not None and sig.severity == "critical":
                        continue  # already the crash's root cause or its evidence
                key = finding.signature_id or finding.fingerprint
                count = found[key][2] + len(finding.processes) if key in found else len(finding.processes)
                found[key] = (finding, inv, count)
        return [self._build(rec, inv, f, crashes=n, confidence=1.0) for f, inv, n in found.values()]


def _launches_sglang(cmdline: str) -> bool:
    return "sglang.launch_server" in cmdline or "sglang serve" in cmdline or "/sglang serve" in cmdline


_CODEC = snapshot.Codec(extra=(UnitRecord, EngineEvent))
