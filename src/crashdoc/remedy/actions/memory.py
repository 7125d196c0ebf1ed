"""CUDA/HIP out-of-memory: which flag, to what value, and why, from the run's own memory lines.

A CUDA OOM says how much was asked for and how much was free; SGLang says, per rank, how much memory was
free before the weights ("Load weight begin. avail mem="), after them, after the KV pool ("Memory pool end.")
and before graph capture. From these the value of `--mem-fraction-static` that leaves room follows, with its
arithmetic. SGLang's KV budget (srt/mem_cache/kv_cache_configurator.py, `_profile_available_bytes`) is the
memory free after the weights minus `pre_model_load_memory * (1 - mem_fraction_static)`, so every 0.01 of the
fraction moves 1 % of the memory free before the weights between the KV pool and everything else
(workspaces, activations, CUDA graphs). SGLang's "GB" are GiB (`/ (1 << 30)`), as are PyTorch's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from crashdoc.assembly.memory_lines import USAGE, avail_mem, kv_allocated
from crashdoc.events import FlagChange, Marker
from crashdoc.remedy.actions.common import Action, Inputs, as_float, as_int

_UNITS = {"B": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "TiB": 2.0**10}
_SIZE = r"([0-9]+(?:\.[0-9]+)?) ([KMGT]iB|B)"
# PyTorch >= 2.1: "Tried to allocate 384.00 MiB. GPU 0 has a total capacity of 23.56 GiB of which 338.75 MiB
# is free. ... Of the allocated memory 22.33 GiB is allocated by PyTorch"
_OOM_NEW = re.compile(
    rf"Tried to allocate {_SIZE}\. GPU (\d+) has a total capacity of {_SIZE} of which {_SIZE} is free\."
    rf"(?:.*?Of the allocated memory {_SIZE} is allocated by PyTorch)?",
    re.S,
)
# PyTorch < 2.1: "Tried to allocate 20.00 MiB (GPU 0; 23.69 GiB total capacity; 22.51 GiB already allocated;
# 8.81 MiB free; ..."
_OOM_OLD = re.compile(
    rf"Tried to allocate {_SIZE} \(GPU (\d+); {_SIZE} total capacity; {_SIZE} already allocated; {_SIZE} free"
)
_OTHER_PROCESS = re.compile(r"Process (\d+) has ([0-9.]+ [KMGT]iB) memory in use")

# SGLang's decode-graph default max batch size by GPU memory (srt/arg_groups/memory_hook.py,
# handle_gpu_memory_settings): (below MiB, max_bs when tp < 4, max_bs when tp >= 4)
_GRAPH_MAX_BS = ((20 * 1024, 8, 8), (35 * 1024, 48, 160), (60 * 1024, 32, 160), (160 * 1024, 256, 512))
_GRAPH_MB_PER_BS = 2  # memory_hook.reserve_for_graph_mb: 2 MB per captured decode batch size
MIN_STEP = 0.01


def _gib(number: str, unit: str) -> float:
    return float(number) * _UNITS[unit]


def _num(value: float) -> str:
    """0.89 rather than 0.890: as a person writes the flag."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _fmt(gib: float) -> str:
    return f"{gib * 1024:.0f} MiB" if gib < 1 else f"{gib:.2f} GiB"


@dataclass(frozen=True, slots=True)
class Oom:
    """A CUDA/HIP out-of-memory error as PyTorch words it (GiB)."""

    requested: float
    gpu: int
    total: float
    free: float
    allocated: float | None  # by PyTorch in this process

    @property
    def short(self) -> float:
        return max(self.requested - self.free, 0.0)


def parse_oom(message: str) -> Oom | None:
    m = _OOM_NEW.search(message)
    if m:
        g = m.groups()
        allocated = _gib(g[7], g[8]) if g[7] else None
        return Oom(_gib(g[0], g[1]), int(g[2]), _gib(g[3], g[4]), _gib(g[5], g[6]), allocated)
    m = _OOM_OLD.search(message)
    if m:
        g = m.groups()
        return Oom(_gib(g[0], g[1]), int(g[2]), _gib(g[3], g[4]), _gib(g[7], g[8]), _gib(g[5], g[6]))
    return None


