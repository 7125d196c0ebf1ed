"""The diagnosis engine: lines, PID 1's records, unit state, launch facts and the kernel's GPU faults in; views,
events and diagnoses out.

The same engine serves the daemon (fed live from journald and D-Bus, ticked by a timer), `crashdoc diagnose`
(fed from journal files, then finished) and `crashdoc explain` (fed from pasted text). It does no I/O and
calls nothing that does: what it needs from disk (a command's flags, its SGLang release) is handed in as
`LaunchFacts` before the event that needs it, and the fix it decides is applied to the unit's files by the
remedy stage afterwards (`remedy.stage`). Others read `units()`, `runs()`, `diagnoses()`, `warnings()` and
drain `events()` (diagnosis.views); nothing outside this package reads or changes its records.

A line is cheap: it is assembled into tracebacks, scanned for markers and line signatures and kept with its
run; it judges nothing. Verdicts (`Verdicts`: a run settled, a late traceback judged again, a survived one
counted by kind) are taken when PID 1 speaks, D-Bus speaks, time passes (`tick`), a batch of events ends
(`feed`, `judge`) or the input ends (`finish`). A kernel GPU fault (`on_gpu`) is counted, tied to the units
whose processes or GPUs it names, and kept (bounded); a crash is put before the faults when its diagnosis is
made (`gpustate`: hardware or not).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeAlias

from crashdoc.assembly.markers import SERVING_LITERALS, find_marker, launches_sglang, logged_release, parse_server_args
from crashdoc.assembly.traceback import TracebackAssembler
from crashdoc.diagnosis.crashloop import LoopState, LoopTracker
from crashdoc.diagnosis.lone import judge_lone
from crashdoc.diagnosis.reporting import Reporter, default_builder
from crashdoc.diagnosis.run import Run
from crashdoc.diagnosis.unitrecord import UnitRecord, begin
from crashdoc.diagnosis.verdicts import SETTLE_GRACE, Verdicts
from crashdoc.events import Lifecycle, LifecycleRecord, LogLine, Thresholds
from crashdoc.matching.matcher import Matcher

if TYPE_CHECKING:  # imported where they are made or first used: `explain` of a healthy log needs none of them
    from crashdoc.diagnosis.gpustate import GpuRecord
    from crashdoc.diagnosis.report import DiagnosisBuilder
    from crashdoc.diagnosis.snapshot import EngineState, SavedText
    from crashdoc.diagnosis.views import EngineEvent, GpuView, RunView, UnitView
    from crashdoc.diagnosis_records import Diagnosis
    from crashdoc.failure_records import Traceback
    from crashdoc.gpu_events import GpuEvent, HostGpus, UnitDevices
    from crashdoc.unit_records import LaunchFacts, UnitState

MAX_INVOCATIONS = 16
MAX_FILE_CHANGES = 20
QUIET_SECONDS = 1.0  # a process with an unfinished traceback that stays quiet this long is done
STOP_GRACE = 3.0  # a unit inactive this long was stopped; started again sooner, it was restarted
_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


class Engine:
    """More methods than the house's 25: its inputs and what it publishes are one interface, which splitting the
    class would only spread over two objects that share every record."""

    def __init__(
        self,
        matcher: Matcher | Callable[[], Matcher],
        *,
        thresholds: Thresholds | None = None,
        role_of: Callable[[str], str | None] = lambda unit: "any",
        builder: DiagnosisBuilder | Callable[[], DiagnosisBuilder] | None = None,
        release_option: tuple[str, str] | None = None,
        quiet_seconds: float = QUIET_SECONDS,
        lone_lines: bool = False,
    ) -> None:
        get = matcher if callable(matcher) and not isinstance(matcher, Matcher) else (lambda: matcher)
        self.thresholds = thresholds or Thresholds()
        self.role_of = role_of
        self._gpu: GpuRecord | None = None  # the kernel's GPU faults and GPU facts, made when the first comes in
        self._gpu_joins: dict | None = None  # the units' processes and GPUs, for the GPU events between two lines
        self._gpu_joins_seq = 0  # `_seq` when they were made: a line since may be a new run's or process's
        self.reporter = Reporter(
            get,
            builder or default_builder,
            release_option,
            lambda: self._units,
            hardware=lambda unit, run, d: d if self._gpu is None else self._gpu.judge(unit, run, d),
        )
        self.verdicts = Verdicts(self.reporter)
        self._saved: SavedText | None = None  # each unit's saved text: made again for `verdicts.changed` only
        self.quiet_seconds = quiet_seconds
        # pasted logs: a failure may be stated by a lone message line (the journal's daemon never guesses so)
        self.lone_lines = lone_lines
        self.assembler = TracebackAssembler()
        self._units: dict[str, UnitRecord] = {}
        self._synthetic = 0  # numbers runs of text logs, which have no INVOCATION_ID
        self._seq = 0  # numbers the lines read: what a run logged after a traceback decides whether it was fatal
        self.now = 0.0

    @property
    def matcher(self) -> Matcher:
        return self.reporter.matcher()

    # --- inputs --------------------------------------------------------------------------

    def watch(self, unit: str) -> bool:
        """Know the unit from now on (when its role says it is watched); False when it is not."""
        return self._record(unit) is not None

    def on_launch(self, facts: LaunchFacts) -> None:
        """What the runtime read of one of a unit's commands: runs that start with it take its flags and release."""
        rec = self._record(facts.unit)
        if rec is not None:
            rec.learn(facts)

    def on_gpu(self, event: GpuEvent | HostGpus | UnitDevices) -> None:
        """A GPU fault the kernel logged (any process's: it is joined with the units here), or what the runtime read
        of the GPUs: the host's, or a unit's CUDA_VISIBLE_DEVICES."""
        from crashdoc.gpu_events import GpuEvent, UnitDevices

        gpu = self._gpu_record()
        if not isinstance(event, GpuEvent):
            if isinstance(event, UnitDevices) and self._record(event.unit) is None:
                return
            gpu.on_fact(event)
            self._gpu_joins = None
            return
        if event.timestamp > self.now:
            self.now = event.timestamp
        if self._gpu_joins is None or self._gpu_joins_seq != self._seq:
            self._gpu_joins_seq = self._seq
            self._gpu_joins = gpu.joins(
                (rec.name, list(rec.runs.values())[-2:], self.reporter.flags(rec.current) if rec.current else {})
                for rec in self._units.values()
            )
        gpu.add(event, self._gpu_joins)

    def on_line(self, line: LogLine, matcher: Matcher | None = None) -> None:
        """The hot path: every line of every watched unit. `matcher`: the batch's (`feed` looks it up once)."""
        if matcher is None:
            matcher = self.reporter.matcher()
        rec = self._units.get(line.unit) or self._record(line.unit)
        if rec is None:
            return
        self.verdicts.changed.add(rec.name)
        if line.timestamp > self.now:
            self.now = line.timestamp
        run = rec.current
        if run is None or run.ended_at is not None or (line.invocation and line.invocation != run.id):
            run = (rec.runs.get(line.invocation) if line.invocation else None) or self._new_run(
                rec, line.invocation, line.timestamp
            )  # an older run that ended is judged later (`judge`): its output is complete now
        if line.cmdline and launches_sglang(line.cmdline):  # a process's first line says who it is
            rec.sglang = True
            if not run.cmdline:
                begin(rec, run, tuple(line.cmdline.split()))  # journald joins argv with spaces: good without D-Bus
        run.lines += 1  # Run.add_line, inlined: the hot path
        if not run.first_line_at:
            run.first_line_at = line.timestamp
        run.last_line_at = line.timestamp or run.last_line_at
        seq = self._seq = self._seq + 1
        assembler = self.assembler
        done = assembler.feed(line, seq)
        if done:
            for tb in done:
                self._add_traceback(rec, tb)
        if assembler.consumed:
            return
        # one RE2 pass for the marker literals and the line signatures; find_marker is told the literal
        literal, match = matcher.scan_line(line.text)
        if literal in SERVING_LITERALS:
            run.serving_seq = seq
            if literal[-5:] == "batch":  # "Decode batch" / "Prefill batch": the load a pool failure happened at
                run.last_batch = line.text
            if not run.open_tracebacks:
                return  # a batch or access line with no traceback to resolve: what add_marker would conclude
        marker = find_marker(line, literal or None) if literal is not None else None
        if marker is not None:
            marker.seq = seq
            if marker.kind in ("loading", "kv-cache", "ready"):
                rec.sglang = True
            if marker.kind == "server-args":
                run.server_flags = parse_server_args(line.text)
                run.sglang = rec.sglang = True
                run.add_marker(marker)
                return  # a very long line that no line signature is about
            if marker.kind == "sglang-version":
                run.logged_release = logged_release(line.text) or run.logged_release
            handled = run.add_marker(marker)
            if handled:
                rec.unjudged.extend((entry, run) for entry in handled)
            if marker.kind == "serving":
                return  # a batch line is no failure
        if run.worded and line.text.strip():
            handled = run.later_line(line.pid, seq)
            if handled:
                rec.unjudged.extend((entry, run) for entry in handled)
        if self.lone_lines and match is None and marker is None:
            run.add_loose(line, seq)
        if match is not None:
            from crashdoc.diagnosis.failures import LineHit  # a matched line: never in a healthy log

            run.add_line_hit(LineHit(match, line, seq))
            sig = matcher.library.get(match.signature_id)
            if sig is not None and sig.severity != "critical":
                rec.line_failures[match.signature_id] += 1
                self.verdicts.publish("line-failure", rec.name, line.timestamp)

    def on_lifecycle(self, record: LifecycleRecord) -> None:
        rec = self._record(record.unit)
        if rec is None:
            return
        if record.timestamp:
            self.now = max(self.now, record.timestamp)
        self._gpu_joins = None  # a run starts or ends: other processes
        verdicts = self.verdicts
        verdicts.judge(rec, self.now)
        kind = record.kind
        if kind is Lifecycle.STARTED:
            rec.stop_seen_at = None  # a stop followed by a start is a restart, not a stop
            verdicts.settle(rec, self.now)
            self._new_run(rec, record.invocation, record.timestamp)
            return
        if kind is Lifecycle.RESTART_SCHEDULED:
            rec.restarts_total += 1
            if record.n_restarts is not None:
                rec.n_restarts = record.n_restarts
        run = rec.runs.get(record.invocation) if record.invocation else rec.current
        if run is None:
            run = rec.pending_end or rec.current
        if kind in (Lifecycle.OOM_KILL, Lifecycle.COREDUMP):
            # about a process of the run in progress (or the one that just ended); never starts a run:
            # journald replays the kernel's old OOM lines when it starts
            if run is not None and (not run.ended or run is rec.pending_end):
                run.apply(record)
            return
        if run is None:
            run = self._new_run(rec, record.invocation, record.timestamp)
        if kind in (Lifecycle.EXITED, Lifecycle.FAILED, Lifecycle.DEACTIVATED):
            for tb in self.assembler.flush(unit=rec.name):
                self._add_traceback(rec, tb)
            verdicts.judge(rec, self.now)
        run.apply(record)
        if kind in (Lifecycle.EXITED, Lifecycle.DEACTIVATED) or (kind is Lifecycle.FAILED and not run.ended):
            if rec.pending_end is not None and rec.pending_end is not run:
                verdicts.settle(rec, self.now)  # an older run still waiting: a newer one has ended since
            rec.pending_end = run
        if kind in (Lifecycle.FAILED, Lifecycle.RESTART_SCHEDULED):
            verdicts.settle(rec, self.now, wait_for_output=True)
        elif kind in (Lifecycle.DEACTIVATED, Lifecycle.JOB_FAILED):
            verdicts.settle(rec, self.now)
        if kind is Lifecycle.START_LIMIT_HIT or (kind is Lifecycle.FAILED and record.result == "start-limit-hit"):
            verdicts.transition(rec, rec.loop.on_failed(record.timestamp or self.now))

    def on_unit_state(self, state: UnitState) -> None:
        rec = self._record(state.unit)
        if rec is None:
            return
        previous = rec.state
        rec.state = state
        if state.timestamp:
            self.now = max(self.now, state.timestamp)
        self.verdicts.judge(rec, self.now)
        if state.n_restarts is not None:
            rec.n_restarts = state.n_restarts  # may drop to 0 (manual restart); restarts_total keeps counting
        current = rec.current
        if current is not None and current.id == state.invocation and state.active_enter_timestamp:
            current.started_at = current.started_at or state.active_enter_timestamp
        if state.exec_start and current is not None and current.cmdline != state.exec_start:
            begin(rec, current, state.exec_start)
            if current.flags:
                rec.sglang = True  # the command starts SGLang: it will say when it is ready
        target = rec.diagnosis.target if rec.diagnosis is not None and rec.diagnosis.fix.changes else None
        if target is not None and state.exec_start and (not target.cmdline or target.exec_start != state.exec_start):
            self.verdicts.refresh(rec, "loop-updated", self.now)  # the loop's fix: a command to apply to, and check
        verdicts = self.verdicts
        if state.active_state == "failed" and (previous is None or previous.active_state != "failed"):
            verdicts.settle(rec, self.now)
            if rec.loop.looping or rec.crashes_total:
                verdicts.transition(rec, rec.loop.on_failed(state.timestamp or self.now))
        elif state.active_state == "inactive" and state.sub_state == "dead":
            verdicts.settle(rec, self.now)
            if rec.loop.looping and rec.stop_seen_at is None:
                # a stop, or the stop half of a restart (`systemctl restart` after applying a fix): which one
                # shows once STOP_GRACE has passed without a new start
                rec.stop_seen_at = state.timestamp or self.now
        elif state.active_state in ("active", "activating", "reloading"):
            rec.stop_seen_at = None

    def on_file_changed(self, unit: str, path: str, at: float) -> None:
        """One of the unit's files (unit file, drop-in, environment file, launch script) changed."""
        rec = self._units.get(unit)
        if rec is None:
            return
        from crashdoc.diagnosis.configchange import FileChange  # the daemon's alone: a paste has no files

        self.verdicts.changed.add(unit)
        rec.file_changes.append(FileChange(path, at))
        del rec.file_changes[:-MAX_FILE_CHANGES]

    def tick(self, now: float) -> None:
        """Time passes: finish quiet tracebacks, settle ended runs, check recovery."""
        self.now = max(self.now, now)
        verdicts = self.verdicts
        for tb in self.assembler.flush_idle(now, self.quiet_seconds):
            rec = self._record(tb.unit)  # marked changed
            if rec is not None:
                self._add_traceback(rec, tb)
        for rec in self._units.values():
            verdicts.judge(rec, self.now)
            if rec.stop_seen_at is not None and now - rec.stop_seen_at >= STOP_GRACE:
                verdicts.stopped(rec, self.now)
        for rec in self._units.values():
            ended = rec.pending_end
            if ended is not None and now - (ended.ended_at or now) >= SETTLE_GRACE:  # the grace for its last lines
                verdicts.settle(rec, self.now)
            run = rec.current
            if run is not None and not run.ended:
                verdicts.judge_alive(rec, run, now, self.thresholds)
            elif (
                run is not None
                and run.ended
                and rec.loop.looping
                and rec.loop.state is not LoopState.FAILED
                and rec.state is None
                and now - (run.ended_at or now) >= self.thresholds.failed_grace
            ):
                # journal only: the unit ended and nothing started it again
                if run.crashed:
                    verdicts.transition(rec, rec.loop.on_failed(now))
                else:
                    verdicts.transition(rec, rec.loop.on_stopped(now))

    def finish(self) -> None:
        """End of a one-shot input: whatever is still open is judged on what was seen."""
        verdicts = self.verdicts
        verdicts.changed.update(self._units)
        for rec in self._units.values():
            if rec.stop_seen_at is not None:
                verdicts.stopped(rec, self.now)
        for tb in self.assembler.flush():
            found = self._units.get(tb.unit)
            if found is not None:
                self._add_traceback(found, tb)
        for rec in self._units.values():
            verdicts.judge(rec, self.now)
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
                    rec.unjudged.extend((entry, current) for entry in handled)
            if current is not None and not current.ended and current.worded:
                rec.unjudged.extend((entry, current) for entry in current.settle_worded())
            if self.lone_lines and current is not None and not current.ended:
                judge_lone(current, self.reporter.matcher())
            verdicts.judge(rec, self.now)
            if current is not None and not current.ended and current.crashed:
                current.ended_by_input = True
                current.ended_at = current.last_line_at
                rec.pending_end = current
            verdicts.settle(rec, self.now)

    def judge(self) -> None:
        """Take the verdicts the lines left due: a run that ended before a newer one began, a traceback that came
        after its run was judged, the kinds of the tracebacks runs survived. PID 1's records, D-Bus states, ticks
        and `finish` take them first; `feed` after each batch of events."""
        for rec in self._units.values():
            self.verdicts.judge(rec, self.now)
        self._gpu_joins = None
        gpu = self._gpu
        while gpu is not None and gpu.dirty:  # a GPU fault joined a unit: its loop's diagnosis is made again
            joined = self._units.get(gpu.dirty.pop())
            if joined is not None and joined.loop.looping:
                self.verdicts.refresh(joined, "loop-updated", self.now)

    # --- what others read ----------------------------------------------------------------

    def units(self, names: Iterable[str] | None = None) -> dict[str, UnitView]:
        """Every watched unit (or those of `names` that are) as it stands now."""
        if names is None:
            return {name: rec.view() for name, rec in self._units.items()}
        return {name: rec.view() for name in names if (rec := self._units.get(name)) is not None}

    def runs(self, unit: str) -> tuple[RunView, ...]:
        """The unit's runs that are still remembered (the latest MAX_INVOCATIONS), oldest first."""
        rec = self._units.get(unit)
        return tuple(self.reporter.run_view(r) for r in rec.runs.values()) if rec is not None else ()

    def gpus(self) -> GpuView:
        """The kernel's GPU faults as counted (by GPU, Xid and unit), and the host's GPUs."""
        return self._gpu_record().view()

    def events(self, limit: int | None = None) -> list[EngineEvent]:
        """Drain what happened since the last call (all of it, or the first `limit` events)."""
        outbox = self.verdicts.events
        count = len(outbox) if limit is None else min(limit, len(outbox))
        out = outbox[:count]
        del outbox[:count]
        return out

    def pending(self) -> tuple[EngineEvent, ...]:
        """What `events()` would drain now, left in place (and in the snapshot)."""
        return tuple(self.verdicts.events)

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
                live = replace(rec.diagnosis, restarts=rec.n_restarts)  # NRestarts moves on
                result.append(((0, 0, -live.crashes), live))
                continue
            for rank, diagnosis in enumerate(self.reporter.crash_diagnoses(rec)):
                result.append(((1, rank, -diagnosis.crashes), diagnosis))
            for rank, diagnosis in enumerate(self.reporter.line_diagnoses(rec)):  # the most telling first
                result.append(((2, rank, 0), diagnosis))
        result.sort(key=lambda item: (item[0][0], _SEVERITY_ORDER.get(item[1].severity, 3), item[0][2], item[0][1]))
        return [d for _, d in result]

    def warnings(self, units: Iterable[str] | None = None) -> list[Diagnosis]:
        """Tracebacks the runs survived, one per unit and error, most frequent first: shown, never a crash."""
        wanted = set(units) if units is not None else None
        out = [
            d
            for rec in self._units.values()
            if wanted is None or rec.name in wanted
            for d in self.reporter.warnings(rec)
        ]
        out.sort(key=lambda d: -d.crashes)
        return out

    # --- persistence ---------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything the engine knows as versioned JSON data (`diagnosis.snapshot`), to resume where a killed or
        upgraded crashdoc stopped, with the events not yet drained: an outbox a restarted crashdoc hands out again
        (a decision taken on a D-Bus change or a tick, which a replay of the journal would not redo)."""
        from crashdoc.diagnosis import snapshot  # the daemon's alone: explain and diagnose never save

        return snapshot.dump(_state(self))

    def restore(self, saved: dict[str, Any] | bytes) -> None:
        """Load a snapshot made by `snapshot` (this schema or an older one), or the pickle crashdoc 0.1.0 saved
        (bytes: once, on the first start after the upgrade); raises ValueError (SnapshotError) otherwise."""
        from crashdoc.diagnosis import snapshot, snapshot_pickle

        state = snapshot_pickle.from_legacy_pickle(saved) if isinstance(saved, bytes) else snapshot.load(saved)
        for rec in state.units.values():
            rec.loop.thresholds = self.thresholds  # the configuration may have changed meanwhile
            rec.role = self.role_of(rec.name) or rec.role
        self._units = state.units
        self.assembler.import_(state.pending)
        self._synthetic = state.synthetic
        self._seq = state.seq
        self.now = state.now
        self.verdicts.events = state.events
        self._gpu = state.gpus
        self._gpu_joins = self._saved = None  # every unit encoded again at the next snapshot_text

    # --- configuration changes while running -------------------------------------------------------

    def forget_loops(self) -> None:
        """The journal the state came from is gone (a new journal, a re-imaged host): no loop that it
        showed can be going on now. Counters keep their totals; runs in progress are forgotten."""
        self.verdicts.changed.update(self._units)
        for rec in self._units.values():
            rec.loop.reset()
            rec.diagnosis = None
            rec.current = None
            rec.pending_end = None
        kept = ("loop-started", "loop-updated", "failed")
        self.verdicts.events = [e for e in self.verdicts.events if e.kind not in kept]

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
            if self._gpu is not None:
                self._gpu.forget_unit(name)
        self._gpu_joins = None
        self.verdicts.changed.update(self._units)
        for name, rec in self._units.items():
            rec.role = role_of(name) or rec.role
        return gone

    # --- internals -----------------------------------------------------------------------

    def _record(self, unit: str) -> UnitRecord | None:
        """The unit's record, created on first sight when the unit is watched; marked changed (an input reached it)."""
        rec = self._units.get(unit)
        if rec is None:
            role = self.role_of(unit)
            if role is None:
                return None
            rec = self._units[unit] = UnitRecord(unit, role, LoopTracker(unit, self.thresholds))
        self.verdicts.changed.add(unit)
        return rec

    def _gpu_record(self) -> GpuRecord:
        if self._gpu is None:
            from crashdoc.diagnosis.gpustate import GpuRecord

            self._gpu = GpuRecord()
        return self._gpu

    def _new_run(self, rec: UnitRecord, invocation: str, timestamp: float) -> Run:
        if not invocation:
            self._synthetic += 1
        run_id = invocation or f"run-{self._synthetic}"
        current = rec.current
        if current is not None and not invocation and not current.ended and not current.lines:
            current.started_at = current.started_at or timestamp  # "Started" before any line: same run
            return current
        run = Run(rec.name, run_id, started_at=timestamp)
        state = rec.state
        if state is not None and state.exec_start:
            begin(rec, run, state.exec_start)  # what this run starts with, before anyone edits it
        if state is not None and state.invocation == run_id and state.active_enter_timestamp and not timestamp:
            run.started_at = state.active_enter_timestamp
        rec.runs[run_id] = run
        while len(rec.runs) > MAX_INVOCATIONS:
            rec.runs.popitem(last=False)
        rec.current = run
        return run

    def _add_traceback(self, rec: UnitRecord, tb: Traceback) -> None:
        run = rec.runs.get(tb.invocation) if tb.invocation else None
        if run is None:
            run = rec.current or self._new_run(rec, tb.invocation, tb.timestamp)
        kept = len(run.tracebacks)
        handled = run.add_traceback(tb)
        if handled:
            rec.unjudged.extend((entry, run) for entry in handled)
        if run.ended and run is not rec.pending_end and len(run.tracebacks) > kept:  # at most MAX_TRACEBACKS times
            rec.late.add(run.id)  # judged again (`judge`) with the traceback that came after its verdict


