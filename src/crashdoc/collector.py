"""The cyclic garbage collector paused while a command makes many objects that hold no cycles: reference counting
frees them, and the collector's passes over them (again and again while they live) are most of what it would cost.
The miner's syntax trees; `diagnose`'s read of a journal (the library's and the engine's objects)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused(*, freeze: bool = False) -> Iterator[None]:
    """The collector off inside, back on after (as it was: a caller's process goes on). `freeze`: what was made is
    frozen first, out of the collector's sight: its next pass would walk all of it (~7 ms after `diagnose`'s
    read, as the process ends); a caller's process still frees it by reference counts."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if freeze:
                gc.freeze()
            gc.enable()
