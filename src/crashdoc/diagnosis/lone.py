"""Lone lines of a pasted log: a failure stated without its traceback.

Kept apart from the root-cause choice (`rootcause.py`) because every pasted log goes through it at its end,
while the judgment (and what it imports: categories, the router's format, derived matches) is only needed
once something failed: `explain` of a healthy log never imports it.
"""

from __future__ import annotations

import re

from crashdoc.assembly.logline import split_prefix
from crashdoc.diagnosis.run import Run, request_record
from crashdoc.matching.matcher import Matcher
from crashdoc.text import LazyPattern

_WARNING_WORDS = LazyPattern(r"\bwarn(?:ing)?s?\b|deprecat|\bWARN\b", re.IGNORECASE)
_CONTINUATION_LINES = 8
_WENT_ON_LINES = 5  # this many other lines of the process after a lone failure: it carried on
_TAIL_LINES = 64  # room for the same failure from every rank of a node, and its continuation lines


def judge_lone(inv: Run, matcher: Matcher) -> None:
    """A pasted log with no traceback may still state its failure: a lone line that a reviewed or derived
    signature knows as an exception message ("Decode out of memory. Try to lower your batch size.", a kernel's
    `CUDA error: ...`, an ImportError's text without its type). The first such line that the process did
    not get past (no ready, no batches and no run of other lines after it) becomes a frameless traceback,
    with the lines that continue its record (`Try to allocate 52 tokens.`)."""
    inv.lone = []
    if inv.tracebacks or not inv.loose:
        return
    loose = inv.loose
    ready = max((m.seq for m in inv.markers if m.kind == "ready"), default=0)
    # a lone failure has fewer than _WENT_ON_LINES other lines after it: only the paste's tail can hold one
    start = max(len(loose) - _TAIL_LINES, 0)
    for i, (seq, pid, text) in enumerate(loose[start:], start):
        _, rank, body = split_prefix(text)
        body = body.strip()
        if len(body) < 12 or _WARNING_WORDS.search(body) or seq <= max(ready, inv.serving_seq) or request_record(body):
            continue
        record = [body]
        for nseq, npid, ntext in loose[i + 1 : i + 1 + _CONTINUATION_LINES]:
            if nseq != seq + len(record) or npid != pid or not ntext.strip() or split_prefix(ntext)[0]:
                break
            record.append(ntext.strip())
        message = "\n".join(record)
        if not (matcher.knows_message(message) or (len(record) > 1 and matcher.knows_message(body))):
            continue
        same = set(record)  # the same failure from the other ranks is no sign of going on
        later = sum(
            1
            for _, p2, t2 in loose[i + len(record) :]
            if (0 in (p2, pid) or p2 == pid) and t2.strip() and split_prefix(t2)[2].strip() not in same
        )
        if later >= _WENT_ON_LINES:
            continue  # the process went on logging: it survived this
        from crashdoc.failure_records import ExceptionInfo, Traceback  # a failure stated by a lone line

        exc = ExceptionInfo(type="", message=message, line=body)
        inv.lone.append(
            Traceback(unit=inv.unit, pid=pid, chain=(exc,), rank=rank, header=text[:300], text=message, seq=seq)
        )
        return
