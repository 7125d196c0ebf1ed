"""The daemon's C heap (glibc malloc): bounded at start, freed pages handed back to the kernel.

What Python frees goes back to glibc, which keeps it: the pages of a catch-up's batches, a flood's
lines and each save's transient snapshot stay resident unless glibc is told to return them
(`malloc_trim`), and each thread that allocates (HTTP, remedies, checks, alerts) gets an arena of its
own whose pages are kept apart. Not glibc, or no libc: nothing to do, nothing changes but memory.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Any

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_trim  # noqa: B018 (glibc's, or AttributeError)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def bound_malloc(threshold: int = 128 * 1024, arenas: int = 2) -> None:
    """Keep glibc's mmap and trim thresholds fixed at 128 KiB, and at most `arenas` malloc arenas.

    glibc raises its mmap threshold after each large free (up to 32 MiB), so the daemon's large
    transient buffers (the state saved every second, batches of a catch-up) end up in the brk heap
    and their pages stay resident after they are freed: 4 MB of RSS after following 2M entries,
    6 MB of the catch-up peak (bench/memory.py). The threads share two arenas instead of one each
    (their work is seldom at once, and their freed pages would stay apart in arenas of their own)."""
    if _LIBC is None:
        return
    _LIBC.mallopt(_M_MMAP_THRESHOLD, threshold)
    _LIBC.mallopt(_M_TRIM_THRESHOLD, threshold)
    _LIBC.mallopt(_M_ARENA_MAX, arenas)


def trim() -> None:
    """Return the free pages of every arena to the kernel (after a catch-up, a save, now and then)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


@dataclass(slots=True)
class Trimmer:
    """`trim()` now and then: every `interval` seconds (a save's snapshot, a flood's lines), and at once after
    a catch-up."""

    interval: float = 5.0
    _next: float = 0.0

    def now(self) -> None:
        trim()
        self._next = time.monotonic() + self.interval

    def tick(self) -> None:
        if time.monotonic() >= self._next:
            self.now()
