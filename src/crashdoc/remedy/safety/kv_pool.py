"""The device KV pool of one rank, read from SGLang's own start-up lines: what `--hicache-ratio` multiplies.

HiCache's host pool is the ratio times this pool per rank (srt/mem_cache/pool_host/base.py), so the safety check
needs its size before it can say whether a ratio fits: the pool size lines of the last launch, or, for DeepSeek
V4 whose pool logs no size of its own, the drop in free GPU memory between the weights and the pools.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from crashdoc.assembly import memory_lines as memory
from crashdoc.assembly.logline import split_prefix
from crashdoc.events import LogLine

GIB = 1 << 30

# A start of SGLang: its `server_args=` line (the memory lines' patterns are assembly.memory_lines').
_LAUNCH = re.compile(r"server_args=ServerArgs\(|server_args=\{")


@dataclass(frozen=True, slots=True)
class KvPool:
    """The device KV pool of one rank, as SGLang logged it (the largest rank when they differ)."""

    bytes_per_rank: int
    ranks_logged: int  # distinct rank prefixes (TP0..TP3) that logged it; 1 without a prefix
    evidence: str  # the line it was read from
    estimated: bool = False  # from the drop in free GPU memory, not a pool size line
    host_bytes_per_rank: int = 0  # what HiCache allocated per rank in that run (0 when it did not)


def _text(line: str | LogLine) -> str:
    return line if isinstance(line, str) else line.text


def _launches(lines: Iterable[str | LogLine]) -> list[list[str]]:
    """Lines cut at each start of SGLang (its `server_args=` line), and at each new systemd invocation."""
    runs: list[list[str]] = [[]]
    invocation = None
    for line in lines:
        text = _text(line)
        inv = None if isinstance(line, str) else line.invocation or None
        if (_LAUNCH.search(text) and runs[-1]) or (inv and invocation and inv != invocation):
            runs.append([])
        invocation = inv or invocation
        runs[-1].append(text)
    return runs


def kv_pool_from_log(lines: Iterable[str | LogLine]) -> KvPool | None:
    """The device KV pool per rank from the last launch that logged one, or None.

    Per rank, the pools it allocated are summed (target + draft model, full + sliding-window layers); the
    post-capture resize replaces them when present; without any size line, the pool is estimated from the
    free GPU memory after the weights minus after the pools.
    """
    for run in reversed(_launches(lines)):
        pool = _pool_of_run(run)
        if pool is not None:
            return pool
    return None


def _pool_of_run(run: Sequence[str]) -> KvPool | None:
    allocated: dict[str, float] = {}
    post: dict[str, float] = {}
    swa: dict[str, float] = {}
    weight_end: dict[str, float] = {}
    pool_end: dict[str, float] = {}
    host: dict[str, float] = {}
    evidence: dict[str, str] = {}
    for text in run:
        _, rank, body = split_prefix(text)
        if "KV" in body or "kv" in body:
            if kv := memory.kv_allocated(body):
                allocated[rank] = allocated.get(rank, 0.0) + kv[1]
                evidence.setdefault("allocated", text)
            elif k := memory.KV_POST_CAPTURE.search(body):
                post[rank] = post.get(rank, 0.0) + float(k["kv"])
                evidence.setdefault("post", text)
            elif k := memory.SWA_POOL.search(body):
                swa[rank] = float(k["kv"])
                evidence.setdefault("swa", text)
        avail = memory.avail_mem(body)
        if avail is not None and memory.LOAD_END in body:
            weight_end[rank] = avail
        elif avail is not None and memory.POOL_END in body:
            pool_end[rank] = avail
            evidence.setdefault("estimate", text)
        elif h := memory.HOST_ALLOCATED.search(body):
            host[rank] = host.get(rank, 0.0) + float(h["gb"] or h["gb4"])
    host_bytes = int(max(host.values(), default=0.0) * 1e9)
    for table, key in ((post, "post"), (allocated, "allocated"), (swa, "swa")):
        if table:
            return KvPool(int(max(table.values()) * GIB), len(table), evidence[key], False, host_bytes)
    deltas = {r: weight_end[r] - pool_end[r] for r in pool_end if r in weight_end and weight_end[r] > pool_end[r]}
    if deltas:
        return KvPool(int(max(deltas.values()) * GIB), len(deltas), evidence["estimate"], True, host_bytes)
    return None


def host_memory_refusal(lines: Iterable[str | LogLine]) -> tuple[int, int] | None:
    """(requested, free) bytes from SGLang's own "Not enough host memory" error, if it raised one."""
    found = None
    for line in lines:
        if m := memory.HOST_REFUSED.search(_text(line)):
            found = (int(float(m["req"]) * 1e9), int(float(m["have"]) * 1e9))
    return found
