"""Text as crashdoc keeps it: terminal escapes and control characters removed.

A unit's output reaches the on-call engineer's terminal through a diagnosis, so whatever a
terminal would obey is dropped at the edge (sources) and again before printing.
"""

from __future__ import annotations

import re

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
