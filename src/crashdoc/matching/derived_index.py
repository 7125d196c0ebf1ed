"""The literal-prefix index of derived patterns: which records can match a message, nothing compiled.

Derived patterns are anchored at the message start, so their literal head is a key: a dict on its first
PREFIX_KEY characters, plus the few patterns that begin with a hole, tried when the text holds their longest
literal piece. One RE2 Set over all patterns would cost 12 MB and 45 ms; this index a fraction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

PREFIX_KEY = 8  # characters of a pattern's literal start used as an index key

_SPECIAL = frozenset("[](){}.*+?|$^")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}


def literal_prefix(pattern: str) -> str:
    """The literal text an anchored pattern (`^abc\\.d(?P<x>...)`) must begin with: `abc.d`."""
    out: list[str] = []
    i = 1 if pattern.startswith("^") else 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            if i + 1 >= len(pattern):
                break
            nxt = pattern[i + 1]
            if nxt == "x" and pattern[i + 2 : i + 3] == "{":
                end = pattern.find("}", i)
                if end < 0:
                    break
                out.append(chr(int(pattern[i + 3 : end], 16)))
                i = end + 1
                continue
            if nxt.isalnum() and nxt not in _ESCAPES:
                break  # \d, \b, \A...: not a literal character
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        if ch in _SPECIAL:
            break
        out.append(ch)
        i += 1
    # a quantifier after the last character makes it optional: do not count on it
    if i < len(pattern) and pattern[i] in "?*{" and out:
        out.pop()
    return "".join(out)


def needle(pattern: str) -> str:
    """The longest run of literal text of an RE2 pattern (escapes undone): text every match contains; "" when
    the pattern has alternatives or optional groups (no run is sure to be in a match)."""
    if "|" in pattern or re.search(r"\)[?*]|\)\{0", pattern):
        return ""
    runs: list[str] = []
    run: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt.isalnum():  # \d, \s, \n: a class, not a literal
                runs.append("".join(run))
                run = []
            else:
                run.append(nxt)
            i += 2
            continue
        if c in "?*" or (c == "{" and run):  # the character before is optional
            if run:
                run.pop()
            runs.append("".join(run))
            run = []
        elif c == "[":  # a character class: skip it
            runs.append("".join(run))
            run = []
            end = pattern.find("]", i + 2)
            i = end if end > 0 else len(pattern)
        elif c == "(":  # a group: skip its (?P<name> or (?: opening
            runs.append("".join(run))
            run = []
            if pattern.startswith("(?P<", i):
                i = pattern.find(">", i)
            elif pattern.startswith("(?", i):
                i += 2
        elif c in ".)+^${}":
            runs.append("".join(run))
            run = []
        else:
            run.append(c)
        i += 1
    runs.append("".join(run))
    return max(runs, key=len)


class PrefixIndex:
    """Records (by position) keyed by their pattern's literal start; `short`: (head, position, needle) of the
    patterns whose literal start is shorter than the key (they begin with a hole)."""

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        self.buckets: dict[str, list[int]] = {}
        self.short: list[tuple[str, int, str]] = []
        for index, pattern in enumerate(patterns):
            head = literal_prefix(pattern)
            if len(head) >= PREFIX_KEY:
                self.buckets.setdefault(head[:PREFIX_KEY], []).append(index)
            else:  # begins with a hole: its longest literal piece must be in the text (a lone line costs little)
                self.short.append((head, index, needle(pattern)))

    def as_data(self) -> dict[str, Any]:
        """The index as JSON data: the shipped layout stores it (`derived_store`), so no process computes it."""
        return {"buckets": self.buckets, "short": [list(s) for s in self.short]}

    @classmethod
    def of(cls, data: dict[str, Any]) -> PrefixIndex:
        index = cls()
        index.buckets = {str(k): [int(i) for i in v] for k, v in data["buckets"].items()}
        index.short = [(str(h), int(i), str(n)) for h, i, n in data["short"]]
        return index

    def candidates(self, text: str) -> list[int]:
        """Positions of the records whose anchored pattern can match `text`, in order."""
        found = list(self.buckets.get(text[:PREFIX_KEY], ()))
        found.extend(index for head, index, piece in self.short if text.startswith(head) and piece in text)
        return sorted(found)
