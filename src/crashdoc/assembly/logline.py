"""SGLang's log line format.

SGLang logs `[%Y-%m-%d %H:%M:%S{.ms}{ prefix}] message` (srt/utils/common.py configure_logger):
the prefix is the scheduler rank (`TP3`, `DP1 TP3 EP3`), only on the first line of a record;
continuation lines of a multi-line record carry no prefix. There is no level name. Some
libraries wrap lines in ANSI colours; torch's elastic launcher prefixes `[rank0]: `.
"""

from __future__ import annotations

import re

_PREFIX = re.compile(r"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)((?: [^\]\s]+)*)\] ?")
_TORCH_RANK = re.compile(r"\[rank\d+\]: ?")
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


def split_prefix(text: str) -> tuple[bool, str, str]:
    """Return (has_prefix, rank, body) for one line."""
    if text.startswith("["):
        m = _PREFIX.match(text)
        if m is not None:
            return True, m.group(2).strip(), text[m.end() :]
        m = _TORCH_RANK.match(text)
        if m is not None:
            return False, "", text[m.end() :]
    return False, "", text


def has_prefix(text: str) -> bool:
    return text.startswith("[") and _PREFIX.match(text) is not None