def snapshot_text(engine: Engine) -> str:
    """`engine.snapshot()` as the state file's JSON text (not a method: the engine's interface is one)."""
    from crashdoc.diagnosis.snapshot import joined

    return joined(snapshot_parts(engine))


def snapshot_parts(engine: Engine) -> list[str | bytes]:
    """`snapshot_text` in pieces, the units' kept compressed and encoded again only if changed (`SavedText`)."""
    from crashdoc.diagnosis.snapshot import SavedText

    engine._saved = engine._saved or SavedText()
    return engine._saved.parts(_state(engine), engine.verdicts.changed)


def _state(engine: Engine) -> EngineState:
    from crashdoc.diagnosis.snapshot import EngineState

    engine.judge()  # what is saved is settled: nothing a line left due is lost with the process
    events, gpus = list(engine.verdicts.events), engine._gpu_record()
    return EngineState(
        engine._units, engine.assembler.export(), engine._synthetic, engine._seq, engine.now, events, gpus
    )


FeedEvent: TypeAlias = "LogLine | LifecycleRecord | UnitState | LaunchFacts | GpuEvent | HostGpus | UnitDevices"


def feed(engine: Engine, events: Iterable[FeedEvent]) -> None:
    """Events, in order, to the engine's inputs: journal lines, PID 1's records, D-Bus's unit states, the kernel's
    GPU faults and the launch and GPU facts they need."""
    on_line, on_lifecycle = engine.on_line, engine.on_lifecycle  # looked up once, not per event
    matcher = engine.matcher  # the batch's: a reloaded library applies from the next batch
    for event in events:
        if isinstance(event, LogLine):
            on_line(event, matcher)
        elif isinstance(event, LifecycleRecord):
            on_lifecycle(event)
        else:  # D-Bus's unit states, launch facts, GPU records: never a paste's (their classes imported at the first)
            from crashdoc.unit_records import LaunchFacts, UnitState

            if isinstance(event, UnitState):
                engine.on_unit_state(event)
            elif isinstance(event, LaunchFacts):
                engine.on_launch(event)
            else:
                engine.on_gpu(event)
    engine.judge()
