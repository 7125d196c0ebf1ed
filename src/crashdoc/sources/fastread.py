"""The C batch reader (fastread.c) for one-shot reads: built on first use, loaded with ctypes.

`diagnose` over a large journal spends most of its time in systemd-python's per-field calls;
fastread.c walks and reads a batch of entries in C (one enumeration of each entry's fields
instead of a scan per field). It needs a C compiler, Python's headers and libsystemd-dev
(`make setup` installs them); it is built once per source, Python and systemd-python, into
crashdoc's cache folder. Without them, or when the folder cannot be written, `batch_reader`
returns None and the journal is read with systemd-python alone: same events, slower.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crashdoc.events import LogLine
from crashdoc.text import terminal_safe

SOURCE = Path(__file__).with_name("fastread.c")
RETRY_FAILED_AFTER = 24 * 3600
# read_batch(reader, limit, stop units, processes, max message bytes) -> (lines, status, errors)
Lines = list[LogLine]
BatchReader = Callable[[Any, int, tuple[bytes, ...], dict[Any, Any], int], tuple[Lines, int, int]]
LIMIT, AT_END, STOPPED = 0, 1, 2
# the LogLine fields fastread.c sets, in its order: the C code builds the lines through these slots
LINE_FIELDS = ("unit", "pid", "text", "timestamp", "invocation", "cmdline")


def batch_reader(reader: Any, folder: Path | None) -> BatchReader | None:
    """`read_batch(reader, limit, stop)` for this systemd-python Reader, or None (not buildable here)."""
    from systemd import journal

    if folder is None or not isinstance(reader, journal._Reader):
        return None
    # fastread.c reads the sd_journal pointer that follows the object header of systemd-python's Reader
    if journal._Reader.__basicsize__ != object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p):
        return None
    library = _built(folder)
    if library is None:
        return None
    try:
        lib = ctypes.PyDLL(str(library))
        read = lib.crashdoc_read_batch
        read.argtypes = (ctypes.py_object, ctypes.c_long, ctypes.py_object, ctypes.py_object, ctypes.c_long)
        read.restype = ctypes.py_object
        threshold = lib.crashdoc_reader_threshold
        threshold.argtypes = (ctypes.py_object,)
        threshold.restype = ctypes.c_long
        setup = lib.crashdoc_setup
        setup.argtypes = (ctypes.py_object,) * 4
        setup.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    if not _line_slots_match() or setup(LogLine, _line_slots(), terminal_safe, "") != 0:
        return None  # LogLine changed shape: the C code would build incomplete lines
    if threshold(reader) != reader.data_threshold:  # the pointer is not what it should be: never use it
        return None
    return read


def _line_slots_match() -> bool:
    import dataclasses
    import types

    names = tuple(f.name for f in dataclasses.fields(LogLine))
    return names == LINE_FIELDS and all(
        isinstance(LogLine.__dict__.get(n), types.MemberDescriptorType) for n in LINE_FIELDS
    )


def _line_slots() -> tuple[Any, ...]:
    return tuple(LogLine.__dict__[n] for n in LINE_FIELDS)


def _built(folder: Path) -> Path | None:
    try:
        source = SOURCE.read_bytes()
    except OSError:
        return None
    from systemd import journal

    key = hashlib.blake2b(digest_size=10)
    for part in (source, sys.version.encode(), str(journal.__file__).encode(), sys.executable.encode()):
        key.update(len(part).to_bytes(8, "little") + part)
    target = folder / f"fastread-{key.hexdigest()}.so"
    failed = target.with_suffix(".failed")
    if target.exists():
        return target
    try:  # a failed build is tried again a day later (a compiler or libsystemd-dev installed since)
        if time.time() - failed.stat().st_mtime < RETRY_FAILED_AFTER:
            return None
    except OSError:
        pass
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    include = sysconfig.get_paths().get("include", "")
    if compiler is None or not include or not os.path.exists(os.path.join(include, "Python.h")):
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".fastread-", suffix=".so", dir=folder)
        os.close(fd)
    except OSError:
        return None
    argv = [compiler, "-O2", "-shared", "-fPIC", f"-I{include}", "-o", tmp, str(SOURCE), "-lsystemd"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=120)
        if done.returncode != 0:
            failed.write_bytes(done.stderr[-4000:])  # e.g. no libsystemd-dev: not tried again
            return None
        os.replace(tmp, target)
        return target
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
