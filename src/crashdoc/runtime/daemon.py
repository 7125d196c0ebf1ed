"""`crashdoc run`: the loop that moves events between the parts and keeps time.

One thread owns the engine and runs a select loop over the journal's inotify fd, the D-Bus
fd and a wake-up pipe (library reloads, signals, file changes, a fix the remedy stage finished).
The HTTP server and the Alertmanager sender run in their own threads and read under the same lock.
Decisions belong to the engine; the files they need are read before its step (`LaunchReader`) and
the fixes applied after it on worker threads (`remedies`), both outside the lock; effects belong to
`effects`, saving to `saving`, what HTTP shows to `view`; this module only moves events and keeps time.
"""

from __future__ import annotations

import dataclasses
import os
import selectors
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from crashdoc.config import Config, ConfigError, load_config
from crashdoc.diagnosis.engine import Engine, feed, snapshot_parts
from crashdoc.events import Diagnosis, GpuEvent, LifecycleRecord, LogLine, UnitState
from crashdoc.matching.reload import LibraryHolder, LibraryWatcher
from crashdoc.outputs.http import HttpServer
from crashdoc.outputs.journal_records import recorded_event_ids
from crashdoc.outputs.metrics import CrashdocCollector, Health, make_registry
from crashdoc.remedy.launch import LaunchReader
from crashdoc.runtime import heap, saving
from crashdoc.runtime.effects import RECORDED, Effects
from crashdoc.runtime.log import log
from crashdoc.runtime.remedies import RemedyWorker
from crashdoc.runtime.saving import StateSaver
from crashdoc.runtime.settings import settings_change
from crashdoc.runtime.view import HttpView
from crashdoc.sources.files import UnitFilesWatcher
from crashdoc.sources.gpu_facts import GpuFactsReader
from crashdoc.sources.journal import JournalSource
from crashdoc.sources.units import UnitWatcher

# journal entries per read; while behind, the next batch is walked while the engine handles this one: 500, not 1000
# or 2000, halves what the two hold (a 2M-entry catch-up: VmHWM 50.7-51.2 -> 49.7-49.8 MB, 0.8 MB less heap kept
# after; 1000 instead of 2000 had been -1.7 MB steady); as fast (250: 20% slower)
BATCH = 500
DRAIN_BUDGET = 0.5  # seconds of reading before ticks, D-Bus and wake-ups get a turn (a flood, a backlog)
BUSY_TIMEOUT = 0.05  # after activity, look at the journal this often (journald delays wake-ups up to 250 ms)
IDLE_TIMEOUT = 1.0
BUSY_PERIOD = 3.0
LAG_PROBE_INTERVAL = 1.0  # while behind, look up the newest entry's time this often (for the lag metric)
REMEDY_WAIT = 10.0  # seconds a loop's record and alert wait for its fix; then they go out with the changes alone


