"""Checks that a proposed fix does not trade one crash loop for another: "will `--hicache-ratio 2.0` fit?".

`--hicache-ratio R` makes every scheduler rank reserve R x its device KV pool in pinned host memory
(srt/mem_cache/pool_host/base.py: host tokens = device tokens x ratio). SGLang checks that against the host's
free memory, but not against the NUMA node the process is bound to: a prefill on 4 GPUs with ~40 GiB of KV
pool per GPU asks for ~320 GiB at ratio 2.0, which passes SGLang's check on a 500 GiB host and then dies when
`numactl --membind=0` confines it to node 0's ~240 GiB. This module reads the pool size from SGLang's own
start-up lines, the rank count from the flags and the memory from /proc and /sys (under an injectable root,
so tests use fake trees), and says in sentences whether the ratio fits and which ratio would.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from crashdoc.assembly import memory_lines as memory
from crashdoc.assembly.logline import split_prefix
from crashdoc.events import FlagChange, LogLine
from crashdoc.remedy.commandline import LaunchCommand, Where, parse_wrappers

GIB = 1 << 30
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

# SGLang's memory lines (their patterns: assembly.memory_lines); DeepSeek V4's pool logs no size of its own,
# so the free GPU memory after the weights and after the pools stands in for it.
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


# --- memory ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NumaBinding:
    """Where the unit's memory may come from."""

    nodes: tuple[int, ...]
    strict: bool  # membind / NUMAPolicy=bind: an allocation beyond these nodes fails
    source: str  # "numactl --membind=0", "NUMAPolicy=bind NUMAMask=0", "CPUAffinity=0-31"


def parse_list(text: str) -> tuple[int, ...] | None:
    """A Linux list ("0", "0,2", "0-3", "0-31 64-95"); None when it is not one."""
    out: list[int] = []
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            return None
        lo, hi = int(m[1]), int(m[2] or m[1])
        if hi < lo or hi - lo > 65536:
            return None
        out.extend(range(lo, hi + 1))
    return tuple(sorted(set(out))) or None


def _nodes(root: Path) -> dict[int, tuple[int, ...]]:
    """NUMA node -> its CPUs, from /sys/devices/system/node."""
    out: dict[int, tuple[int, ...]] = {}
    base = root / "sys/devices/system/node"
    try:
        entries = list(base.iterdir())
    except OSError:
        return out
    for entry in entries:
        m = re.fullmatch(r"node(\d+)", entry.name)
        if not m:
            continue
        try:
            cpus = parse_list((entry / "cpulist").read_text()) or ()
        except OSError:
            cpus = ()
        out[int(m[1])] = cpus
    return out


def _node_list(spec: str, known: Sequence[int]) -> tuple[int, ...] | None:
    spec = spec.strip().lstrip("+")
    if spec == "all":
        return tuple(known) or None
    if spec.startswith("!"):
        excluded = parse_list(spec[1:])
        return None if excluded is None else tuple(n for n in known if n not in excluded) or None
    return parse_list(spec)


def _numactl_options(args: Sequence[str]) -> dict[str, str]:
    """numactl's options by long name: `-m 0`, `-m0`, `--membind 0`, `--membind=0` all give membind=0."""
    short = {"-m": "membind", "-N": "cpunodebind", "-i": "interleave", "-p": "preferred", "-C": "physcpubind"}
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if a.startswith("--"):
            name, eq, value = a[2:].partition("=")
            if not eq and name in short.values():
                value, i = nxt, i + 1
            out[name] = value
        elif a[:2] in short:
            if len(a) > 2:
                out[short[a[:2]]] = a[2:]
            else:
                out[short[a[:2]]] = nxt
                i += 1
        elif a in ("-l", "--localalloc"):
            out["localalloc"] = ""
        i += 1
    return out


