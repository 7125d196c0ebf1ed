"""The journal's file pages mapped into this process: how many, and giving them back.

libsystemd maps journal files in 8 MiB windows and keeps at least 64 of them, so a reader that walks a large
journal would carry up to 512 MiB of file pages in its RSS. `MappedPages` bounds what reading maps between two
releases; `release_journal_pages` gives them back.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

_MADV_DONTNEED = 4
_PAGE = os.sysconf("SC_PAGE_SIZE")


class MappedPages:
    """The bound on the pages reading maps: `above` bytes more than after the last release (a flood of
    48K lines maps far more per entry than a journal of short lines), `caught_up_above` once caught up (None: the
    same bound, for a reader that ends there: its pages go with its process)."""

    def __init__(self, above: int, caught_up_above: int | None) -> None:
        self.above = above
        self.caught_up_above = caught_up_above
        self.after_release = mapped_bytes()  # file-backed resident bytes after the last release
        self._caught_up = False  # the last bound was asked caught up

    def release(self) -> None:
        """Give every mapped journal page back now (placing the reader touched a window of every file)."""
        release_journal_pages()
        self.after_release = mapped_bytes()

    def bound(self, caught_up: bool) -> None:
        """Release once reading mapped more than the bound since the last release; on catching up, everything
        (a release while a walk read ahead counts what the walk mapped meanwhile as kept: a 2M-entry catch-up
        kept 3.9 MB of them for good); once caught up, whatever was mapped past `caught_up_above`."""
        grown = mapped_bytes() - self.after_release
        arrived, self._caught_up = caught_up and not self._caught_up, caught_up
        at_end = self.caught_up_above is not None and caught_up and (arrived or grown > self.caught_up_above)
        if at_end or grown > self.above:
            self.release()


def release_journal_pages() -> int:
    """Unmap the journal pages this process has read (they stay in the page cache).

    Returns the size of the journal mappings advised, in bytes.

    libsystemd maps journal files in 8 MiB windows and keeps at least 64 of them, so a reader
    that walks a large journal carries up to 512 MiB of file pages in its RSS (the daemon had
    288 MB after following 2M entries, against 36 MB of heap). MADV_DONTNEED on those read-only shared mappings drops
    the page-table entries only: the next access is a minor fault on the same page-cache page,
    so libsystemd's pointers stay valid and nothing is read again from disk.
    """
    libc = _libc()
    if libc is None:
        return 0
    released = 0
    try:
        with open("/proc/self/maps", "rb") as maps:
            text = maps.read()
        for line in text.splitlines():
            if not line.endswith((b".journal", b".journal~")):  # most lines: decided without splitting them
                continue
            parts = line.split(None, 5)
            if len(parts) < 6 or parts[1] != b"r--s":
                continue
            start, _, end = parts[0].partition(b"-")
            begin, length = int(start, 16), int(end, 16) - int(start, 16)
            if libc.madvise(ctypes.c_void_p(begin), ctypes.c_size_t(length), _MADV_DONTNEED) == 0:
                released += length
    except (OSError, ValueError):
        return released
    return released


def mapped_bytes() -> int:
    """Resident file-backed and shared pages of this process (/proc/self/statm), in bytes."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[2]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


@functools.cache
def _libc() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        return libc
    except (OSError, AttributeError):
        return None