@dataclass(slots=True)
class Daemon:
    config: Config
    holder: LibraryHolder
    engine: Engine
    source: JournalSource
    saver: StateSaver
    watcher: UnitWatcher | None
    effects: Effects
    view: HttpView
    lock: threading.Lock
    health: Health
    launches: LaunchReader
    remedies: RemedyWorker
    files: UnitFilesWatcher | None = None
    # the host's GPUs and each unit's CUDA_VISIBLE_DEVICES, read for the kernel's GPU faults
    gpu_facts: GpuFactsReader = field(default_factory=lambda: GpuFactsReader(None))
    unit_files: Callable[[UnitState], list[str]] = lambda state: []
    library_folders: Callable[[Config], list] = lambda config: []
    notify: Callable[[str], None] = lambda state: None
    config_path: str | None = None  # `crashdoc run --config FILE`: read again on SIGHUP
    overrides: dict[str, Any] = field(default_factory=dict)  # command-line options: they win over the file
    _file_events: deque[tuple[str, str, float]] = field(default_factory=lambda: deque(maxlen=1000))
    _stop: bool = False
    _reload_requested: bool = False
    _config_reload_requested: bool = False
    _library_watcher: LibraryWatcher | None = None
    _wake_w: int = -1
    _busy_until: float = 0.0
    _behind: bool = False  # the last drain stopped for its time budget: more to read at once
    _stale: set[str] = field(default_factory=set)  # units to read over D-Bus once the journal is caught up
    _lag_probe_at: float = 0.0
    _heap: heap.Trimmer = field(default_factory=heap.Trimmer)  # freed heap pages go back to the kernel
    _caught_up: bool = False  # the journal was read to its end once since the start
    _saved_outbox: set[int] = field(default_factory=set)  # ids of the pending events a save already holds
    _waiting_since: dict[int, float] = field(default_factory=dict)  # pending events waiting for their fix
    _unready_since: dict[str, float] = field(default_factory=dict)  # loops whose fix is not applied yet
    _alerted: dict[str, Diagnosis] = field(default_factory=dict)  # what the alerts said last, by unit

    # --- lifecycle -----------------------------------------------------------------------

    def prepare(self) -> None:
        self.view.registry = make_registry(
            CrashdocCollector(self.engine.units, self.health, self.lock, gpus=self.engine.gpus)
        )
        self.health.started_at = time.time()
        self.health.signatures_loaded = len(self.holder.library)
        if self.source.fast_reader:  # said once: the daemon reads as before, only slower
            log(f"reading the journal with systemd-python, the C batch reader is not in use: {self.source.fast_reader}")
        saved = self.saver.store.load()
        if saved.warning:
            log(saved.warning)
        resumed = bool(saved.cursor) and self.source.seek_cursor(saved.cursor or "")
        if resumed:
            gone = self.source.cursor_gone
            if gone:
                log(
                    "the saved journal position is gone (rotated away and vacuumed while crashdoc was not "
                    "running, or a new journal): going on with the oldest entry after it"
                )
            if saving.restore(self.engine, saved, journal_gone=gone, keep_aside=self.saver.store.keep_aside):
                # effects between the last save and a kill are redone on resume: skip records already written
                self.effects.recorder.seen |= recorded_event_ids(saved.saved_at - 3600, self.config.journal_directory)
        else:
            if saved.cursor:
                log("the saved cursor cannot be used; starting at the journal's end")
            self.source.seek_tail()
        self._host_gpus()
        if self.watcher is not None:
            if self.watcher.connect():
                self.health.dbus_up = True
                if self.watcher.fast_reads:  # said once: units are read through pystemd, which keeps the GIL
                    log(f"reading unit state through pystemd, busread.c is not in use: {self.watcher.fast_reads}")
                discovered = self.watcher.discover()
                self.source.watch_units(discovered)
                for unit in discovered:
                    self.engine.watch(unit)
                    if resumed:
                        self._stale.add(unit)  # D-Bus says "now": after the backlog since the cursor
                    else:
                        self._refresh_unit(unit)
                        self._catch_up(unit)
            else:
                log(f"{self.watcher.last_error}; working from the journal alone until it comes back")

    def _catch_up(self, unit: str) -> None:
        """A run already in progress when crashdoc starts: read what it logged so far (was it ready?)."""
        view = self.engine.units().get(unit)
        state = view.systemd if view is not None else None
        if state is None or not state.invocation or state.active_state not in ("active", "activating", "reloading"):
            return
        self._feed(list(self.source.run_so_far(unit, state.invocation)))
        with self.lock:
            self.engine.events()  # history, not news: no records or alerts for it

    def run(self, http: HttpServer | None) -> int:
        sel = selectors.DefaultSelector()
        wake_r, self._wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(self._wake_w, False)
        sel.register(wake_r, selectors.EVENT_READ, "wake")
        sel.register(self.source.fileno(), selectors.EVENT_READ, "journal")
        dbus_fd = self._register_dbus(sel, None)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.request_stop())
        signal.signal(signal.SIGHUP, lambda *_: self.request_reload(config=True))
        self._library_watcher = LibraryWatcher(self.holder.folders, self.request_reload)
        self._library_watcher.start()
        if self.files is not None:
            self.files.start()
        if http is not None:
            http.start()
        self.notify("READY=1\nSTATUS=watching " + ", ".join(r.pattern for r in self.config.units))
        try:
            self._behind = not self._drain()
            while not self._stop:
                try:
                    dbus_fd = self._iteration(sel, wake_r, dbus_fd)
                except Exception as exc:  # a bug must not take the on-call tool down with it
                    self.health.loop_errors += 1
                    log(f"internal error, continuing: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
                    time.sleep(min(5.0, 0.1 * self.health.loop_errors))  # never spin on a repeating error
                self.notify("WATCHDOG=1")
        finally:
            self.notify("STOPPING=1")
            self._library_watcher.stop()
            if self.files is not None:
                self.files.stop()
            if http is not None:
                http.stop()
            self._save(force=True)
            self.effects.stop()
            self.remedies.stop(wait=1.0)
            os.close(wake_r)
            os.close(self._wake_w)
        return 0

    def _iteration(self, sel: selectors.BaseSelector, wake_r: int, dbus_fd: int | None) -> int | None:
        """One turn of the loop: wait for the journal, D-Bus or a wake-up, then catch up."""
        timeout = 0.0 if self._behind else BUSY_TIMEOUT if time.monotonic() < self._busy_until else IDLE_TIMEOUT
        for key, _ in sel.select(timeout):
            if key.data == "wake":
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
            elif key.data == "journal":
                self.source.process()
            elif key.data == "dbus":
                self._dbus_ready()
        if self._reload_requested:
            self._reload_requested = False
            if self._config_reload_requested:
                self._config_reload_requested = False
                self._reload_config()
            self._reload_library()
        self._apply_file_events()
        self._behind = not self._drain()
        self._tick()
        return self._register_dbus(sel, dbus_fd)

    def request_stop(self) -> None:
        self._stop = True
        self.wake()

    def request_reload(self, config: bool = False) -> None:
        """A signature file changed (the watcher's thread), or SIGHUP (`config`: the configuration file too)."""
        self._reload_requested = True
        self._config_reload_requested |= config
        self.wake()

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    # --- the loop's steps ----------------------------------------------------------------

    def _drain(self) -> bool:
        """Read what the journal has, batch by batch; decisions and the cursor saved, then effects.

        True once caught up; False when it stopped for its time budget with more to read, so that
        a flood or a long backlog does not starve the ticks (quiet tracebacks, ended runs, recovery)
        and D-Bus: the loop then comes straight back.
        """
        deadline = time.monotonic() + DRAIN_BUDGET
        while not self._stop:
            errors = self.source.stats.errors
            events = self.source.read(BATCH)
            self._account(errors)
            if events:
                self._feed(events)
                self._busy_until = time.monotonic() + BUSY_PERIOD
            if self.source.at_end and self._stale:
                self._refresh_stale()
            effects = self._act()
            if self.source.cursor != self.saver.store.last_saved:
                self.saver.dirty = True
            self._update_journal_health()
            # right after effects: a kill now would redo as little as possible; written on the saver's thread (no
            # ordering waits on it: a save before effects, and the last one, wait for all saves before them)
            self._save(force=effects, wait=False)
            if self.source.at_end:
                if not self._caught_up:
                    self._caught_up = True
                    self._heap.now()  # the catch-up's freed pages, at once
                    if self.source.stats.entries:  # a backlog since the saved position: how long it took
                        took = time.time() - self.health.started_at
                        log(f"caught up with the journal: {self.source.stats.entries:,} entries read in {took:.1f} s")
                return True
            if time.monotonic() >= deadline:
                return False
            self.notify("WATCHDOG=1")  # a long backlog (start-up, a flood) is progress, not a hang
        return True

    def _feed(self, events: list[LogLine | LifecycleRecord | GpuEvent]) -> None:
        """Events into the engine: the launch facts they need read first (files, outside the lock), then the
        engine's step under the lock. A unit PID 1 spoke of is read over D-Bus once the journal is caught up."""
        prepared = self.launches.prepare(events)
        with self.lock:
            feed(self.engine, prepared)
        if self.source.driver_loaded:  # the NVIDIA driver loaded again: the host's GPUs are read again
            self.source.driver_loaded = False
            self._host_gpus()
        if self.watcher is not None:
            self._stale.update(e.unit for e in events if isinstance(e, LifecycleRecord))

    def _host_gpus(self) -> None:
        """The host's GPUs (the NVIDIA driver's list), read outside the lock and handed to the engine."""
        host = self.gpu_facts.host()
        if host is None:
            return
        for problem in host.gpus.problems:
            log(f"GPU faults: {problem}")
        with self.lock:
            feed(self.engine, [host])

    def _refresh_stale(self) -> None:
        """Read the units D-Bus or PID 1 said something about, now that the journal is caught up.

        D-Bus tells how things are now, the journal how they came to be: applied to an engine still
        replaying a backlog (a restart, a flood), "now" lands before the past and the past is then
        misread (a stopped unit's old crashes start a new loop, which the stop then ends again).
        """
        if self.watcher is None or not self.watcher.up:
            return
        units, self._stale = sorted(self._stale), set()
        for unit, state in self.watcher.states(units).items():  # one round trip to PID 1 for them all
            if state is None and not self.watcher.up:
                self._stale.add(unit)  # read once the bus is back
            else:
                self._refresh_unit(unit, state)

    def _refresh_unit(self, unit: str, state: UnitState | None = None) -> None:
        """What D-Bus says of the unit now (`state`, when already read), with its command's launch facts, read
        before taking the lock."""
        assert self.watcher is not None
        state = state or self.watcher.state(unit)
        self.health.dbus_up = self.watcher.up
        if state is None:
            return
        devices = self.gpu_facts.for_state(state)  # its CUDA_VISIBLE_DEVICES (environment files read here)
        prepared = [*([devices] if devices is not None else []), *self.launches.prepare([state])]
        changed = self.files.set_unit_files(unit, self.unit_files(state)) if self.files and state.loaded else []
        with self.lock:
            feed(self.engine, prepared)
            for path, mtime in changed:
                self.engine.on_file_changed(unit, path, mtime)
            view = self.engine.units([unit]).get(unit)
        if view is not None and view.diagnosis is not None:  # its loop's fix, on the command systemd reported now
            self.remedies.request(view.diagnosis, check=True)

    def file_changed(self, unit: str, path: str, at: float) -> None:
        """From the file watcher's thread: queue it for the loop."""
        self._file_events.append((unit, path, at))
        self.wake()

    def _apply_file_events(self) -> None:
        while self._file_events:
            unit, path, at = self._file_events.popleft()
            with self.lock:
                self.engine.on_file_changed(unit, path, at)

    def _dbus_ready(self) -> None:
        assert self.watcher is not None
        changed = self.watcher.process()
        self.health.dbus_up = self.watcher.up
        if changed:
            # systemd tells D-Bus at once, journald wakes readers up to 250 ms later: read now (the drain
            # reads the changed units over D-Bus once caught up with the journal)
            self.source.watch_units(changed)
            with self.lock:
                for unit in changed:
                    self.engine.watch(unit)
            self._stale |= changed
            self._behind = not self._drain()
            self._busy_until = time.monotonic() + BUSY_PERIOD

    def _register_dbus(self, sel: selectors.BaseSelector, current: int | None) -> int | None:
        if self.watcher is None:
            return None
        if not self.watcher.up:
            if current is not None:
                try:
                    sel.unregister(current)
                except (KeyError, ValueError):
                    pass
                current = None
            if self.watcher.maybe_reconnect():
                log("D-Bus is back")
                with self.lock:
                    for unit in self.watcher.discover():
                        self.engine.watch(unit)
                        self._stale.add(unit)  # read once the journal is caught up
            self.health.dbus_up = self.watcher.up
        fd = self.watcher.fileno() if self.watcher.up else None
        if fd is not None and fd != current:
            if current is not None:
                try:
                    sel.unregister(current)
                except (KeyError, ValueError):
                    pass
            sel.register(fd, selectors.EVENT_READ, "dbus")
            return fd
        return current

    def _tick(self) -> None:
        # while a backlog is read, it is the journal's time, not the clock's: a run in the backlog must not
        # look as old as the clock says (recovered, a traceback quiet, an ended run settled too soon)
        now = self.source.stats.last_timestamp if self._behind and self.source.stats.last_timestamp else time.time()
        with self.lock:
            self.engine.tick(now)
        self._act()
        self.effects.tick()
        self._heap.tick()

    def _reload_config(self) -> None:
        """SIGHUP: read the configuration file again. What can change live takes effect now (LIVE_SETTINGS);
        the rest is kept, and logged, until a restart. An invalid file is rejected with its problems as
        file:line, counted, and the configuration in use stays."""
        if self.config_path is None:
            log("SIGHUP: no configuration file (--config) to read again; reloading the signature library")
            return
        try:
            new = dataclasses.replace(load_config(self.config_path), **self.overrides)
        except ConfigError as exc:
            self.health.config_reload_errors += 1
            self.health.config_reload_ok = False
            log(exc.said("configuration reload rejected, the previous configuration stays active"))
            return
        old = self.config
        change = settings_change(old, new)
        self.config = self.view.config = change.config
        if "thresholds" in change.live:
            with self.lock:
                self.engine.set_thresholds(new.thresholds)
        if "units" in change.live:
            self._rewatch(new)
        if "signature_folders" in change.live or "builtin_signatures" in change.live:
            self.holder.folders = self.library_folders(new)
            if self._library_watcher is not None:
                self._library_watcher.stop()
                self._library_watcher = LibraryWatcher(self.holder.folders, self.request_reload)
                self._library_watcher.start()
        self.health.config_reloads += 1
        self.health.config_reload_ok = True
        log(
            f"configuration reloaded from {self.config_path}: "
            + (", ".join(change.live) + " changed" if change.live else "nothing that applies live changed")
        )
        for name in change.later:
            log(
                f"{name} changed in {self.config_path}: it takes effect when crashdoc restarts "
                f"(still {getattr(old, name)!r})"
            )

    def _rewatch(self, config: Config) -> None:
        """New watch rules: units no longer watched are forgotten (their metrics and alerts go), the roles of
        the others follow the rules, and newly watched units are looked up on D-Bus (their lines count from
        now on)."""
        self.source.rewatch(config.units)
        with self.lock:
            gone = self.engine.set_roles(self.source.units.role_of)
        for name in gone:
            if self.files is not None:
                self.files.set_unit_files(name, [])
        if self.watcher is not None and self.watcher.up:
            for unit in self.watcher.discover():
                with self.lock:
                    self.engine.watch(unit)
                self._refresh_unit(unit)

    def _reload_library(self) -> None:
        """On the library's own thread: reading goes on while the edited files are checked (in a child)."""

        def loaded() -> None:
            with self.lock:
                self.health.signatures_loaded = len(self.holder.library)
                self.health.signature_reloads = self.holder.reloads
                self.health.signature_reload_errors = self.holder.errors

        self.holder.reload_apart(loaded)

    def _act(self) -> bool:
        """Carry out what the engine decided, in order, each loop event once the remedy stage has applied its
        fix (or REMEDY_WAIT has passed); True if that had effects (journal records).

        Decisions with effects are saved first, with the engine's state and the cursor: the
        snapshot keeps them as an outbox (they stay in the engine until they are carried out). A
        kill before that save redoes them from the journal; a kill after it hands them out again
        on restart and the recorder skips the records the journal already holds. Saving only after
        the effects would lose that for decisions a journal replay does not redo (a D-Bus change, a
        tick: dated by the clock, they come out of a restarted crashdoc as new events).
        """
        with self.lock:
            pending = self.engine.pending()
        if any(e.kind in RECORDED and id(e) not in self._saved_outbox for e in pending):
            self.saver.dirty = True
            self._save(force=True)
            self._saved_outbox = {id(e) for e in pending}
        now = time.monotonic()
        waiting, ready = {}, 0
        for event in pending:
            d = event.diagnosis
            if d is not None and event.kind in RECORDED:
                self.remedies.request(d, check=True)  # SGLang's own checks too, for a loop's fix
                since = waiting[id(event)] = self._waiting_since.get(id(event), now)
                if not self.remedies.ready(d) and now - since < REMEDY_WAIT:
                    break
            ready += 1
        self._waiting_since = waiting
        with self.lock:
            events = self.engine.events(ready)
        published = [replace(e, diagnosis=self.remedies.published(e.diagnosis)) if e.diagnosis else e for e in events]
        effects = self.effects.emit(published, self._active_alerts)
        effects |= self.effects.checked(self.remedies.take_checked())  # a loop's fix, once SGLang has spoken
        if self.remedies.changed:  # a fix or a check came in: the alerts say it
            self.remedies.changed = False
            if self.effects.alerts is not None and not events:
                self.effects.alerts.update(self._active_alerts())
        if effects:
            self.saver.dirty = True  # the outbox on disk is stale now; the next save empties it
        return effects

    def _active_alerts(self) -> dict[str, Diagnosis]:
        """The loops to alert on, each with its fix as the remedy stage applied it. A loop whose fix is not ready
        yet (for REMEDY_WAIT at most) keeps the alert it had, or has none yet: an alert never goes out with a
        fix that has no command, only to be sent again a moment later with one."""
        with self.lock:
            active = {name: rec.diagnosis for name, rec in self.engine.units().items() if rec.diagnosis is not None}
        now = time.monotonic()
        shown: dict[str, Diagnosis] = {}
        unready: dict[str, float] = {}
        for name, d in active.items():
            if not self.remedies.ready(d):
                since = unready[name] = self._unready_since.get(name, now)
                if now - since < REMEDY_WAIT:
                    if name in self._alerted:
                        shown[name] = self._alerted[name]
                    continue
            shown[name] = self.remedies.published(d)
        self._unready_since, self._alerted = unready, shown
        return shown

    def _account(self, errors: int) -> None:
        """Say what one read skipped: entries gone before they could be read (their sequence numbers
        jump: rotated away and vacuumed, a file dropped), and entries that could not be read."""
        stats = self.source.stats
        gone = self.source.take_gone()
        if gone > 0:
            self.health.journal_entries_skipped += gone
            log(f"{gone} journal entries were gone before they could be read (rotated away and vacuumed?)")
        if stats.errors > errors:
            log(f"skipped {stats.errors - errors} unreadable journal entries ({stats.last_error})")

    def _update_journal_health(self) -> None:
        """The journal's vital signs. The lag is how far the entry read last is behind the newest one
        written: 0 once caught up; while behind, the newest entry's time is looked up (a second reader)."""
        stats = self.source.stats
        h = self.health
        h.journal_entries_read = stats.entries
        h.journal_read_errors = stats.errors
        if stats.last_timestamp:
            h.journal_last_entry_timestamp = stats.last_timestamp
        if self.source.at_end or not stats.last_timestamp:
            h.journal_lag_seconds = 0.0
        elif time.monotonic() >= self._lag_probe_at:
            self._lag_probe_at = time.monotonic() + LAG_PROBE_INTERVAL
            newest = self.source.newest_timestamp()
            if newest is not None:
                h.journal_lag_seconds = max(0.0, newest - stats.last_timestamp)

    def _save(self, force: bool = False, wait: bool = True) -> None:
        def snapshot() -> list[str | bytes]:
            with self.lock:
                return snapshot_parts(self.engine)

        self.saver.save(self.source.cursor, snapshot, force=force, wait=wait)