def numa_binding(
    inv: LaunchCommand | None,
    *,
    numa_policy: str = "",
    numa_mask: str = "",
    cpu_affinity: str = "",
    root: Path = Path("/"),
) -> NumaBinding | None:
    """The NUMA binding of the SGLang processes: numactl in the command (or in ExecStart, around the launch
    script), else the unit's NUMAPolicy=/NUMAMask=, else a CPUAffinity= that lies within one node."""
    nodes = _nodes(root)
    known = sorted(nodes)
    wrappers = list(inv.wrappers) if inv else []
    if inv is not None and inv.where is not Where.ARGV:
        wrappers += parse_wrappers(inv.exec_start)[0]
    for w in wrappers:
        if w.name != "numactl":
            continue
        opts = _numactl_options(w.args)
        for name, strict in (("membind", True), ("interleave", False), ("preferred", False), ("cpunodebind", False)):
            if name in opts and (found := _node_list(opts[name], known)):
                return NumaBinding(found, strict, f"numactl --{name}={opts[name]}")
        if "physcpubind" in opts and (cpus := parse_list(opts["physcpubind"])):
            hit = _nodes_of_cpus(cpus, nodes)
            if hit:
                return NumaBinding(hit, False, f"numactl --physcpubind={opts['physcpubind']}")
    policy = numa_policy.strip().lower()
    if policy in ("bind", "interleave", "preferred") and numa_mask.strip():
        found = _node_list(numa_mask, known)
        if found:
            return NumaBinding(found, policy == "bind", f"NUMAPolicy={policy} NUMAMask={numa_mask.strip()}")
    if cpu_affinity.strip():
        cpus = parse_list(cpu_affinity)
        hit = _nodes_of_cpus(cpus or (), nodes)
        if hit and len(hit) < len(nodes):
            return NumaBinding(hit, False, f"CPUAffinity={cpu_affinity.strip()}")
    return None


def _nodes_of_cpus(cpus: Sequence[int], nodes: dict[int, tuple[int, ...]]) -> tuple[int, ...]:
    wanted = set(cpus)
    return tuple(sorted(n for n, node_cpus in nodes.items() if wanted.intersection(node_cpus)))


def _meminfo(path: Path) -> dict[str, int]:
    """Fields of a meminfo file in bytes (`MemTotal: 1 kB`, `Node 0 MemFree: 1 kB`)."""
    out: dict[str, int] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        m = re.match(r"(?:Node \d+ )?([\w()]+):\s+(\d+)(?:\s+kB)?", line)
        if m:
            out[m[1]] = int(m[2]) * (1024 if line.rstrip().endswith("kB") else 1)
    return out


@dataclass(frozen=True, slots=True)
class HostMemory:
    """Memory the unit's processes may use, and where that figure comes from."""

    available: int
    total: int
    scope: str  # "the host", "NUMA node 0", "NUMA nodes 0,1"
    source: str = ""  # the binding that set the scope: "numactl --membind=0"; "" for the whole host
    preferred_available: int = 0  # under a soft binding (cpunodebind, CPUAffinity): what those nodes have
    note: str = ""  # what could not be read


def host_memory(
    root: Path = Path("/"), binding: NumaBinding | None = None, memory_max: int | None = None
) -> HostMemory | None:
    """Available memory for the unit: the bound NUMA nodes' free and reclaimable memory under a strict
    binding, else the host's MemAvailable; capped by the unit's MemoryMax= when given. None when nothing
    is readable."""
    host = _meminfo(root / "proc/meminfo")
    node_avail = node_total = 0
    missing: list[int] = []
    for n in binding.nodes if binding else ():
        info = _meminfo(root / f"sys/devices/system/node/node{n}/meminfo")
        if "MemFree" not in info:
            missing.append(n)
            continue
        node_total += info.get("MemTotal", 0)
        node_avail += (
            info["MemFree"]
            + info.get("Active(file)", 0)
            + info.get("Inactive(file)", 0)
            + info.get("SReclaimable", info.get("KReclaimable", 0))
        )
    note = f"the meminfo of NUMA node(s) {', '.join(map(str, missing))} is unreadable" if missing else ""
    if binding is not None and binding.strict and node_total and not missing:
        nodes = ",".join(map(str, binding.nodes))
        scope = f"NUMA node{'s' if len(binding.nodes) > 1 else ''} {nodes}"
        mem = HostMemory(node_avail, node_total, scope, binding.source)
    elif "MemAvailable" in host:
        soft = binding is not None and not binding.strict and not missing
        mem = HostMemory(
            host["MemAvailable"],
            host.get("MemTotal", 0),
            "the host",
            binding.source if soft and binding else "",
            node_avail if soft else 0,
            note,
        )
    else:
        return None
    if memory_max is not None and 0 < memory_max < mem.available:
        mem = HostMemory(
            memory_max, mem.total, f"{mem.scope} (MemoryMax=)", mem.source, mem.preferred_available, mem.note
        )
    return mem


