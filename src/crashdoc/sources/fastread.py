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
    from systemd import journal

    if folder is None:
        return None, "no cache folder to build it in (no $HOME or $XDG_CACHE_HOME)"
    if not isinstance(reader, journal._Reader):
        return None, "the journal reader is not systemd-python's"
    # fastread.c reads the sd_journal pointer that follows the object header of systemd-python's Reader
    if journal._Reader.__basicsize__ != object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p):
        return None, "systemd-python's Reader has a layout fastread.c does not know"
    library, why = _built(folder)
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


def _built(folder: Path) -> tuple[Path | None, str]:
    try:
        source = SOURCE.read_bytes()
    except OSError as exc:
        return None, f"cannot read {SOURCE}: {exc.strerror or exc}"
    from systemd import journal

    key = hashlib.blake2b(digest_size=10)
    for part in (source, sys.version.encode(), str(journal.__file__).encode(), sys.executable.encode()):
        key.update(len(part).to_bytes(8, "little") + part)
    target = folder / f"fastread-{key.hexdigest()}.so"
    failed = target.with_suffix(".failed")
    if target.exists():
        return target, ""
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
        fd, tmp = tempfile.mkstemp(prefix=".fastread-", suffix=".so", dir=folder)
        os.close(fd)
    except OSError as exc:
        return None, f"cannot write {folder}: {exc.strerror or exc}"
    argv = [compiler, "-O2", "-shared", "-fPIC", f"-I{include}", "-o", tmp, str(SOURCE), "-lsystemd"]
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
