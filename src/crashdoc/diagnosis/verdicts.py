"""The engine's verdicts on a unit's runs: a run that ended is judged (a crash moves the loop state and the
diagnosis), a late traceback is judged again, a survived one is counted by kind, a run that lived long enough
ends a loop. Each decision that others act on becomes an `EngineEvent` in the outbox.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crashdoc.diagnosis.crashloop import LoopState
from crashdoc.diagnosis.reporting import Reporter
from crashdoc.diagnosis.run import Run
from crashdoc.diagnosis.unitrecord import UnitRecord
from crashdoc.events import HARDWARE, Thresholds

if TYPE_CHECKING:  # imported where they are made or first used: `explain` of a healthy log needs none of them
    from crashdoc.diagnosis.failures import Handled, Transition
    from crashdoc.diagnosis.views import EngineEvent
    from crashdoc.diagnosis_records import Diagnosis

SETTLE_GRACE = 1.0  # seconds a crash that logged nothing waits for its last lines


class Verdicts:
    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.events: list[EngineEvent] = []  # decided, not yet handed out (the outbox a snapshot keeps)
        # the units changed since the last snapshot (the engine adds those its inputs reach): only they are encoded
        self.changed: set[str] = set()

    def publish(self, kind: str, unit: str, at: float, diagnosis: Diagnosis | None = None) -> None:
        """An event into the outbox (`views` imported at the first: a healthy pasted log decides none)."""
        from crashdoc.diagnosis.views import EngineEvent

        self.events.append(EngineEvent(kind, unit, at, diagnosis))

    def judge(self, rec: UnitRecord, now: float) -> None:
        """The verdicts a unit's lines left due, in the order they arose: a run that ended before a newer one
        began (its output is complete), runs a traceback reached after their verdict, the kinds of the
        tracebacks its runs survived."""
        if rec.pending_end is not None and rec.pending_end is not rec.current:
            self.settle(rec, now)
        if rec.late or rec.unjudged:
            self.changed.add(rec.name)
        while rec.late:
            run = rec.runs.get(rec.late.pop())
            if run is not None:
                self.rejudge(rec, run, now)
        if rec.unjudged:
            unjudged, rec.unjudged = rec.unjudged, []
            for entry, run in unjudged:
                self.count_handled(rec, run, [entry])

    def settle(self, rec: UnitRecord, now: float, wait_for_output: bool = False) -> None:
        """Judge the run that ended: a crash updates the loop state and the diagnosis.

        journald reads a unit's output lazily, so PID 1's record of the end can arrive before the
        run's last lines: a crash with nothing logged yet waits up to SETTLE_GRACE (the tick or the
        next run settles it), so that it is counted under the right signature once and for all.
        """
        run = rec.pending_end
        if run is None:
            return
        if (
            wait_for_output
            and run.crashed
            and not (run.tracebacks or run.line_hits or run.oom_killed or run.core_dumped)
            and now - (run.ended_at or now) < SETTLE_GRACE
        ):
            return
        self.changed.add(rec.name)
        rec.pending_end = None
        if not run.crashed:
            return
        from crashdoc.diagnosis.rootcause import root_cause  # a run crashed: the judgment's first use

        reporter = self.reporter
        finding = root_cause(run, reporter.matcher(), reporter.facts(rec, run))
        at = run.ended_at or run.last_line_at or now
        rec.crashes_total += 1
        rec.last_crash_at = at
        transition = rec.loop.on_crash(run, finding, at)
        crash_diagnosis = reporter.crash(rec, run, finding, crashes=1, confidence=1.0) if finding else None
        hardware = ""
        if crash_diagnosis is not None and crash_diagnosis.kind == HARDWARE:
            hardware = crash_diagnosis.signature or ""
        rec.loop.crashes[-1].hardware = hardware  # a GPU fault caused it: counted and grouped as such
        key = hardware or (finding.signature_id if finding is not None and finding.signature_id else "unknown")
        rec.crashes_by_signature[key] += 1
        self.publish("crash", rec.name, at, crash_diagnosis)
        self.transition(rec, transition)
        if rec.loop.looping and transition is None:
            self.refresh(rec, "loop-updated", now)

    def rejudge(self, rec: UnitRecord, run: Run, now: float) -> None:
        """A traceback that completed after its run was judged: journald reads a unit's output lazily,
        so under a flood (or for a 10,000-frame traceback) a run's last lines arrive after PID 1's
        record of its end, and the crash was settled without them (after SETTLE_GRACE). Its root cause
        is decided again and a loop's diagnosis follows; its count stays where it was first put."""
        crash = next((c for c in reversed(rec.loop.crashes) if c.invocation == run.id), None)
        if crash is None:
            return
        from crashdoc.diagnosis.rootcause import root_cause

        finding = root_cause(run, self.reporter.matcher(), self.reporter.facts(rec, run))
        if finding is None or (crash.finding is not None and crash.finding.fingerprint == finding.fingerprint):
            return
        crash.finding = finding  # crashdoc_crashes_total keeps its first count: a counter never goes down
        if rec.loop.looping:
            self.refresh(rec, "loop-updated", now)

    def count_handled(self, rec: UnitRecord, run: Run, handled: list[Handled]) -> None:
        """Tracebacks the run survived: counted by kind of failure, never a crash."""
        if not handled:
            return
        from crashdoc.diagnosis.category import failure_kind, guess_category, guess_kind
        from crashdoc.diagnosis.rootcause import traceback_finding

        for entry in handled:
            if not entry.kind:
                if entry.kept:  # matched once per distinct error: a flood of the same warning costs a lookup
                    matcher = self.reporter.matcher()
                    finding = traceback_finding(entry.traceback, matcher, self.reporter.facts(rec, run))
                    sig = matcher.library.get(finding.signature_id) if finding.signature_id else None
                    entry.kind = failure_kind(finding, sig)
                else:  # past the bound of distinct errors kept: the cheap guess, no matching
                    exc = entry.traceback.final
                    entry.kind = guess_kind(exc.type, exc.message, guess_category(exc))
            rec.warnings_by_kind[entry.kind] += 1

    def judge_alive(self, rec: UnitRecord, run: Run, now: float, thresholds: Thresholds) -> None:
        """A run that lived through the recovery window (and is ready, for SGLang) is good: remember its
        command line for config-change reports, and end a loop if there is one."""
        started = run.started_at or run.first_line_at
        loop = rec.loop
        before = (run.good, loop.startup_streak, loop.state)
        if not run.good and started and now - started >= thresholds.recovery and (run.ready or not rec.sglang):
            run.good = True
            rec.last_good = run
        if run.good:
            # dated by the run, not by the clock, so that a restarted crashdoc names the event the same way
            since = max(started, run.ready_at or 0.0)
            self.transition(rec, rec.loop.on_good_run(since + thresholds.recovery))
        if (run.good, loop.startup_streak, loop.state) != before:
            self.changed.add(rec.name)

    def stopped(self, rec: UnitRecord, now: float) -> None:
        self.changed.add(rec.name)
        at, rec.stop_seen_at = rec.stop_seen_at, None
        self.transition(rec, rec.loop.on_stopped(at if at is not None else now))

    def transition(self, rec: UnitRecord, transition: Transition | None) -> None:
        if transition is None:
            return
        self.changed.add(rec.name)
        new = transition.new
        if new in (LoopState.LOOPING, LoopState.FAILED):
            kind = "loop-started" if transition.new_loop else ("failed" if new is LoopState.FAILED else "loop-updated")
            self.refresh(rec, kind, transition.at)
        elif new in (LoopState.RECOVERED, LoopState.STOPPED):
            rec.last_diagnosis = rec.diagnosis or rec.last_diagnosis
            rec.diagnosis = None
            kind = "recovered" if new is LoopState.RECOVERED else "stopped"
            self.publish(kind, rec.name, transition.at, rec.last_diagnosis)

    def refresh(self, rec: UnitRecord, kind: str, at: float) -> None:
        """The loop's diagnosis made again; an event unless it is an update that changes nothing."""
        self.changed.add(rec.name)
        diagnosis = self.reporter.loop_diagnosis(rec)
        changed = rec.diagnosis is None or (rec.diagnosis.signature, rec.diagnosis.fingerprint) != (
            diagnosis.signature,
            diagnosis.fingerprint,
        )
        rec.diagnosis = diagnosis
        if kind != "loop-updated" or changed:
            self.publish(kind, rec.name, at, diagnosis)
