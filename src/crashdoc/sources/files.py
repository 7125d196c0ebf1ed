"""Edits to the files a unit is made of: unit file, drop-ins, environment files, launch script.

Most crash loops start with an edit. watchdog tells the moment a file changed, so the
diagnosis can say "the loop began 12 s after /opt/sglang/prefill.sh changed". Parent folders
are watched (editors replace files by renaming a new one over them), and files that changed
while crashdoc was not running are reported once, by their modification time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import ObservedWatch

OnChange = Callable[[str, str, float], None]  # (unit, path, when)


class UnitFilesWatcher(FileSystemEventHandler):
    def __init__(self, on_change: OnChange) -> None:
        self.on_change = on_change
        self._observer = Observer()
        self._observer.daemon = True
        self._lock = threading.Lock()
        self._units_of: dict[str, set[str]] = {}  # path -> units
        self._files_of: dict[str, set[str]] = {}  # unit -> paths
        self._watches: dict[str, ObservedWatch] = {}  # folder -> watch
        self.errors = 0
        self.last_error = ""

    def start(self) -> None:
        self._observer.start()

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join(timeout=5)

    def set_unit_files(self, unit: str, paths: Iterable[str]) -> list[tuple[str, float]]:
        """Watch exactly these files for `unit`; returns (path, mtime) of files newly watched."""
        wanted = {os.path.abspath(p) for p in paths if p and not p.startswith("/dev/")}
        fresh: list[tuple[str, float]] = []
        with self._lock:
            old = self._files_of.get(unit, set())
            for path in old - wanted:
                self._units_of.get(path, set()).discard(unit)
            for path in wanted - old:
                self._units_of.setdefault(path, set()).add(unit)
                try:
                    fresh.append((path, os.stat(path).st_mtime))
                except OSError:
                    pass
            self._files_of[unit] = wanted
            folders = {str(Path(p).parent) for p, units in self._units_of.items() if units}
        for folder in folders - set(self._watches):
            try:
                self._watches[folder] = self._observer.schedule(self, folder, recursive=False)
            except OSError as exc:  # a folder that does not exist or cannot be read
                self.errors += 1
                self.last_error = f"cannot watch {folder}: {exc.strerror or exc}"
        for folder in set(self._watches) - folders:
            self._observer.unschedule(self._watches.pop(folder))
        return fresh

    def watched(self, unit: str) -> set[str]:
        with self._lock:
            return set(self._files_of.get(unit, set()))

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type in ("opened", "closed_no_write", "deleted"):
            return
        now = time.time()
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if not raw:
                continue
            path = os.path.abspath(os.fsdecode(raw))
            with self._lock:
                units = sorted(self._units_of.get(path, ()))
            for unit in units:
                self.on_change(unit, path, now)
