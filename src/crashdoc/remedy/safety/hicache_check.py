"""Will `--hicache-ratio R` fit? The ratio x the device KV pool per rank x the ranks on this host, against the
memory the unit may use, in sentences; and the ratio SGLang's own auto-sizing would pick.

`--hicache-ratio R` makes every scheduler rank reserve R x its device KV pool in pinned host memory
(srt/mem_cache/pool_host/base.py: host tokens = device tokens x ratio). SGLang checks that against the host's
free memory, but not against the NUMA node the process is bound to: a prefill on 4 GPUs with ~40 GiB of KV
pool per GPU asks for ~320 GiB at ratio 2.0, which passes SGLang's check on a 500 GiB host and then dies when
`numactl --membind=0` confines it to node 0's ~240 GiB.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from crashdoc.events import LogLine
from crashdoc.remedy.commandline import LaunchCommand
from crashdoc.remedy.safety.host_memory import HostMemory, host_memory, numa_binding
from crashdoc.remedy.safety.kv_pool import GIB, KvPool, kv_pool_from_log

# SGLang keeps this much host RAM free when it sizes HiCache pools (pool_host/base.py,
# HICACHE_HOST_MEMORY_RESERVE_BYTES); crashdoc does the same before its own headroom.
SGLANG_HOST_RESERVE = 10 * GIB
# Kept free on top of SGLang's reserve when proposing a ratio: the scheduler, tokenizer and detokenizer
# processes, pinned transfer buffers and the page cache of the weights also live in host memory.
DEFAULT_HEADROOM = 0.10
DEFAULT_RATIO = 2.0  # SGLang's default --hicache-ratio in cache mode (arg_groups/fields/memory.py)
# Since 0.5.21 SGLang sizes the host pool itself when neither --hicache-ratio nor --hicache-size is given
# (srt/mem_cache/hicache_auto_size.py; 0.5.20 has no such module): the default ratio is lowered to
# (available host memory, bounded by cgroup limits, - the 10 GiB reserve) / ranks on the host
# x --hicache-host-memory-fraction (0.8) x (1 - 5 % allocation slack) / device KV bytes per rank. It reads the
# host's memory, not a NUMA node's, and it does not support DeepSeek V4's pool (DeepSeekV4TokenToKVPool is none
# of its _SIZEABLE_POOLS: "HiCache auto-sizing does not support ...; set --hicache-ratio or --hicache-size
# explicitly."), so a DeepSeek V4 fix keeps an explicit ratio on every release.
AUTO_SIZING_SINCE = (0, 5, 21)
AUTO_SIZE_FRACTION = 0.8  # --hicache-host-memory-fraction's default
AUTO_SIZE_SLACK = 0.05  # _ALLOCATION_SLACK_FRACTION

TP_FLAGS = ("--tp-size", "--tp", "--tensor-parallel-size")
PP_FLAGS = ("--pp-size", "--pipeline-parallel-size")
DP_FLAGS = ("--dp-size", "--dp", "--data-parallel-size")
NNODES_FLAGS = ("--nnodes",)


# --- ranks -------------------------------------------------------------------------------------------


def _int_flag(inv: LaunchCommand, names: Sequence[str], default: int) -> int | None:
    value = inv.value(*names)
    if value is None:
        return default
    try:
        return max(int(value), 1)
    except ValueError:
        return None  # `$TP`: unknown here


def ranks_on_host(inv: LaunchCommand) -> int | None:
    """Scheduler ranks this unit runs on this host: tp x pp (x dp unless DP attention) / nnodes.

    None when a size is a shell variable crashdoc cannot resolve.
    """
    tp = _int_flag(inv, TP_FLAGS, 1)
    pp = _int_flag(inv, PP_FLAGS, 1)
    dp = _int_flag(inv, DP_FLAGS, 1)
    nnodes = _int_flag(inv, NNODES_FLAGS, 1)
    if tp is None or pp is None or dp is None or nnodes is None:
        return None
    if inv.has("--enable-dp-attention"):
        dp = 1  # the attention DP groups live inside the TP group
    return max(math.ceil(tp * pp * dp / nnodes), 1)


def rank_count(inv: LaunchCommand | None, pool: KvPool) -> tuple[int, list[str]]:
    """The ranks on this host from the command's flags, else those the log shows, with a sentence saying why."""
    ranks = ranks_on_host(inv) if inv is not None else None
    if ranks is not None:
        return ranks, []
    why = "the command is unknown" if inv is None else "the parallel sizes are not literal in the command"
    return pool.ranks_logged, [f"Rank count: {why}; crashdoc counted {pool.ranks_logged} rank(s) in the log."]


# --- the check ---------------------------------------------------------------------------------------


def gib(n: float) -> str:
    """A byte count as the sentences write it: `16.3 GiB`."""
    return f"{n / GIB:.1f} GiB"


def ratio_text(r: float) -> str:
    """A ratio as the sentences write it: `2.0`, `0.35`."""
    return f"{r:g}" if r != int(r) else f"{r:.1f}"


@dataclass(frozen=True, slots=True)
class HicacheCheck:
    """Whether `--hicache-ratio ratio` fits, with the numbers behind it and the sentences to show."""

    ratio: float
    fits: bool
    needed: int  # bytes of host memory all ranks' HiCache pools would take
    available: int  # bytes the unit may use (before SGLang's reserve)
    max_ratio: float  # the largest ratio that fits with reserve and headroom, one decimal, rounded down
    ranks: int
    pool_per_rank: int
    sentences: tuple[str, ...]