# --- the check ---------------------------------------------------------------------------------------


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _ratio(r: float) -> str:
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
    pool_text = f"{_gib(pool.bytes_per_rank)} device KV pool per rank" + (
        " (estimated from free GPU memory)" if pool.estimated else ""
    )
    sentence = (
        f"--hicache-ratio {_ratio(ratio)} {'fits' if fits else 'does not fit'}: HiCache would pin "
        f"{_ratio(ratio)} x {pool_text} x {ranks} rank{'s' if ranks > 1 else ''} = {_gib(needed)} of host "
        f"memory, and {where} {'have' if memory.scope.startswith('NUMA nodes') else 'has'} "
        f"{_gib(memory.available)} available ({_gib(memory.total)} total)."
    )
    sentences = [sentence]
    if memory.note:
        sentences.append(f"Checked against the whole host: {memory.note}.")
    if memory.preferred_available and needed > memory.preferred_available:
        sentences.append(
            f"That is more than the {_gib(memory.preferred_available)} of the NUMA node(s) the unit runs on "
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
            f"The largest ratio that fits, keeping SGLang's {_gib(reserve)} reserve and {headroom:.0%} headroom, "
            f"is --hicache-ratio {max_ratio:.1f} ({_gib(max_ratio * per_unit_ratio)})."
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
            f"crashdoc could not check that --hicache-ratio {_ratio(ratio)} fits in host memory: the log has no "
            '"KV Cache is allocated" line (SGLang crashed before it sized the KV pool). Each rank will pin '
            f"{_ratio(ratio)} x its device KV pool in host memory."
        ]
    ranks = ranks_on_host(inv) if inv is not None else None
    out: list[str] = []
    if ranks is None:
        ranks = pool.ranks_logged
        why = "the command is unknown" if inv is None else "the parallel sizes are not literal in the command"
        out.append(f"Rank count: {why}; crashdoc counted {ranks} rank(s) in the log.")
    binding = numa_binding(inv, numa_policy=numa_policy, numa_mask=numa_mask, cpu_affinity=cpu_affinity, root=root)
    memory = host_memory(root, binding, memory_max)
    if memory is None:
        return [
            f"crashdoc could not check that --hicache-ratio {_ratio(ratio)} fits: {root / 'proc/meminfo'} is "
            f"unreadable. It needs about {_gib(ratio * pool.bytes_per_rank * max(ranks, pool.ranks_logged))} "
            "of host memory."
        ]
    check = check_hicache_ratio(ratio, pool, ranks, memory)
    return [*check.sentences, *out]


def ratio_from_changes(changes: Sequence[FlagChange]) -> float | None:
    """The --hicache-ratio a fix sets (`replace ... -> --hicache-ratio 2.0`, `set`, `add`), or None."""
    ratio = None
    for c in changes:
        target = c.new_flag if c.action == "replace" and c.new_flag else c.flag
        if target == "--hicache-ratio" and c.action in ("replace", "set", "add") and c.value is not None:
            try:
                ratio = float(c.value)
            except ValueError:
                continue
    return ratio


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


@dataclass(frozen=True, slots=True)
class SafeFix:
    """What the safety check made of a fix: the changes to apply (a value the check accepts, or none that the
    host cannot take), the sentences for `Fix.warnings`, and a summary to show instead of the signature's."""

    changes: tuple[FlagChange, ...]
    sentences: tuple[str, ...]
    summary: str = ""  # "" keeps the signature's


