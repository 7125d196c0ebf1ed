"""The daemon's saved state: the journal cursor with the engine's snapshot at that cursor.

Saved atomically (sources.cursor), after the entries up to the cursor had their decisions and
before their effects: the snapshot's undrained events are an outbox that a restarted crashdoc
hands out again, and the recorder skips what the journal already holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crashdoc.diagnosis.engine import Engine
from crashdoc.diagnosis.snapshot import SnapshotError
from crashdoc.outputs.metrics import Health
from crashdoc.runtime.log import log
from crashdoc.sources.cursor import CursorStore, SavedState

SAVE_INTERVAL = 1.0


@dataclass(slots=True)
class StateSaver:
    store: CursorStore
    health: Health
    say: Callable[[str], None] = log
    dirty: bool = False
    _last_save: float = 0.0

    def save(self, cursor: str | None, snapshot: Callable[[], dict[str, Any]], force: bool = False) -> None:
        now = time.monotonic()
        if not self.dirty or (not force and now - self._last_save < SAVE_INTERVAL) or cursor is None:
            return
        ok = self.store.save(cursor, engine=snapshot())
        if not ok and self.health.state_writable:
            self.say(f"{self.store.last_error}; diagnosing in memory only")
        elif ok and not self.health.state_writable:
            self.say(f"the state is saved again in {self.store.directory}")
        self.health.state_writable = ok
        self.health.state_write_errors = self.store.write_errors
        self._last_save = now
        self.dirty = not ok


def restore(engine: Engine, saved: SavedState, journal_gone: bool) -> bool:
    """Give the engine the state saved at the cursor; False (and a log line) when there is none to use.

    When the journal it came from is gone (`journal_gone`: the cursor no longer exists, e.g. a fresh
    journal after a re-image), counters keep their totals but no loop it showed is taken as going on.
    """
    if saved.engine is None and not saved.legacy_engine:
        log("resuming the journal after the saved cursor (no saved state: counters start at 0)")
        return False
    try:
        engine.restore(saved.engine if saved.engine is not None else saved.legacy_engine)
        if saved.engine is None:
            log("the saved state of crashdoc 0.1.0 was read and will be saved in today's format")
    except SnapshotError as exc:
        log(f"the saved state cannot be used ({exc}); resuming the journal with empty counters")
        return False
    if journal_gone:
        looping = [name for name, rec in engine.units().items() if rec.crashloop]
        engine.forget_loops()
        if looping:
            log(f"the saved journal position is gone: not assuming {', '.join(looping)} still loop")
    units = engine.units()
    looping_now = sum(1 for r in units.values() if r.crashloop)
    log(f"resuming after the saved cursor with the saved state: {len(units)} unit(s), {looping_now} looping")
    return True