def check_hicache_ratio(
    ratio: float,
    pool: KvPool,
    ranks: int,
    memory: HostMemory,
    *,
    reserve: int = SGLANG_HOST_RESERVE,
    headroom: float = DEFAULT_HEADROOM,
) -> HicacheCheck:
    """Compare ratio x pool x ranks with the memory, and propose the largest ratio that fits."""
    ranks = max(ranks, pool.ranks_logged, 1)
    per_unit_ratio = pool.bytes_per_rank * ranks  # bytes per 1.0 of ratio
    needed = int(ratio * per_unit_ratio)
    usable = max(memory.available - reserve, 0)
    fits = needed <= usable
    max_ratio = math.floor(usable * (1 - headroom) / per_unit_ratio * 10) / 10 if per_unit_ratio else 0.0
    where = memory.scope + (f" ({memory.source})" if memory.source and memory.scope != "the host" else "")
    pool_text = f"{gib(pool.bytes_per_rank)} device KV pool per rank" + (
        " (estimated from free GPU memory)" if pool.estimated else ""
    )
    sentence = (
        f"--hicache-ratio {ratio_text(ratio)} {'fits' if fits else 'does not fit'}: HiCache would pin "
        f"{ratio_text(ratio)} x {pool_text} x {ranks} rank{'s' if ranks > 1 else ''} = {gib(needed)} of host "
        f"memory, and {where} {'have' if memory.scope.startswith('NUMA nodes') else 'has'} "
        f"{gib(memory.available)} available ({gib(memory.total)} total)."
    )
    sentences = [sentence]
    if memory.note:
        sentences.append(f"Checked against the whole host: {memory.note}.")
    if memory.preferred_available and needed > memory.preferred_available:
        sentences.append(
            f"That is more than the {gib(memory.preferred_available)} of the NUMA node(s) the unit runs on "
            f"({memory.source}): the rest comes from remote memory, which slows HiCache transfers down."
        )
    below_one = (
        "Below 1.0 the host pool is smaller than the device pool and HiCache gains little (SGLang warns "
        "about it): bind the unit to more NUMA nodes, or lower --mem-fraction-static."
    )
    if max_ratio <= 0 and not fits:
        sentences.append("No ratio fits: bind the unit to more NUMA nodes or drop --enable-hierarchical-cache.")
    elif max_ratio > 0 and (not fits or ratio > max_ratio):
        sentences.append(
            f"The largest ratio that fits, keeping SGLang's {gib(reserve)} reserve and {headroom:.0%} headroom, "
            f"is --hicache-ratio {max_ratio:.1f} ({gib(max_ratio * per_unit_ratio)})."
        )
        if max_ratio < 1.0:
            sentences.append(below_one)
    elif ratio < 1.0:  # it fits, but is small (SGLang's auto-sizing on a small host)
        sentences.append(below_one)
    return HicacheCheck(ratio, fits, needed, memory.available, max_ratio, ranks, pool.bytes_per_rank, tuple(sentences))


def hicache_host_memory(
    ratio: float | None,
    lines: Iterable[str | LogLine],
    inv: LaunchCommand | None,
    *,
    numa_policy: str = "",
    numa_mask: str = "",
    cpu_affinity: str = "",
    memory_max: int | None = None,
    root: Path = Path("/"),
) -> list[str]:
    """The `hicache-host-memory` safety check: sentences for `Fix.warnings`.

    `ratio` is the ratio the fix sets (None: the command's --hicache-ratio, else SGLang's default 2.0);
    `lines` the unit's log of its last runs. Says plainly what it could not check, and why.
    """
    if ratio is None:
        current = inv.value("--hicache-ratio") if inv else None
        try:
            ratio = float(current) if current else DEFAULT_RATIO
        except ValueError:
            ratio = DEFAULT_RATIO
    lines = list(lines)
    pool = kv_pool_from_log(lines)
    if pool is None:
        return [
            f"crashdoc could not check that --hicache-ratio {ratio_text(ratio)} fits in host memory: the log has no "
            '"KV Cache is allocated" line (SGLang crashed before it sized the KV pool). Each rank will pin '
            f"{ratio_text(ratio)} x its device KV pool in host memory."
        ]
    ranks, out = rank_count(inv, pool)
    binding = numa_binding(inv, numa_policy=numa_policy, numa_mask=numa_mask, cpu_affinity=cpu_affinity, root=root)
    memory = host_memory(root, binding, memory_max)
    if memory is None:
        return [
            f"crashdoc could not check that --hicache-ratio {ratio_text(ratio)} fits: {root / 'proc/meminfo'} is "
            f"unreadable. It needs about {gib(ratio * pool.bytes_per_rank * max(ranks, pool.ranks_logged))} "
            "of host memory."
        ]
    check = check_hicache_ratio(ratio, pool, ranks, memory)
    return [*check.sentences, *out]


def auto_sizes(release: str) -> bool | None:
    """Whether SGLang `release` sizes the HiCache host pool itself when no ratio is given; None when unknown."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", release or "")
    if m is None:
        return None
    return tuple(int(x) for x in m.groups()) >= AUTO_SIZING_SINCE


def auto_ratio(pool: KvPool, ranks: int, host: HostMemory, requested: float = DEFAULT_RATIO) -> float:
    """The ratio SGLang's auto-sizing picks (hicache_auto_size.auto_size_hicache), to three decimals, rounded down;
    0 or less when nothing is left after the reserve (SGLang then refuses to start)."""
    budget = max(host.available - SGLANG_HOST_RESERVE, 0) // max(ranks, 1) * AUTO_SIZE_FRACTION
    ratio = min(requested, budget * (1 - AUTO_SIZE_SLACK) / pool.bytes_per_rank) if pool.bytes_per_rank else 0.0
    return math.floor(ratio * 1000) / 1000