def hicache_fix(
    changes: Sequence[FlagChange],
    summary: str,
    lines: Iterable[str | LogLine],
    inv: LaunchCommand | None,
    *,
    release: str = "",
    numa_policy: str = "",
    numa_mask: str = "",
    cpu_affinity: str = "",
    memory_max: int | None = None,
    root: Path = Path("/"),
) -> SafeFix:
    """One truth per fix: the ratio the corrected command runs with (the fix's, the command's, SGLang's
    auto-sized one on a release that has it, else the default 2.0) is checked; when the host cannot take it,
    the changes carry the largest ratio that fits, or turn HiCache off when none does, with the arithmetic."""
    changes = list(changes)
    explicit = _corrected_ratio(changes, inv)
    auto = explicit is None and auto_sizes(release) is True
    ratio = explicit if explicit is not None else DEFAULT_RATIO
    lines = list(lines)
    pool = kv_pool_from_log(lines)
    binding = numa_binding(inv, numa_policy=numa_policy, numa_mask=numa_mask, cpu_affinity=cpu_affinity, root=root)
    memory = host_memory(root, binding, memory_max)
    if pool is None or memory is None:  # said plainly by the check of the ratio as given
        sentences = hicache_host_memory(
            ratio,
            lines,
            inv,
            numa_policy=numa_policy,
            numa_mask=numa_mask,
            cpu_affinity=cpu_affinity,
            memory_max=memory_max,
            root=root,
        )
        return SafeFix(tuple(changes), tuple(sentences))
    ranks = ranks_on_host(inv) if inv is not None else None
    notes: list[str] = []
    if ranks is None:
        ranks = pool.ranks_logged
        why = "the command is unknown" if inv is None else "the parallel sizes are not literal in the command"
        notes.append(f"Rank count: {why}; crashdoc counted {ranks} rank(s) in the log.")
    ranks = max(ranks, pool.ranks_logged, 1)
    intro: list[str] = []
    if auto:
        seen = host_memory(root, None, memory_max) or memory  # SGLang's own view: the host, cgroup-bounded
        ratio = auto_ratio(pool, ranks, seen)
        intro.append(_auto_sentence(release, ratio, pool, ranks, seen, memory))
    check = check_hicache_ratio(ratio, pool, ranks, memory) if ratio > 0 else None
    if check is not None and check.fits:
        return SafeFix(tuple(changes), (*intro, *check.sentences, *notes))
    max_ratio = (
        check.max_ratio if check is not None else check_hicache_ratio(DEFAULT_RATIO, pool, ranks, memory).max_ratio
    )
    said = check.sentences if check is not None else ()
    verdict, rest = list(said[:1]), [s for s in said[1:] if not s.startswith(("The largest ratio", "No ratio fits"))]
    usable = max(memory.available - SGLANG_HOST_RESERVE, 0)
    if max_ratio > 0:
        value = f"{max_ratio:.1f}"
        changes, summary = _with_ratio(changes, summary, value)
        chosen = (
            f"The corrected command uses --hicache-ratio {value}, the largest that fits keeping SGLang's "
            f"{_gib(SGLANG_HOST_RESERVE)} reserve and {DEFAULT_HEADROOM:.0%} headroom: {value} x "
            f"{_gib(pool.bytes_per_rank)} x {ranks} = {_gib(max_ratio * pool.bytes_per_rank * ranks)}, within the "
            f"{_gib(usable)} left on {memory.scope} after the reserve."
        )
        off = ["An explicit ratio turns SGLang's auto-sizing off."] if auto else []
        return SafeFix(tuple(changes), (*intro, *verdict, chosen, *off, *rest, *notes), summary)
    none_fits = (
        f"No --hicache-ratio fits: {memory.scope} has {_gib(memory.available)} available, {_gib(usable)} after "
        f"SGLang's {_gib(SGLANG_HOST_RESERVE)} reserve, {_gib(usable * (1 - DEFAULT_HEADROOM))} with "
        f"{DEFAULT_HEADROOM:.0%} headroom, and even --hicache-ratio 0.1 would pin 0.1 x {_gib(pool.bytes_per_rank)} "
        f"x {ranks} = {_gib(0.1 * pool.bytes_per_rank * ranks)}. The corrected command turns HiCache off (no "
        "--enable-hierarchical-cache); turn it on again once the unit may use more memory (more NUMA nodes, a "
        "larger MemoryMax=, fewer ranks per host) or its device KV pool is smaller (a lower --mem-fraction-static)."
    )
    return SafeFix(
        tuple(_hicache_off(changes)),
        (*intro, *verdict, none_fits, *notes),
        "no --hicache-ratio fits this host: turn HiCache off (remove `--enable-hierarchical-cache`)",
    )


