"""Text as crashdoc keeps it: terminal escapes and control characters removed.

A unit's output reaches the on-call engineer's terminal through a diagnosis, so whatever a
terminal would obey is dropped at the edge (sources) and again before printing.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but newline and tab, DEL, C1 (U+009B is a CSI)


def clean(text: str) -> str:
    """Drop ANSI escapes and control characters, which a terminal would obey; cheap when there are none."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if not text.isprintable():
        text = _CONTROL.sub("", text.replace("\t", "    "))
    return text


_TERMINAL = re.compile(r"[\x01-\x08\x0b-\x1f\x7f-\x9f]")  # the controls a terminal obeys (it ignores NUL)


def terminal_safe(text: str) -> str:
    """What the journal source keeps of a line: escape sequences and the control characters a terminal
    would obey are dropped (a unit's output reaches the on-call engineer's terminal through a diagnosis);
    tabs, NUL and invalid bytes (U+FFFD) stay as read."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return _TERMINAL.sub("", text)


class LazyPattern:
    """A `re` pattern compiled on its first use, for the patterns of cold paths (a crash's judgment, a
    fingerprint, a report): ~0.1 ms each at import, ~6 ms of every `explain` that never uses them. After the
    first call, each method is the compiled pattern's own (an instance attribute): no cost per call."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags

    def compiled(self) -> re.Pattern[str]:
        compiled = re.compile(self.pattern, self.flags)
        for name in ("search", "match", "fullmatch", "sub", "finditer", "findall"):
            setattr(self, name, getattr(compiled, name))
        return compiled

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled().search(string, pos, endpos)

    def match(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled().match(string, pos, endpos)

    def fullmatch(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled().fullmatch(string, pos, endpos)

    def sub(self, repl: str | Callable[[re.Match[str]], str], string: str, count: int = 0) -> str:
        return self.compiled().sub(repl, string, count)

    def finditer(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[str]]:
        return self.compiled().finditer(string, pos, endpos)

    def findall(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> list[Any]:
        return self.compiled().findall(string, pos, endpos)
