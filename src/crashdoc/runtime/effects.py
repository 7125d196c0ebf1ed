"""Carrying out what the engine decided: journal records, alert state, the daemon's own log lines.

The recorder and the alert sender are Protocols so that the loop does not care which
implementation is behind them (the journal and Alertmanager in production, lists in tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from crashdoc.diagnosis.views import EngineEvent
from crashdoc.events import Diagnosis
from crashdoc.outputs.metrics import Health
from crashdoc.runtime.log import log, stderr_is_journal

# events that leave a trace outside crashdoc (a journal record): saved in the outbox before they act
RECORDED = frozenset({"loop-started", "loop-updated", "failed", "recovered", "stopped"})


class Recorder(Protocol):
    written: int
    last_error: str
    seen: set[str]

    def record(self, event: EngineEvent) -> bool: ...

    def record_checked(self, unit: str, d: Diagnosis) -> bool: ...


class AlertSink(Protocol):
    def update(self, active: Mapping[str, Diagnosis]) -> None: ...

    def tick(self) -> None: ...

    def stop(self, wait: float | None = None) -> None: ...


@dataclass(slots=True)
class Effects:
    recorder: Recorder
    health: Health
    alerts: AlertSink | None = None
    say: Callable[[str], None] = log
    quiet_when_recorded: bool = field(default_factory=stderr_is_journal)  # a record already says it all

    def emit(self, events: list[EngineEvent], active: Callable[[], Mapping[str, Diagnosis]]) -> bool:
        """Records for loop events (their diagnoses as the remedy stage left them), the alert state, the latency
        metric. True if anything was recorded."""
        effects = False
        for event in events:
            if event.kind not in RECORDED:
                continue
            effects = True
            recorded = self.recorder.record(event)
            if recorded:
                self.health.journal_records_written = self.recorder.written
            elif self.recorder.last_error:
                self.say(self.recorder.last_error)
                self.recorder.last_error = ""
            else:
                continue  # handed out again after a restart and already in the journal: done before
            quiet = recorded and self.quiet_when_recorded
            d = event.diagnosis
            if event.kind in ("loop-started", "failed") and d is not None:
                self.health.diagnosis_latency.observe(max(0.0, time.time() - (d.timestamp or event.at)))
                if not quiet:
                    self.say(f"{event.unit} is crash-looping: {d.root_cause.line or d.title} -- fix: {d.fix.summary}")
            elif event.kind == "recovered" and not quiet:
                self.say(f"{event.unit} recovered")
        if self.alerts is not None and events:
            self.alerts.update(active())
        return effects

    def checked(self, done: list[Diagnosis]) -> bool:
        """A loop's fix once SGLang's checks have spoken (the search's fix, or the check's verdict): a journal
        record and a line of its own, after the loop's record that said the check was pending."""
        effects = False
        for d in done:
            recorded = self.recorder.record_checked(d.unit, d)
            if recorded:
                effects = True
                self.health.journal_records_written = self.recorder.written
            elif self.recorder.last_error:
                self.say(self.recorder.last_error)
                self.recorder.last_error = ""
            if not (recorded and self.quiet_when_recorded):
                self.say(f"{d.unit}: fix {d.fix.verified} -- {d.fix.summary}")
        return effects

    def tick(self) -> None:
        if self.alerts is not None:
            self.alerts.tick()

    def stop(self) -> None:
        if self.alerts is not None:
            self.alerts.stop()