def _auto_sentence(release: str, ratio: float, pool: KvPool, ranks: int, seen: HostMemory, memory: HostMemory) -> str:
    """The arithmetic of SGLang's own auto-sizing, and what it does not see."""
    text = (
        f"SGLang {release} sizes the HiCache host pool itself when no ratio is given: min({_ratio(DEFAULT_RATIO)}, "
        f"({_gib(seen.available)} available on the host - {_gib(SGLANG_HOST_RESERVE)} reserve) / {ranks} "
        f"rank{'s' if ranks > 1 else ''} x {AUTO_SIZE_FRACTION:g} x {1 - AUTO_SIZE_SLACK:g} / "
        f"{_gib(pool.bytes_per_rank)} device KV pool per rank) = {ratio:.3f}"
    )
    if ratio <= 0:
        return text + '; SGLang refuses to start ("No host memory is left for HiCache after the 10 GiB reserve").'
    if memory.scope != seen.scope:
        return text + f"; it reads the host's memory, not that of {memory.scope} ({memory.source})."
    return text + "."


def _corrected_ratio(changes: Sequence[FlagChange], inv: LaunchCommand | None) -> float | None:
    """The --hicache-ratio the corrected command passes: the fix's, else the command's unless the fix removes it;
    None when it passes none (or one that is not a literal number)."""
    ratio = ratio_from_changes(changes)
    if ratio is not None:
        return ratio
    if any(c.flag == "--hicache-ratio" and c.action in ("remove", "replace") for c in changes):
        return None
    current = inv.value("--hicache-ratio") if inv is not None else None
    try:
        return float(current) if current else None
    except ValueError:
        return None


def _with_ratio(changes: list[FlagChange], summary: str, value: str) -> tuple[list[FlagChange], str]:
    """The changes with `value` as the ratio they set (added as a `set` when they set none), and the summary
    saying it."""
    out: list[FlagChange] = []
    old = None
    for c in changes:
        target = c.new_flag if c.action == "replace" and c.new_flag else c.flag
        if target == "--hicache-ratio" and c.action in ("replace", "set", "add") and c.value is not None:
            old = c.value
            c = FlagChange(c.action, c.flag, value, c.new_flag, c.placeholder)
        out.append(c)
    if old is None:
        out.append(FlagChange("set", "--hicache-ratio", value))
        return out, f"{summary}; set `--hicache-ratio {value}` (the largest ratio that fits this host)"
    said = f"--hicache-ratio {old}"
    if said in summary:
        return out, summary.replace(said, f"--hicache-ratio {value}") + (
            f" (the largest ratio that fits this host; {old} does not)"
        )
    return out, f"{summary} (with --hicache-ratio {value}: the largest ratio that fits this host)"


def _hicache_off(changes: list[FlagChange]) -> list[FlagChange]:
    """The changes without any ratio, with HiCache turned off: a flag the fix replaced by a ratio is removed."""
    out: list[FlagChange] = []
    for c in changes:
        target = c.new_flag if c.action == "replace" and c.new_flag else c.flag
        if target == "--hicache-ratio" and c.action in ("replace", "set", "add"):
            if c.action == "replace" and c.flag != "--hicache-ratio":
                out.append(FlagChange("remove", c.flag))
            continue
        out.append(c)
    out.append(FlagChange("remove", "--enable-hierarchical-cache"))
    return out


def safety_warnings(name: str | None, **inputs: object) -> list[str]:
    """Run the safety check a signature names (`fix.safety`) on a given ratio; [] for none or an unknown name."""
    if name == "hicache-host-memory":
        return hicache_host_memory(**inputs)  # type: ignore[arg-type]
    return []


def safe_fix(name: str | None, changes: Sequence[FlagChange], summary: str, **inputs: object) -> SafeFix:
    """The fix as the safety check a signature names (`fix.safety`) leaves it; unchanged for none or unknown."""
    if name == "hicache-host-memory":
        return hicache_fix(changes, summary, **inputs)  # type: ignore[arg-type]
    return SafeFix(tuple(changes), ())
