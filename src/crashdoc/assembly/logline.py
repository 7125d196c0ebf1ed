"""SGLang's log line format.

SGLang logs `[%Y-%m-%d %H:%M:%S{.ms}{ prefix}] message` (srt/utils/common.py configure_logger):
the prefix is the scheduler rank (`TP3`, `DP1 TP3 EP3`), only on the first line of a record;
continuation lines of a multi-line record carry no prefix. There is no level name. Some
libraries wrap lines in ANSI colours; torch's elastic launcher prefixes `[rank0]: `.
"""

from __future__ import annotations

from crashdoc.text import LazyPattern

_PREFIX = LazyPattern(r"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)((?: [^\]\s]+)*)\] ?")
_TORCH_RANK = LazyPattern(r"\[rank\d+\]: ?")


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