@dataclass(slots=True)
class RankMemory:
    """What one rank logged about its GPU memory before it failed (GiB; None when not logged)."""

    rank: str = ""
    before_weights: float | None = None  # "Load weight begin. avail mem=": SGLang's pre_model_load_memory
    after_weights: float | None = None
    weights: float | None = None  # "Load weight end. ... mem usage="
    kv_tokens: int | None = None
    kv_size: float | None = None
    after_pool: float | None = None  # "Memory pool end. avail mem="
    before_graphs: float | None = None
    sources: list[str] = field(default_factory=list)  # the ranks whose lines were used


def rank_memory(markers: Iterable[Marker], rank: str = "", pid: int = 0) -> RankMemory:
    """The memory lines of the failing rank (by rank prefix, else PID); a value the rank did not log is taken
    from the first rank that did (the ranks of one unit see the same GPUs' sizes)."""
    mine = RankMemory(rank=rank)
    others = RankMemory()
    for m in markers:
        own = (m.rank == rank) if (rank and m.rank) else (bool(pid) and m.pid == pid)
        target = mine if own else others
        _absorb(target, m)
        if not own and m.rank and m.rank not in others.sources and m.kind in _MEMORY_KINDS:
            others.sources.append(m.rank)
    for name in (
        "before_weights",
        "after_weights",
        "weights",
        "kv_tokens",
        "kv_size",
        "after_pool",
        "before_graphs",
    ):
        if getattr(mine, name) is None and getattr(others, name) is not None:
            setattr(mine, name, getattr(others, name))
            mine.sources.extend(s for s in others.sources[:1] if s not in mine.sources)
    return mine


_MEMORY_KINDS = ("loading", "weights-loaded", "kv-cache", "pool-end", "graph-begin")


def _absorb(mem: RankMemory, m: Marker) -> None:
    value = avail_mem(m.text)
    if m.kind == "loading" and mem.before_weights is None:
        mem.before_weights = value
    elif m.kind == "weights-loaded" and mem.after_weights is None:
        mem.after_weights = value
        used = USAGE.search(m.text)
        mem.weights = float(used["used"]) if used else None
    elif m.kind == "kv-cache" and mem.kv_tokens is None:
        kv = kv_allocated(m.text)
        if kv:
            mem.kv_tokens, mem.kv_size = kv
    elif m.kind == "pool-end" and mem.after_pool is None:
        mem.after_pool = value
    elif m.kind == "graph-begin" and mem.before_graphs is None and "Capture" in m.text:
        mem.before_graphs = value


def memory_of(inputs: Inputs) -> RankMemory:
    """The failing rank's memory lines (by rank prefix, else PID)."""
    tb = inputs.traceback
    return rank_memory(inputs.markers, tb.rank if tb else "", tb.pid if tb else 0)


