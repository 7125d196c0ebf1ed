"""The daemon's saved state: the journal cursor with the engine's snapshot at that cursor.

Saved atomically (sources.cursor), after the entries up to the cursor had their decisions and
before their effects: the snapshot's undrained events are an outbox that a restarted crashdoc
hands out again, and the recorder skips what the journal already holds.

The snapshot is taken and encoded on the reading thread (where the engine is current); the write and
its two fsyncs (milliseconds, tens of them on a busy disk) run on a writer thread. A save that the
ordering needs (before effects, at the stop) waits until it is on disk; the others do not.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from crashdoc.diagnosis.engine import Engine
from crashdoc.diagnosis.snapshot import SnapshotError
from crashdoc.outputs.metrics import Health
from crashdoc.runtime.log import log
from crashdoc.sources.cursor import CursorStore, Payload, SavedState

SAVE_INTERVAL = 1.0
# A save not forced waits at least this many times what taking the last snapshot cost the reading thread: twenty
# looping units with their runs' tracebacks make a state of megabytes, whose snapshot and JSON held the GIL for
# 100-200 ms on a busy host; once a second that was a fifth of the reading thread's time, and every crash that
# came in meanwhile waited for it. (Since snapshot version 3 a save encodes only the units changed since the last:
# milliseconds, so this spacing rarely exceeds SAVE_INTERVAL; the first save after a start still encodes them all.)
SAVE_COST_FACTOR = 20


class StateWriter:
    """Writes the newest state handed to it, on a thread of its own (started with the first): a state handed
    while another is written replaces any older one still waiting, since the newest holds all they hold."""

    def __init__(self, write: Callable[[str, Payload], None]) -> None:
        self._write = write
        self._cond = threading.Condition()
        self._newest: tuple[str, Payload] | None = None
        self._handed = self._done = 0  # states handed in, and how many of them are on disk (or failed)
        self._thread: threading.Thread | None = None

    def submit(self, cursor: str, payload: Payload) -> None:
        with self._cond:
            self._newest = (cursor, payload)
            self._handed += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="crashdoc-state-writer", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self) -> None:
        """Return once every state handed in so far is written (or failed to be)."""
        with self._cond:
            self._cond.wait_for(lambda: self._done >= self._handed)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._newest is not None)
                assert self._newest is not None
                (cursor, payload), self._newest = self._newest, None
                handed = self._handed
            try:
                self._write(cursor, payload)
            except Exception as exc:  # a bug must not leave a flush waiting for ever
                log(f"internal error saving the state: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            with self._cond:
                self._done = handed
                self._cond.notify_all()


@dataclass(slots=True)
class StateSaver:
    store: CursorStore
    health: Health
    say: Callable[[str], None] = log
    dirty: bool = False
    _last_save: float = 0.0
    _interval: float = SAVE_INTERVAL  # between saves not forced: SAVE_INTERVAL, longer for a costly snapshot
    _writer: StateWriter = field(init=False)

    def __post_init__(self) -> None:
        self._writer = StateWriter(self._write)

    def save(
        self,
        cursor: str | None,
        snapshot: Callable[[], dict[str, Any] | Sequence[str | bytes]],
        force: bool = False,
        wait: bool = True,
    ) -> None:
        """Save when dirty (unless `force`d, at most every SAVE_INTERVAL, or SAVE_COST_FACTOR times what the last
        snapshot cost); with `wait`, return once this state and every one saved before it are on disk (or failed
        to be: `health.state_writable` says so)."""
        now = time.monotonic()
        if self.dirty and cursor is not None and (force or now - self._last_save >= self._interval):
            payload = self.store.encode(cursor, engine=snapshot())
            self._interval = max(SAVE_INTERVAL, (time.monotonic() - now) * SAVE_COST_FACTOR)
            self.dirty = False  # a failed write sets it again
            self._last_save = now
            self._writer.submit(cursor, payload)
        if wait:
            self._writer.flush()

    def _write(self, cursor: str, payload: Payload) -> None:  # the writer's thread
        ok = self.store.write(cursor, payload)
        if not ok and self.health.state_writable:
            self.say(f"{self.store.last_error}; diagnosing in memory only")
        elif ok and not self.health.state_writable:
            self.say(f"the state is saved again in {self.store.directory}")
        self.health.state_writable = ok
        self.health.state_write_errors = self.store.write_errors
        if not ok:
            self.dirty = True


def restore(engine: Engine, saved: SavedState, journal_gone: bool, keep_aside: Callable[[], str] = lambda: "") -> bool:
    """Give the engine the state saved at the cursor; False (and a log line) when there is none to use (an
    engine state it cannot read is first kept aside: `CursorStore.keep_aside`).

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
        log(f"the saved state cannot be used ({exc}){keep_aside()}; resuming the journal with empty counters")
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
