"""The C batch reader (fastread.c): built on first use, loaded with ctypes.

Reading the journal through systemd-python costs a Python call per field; fastread.c walks and
reads a batch of entries in C (one enumeration of each entry's fields instead of a scan per
field), for the daemon and `diagnose` alike. It needs a C compiler, Python's headers and
libsystemd-dev (`make setup` installs them); it is built once per source, Python and
systemd-python, into crashdoc's cache folder. Without them `batch_reader` says why, and the
journal is read by the systemd-python batch reader of sources/journal.py: same events, slower.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crashdoc.events import LogLine

SOURCE = Path(__file__).with_name("fastread.c")
RETRY_FAILED_AFTER = 24 * 3600
# read_batch(reader, limit, stop unit prefixes, processes, max message bytes, line_of, text_of)
#   -> (lines, status, entries stepped, damaged entries)
BatchReader = Callable[
    [Any, int, tuple[bytes, ...], dict[Any, Any], int, Callable[..., LogLine], Callable[[bytes], str]],
    tuple[list[LogLine], int, int, int],
]
LIMIT, AT_END, STOPPED = 0, 1, 2


def batch_reader(reader: Any, folder: Path | None) -> tuple[BatchReader | None, str]:
    """`(read_batch, "")` for this systemd-python Reader, or `(None, why not)`."""
    from systemd._reader import _Reader

    if folder is None:
        return None, "no cache folder to build it in (no $HOME or $XDG_CACHE_HOME)"
    if not isinstance(reader, _Reader):
        return None, "the journal reader is not systemd-python's"
    # fastread.c reads the sd_journal pointer that follows the object header of systemd-python's Reader
    if _Reader.__basicsize__ != object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p):
        return None, "systemd-python's Reader has a layout fastread.c does not know"
    library, why = built_library(folder)
    if library is None:
        return None, why
    try:
        lib = ctypes.PyDLL(str(library))
        read = lib.crashdoc_read_batch
        read.argtypes = (ctypes.py_object, ctypes.c_long, *(ctypes.py_object,) * 2, ctypes.c_long)
        read.argtypes += (ctypes.py_object,) * 2
        read.restype = ctypes.py_object
        threshold = lib.crashdoc_reader_threshold
        threshold.argtypes = (ctypes.py_object,)
        threshold.restype = ctypes.c_long
    except (OSError, AttributeError) as exc:
        return None, f"cannot load {library}: {exc}"
    if threshold(reader) != reader.data_threshold:  # the pointer is not what it should be: never use it
        return None, "systemd-python's Reader does not hold the sd_journal pointer where fastread.c reads it"
    return read, ""


def read_ahead(folder: Path) -> ReadAhead | None:
    """A `ReadAhead` from the reader `batch_reader` built in `folder` (after it said yes), or None."""
    library, _ = built_library(folder)
    try:
        return ReadAhead(ctypes.PyDLL(str(library))) if library is not None else None
    except (OSError, AttributeError, MemoryError):
        return None


class ReadAhead:
    """A batch reader (`BatchReader`) that walks the next batch in a thread while Python handles this one
    (fastread.c `crashdoc_read_ahead`): on two CPUs `diagnose` then costs about the longer of reading and the
    engine instead of their sum. While a walk runs nothing else may use the reader: `position()` says where
    the batches handed out end, and `drop()` (before placing the reader, or closing it) waits for the walk and
    returns the cursor to go back to. The same lines as `crashdoc_read_batch`, except that a walk started by
    one call has that call's limit, and neither a process's first line nor the entries Python reads with its
    own rules end it (`first_line`, `other_entry` read them from the fields the walk kept, with those rules)."""

    def __init__(self, lib: Any) -> None:
        new = lib.crashdoc_ahead_new
        new.restype = ctypes.c_void_p
        self._read, self._position = lib.crashdoc_read_ahead, lib.crashdoc_ahead_position
        self._drop = lib.crashdoc_ahead_drop
        self._walking = lib.crashdoc_ahead_walking
        self._walking.argtypes, self._walking.restype = (ctypes.c_void_p,), ctypes.c_int
        self._wait = lib.crashdoc_ahead_wait
        self._wait.argtypes, self._wait.restype = (ctypes.c_void_p,), None
        self._read.argtypes = (ctypes.py_object, ctypes.c_void_p, ctypes.c_long, *(ctypes.py_object,) * 2)
        self._read.argtypes += (ctypes.c_long, *(ctypes.py_object,) * 3)
        self._read.restype = ctypes.py_object
        for f in (self._position, self._drop):
            f.argtypes, f.restype = (ctypes.c_void_p,), ctypes.py_object
        self._start = lib.crashdoc_ahead_start
        self._start.argtypes = (ctypes.py_object, ctypes.c_void_p, ctypes.c_long, *(ctypes.py_object,) * 2)
        self._start.argtypes += (ctypes.c_long, ctypes.c_long)
        self._start.restype = ctypes.py_object
        self._set = lib.crashdoc_ahead_set
        self._set.argtypes = (ctypes.c_void_p, ctypes.py_object, ctypes.py_object)
        self._set.restype = ctypes.py_object
        self._free = lib.crashdoc_ahead_free
        self._free.argtypes = (ctypes.c_void_p,)
        # a process's first line, kept by the walk: first_line({field: bytes}, realtime usec, unit bytes) -> line
        self.first_line: Callable[[dict[str, bytes], int, bytes], LogLine | None] = lambda fields, usec, unit: None
        # an entry Python reads with its own rules (PID 1's, a core dump, a kernel line), kept whole by the walk:
        # other_entry({field: bytes}, realtime usec) -> the events it makes; `names`: the units the reader matches
        # (a record of PID 1's about another unit ends the walk: Python matches that unit from there on)
        self.other_entry: Callable[[dict[str, bytes], int], list[Any]] = lambda fields, usec: []
        self.names: tuple[bytes, ...] = ()
        self._reader: Any = None  # the reader a walk may be using: kept alive as long as this
        self._state = new()
        if not self._state:
            raise MemoryError("no memory for the read-ahead state")

    def __call__(self, reader: Any, limit: int, stop: Any, processes: Any, max_bytes: int, line_of: Any, text_of: Any):
        self._reader = reader
        self._set(self._state, self.names, self.other_entry)
        return self._read(reader, self._state, limit, stop, processes, max_bytes, line_of, text_of, self.first_line)

    def start(self, reader: Any, limit: int, stop: Any, processes: Any, max_bytes: int, placed: bool = False) -> None:
        """Walk the next batch now, from the entry the reader is on (Python has read the one a batch stopped on),
        or (`placed`) from where it was just placed, on no entry yet (the head, a time: `diagnose`'s first walk)."""
        self._reader = reader
        self._set(self._state, self.names, self.other_entry)
        self._start(reader, self._state, limit, stop, processes, max_bytes, int(placed))

    def walking(self) -> bool:
        """Whether the worker is still walking the next batch (a read now would wait for it)."""
        return bool(self._walking(self._state))

    def wait(self) -> None:
        """Wait until the running walk has walked its batch (kept for the next read): the reader may then be asked
        what does not move it, such as the journal's ends, without the walk dropped and the reader placed again."""
        self._wait(self._state)

    def position(self) -> tuple[str, float] | None:
        """(cursor, realtime in seconds) of the last entry handed out while a walk runs past it; else None."""
        where = self._position(self._state)
        return None if where is None else (where[0], where[1] / 1e6)

    def settle(self, reader: Any, place: Callable[[], None]) -> None:
        """Before the reader is used outside reading: no walk may run beside it, and what one read past the
        events handed out is read again (`place`: how the reader was placed, for a walk that started there)."""
        back = self.drop()
        if back:
            reader.seek_cursor(back)
            reader._next()  # on the last entry handed out: reading goes on after it
        elif back == "":  # the walk started where the reader was placed, before any entry was handed out
            place()

    def drop(self) -> str | None:
        """Wait for the walk and forget what it read; the cursor of the last entry handed out, if it ran ("": it
        started on no entry, where the reader had been placed)."""
        return self._drop(self._state)

    def __del__(self) -> None:
        if getattr(self, "_state", None):
            self._free(self._state)
            self._state = None


def built_library(folder: Path, path: Path = SOURCE) -> tuple[Path | None, str]:
    """The shared library built from the C file `path` (fastread.c; busread.c) in `folder`, or why not.

    Built once per source, Python and systemd-python: a start that finds it costs a read of the source and a
    stat (the compiler's modules, subprocess, shutil, tempfile, sysconfig, are imported only to build)."""
    try:
        source = path.read_bytes()
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}"
    from systemd import _reader  # the C type whose layout fastread.c reads

    key = source_key(source, sys.version.encode(), str(_reader.__file__).encode(), sys.executable.encode())
    target = folder / f"{path.stem}-{key}.so"
    if target.exists():
        return target, ""
    return _build(folder, path, target)