def memory_fraction_action(inputs: Inputs, oom: Oom, phase: str, *, pool: bool = False) -> Action | None:
    """Lower --mem-fraction-static by what was missing plus a margin.

    After the KV pool, the request that failed is followed by others of its kind (more workspaces, the CUDA
    graphs of every batch size), so room for just the missing bytes would fail a step later: the margin is the
    request once more. When the KV pool itself failed (`pool`), the pool shrinks by what was missing and the
    margin is the minimum step, 0.01; the rest of SGLang's reserve is untouched.
    """
    mem = memory_of(inputs)
    why: list[str] = []
    rank = (inputs.traceback.rank if inputs.traceback else "") or f"GPU {oom.gpu}"
    why.append(
        f"{rank} asked for {_fmt(oom.requested)} with {_fmt(oom.free)} free on a {_fmt(oom.total)} GPU: "
        f"{_fmt(oom.short)} short."
    )
    if mem.after_pool is not None:
        why.append(f'After the KV pool, {mem.after_pool:.2f} GB were left outside it ("Memory pool end").')
    if mem.before_graphs is not None:
        why.append(f"Graph capture began with {mem.before_graphs:.2f} GB free.")
    margin = 0.0 if pool else oom.requested
    need = oom.short + margin
    base = mem.before_weights
    base_text = f'{base:.2f} GB free before the weights ("Load weight begin")' if base else ""
    if base is None:
        base = oom.total
        base_text = f"the GPU's {_fmt(oom.total)} (the log does not show the memory free before the weights)"
    step = need / base + MIN_STEP if pool else max(need / base, MIN_STEP)
    current = as_float(inputs.flags.get("--mem-fraction-static"))
    estimated = False
    if current is None and mem.after_pool is not None and base:
        current = 1 - mem.after_pool / base
        estimated = True
    if pool:
        why.append(
            f"The pool must shrink by the {_fmt(oom.short)} that were missing, {need / base:.4f} of {base_text}, "
            f"plus {MIN_STEP} as margin: {step:.4f}."
        )
    else:
        why.append(
            f"Room for that request and as much again: {_fmt(oom.short)} + {_fmt(oom.requested)} = {_fmt(need)}, "
            f"which is {need / base:.4f} of {base_text}"
            + (f"; the step is at least {MIN_STEP}" if need / base < MIN_STEP else "")
            + "."
        )
    other = _OTHER_PROCESS.search(inputs.finding.message)
    if other:
        why.append(
            f"Another process ({other.group(1)}) holds {other.group(2)} of this GPU: stopping it, or giving the "
            "units GPUs of their own, is the better fix."
        )
    if current is None:
        return Action(
            summary=f"lower `--mem-fraction-static` by {step:.3f} from its current value ({phase}; "
            "the log does not show the current value)",
            changes=[],
            why=why,
        )
    new = math.floor((current - step) * 1000) / 1000
    if estimated:
        why.append(
            f"The log does not show --mem-fraction-static; SGLang leaves (1 - fraction) x {base:.2f} GB outside "
            f"the static pool, so {mem.after_pool:.2f} GB left means about 1 - {mem.after_pool:.2f}/{base:.2f} = "
            f"{current:.3f}."
        )
    why.append(f"{current:.3f} - {step:.4f} = {current - step:.4f}, rounded down: {_num(new)}.")
    if mem.kv_tokens and mem.kv_size:
        freed = step * base
        lost = min(mem.kv_tokens, round(mem.kv_tokens * freed / mem.kv_size))
        why.append(
            f"The KV pool ({mem.kv_tokens} tokens, {mem.kv_size:.2f} GB) gives up about {freed:.2f} GB, "
            f"~{lost} tokens ({lost / mem.kv_tokens:.0%})."
        )
    warnings = []
    if mem.weights is not None and base and new * base <= mem.weights:
        warnings.append(
            f"At {_num(new)} the static pool ({new * base:.2f} GB) no longer holds the weights ({mem.weights:.2f} GB): "
            "this model needs more GPUs (--tp-size) or a smaller checkpoint."
        )
    shown = f"{current:.3f} (estimated)" if estimated else f"{current:g}"
    return Action(
        summary=f"lower `--mem-fraction-static` from {shown} to {_num(new)} so {phase} fits next to the KV pool",
        changes=[FlagChange("set", "--mem-fraction-static", _num(new))],
        why=why,
        warnings=warnings,
    )


def graph_max_bs_flag(flags: Mapping[str, str]) -> str:
    """SGLang 0.5.23 spells it --cuda-graph-max-bs-decode; older releases --cuda-graph-max-bs (their
    server_args line shows `cuda_graph_max_bs`)."""
    if "--cuda-graph-max-bs" in flags and "--cuda-graph-max-bs-decode" not in flags:
        return "--cuda-graph-max-bs"
    return "--cuda-graph-max-bs-decode"


def default_graph_max_bs(total_gib: float, tp: int) -> int:
    mib = total_gib * 1024
    for below, small, large in _GRAPH_MAX_BS:
        if mib < below:
            return small if tp < 4 else large
    return 512


