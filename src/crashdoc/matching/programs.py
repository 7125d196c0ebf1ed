"""RE2 programs compiled on first use, and the few kept: shared by the reviewed and the derived signatures.

A pattern searched alone (a candidate the RE2 set or the prefix index found) needs a program of its own, and
RE2 keeps with it the DFA states of every text it has seen, up to the budget it was compiled with. A daemon
searches one candidate once per crash, for months: kept for every pattern ever searched, at a generous budget,
those programs grew with every distinct message a host sent (bench/README.md, issue 26 rounds 7 and 8)."""

from __future__ import annotations

import re2

HOT_MAX_MEM = 64 << 20  # room for the DFA of a large combined set scanned on every line
# what is matched once per crash (exception messages, frames): RE2 keeps the DFA states of every text it
# has seen up to its budget (the message set held 26 MB after 400 distinct messages at 64 MB); at 4 MB
# they are rebuilt when the budget is spent, 0.13 ms a message instead of 0.015 (bench/README.md)
COLD_MAX_MEM = 4 << 20


def re2_options(max_mem: int = HOT_MAX_MEM) -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = max_mem
    return options


class KeptPrograms:
    """The RE2 programs of the patterns searched last (`size` of them, the least recently used dropped).

    Each program a pattern gets is ~40 KB: kept for every signature ever searched alone, a daemon held
    90 of them (3.4 MB) after 2M journal entries. Compiling one again costs ~70 us, once per crash."""

    __slots__ = ("_order", "size")

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._order: dict[LazyRegex, None] = {}  # last used last

    def used(self, regex: LazyRegex) -> None:
        order = self._order
        order.pop(regex, None)
        order[regex] = None
        if len(order) > self.size:
            try:  # another thread (the remedy stage's) may be at it too: one of them drops it
                oldest = next(iter(order))
                del order[oldest]
            except (KeyError, RuntimeError, StopIteration):
                return
            oldest._compiled = None

    def __len__(self) -> int:
        return len(self._order)


class LazyRegex:
    """A pattern compiled on its first search, at the budget of what is matched once per crash
    (`COLD_MAX_MEM`): most patterns never need a program of their own (megabytes for a library), and
    those that do keep theirs while among the last few used (`KeptPrograms`)."""

    __slots__ = ("_compiled", "_kept", "pattern")

    def __init__(self, pattern: str, kept: KeptPrograms) -> None:
        self.pattern = pattern
        self._kept = kept
        self._compiled: re2._Regexp | None = None

    def search(self, text: str) -> re2._Match | None:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re2.compile(self.pattern, re2_options(COLD_MAX_MEM))
        self._kept.used(self)
        return compiled.search(text)
