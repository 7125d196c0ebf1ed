"""Which unit, which rank, which GPU: kernel GPU events joined with what crashdoc knows of the units.

Two ways to join, both pure functions over published facts (the engine's records are read, never edited):
- by process: an Xid's `pid=` against the PIDs a unit's run logged under (each SGLang scheduler rank is one
  process and prefixes its lines with its rank, "[... TP3]");
- by GPU: the Xid's PCI address against the GPU each rank used: SGLang's device for the rank (base GPU id,
  rank, GPU id step), through the unit's CUDA_VISIBLE_DEVICES, to the host's PCI-to-index map.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from crashdoc.assembly.logline import split_prefix
from crashdoc.diagnosis.views import RunView
from crashdoc.events import GpuEvent
from crashdoc.sources.kernel_gpu import normalize_bus_id
from crashdoc.sources.nvidia_gpus import GpuMap

_RANK_PART = re.compile(r"\b(DP|PP|TP|EP|ATTN_CP|MOE_DP)(\d+)\b")


@dataclass(frozen=True, slots=True)
class GpuRef:
    """The GPU a rank used, as far as it is known."""

    index: int | None = None  # nvidia-smi's index on the host
    bus_id: str = ""  # "0000:c1:00.0"
    uuid: str = ""
    device: int | None = None  # the device number the rank asked CUDA for (before CUDA_VISIBLE_DEVICES)
    how: str = ""  # how crashdoc got from the rank to the GPU, for the evidence

    def name(self) -> str:
        """ "GPU 3 (0000:c1:00.0)", or what is known of it."""
        if self.index is not None:
            return f"GPU {self.index} ({self.bus_id})" if self.bus_id else f"GPU {self.index}"
        device = f"device {self.device} of the unit" if self.device is not None else ""
        if self.bus_id:
            return f"GPU {self.bus_id} ({device})" if device else f"GPU {self.bus_id}"
        return f"the GPU ({device})" if device else "the GPU"


@dataclass(frozen=True, slots=True)
class CrashFacts:
    """What the hardware decision needs of one crash."""

    unit: str
    first_error_at: float  # the first error line's time (seconds; 0.0 when unknown)
    rank: str = ""  # the rank whose error came first ("TP3"; "" for the launcher or unknown)
    exception: str = ""  # that error's exception line
    kind: str = ""  # the software diagnosis' kind (config, resource, ...)
    pids: Mapping[int, str] = field(default_factory=dict)  # the run's processes: pid -> rank ("" = launcher)
    gpus: Mapping[str, GpuRef] = field(default_factory=dict)  # rank -> its GPU, where it could be worked out


# --- rank -> device -> GPU ------------------------------------------------------------------------------------------


def rank_parts(rank: str) -> dict[str, int]:
    """ "DP1 TP3 EP3" -> {"DP": 1, "TP": 3, "EP": 3}."""
    return {name: int(number) for name, number in _RANK_PART.findall(rank)}


def _int_flag(flags: Mapping[str, str], *names: str, default: int) -> int:
    for name in names:
        value = flags.get(name, "")
        if value.strip().lstrip("-").isdigit():
            return int(value)
    return default


def device_of_rank(rank: str, flags: Mapping[str, str]) -> int | None:
    """The local device number SGLang gives a scheduler rank (0.5.23's `compute_local_gpu_id` and the data
    parallel controller): base GPU id + DP replica offset + (pp rank % pp per node) x tp per node
    + (tp rank % tp per node) x GPU id step. None for the launcher (no TP/PP part in its prefix)."""
    parts = rank_parts(rank)
    if "TP" not in parts and "PP" not in parts:
        return None
    # sizes not known (a paste without SGLang's server_args line): at least as many ranks as the rank says
    tp = max(_int_flag(flags, "--tp-size", "--tensor-parallel-size", default=parts.get("TP", 0) + 1), 1)
    pp = max(_int_flag(flags, "--pp-size", "--pipeline-parallel-size", default=parts.get("PP", 0) + 1), 1)
    dp = max(_int_flag(flags, "--dp-size", "--data-parallel-size", default=1), 1)
    nnodes = max(_int_flag(flags, "--nnodes", default=1), 1)
    base = _int_flag(flags, "--base-gpu-id", default=0)
    step = max(_int_flag(flags, "--gpu-id-step", default=1), 1)
    pp_per_node = max(pp // nnodes, 1)
    tp_per_node = max(tp // max(nnodes // pp, 1), 1)
    device = base + (parts.get("PP", 0) % pp_per_node) * tp_per_node + (parts.get("TP", 0) % tp_per_node) * step
    dp_attention = "--enable-dp-attention" in flags and flags["--enable-dp-attention"].lower() not in ("false", "0")
    if dp > 1 and not dp_attention and "DP" in parts:  # a replica per DP rank, each on its own GPUs
        device += parts["DP"] * tp * pp * step
    return device


def visible_devices(environment: Iterable[str]) -> str | None:
    """CUDA_VISIBLE_DEVICES from `NAME=VALUE` entries (systemd's Environment=, an environment file); the last wins."""
    found = None
    for entry in environment:
        name, sep, value = entry.partition("=")
        if sep and name.strip() == "CUDA_VISIBLE_DEVICES":
            found = value.strip().strip("'\"")
    return found


def gpu_of_device(device: int, visible: str | None, gpus: GpuMap) -> GpuRef:
    """The host GPU behind a process's CUDA device number: CUDA_VISIBLE_DEVICES (indexes or UUIDs) picks it."""
    steps = [f"device {device}"]
    index: int | None = device
    uuid = ""
    if visible is not None:
        entries = [e.strip() for e in visible.split(",")]
        if visible.strip() == "" or device >= len(entries) or not entries[device]:
            return GpuRef(device=device, how=f"device {device} is not in CUDA_VISIBLE_DEVICES={visible!r}")
        chosen = entries[device]
        steps.append(f"CUDA_VISIBLE_DEVICES={visible} -> {chosen}")
        if chosen.isdigit():
            index = int(chosen)
        else:
            info = gpus.by_uuid(chosen)
            index = info.index if info is not None else None
            uuid = chosen
    info = gpus.by_index(index) if index is not None else None
    if info is None:
        return GpuRef(index=index, uuid=uuid, device=device, how=" -> ".join(steps))
    steps.append(f"GPU {info.index} at {info.bus_id}")
    return GpuRef(info.index, info.bus_id, info.uuid or uuid, device, " -> ".join(steps))


def unit_gpus(ranks: Iterable[str], flags: Mapping[str, str], visible: str | None, gpus: GpuMap) -> dict[str, GpuRef]:
    """rank -> GPU for every scheduler rank named (the launcher has none)."""
    out: dict[str, GpuRef] = {}
    for rank in ranks:
        device = device_of_rank(rank, flags)
        if device is not None:
            ref = gpu_of_device(device, visible, gpus)
            out[rank] = GpuRef(ref.index, ref.bus_id, ref.uuid, ref.device, f"{rank} -> {ref.how}")
    return out


# --- what the engine publishes -> the facts of a crash -----------------------------------------------------------


def processes_of_run(run: RunView) -> dict[int, str]:
    """pid -> rank of the processes a run's lines came from, as its tracebacks and markers recorded them."""
    out: dict[int, str] = {}
    seen = [(m.pid, m.rank) for m in run.markers] + [(tb.pid, tb.rank) for tb in run.tracebacks]
    for pid, rank in seen:
        if pid and (pid not in out or (rank and not out[pid])):
            out[pid] = rank
    return out


def crash_of_run(
    unit: str, run: RunView, kind: str, flags: Mapping[str, str], visible: str | None, gpus: GpuMap
) -> CrashFacts | None:
    """The facts of a crashed run (as the engine published it): its first error line (the earliest fatal
    traceback or critical line), that error's rank and exception, its processes and their GPUs."""
    firsts: list[tuple[float, str, str]] = [
        (tb.timestamp, tb.rank, tb.final.line or tb.final.type) for tb in run.tracebacks
    ]
    firsts += [(hit.line.timestamp, split_prefix(hit.line.text)[1], hit.match.line) for hit in run.line_hits]
    firsts = [f for f in firsts if f[0]]
    if not firsts:
        return None
    at, rank, exception = min(firsts, key=lambda f: f[0])
    pids = processes_of_run(run)
    ranks = set(pids.values()) | {rank}
    return CrashFacts(
        unit, at, rank, exception, kind, pids, unit_gpus(sorted(r for r in ranks if r), flags, visible, gpus)
    )


def attribute(
    event: GpuEvent, units: Mapping[str, tuple[Mapping[int, str], Mapping[str, GpuRef]]]
) -> list[tuple[str, str]]:
    """(unit, rank) pairs an event belongs to, by its pid first, then by its GPU; [] when none (another
    process, another GPU, or nothing to join on). `units`: unit -> (pid -> rank, rank -> GPU)."""
    if event.pid:
        for unit, (pids, _) in units.items():
            if event.pid in pids:
                return [(unit, pids[event.pid])]
    bus = normalize_bus_id(event.bus_id) if event.bus_id else ""
    if not bus:
        return []
    return [(unit, rank) for unit, (_, ranks) in units.items() for rank, ref in ranks.items() if ref.bus_id == bus]


def xid_labels(
    event: GpuEvent, gpus: GpuMap, units: Mapping[str, tuple[Mapping[int, str], Mapping[str, GpuRef]]]
) -> list[tuple[str, str, str]]:
    """(gpu, xid, unit) label values under which an Xid is counted (crashdoc_gpu_xid_total): the GPU's index on
    the host (its bus id when the host's map does not list it), the Xid, and each unit it belongs to ("" for
    none: a GPU no watched unit uses). Bounded: GPUs of the host x Xids x watched units."""
    if event.kind != "xid" or event.code is None:
        return []
    info = gpus.by_bus(event.bus_id) if event.bus_id else None
    gpu = str(info.index) if info is not None else (event.bus_id or "unknown")
    owners = sorted({unit for unit, _ in attribute(event, units)}) or [""]
    return [(gpu, str(event.code), unit) for unit in owners]