def graph_capture_action(inputs: Inputs, oom: Oom) -> Action:
    """Halve the largest captured decode batch; if SGLang's own estimate of what that saves (2 MB per batch
    size) does not cover what was missing, lower --mem-fraction-static as well."""
    flag = graph_max_bs_flag(inputs.flags)
    tp, tp_text = inputs.tp_size()
    current = as_int(inputs.flags.get(flag)) or as_int(inputs.flags.get("--cuda-graph-max-bs"))
    why = []
    if current is None:
        current = default_graph_max_bs(oom.total, tp)
        why.append(
            f"{flag} is not set: SGLang's default for a {_fmt(oom.total)} GPU with {tp_text} is {current} "
            "(srt/arg_groups/memory_hook.py)."
        )
    new = max(current // 2, 1)
    saved = (current - new) * _GRAPH_MB_PER_BS / 1024
    why.append(
        f"SGLang budgets {_GRAPH_MB_PER_BS} MB of graph memory per captured batch size: {current} -> {new} saves "
        f"about {(current - new) * _GRAPH_MB_PER_BS} MB; {_fmt(oom.short)} were missing."
    )
    changes = [FlagChange("set", flag, str(new))]
    summary = f"lower `{flag}` from {current} to {new} so the decode CUDA graphs fit next to the KV pool"
    warnings: list[str] = []
    if saved < oom.short + oom.requested:
        also = memory_fraction_action(inputs, oom, "graph capture")
        if also is not None:
            why.extend(also.why)
            warnings.extend(also.warnings)
            if also.changes and also.summary:
                changes.extend(also.changes)
                summary += f", and {also.summary.split(' so ', 1)[0]}"
    return Action(summary=summary, changes=changes, why=why, warnings=warnings)


def weight_load_action(inputs: Inputs, oom: Oom, fallback: bool) -> Action:
    """The weights do not fit: more GPUs (tensor parallelism) or fewer bytes per weight (quantization).
    The rank had `allocated` and asked for `requested` more, so the weights need at least that per rank."""
    tp, tp_text = inputs.tp_size()
    held = oom.allocated if oom.allocated is not None else max(oom.total - oom.free, 0.0)
    need = held + oom.requested
    rank = (inputs.traceback.rank if inputs.traceback else "") or f"GPU {oom.gpu}"
    why = [
        f"{rank} already held {_fmt(held)} and asked for {_fmt(oom.requested)} more while building or loading "
        f"the model: it needs at least {_fmt(need)} on a {_fmt(oom.total)} GPU ({tp_text})."
    ]
    if fallback:
        why.append(
            "Through SGLang's Transformers fallback the model is built unsharded and unquantized on every rank, "
            "so neither --tp-size nor a quantized checkpoint lowers that."
        )
        return Action(
            summary=f"no flag fits it: each rank needs at least {_fmt(need)} through the Transformers fallback, "
            f"more than its {_fmt(oom.total)} GPU; use an SGLang release that implements this architecture natively",
            changes=[],
            why=why,
        )
    budget = 0.9 * oom.total
    factor = need * tp / budget
    new_tp = 1 << max(math.ceil(math.log2(max(factor, 1.0))), 0)
    new_tp = max(new_tp, tp * 2)
    why.append(
        f"In all, at least {_fmt(need)} x {tp} = {_fmt(need * tp)}; to stay under 0.9 of each GPU "
        f"({_fmt(budget)}) with room for the KV cache, --tp-size must be at least {new_tp} "
        "(a lower bound: the load did not finish)."
    )
    why.append("Alternatively a quantized checkpoint (FP8 halves BF16 weights) on the same GPUs.")
    return Action(
        summary=f"shard the weights over more GPUs: `--tp-size {new_tp}` (now {tp}), or serve a quantized "
        "checkpoint; `--mem-fraction-static` does not help while loading",
        changes=[FlagChange("set", "--tp-size", str(new_tp))],
        why=why,
        warnings=[f"--tp-size {new_tp} needs {new_tp} GPUs visible to the unit (CUDA_VISIBLE_DEVICES)."],
    )
