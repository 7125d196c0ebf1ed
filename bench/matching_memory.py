"""What the matching layer keeps of RE2's programs and DFA states after many distinct messages (issue 26, round 8).

`python -m bench.matching_memory derived [N]`: the shipped derived signatures asked N messages (the 120 real
errors of /work/shared/reference/sglang-errors.jsonl x3, then one message made from each derived template);
`python -m bench.matching_memory messages [BUDGET_MB]`: the reviewed library's message set, compiled from BUDGET_MB
(default: what the matcher gives it), asked the 120 real messages x3. Each prints glibc's heap in use (mallinfo2:
uordblks + hblkhd) kept after the messages, the time per message and what was matched (identical answers: same
digest). Run it on two checkouts (`PYTHONPATH=OTHER/src`) to compare; the heap figures are glibc's, not RSS.
"""

from __future__ import annotations

import ctypes
import json
import re
import sys
import time
import zlib
from pathlib import Path

ERRORS = Path("/work/shared/reference/sglang-errors.jsonl")


_MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2]  # glibc's struct mallinfo2, in order


_libc = ctypes.CDLL(None)
_libc.mallinfo2.restype = _Mallinfo2


def heap_mb() -> float:
    info = _libc.mallinfo2()
    return float(info.uordblks + info.hblkhd) / 1e6


def real_errors() -> list[tuple[str, str]]:
    """(exception type, example message) of each curated real error."""
    rows = [json.loads(line) for line in ERRORS.read_text().splitlines() if line.strip()]
    return [(row["exception_type"], row["example_message"]) for row in rows]


def derived(count: int) -> str:
    from crashdoc.matching.derived import DerivedLibrary, _read_shipped, load_shipped

    made = [
        (sig.exception_type, re.sub(r"\{[^{}]*\}", "7", sig.template) + f" (run {i})")
        for i, sig in enumerate(load_shipped().signatures())
    ]
    library = DerivedLibrary([], (), loader=_read_shipped)
    library.match("warm up", "ValueError")  # the index and prefixes read before counting
    messages = (real_errors() * 3 + made)[:count]
    before, start = heap_mb(), time.perf_counter()
    found = [library.match(message, type_) for type_, message in messages]
    seconds = time.perf_counter() - start
    ids = tuple(m.signature.id if m else "" for m in found)
    digest = zlib.crc32(" ".join(ids).encode())
    return (
        f"derived: {len(messages)} messages ({sum(map(bool, ids))} matched, digest {digest:08x}): "
        f"+{heap_mb() - before:.2f} MB heap kept, {seconds / len(messages) * 1e3:.3f} ms/message"
    )


def messages(budget_mb: float | None) -> str:
    from crashdoc.matching.library import builtin_signature_dirs, load_library
    from crashdoc.matching.matcher import Matcher

    pattern_set = Matcher(load_library(builtin_signature_dirs()))._message_set
    if budget_mb is not None:
        pattern_set._max_mem = int(budget_mb * (1 << 20))
    texts = [message for _, message in real_errors()] * 3
    before = heap_mb()
    pattern_set.compile()
    compiled = heap_mb()
    start, most, hits = time.perf_counter(), 0.0, []
    for text in texts:
        hits.append(tuple(pattern_set.hits(text)))
        most = max(most, heap_mb() - compiled)
    seconds = time.perf_counter() - start
    taken = getattr(pattern_set, "budget", 0) / (1 << 20)  # what it compiled at (0: a checkout that does not say)
    return (
        f"message set from {pattern_set._max_mem / (1 << 20):.2f} MB (compiled at {taken:.2f}): program "
        f"{compiled - before:.2f} MB, DFA {heap_mb() - compiled:.2f} MB after {len(texts)} messages (most "
        f"{most:.2f}), {seconds / len(texts) * 1e3:.3f} ms/message, {sum(map(len, hits))} hits, digest "
        f"{zlib.crc32(repr(hits).encode()):08x}"
    )


def main(argv: list[str]) -> None:
    what = argv[0] if argv else "derived"
    if what == "derived":
        print(derived(int(argv[1]) if len(argv) > 1 else 360))
    elif what == "messages":
        print(messages(float(argv[1]) if len(argv) > 1 else None))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
