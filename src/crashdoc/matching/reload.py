"""Hot reload of the signature library.

A watchdog observer notices edits in the signature folders; after a short quiet period
(editors write files in several steps, and a `git checkout` touches many) the whole library
is loaded again. A library with any problem is rejected as a whole, the problem is logged
with file and line and counted, and the previous library keeps working.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from crashdoc.matching.cache import CompiledCache
from crashdoc.matching.derived import DerivedLibrary
from crashdoc.matching.library import FileCache, Library, LibraryError, Signature, load_library, with_text
from crashdoc.matching.matcher import Matcher


class LibraryHolder:
    """The active matcher, swapped atomically when a good library has been loaded.

    `matching_only` (the daemon): the library keeps what matching and diagnosing read, not the runbook texts,
    examples and near misses (`library.matching_signature`); `shown` reads them back for a page. `validate_apart`
    (the daemon): files are checked against the schema in a throw-away child (`library.FileCache`)."""

    def __init__(
        self,
        folders: Sequence[Path],
        log: Callable[[str], None] = print,
        derived: DerivedLibrary | None = None,
        compiled: CompiledCache | None = None,
        *,
        matching_only: bool = False,
        validate_apart: bool = False,
    ) -> None:
        self.folders = [Path(f) for f in folders]
        self.derived = derived  # kept across reloads: it is package data, not the watched folders
        self._log = log
        self.reloads = 0
        self.errors = 0
        self.last_error = ""
        self._files = FileCache(matching_only, validate_apart=validate_apart)
        self._asked = threading.Lock()  # guards the two flags below, between the daemon's thread and the loader's
        self._wanted = False  # a load was asked since the last one began
        self._loading = False  # a loader thread runs
        self._done: Callable[[], None] = lambda: None  # called after each load (the latest asker's)
        # the first load must succeed; `compiled`: read back validated from the cache when the files are unchanged
        library = load_library(self.folders, self._files, compiled, matching_only=matching_only)
        self._matcher = Matcher(library, derived).compile()

    @property
    def matcher(self) -> Matcher:
        return self._matcher

    @property
    def library(self) -> Library:
        return self._matcher.library

    def shown(self, sig: Signature) -> Signature:
        """`sig` (of this library) as a page shows it: with its runbook text, read from its file when not kept."""
        return with_text(sig) if self._files.matching_only else sig

    def reload_apart(self, done: Callable[[], None]) -> None:
        """Load again on a thread of its own, then call `done`: the files an edit changed are checked against the
        schema in a child (~0.3 s) that the daemon's reading does not wait for; the matcher is swapped in one
        assignment. Asked while a load runs, one more follows it (it sees the newest files)."""
        with self._asked:
            self._wanted, self._done = True, done
            if self._loading:
                return
            self._loading = True
        threading.Thread(target=self._load_while_wanted, name="crashdoc-library", daemon=True).start()

    def _load_while_wanted(self) -> None:
        while True:
            with self._asked:
                if not self._wanted:
                    self._loading = False
                    return
                self._wanted, done = False, self._done
            self.reload()
            done()

    def reload(self) -> bool:
        """Load again; True when the new library replaced the old one."""
        try:
            matcher = Matcher(load_library(self.folders, self._files), self.derived).compile()
        except LibraryError as exc:
            self.errors += 1
            self.last_error = str(exc.problems[0]) if exc.problems else "unknown problem"
            self._log(exc.said("signature library reload rejected, the previous library stays active", limit=20))
            return False
        except Exception as exc:
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._log(f"signature library reload failed ({self.last_error}); the previous library stays active")
            return False
        before = len(self._matcher.library)
        self._matcher = matcher
        self.reloads += 1
        self.last_error = ""
        self._log(f"signature library reloaded: {len(matcher.library)} signatures (was {before})")
        return True


class LibraryWatcher(FileSystemEventHandler):
    """Calls `on_change` once edits in the folders have been quiet for `settle` seconds."""

    def __init__(self, folders: Sequence[Path], on_change: Callable[[], None], settle: float = 0.3) -> None:
        self.folders = [Path(f) for f in folders if Path(f).exists()]
        self.on_change = on_change
        self.settle = settle
        self._observer = Observer()
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self.last_event = 0.0

    def start(self) -> None:
        for folder in self.folders:
            target = folder if folder.is_dir() else folder.parent
            self._observer.schedule(self, str(target), recursive=True)
        self._observer.daemon = True
        self._observer.start()

    def stop(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
        self._observer.stop()
        self._observer.join(timeout=5)

    def on_any_event(self, event: FileSystemEvent) -> None:
        path = str(event.src_path)
        dest = str(getattr(event, "dest_path", "") or "")
        if event.event_type in ("opened", "closed_no_write") or not (
            path.endswith((".yaml", ".yml")) or dest.endswith((".yaml", ".yml")) or event.is_directory
        ):
            return
        self.last_event = time.monotonic()
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.settle, self.on_change)
            self._timer.daemon = True
            self._timer.start()