def source_key(*parts: bytes) -> str:
    """16 hex digits that change with any of `parts` (each framed by its length): zlib's CRC-32 and Adler-32 of
    them, at no import cost (hashlib loads OpenSSL); a stale library would need both to collide."""
    crc, adler = 0, 1
    for part in parts:
        framed = len(part).to_bytes(8, "little") + part
        crc, adler = zlib.crc32(framed, crc), zlib.adler32(framed, adler)
    return f"{crc:08x}{adler:08x}"


def _build(folder: Path, path: Path, target: Path) -> tuple[Path | None, str]:
    import shutil
    import subprocess
    import sysconfig
    import tempfile

    failed = target.with_suffix(".failed")
    try:  # a failed build is tried again a day later (a compiler or libsystemd-dev installed since)
        if time.time() - failed.stat().st_mtime < RETRY_FAILED_AFTER:
            return None, f"its build failed (see {failed}; tried again a day later)"
    except OSError:
        pass
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    include = sysconfig.get_paths().get("include", "")
    if compiler is None:
        return None, "no C compiler (cc or gcc)"
    if not include or not os.path.exists(os.path.join(include, "Python.h")):
        return None, "Python's headers (Python.h) are not installed"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".so", dir=folder)
        os.close(fd)
    except OSError as exc:
        return None, f"cannot write {folder}: {exc.strerror or exc}"
    argv = [compiler, "-O2", "-shared", "-fPIC", "-pthread", f"-I{include}", "-o", tmp, str(path), "-lsystemd"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=120)
        if done.returncode != 0:
            failed.write_bytes(done.stderr[-4000:])  # e.g. no libsystemd-dev: not tried again at once
            last = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
            return None, f"its build failed ({last[0][:200]}; see {failed})"
        os.replace(tmp, target)
        return target, ""
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"its build failed: {exc}"
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
