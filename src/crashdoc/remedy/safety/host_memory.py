"""The memory a unit's processes may use: the host's, or the NUMA nodes it is bound to, capped by MemoryMax=.

SGLang checks HiCache's host pool against the host's free memory, not against the NUMA node the process is bound
to: `numactl --membind=0` (or NUMAPolicy=bind) confines a prefill to node 0's memory. The binding is read from
the command's wrappers and the unit's settings, the memory from /proc and /sys under an injectable root (tests
use fake trees).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from crashdoc.remedy.commandline import LaunchCommand, Where, parse_wrappers


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
