"""Crash-loop state per unit: healthy -> crash-looping -> failed -> recovered.

SGLang may load weights for many minutes, so "N restarts in 5 minutes" misses a unit that
dies every 8 minutes while loading. The detector counts crash-before-ready cycles instead:
consecutive runs that died before SGLang said it was ready. Runs that crash after being
ready count as runtime crashes within a window. Leaving a loop needs a run that stays up
for the recovery window (and is ready, when the unit is an SGLang server); a loop that
starts again soon after recovering is the same loop (no new alert, no new record).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from crashdoc.diagnosis.run import Run
from crashdoc.events import Thresholds

if TYPE_CHECKING:  # the judgment is imported where a run failed: a healthy log never needs it
    from crashdoc.diagnosis.failures import Crash, Transition
    from crashdoc.diagnosis.rootcause import Finding

KEEP_CRASHES = 200  # crashes remembered per unit (for the dominant root cause)
KEEP_TRACEBACKS = 5  # of which the latest keep their full traceback


class LoopState(StrEnum):
    HEALTHY = "healthy"
    LOOPING = "crash-looping"
    FAILED = "failed"
    RECOVERED = "recovered"
    STOPPED = "stopped"


# a working record, one object per unit: compared by identity (no generated __eq__ to build at import)
@dataclass(slots=True, eq=False)
class LoopTracker:
    """Whether a unit is crash-looping: its recent crashes against the thresholds."""

    unit: str
    thresholds: Thresholds = field(default_factory=Thresholds)
    state: LoopState = LoopState.HEALTHY
    crashes: deque[Crash] = field(default_factory=lambda: deque(maxlen=KEEP_CRASHES))
    startup_streak: int = 0
    loop_started_at: float | None = None
    loop_crashes: deque[Crash] = field(default_factory=lambda: deque(maxlen=KEEP_CRASHES))
    loop_crash_count: int = 0  # all crashes of the current loop (loop_crashes keeps the latest)
    recovered_at: float | None = None
    last_crash_at: float | None = None

    @property
    def looping(self) -> bool:
        return self.state in (LoopState.LOOPING, LoopState.FAILED)

    def on_crash(self, inv: Run, finding: Finding | None, at: float) -> Transition | None:
        from crashdoc.diagnosis.failures import Crash  # made once something failed (as Transition below)

        crash = Crash(inv.id, at, not inv.ready, finding, inv.exit_text(), inv.lifetime)
        self.crashes.append(crash)
        if len(self.crashes) > KEEP_TRACEBACKS:
            older = self.crashes[-KEEP_TRACEBACKS - 1].finding
            if older is not None:
                older.traceback = None  # keep what identifies it; memory stays bounded over long loops
        self.last_crash_at = at
        self.startup_streak = self.startup_streak + 1 if crash.before_ready else 0
        if self.looping:
            self.loop_crashes.append(crash)
            self.loop_crash_count += 1
            if inv.start_limit_hit:
                return self._move(LoopState.FAILED, at)
            return None
        recent = [c for c in self.crashes if not c.before_ready and at - c.at <= self.thresholds.runtime_window]
        if (
            self.startup_streak >= self.thresholds.startup_crashes
            or len(recent) >= self.thresholds.runtime_crashes
            or (inv.start_limit_hit)
        ):
            count = self.startup_streak if self.startup_streak >= self.thresholds.startup_crashes else len(recent)
            self.loop_crashes = deque(list(self.crashes)[-max(count, 1) :], maxlen=KEEP_CRASHES)
            self.loop_crash_count = len(self.loop_crashes)
            continuing = self.recovered_at is not None and at - self.recovered_at <= self.thresholds.flap_window
            if not continuing or self.loop_started_at is None:
                self.loop_started_at = self.loop_crashes[0].at
            new = LoopState.FAILED if inv.start_limit_hit else LoopState.LOOPING
            return self._move(new, at, new_loop=not continuing)
        return None

    def on_failed(self, at: float) -> Transition | None:
        """The unit gave up (start limit hit, or failed without a restart)."""
        if self.state is LoopState.FAILED:
            return None
        if self.loop_started_at is None:
            self.loop_started_at = at
        return self._move(LoopState.FAILED, at, new_loop=self.state is not LoopState.LOOPING)

    def reset(self) -> None:
        """Forget the loop in progress (its journal is gone); the crash history stays."""
        self.state = LoopState.HEALTHY
        self.startup_streak = 0
        self.loop_started_at = None
        self.loop_crashes.clear()
        self.loop_crash_count = 0

    def on_stopped(self, at: float) -> Transition | None:
        """Someone stopped the unit: it is not crash-looping any more."""
        if self.state is LoopState.STOPPED or not self.looping:
            return None
        self.startup_streak = 0
        return self._move(LoopState.STOPPED, at)

    def on_good_run(self, now: float) -> Transition | None:
        """A run lived through the recovery window (and is ready): a loop, if any, is over."""
        self.startup_streak = 0
        if self.state is LoopState.STOPPED:
            self.state = LoopState.HEALTHY
            return None
        if not self.looping:
            return None
        self.recovered_at = now
        return self._move(LoopState.RECOVERED, now)

    def dominant(self) -> tuple[Finding | None, float, int]:
        """The root cause most of this loop's crashes share, how sure we are, and how many crashes."""
        crashes = list(self.loop_crashes) or list(self.crashes)[-1:]
        # a crash a GPU fault caused counts under its hardware signature, whatever its traceback said
        keyed = [
            (c.hardware or c.finding.signature_id or c.finding.fingerprint) if c.finding else None for c in crashes
        ]
        known = [k for k in keyed if k is not None]
        total = max(self.loop_crash_count, len(crashes))
        if not known:
            return None, 0.0, total
        key, count = Counter(known).most_common(1)[0]
        latest = next(c for c, k in zip(reversed(crashes), reversed(keyed), strict=True) if k == key)
        confidence = count / len(crashes)
        if latest.finding is not None and latest.finding.match is None and not latest.hardware:
            confidence *= 0.6  # an unknown error: we know what raised, not that it is the cause
        return latest.finding, round(confidence, 2), total

    def _move(self, new: LoopState, at: float, new_loop: bool = False) -> Transition:
        old, self.state = self.state, new
        if new in (LoopState.RECOVERED, LoopState.STOPPED):
            self.loop_crashes = deque(maxlen=KEEP_CRASHES)
            self.loop_crash_count = 0
        from crashdoc.diagnosis.failures import Transition

        return Transition(self.unit, old, new, at, new_loop)
