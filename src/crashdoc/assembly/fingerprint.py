"""Stable fingerprints for failures, so one crash across restarts, PIDs and ranks is one group.

Like Sentry's grouping: the exception type, the message with the volatile parts masked
(numbers, hex, ids, paths, quoted values), and the module and function of the frames, never
line numbers (they change with every release) nor PIDs or ranks.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

from crashdoc.lean import sha1
from crashdoc.text import LazyPattern

if TYPE_CHECKING:
    from crashdoc.failure_records import ExceptionInfo, Frame, Traceback

_MASKS: tuple[tuple[LazyPattern, str], ...] = (
    (LazyPattern(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uuid>"),
    (LazyPattern(r"\b0x[0-9a-f]+\b", re.I), "<hex>"),
    (LazyPattern(r"\b[0-9a-f]{16,}\b", re.I), "<hex>"),
    (LazyPattern(r"(?:[A-Za-z]:)?(?:/[\w.@+-]+){2,}/?"), "<path>"),
    (LazyPattern(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    (LazyPattern(r"'[^']{0,200}'|\"[^\"]{0,200}\""), "<str>"),
    (LazyPattern(r"\d+(?:\.\d+)?"), "<n>"),
)
_SITE = LazyPattern(r".*/(?:site-packages|dist-packages|python\d?(?:\.\d+)?)/")
_FRAMES_IN_FINGERPRINT = 8
# bumped when what goes into a fingerprint changes, so that groups from before and after never mix
FINGERPRINT_VERSION = 1


def normalise_message(message: str) -> str:
    return _masked(message.strip().split("\n", 1)[0][:500])


@lru_cache(maxsize=4096)
def _masked(first: str) -> str:
    """A pure function, memoised: every rank and every restart prints the same message, and a run's root
    cause is decided again as late tracebacks arrive (the masks were 30% of the engine's time under a
    flood of tracebacks). Keys are at most 500 characters, so the cache stays under a few MB."""
    for pattern, token in _MASKS:
        first = pattern.sub(token, first)
    return re.sub(r"\s+", " ", first)


def frame_module(frame: Frame) -> str:
    site = _SITE.match(frame.file)  # anchored: `sub` would retry `.*` at every position (quadratic)
    path = frame.file[site.end() :] if site else frame.file
    if path.endswith(".py"):
        path = path[:-3]
    return path.strip("/").replace("/", ".")


def exception_parts(exc: ExceptionInfo) -> list[str]:
    parts = [exc.type or "?", normalise_message(exc.message)]
    parts.extend(f"{frame_module(f)}:{f.function}" for f in exc.frames[-_FRAMES_IN_FINGERPRINT:])
    return parts


def fingerprint_traceback(tb: Traceback) -> str:
    """Group by the raised exception (the last of the chain) and where it was raised."""
    return _digest(exception_parts(tb.final))


def fingerprint_text(*parts: str) -> str:
    """Fingerprint for failures without a traceback (a line, an exit status)."""
    return _digest([normalise_message(p) for p in parts])


def _digest(parts: list[str]) -> str:
    """`fp1-` and 16 hex digits: the version tag says which recipe made it."""
    digest = sha1("\x1f".join(parts).encode("utf-8", "replace")).hexdigest()[:16]
    return f"fp{FINGERPRINT_VERSION}-{digest}"
