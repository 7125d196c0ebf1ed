"""Concrete actions for runtime failures whose message names no flag, computed from the run's own numbers.

A CUDA OOM says how much was asked for and how much was free; SGLang says, per rank, how much memory was
free before the weights ("Load weight begin. avail mem="), after them, after the KV pool ("Memory pool end.")
and before graph capture. From these the value of `--mem-fraction-static` that leaves room follows, with its
arithmetic. SGLang's KV budget (srt/mem_cache/kv_cache_configurator.py, `_profile_available_bytes`) is the
memory free after the weights minus `pre_model_load_memory * (1 - mem_fraction_static)`, so every 0.01 of the
fraction moves 1 % of the memory free before the weights between the KV pool and everything else
(workspaces, activations, CUDA graphs). SGLang's "GB" are GiB (`/ (1 << 30)`), as are PyTorch's.

`refine` is a `diagnosis.report.FixRefiner`: pure, fed with the run's markers, line hits and flags.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from crashdoc.diagnosis.report import UnitContext
from crashdoc.diagnosis.rootcause import Finding
from crashdoc.diagnosis.run import Run
from crashdoc.events import Fix, FlagChange, Frame, Marker, Traceback
from crashdoc.remedy.pins import LATEST, PINS

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
_AVAIL = re.compile(r"avail mem=([0-9.]+) GB")
_WEIGHTS = re.compile(r"mem usage=([0-9.]+) GB")
_KV = re.compile(r"#tokens: (\d+), (?:K size: ([0-9.]+) GB, V size: ([0-9.]+) GB|KV size: ([0-9.]+) GB)")
_TP_RANK = re.compile(r"\bTP(\d+)\b")

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
    avail = _AVAIL.search(m.text)
    value = float(avail.group(1)) if avail else None
    if m.kind == "loading" and mem.before_weights is None:
        mem.before_weights = value
    elif m.kind == "weights-loaded" and mem.after_weights is None:
        mem.after_weights = value
        used = _WEIGHTS.search(m.text)
        mem.weights = float(used.group(1)) if used else None
    elif m.kind == "kv-cache" and mem.kv_tokens is None:
        kv = _KV.search(m.text)
        if kv:
            mem.kv_tokens = int(kv.group(1))
            mem.kv_size = float(kv.group(4)) if kv.group(4) else float(kv.group(2)) + float(kv.group(3))
    elif m.kind == "pool-end" and mem.after_pool is None:
        mem.after_pool = value
    elif m.kind == "graph-begin" and mem.before_graphs is None and "Capture" in m.text:
        mem.before_graphs = value


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "", "None") else None
    except ValueError:
        return None


def _int(value: str | None) -> int | None:
    f = _float(value)
    return int(f) if f is not None else None


# --- the actions -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Action:
    summary: str | None  # None: the signature's own summary stands, the action adds changes and reasons
    changes: list[FlagChange]
    why: list[str]
    warnings: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Inputs:
    """What an action is computed from: the failure and the run it happened in."""

    finding: Finding
    flags: Mapping[str, str]
    run: Run | None

    @property
    def traceback(self) -> Traceback | None:
        return self.finding.traceback

    @property
    def markers(self) -> list[Marker]:
        return list(self.run.markers) if self.run is not None else []

    @property
    def ranks(self) -> int:
        """The number of TP ranks the log shows (0 when it shows none)."""
        seen: set[str] = set()
        for m in self.markers:
            seen.update(_TP_RANK.findall(m.rank))
        if self.run is not None:
            for tb in self.run.tracebacks:
                seen.update(_TP_RANK.findall(tb.rank))
        return len(seen)

    def memory(self) -> RankMemory:
        tb = self.traceback
        return rank_memory(self.markers, tb.rank if tb else "", tb.pid if tb else 0)

    def tp_size(self) -> tuple[int, str]:
        tp = _int(self.flags.get("--tp-size"))
        if tp:
            return tp, f"--tp-size {tp}"
        ranks = self.ranks
        if ranks:
            return ranks, f"{ranks} TP rank{'s' if ranks > 1 else ''} in the log"
        return 1, "no --tp-size known: 1 assumed"


def memory_fraction_action(inputs: Inputs, oom: Oom, phase: str, *, pool: bool = False) -> Action | None:
    """Lower --mem-fraction-static by what was missing plus a margin.

    After the KV pool, the request that failed is followed by others of its kind (more workspaces, the CUDA
    graphs of every batch size), so room for just the missing bytes would fail a step later: the margin is the
    request once more. When the KV pool itself failed (`pool`), the pool shrinks by what was missing and the
    margin is the minimum step, 0.01; the rest of SGLang's reserve is untouched.
    """
    mem = inputs.memory()
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
    current = _float(inputs.flags.get("--mem-fraction-static"))
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
    current = _int(inputs.flags.get(flag)) or _int(inputs.flags.get("--cuda-graph-max-bs"))
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


# --- NCCL / gloo ------------------------------------------------------------------------------------

_WATCHDOG = re.compile(
    r"Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
    r"OpType=(?P<op>\w+)[^)]*?Timeout\(ms\)=(?P<ms>\d+)\)"
)
_ENQUEUED = re.compile(
    r"Rank (?P<rank>\d+)\].*?(?:Timeout at NCCL work|detected by watchdog at work): (?P<seq>\d+), "
    r"last enqueued NCCL work: (?P<enq>-?\d+), "
    r"last completed NCCL work: (?P<done>-?\d+)"
)
_GLOO = re.compile(r"\[Rank (?P<rank>\d+)\].*?(?:Gloo|gloo).*?[Tt]imed out")


def collective_timeout_action(inputs: Inputs) -> Action | None:
    """Which rank stalled: the one that never enqueued the collective the others waited on, or the lowest
    SeqNum among the watchdogs' lines; ranks that never reported are suspects too."""
    run = inputs.run
    if run is None:
        return None
    texts = [hit.line.text for hit in run.line_hits]
    texts += [tb.text for tb in run.tracebacks]
    texts += [m.text for m in run.markers if m.kind == "nccl-work"]
    seen: dict[int, tuple[int, str, int]] = {}
    enqueued: dict[int, int] = {}
    for text in texts:
        for m in _WATCHDOG.finditer(text):
            seen.setdefault(int(m["rank"]), (int(m["seq"]), m["op"], int(m["ms"])))
        for m in _ENQUEUED.finditer(text):
            enqueued.setdefault(int(m["rank"]), int(m["enq"]))
    if not seen:
        return None
    why: list[str] = []
    ranks = sorted(seen)
    seqs = {r: s[0] for r, s in seen.items()}
    low = min(seqs.values())
    _, op, ms = seen[ranks[0]]
    why.append(
        f"The watchdog of rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} gave up on "
        f"{op} after {ms / 1000:g} s."
    )
    stalled: list[int] = []
    if enqueued:
        behind = min(enqueued.values())
        if behind < max(enqueued.values()):
            stalled = sorted(r for r, e in enqueued.items() if e == behind)
            why.append(
                f"Rank {', '.join(map(str, stalled))} last enqueued NCCL work {behind}, the others "
                f"{max(enqueued.values())}: it stopped issuing collectives first."
            )
    if not stalled and len(set(seqs.values())) > 1:
        stalled = sorted(r for r, s in seqs.items() if s == low)
        why.append(f"Rank {', '.join(map(str, stalled))} timed out on an earlier collective (SeqNum={low}).")
    world = _int(inputs.flags.get("--tp-size")) or 0
    silent = [r for r in range(world) if r not in seen] if world else []
    if not stalled and silent:
        stalled = silent
        why.append(
            f"Rank {', '.join(map(str, silent))} of {world} never reported a timeout: it was not in the "
            "collective at all (dead, hung, or on another node)."
        )
    why.append(
        "Network checks: rerun with NCCL_DEBUG=INFO (which transport and interface each rank uses), pin the "
        "interface with NCCL_SOCKET_IFNAME=<iface> on multi-homed hosts, check IB links (`ibstat`, "
        "`ibv_devinfo`) and `dmesg -T | grep -i xid` on the stalled rank's node."
    )
    first = f"rank {', '.join(map(str, stalled))}" if stalled else "the rank that stalled (not in this log)"
    changes: list[FlagChange] = []
    summary = f"look at {first} first: its process or link stopped before the {op} the others waited on"
    if run.ready_at is None:
        seconds = max(ms // 1000 * 2, 600)
        changes.append(FlagChange("set", "--dist-timeout", str(seconds)))
        summary += f"; if it was only slow to load, give start-up longer with `--dist-timeout {seconds}`"
        why.append(f"The run never got ready, so a slow load is possible: twice the {ms / 1000:g} s is {seconds} s.")
    return Action(summary=summary, changes=changes, why=why)


def gloo_timeout_action(inputs: Inputs, captures: Mapping[str, str]) -> Action:
    tb = inputs.traceback
    rank = (tb.rank if tb else "") or "this rank"
    ms = _int(captures.get("ms")) or 0
    op = captures.get("op", "recv")
    why = [
        f"{rank} waited {ms / 1000:g} s in a gloo {op} (CPU-side control traffic between ranks): the peer never "
        f"{'sent' if op == 'recv' else 'received'}.",
        "Look at the other ranks' and nodes' logs for the one that stopped first (its own traceback, an OOM "
        "kill, a node reboot).",
        "Network checks: GLOO_SOCKET_IFNAME=<iface> (and NCCL_SOCKET_IFNAME) on multi-homed hosts, a firewall "
        "between the nodes' --dist-init-addr ports, NCCL_DEBUG=INFO for the GPU side.",
    ]
    changes: list[FlagChange] = []
    summary = f"{rank} timed out waiting for a peer in a gloo {op}; find the rank that stopped first"
    run = inputs.run
    if run is not None and run.ready_at is None and ms:
        seconds = max(ms // 1000 * 2, 600)
        changes.append(FlagChange("set", "--dist-timeout", str(seconds)))
        summary += f"; if start-up was only slow, `--dist-timeout {seconds}`"
        why.append(f"The run never got ready, so a slow load is possible: twice the {ms / 1000:g} s is {seconds} s.")
    return Action(summary=summary, changes=changes, why=why)


# --- kernels -----------------------------------------------------------------------------------------


def kernel_fault_action(inputs: Inputs, what: str) -> Action:
    tb = inputs.traceback
    frames = [f"{f.file}:{f.function}" for exc in (tb.chain if tb else ()) for f in exc.frames]
    in_graph = any(re.search(r"cuda_graph|graph_runner|replay", f) for f in frames)
    flag = "--cuda-graph-backend-decode" if "--disable-cuda-graph" not in inputs.flags else "--disable-cuda-graph"
    where = "during CUDA-graph replay" if in_graph else "in a kernel"
    why = [
        f"The {what} surfaced {where}; CUDA reports it asynchronously, so the frame shown may not be the kernel "
        "that failed.",
        f"To confirm whether CUDA graphs are involved, run once with `{flag} disabled` (slower decode): "
        "if the error goes away, the graph path is at fault.",
        "To find the kernel, run once with CUDA_LAUNCH_BLOCKING=1 (much slower): the traceback then stops at "
        "the launch that failed.",
        "Report it upstream (https://github.com/sgl-project/sglang/issues) with: the full traceback, the "
        "server_args line, `python -m sglang.check_env`, the request that triggers it if known, and "
        "`dmesg -T | grep -i xid` from the node.",
    ]
    changes = [FlagChange("set", "--cuda-graph-backend-decode", "disabled")] if in_graph else []
    summary = (
        f"an SGLang or kernel bug ({what} {where}); to confirm and get the unit up, disable decode CUDA graphs "
        "(`--cuda-graph-backend-decode disabled`), then rerun with CUDA_LAUNCH_BLOCKING=1 and report it upstream"
        if in_graph
        else f"an SGLang or kernel bug ({what}); rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel, try "
        "`--cuda-graph-backend-decode disabled` to rule out graphs, and report it upstream"
    )
    return Action(summary=summary, changes=changes, why=why)


# --- environment -------------------------------------------------------------------------------------

_PIP_LINE = re.compile(r"""pip install ((?:--?[\w-]+ )*["']?[\w.\[\],<>=!~-]+["']?(?: --[\w-]+)*)""")
_MODULE_PACKAGES = {  # module -> the package SGLang's requirements or messages name for it
    "flashinfer": "flashinfer_python",
    "sgl_kernel": "sglang-kernel",
    "deep_gemm": "sgl-deep-gemm",
    "mooncake": "mooncake-transfer-engine",
    "flash_mla": "sgl-flash-mla",
    "deep_ep": "sgl-deep-ep",
    "xgrammar": "xgrammar",
    "triton": "triton",
    "yaml": "pyyaml",
    "zmq": "pyzmq",
    "transformers": "transformers",
    "torch": "torch",
}


def missing_package_action(inputs: Inputs, captures: Mapping[str, str]) -> Action | None:
    """The `pip install` line: the package SGLang's message names, else the package known to provide the
    missing module (with the version SGLang pins), else SGLang's instructions URL."""
    message = inputs.finding.message
    m = _PIP_LINE.search(message)
    name = captures.get("module") or captures.get("package") or ""
    top = name.split(".")[0]
    if m:
        package = m.group(1).strip().rstrip(".`'\"")
        named = "the package SGLang's message names"
    elif top.startswith("sglang"):
        return Action(
            summary=f"the SGLang install is incomplete (`{name}` is missing): reinstall SGLang for the unit",
            changes=[],
            why=[f"`{name}` is part of SGLang itself, so the installed SGLang is damaged or mixed with a source tree."],
        )
    elif top.lower() in _MODULE_PACKAGES:
        package = _MODULE_PACKAGES[top.lower()]
        named = f"the package that provides `{top}`"
    elif captures.get("url"):
        return Action(
            summary=f"install {name} into the unit's environment as SGLang says ({captures['url']})",
            changes=[],
            why=[f"SGLang names no pip package for {name}; its message points at {captures['url']}."],
        )
    elif top:
        package = top
        named = f"the package named like the module `{top}` (check its real name on PyPI)"
    else:
        return None
    base = re.split(r"[\[<>=!~ ]", package.strip("'\""), maxsplit=1)[0]
    pin = _pin(base)
    line = f"pip install {package}" if not pin or "=" in package else f"pip install '{base}=={pin}'"
    why = [
        f"Install {named} into the interpreter the unit runs (the python of its ExecStart, or the container "
        f"image): `{line}`."
    ]
    if pin:
        why.append(f"SGLang {LATEST} pins {base}=={pin} (its wheel's Requires-Dist).")
    return Action(summary=f"install the missing package: `{line}` in the unit's environment", changes=[], why=why)


def _pin(package: str) -> str | None:
    found = pinned(package)
    return dict(found).get(LATEST) if found else None


def pinned(package: str) -> list[tuple[str, str]]:
    """(SGLang release, pinned version) for every 0.5.x release that pins `package`."""
    names = {package, package.replace("-", "_"), package.replace("_", "-")}
    if package.replace("_", "-") in ("sgl-kernel", "sglang-kernel"):
        names |= {"sgl-kernel", "sglang-kernel"}
    out = []
    for release, pins in PINS.items():
        for name in names:
            if name in pins:
                out.append((release, pins[name]))
                break
    return out


_INSTALLED = re.compile(
    r"\b(?P<pkg>transformers|torch|flashinfer(?:[_-]python)?|sgl[_-]kernel|sglang[_-]kernel)\b"
    r"[ =]+(?:version )?(?P<ver>\d+\.\d+[\w.+-]*)"
)


_TORCH_SYMBOL = re.compile(r"_ZN?K?(?:5torch|3c10|2at)")  # mangled C++ names in PyTorch's namespaces


def version_action(inputs: Inputs, captures: Mapping[str, str]) -> Action | None:
    """Which package, which version SGLang pins, and which releases pin what is installed."""
    package = captures.get("pkg") or captures.get("package") or ""
    installed = captures.get("installed", "")
    text = inputs.finding.message
    if not package:
        m = _INSTALLED.search(text)
        if m:
            package, installed = m["pkg"], installed or m["ver"]
        elif "transformers" in text or any("transformers" in f.file for f in _frames(inputs)):
            package = "transformers"
        else:
            return None
    package = {"flashinfer": "flashinfer_python", "flashinfer-python": "flashinfer_python"}.get(package, package)
    if package.replace("_", "-") in ("sgl-kernel", "sglang-kernel"):
        package = "sglang-kernel"
    releases = pinned(package)
    if not releases:
        return None
    latest = dict(releases).get(LATEST) or releases[-1][1]
    name = package
    why = [f"SGLang {LATEST} pins {name}=={latest} (its wheel's Requires-Dist)."]
    if installed:
        same = [r for r, v in releases if v == installed]
        if same:
            why.append(f"{name} {installed} is what SGLang {_span(same)} pin: keep it only with that SGLang.")
        else:
            why.append(f"No SGLang 0.5.x release pins {name} {installed}.")
    torch = PINS.get(LATEST, {}).get("torch")
    symbol = captures.get("symbol", "")
    together = f" 'torch=={torch}'" if _TORCH_SYMBOL.match(symbol) and torch and name != "torch" else ""
    if symbol.startswith("cu"):
        why.append(
            f"`{symbol}` is a CUDA driver/runtime function: the node's driver or CUDA libraries are older than the "
            f"ones {name} was built for (`nvidia-smi` shows the driver's CUDA version)."
        )
    if together:
        why.append(
            f"The missing symbol is PyTorch's: {name} and torch must come from one release ({LATEST}: torch=={torch})."
        )
    why.append(
        f"To match SGLang {LATEST}: `pip install '{name}=={latest}'{together}` in the unit's environment "
        f"(`pip show sglang` says which release it runs; upgrade SGLang and {name} together)."
    )
    return Action(summary=None, changes=[], why=why)


def _span(releases: list[str]) -> str:
    return releases[0] if len(releases) == 1 else f"{releases[0]}-{releases[-1]}"


def _frames(inputs: Inputs) -> list[Frame]:
    tb = inputs.traceback
    return [f for exc in (tb.chain if tb else ()) for f in exc.frames]


# --- dispatch ----------------------------------------------------------------------------------------

_MEMORY_PHASES = {
    "torch-oom-after-kv-pool": "the attention workspace",
    "torch-oom-kv-pool-alloc": "the KV pool allocation",
    "cuda-error-out-of-memory": "CUDA's own allocations",
    "torch-oom-generic": "the allocation",
}
_GRAPH = ("torch-oom-cuda-graph-capture", "cuda-graph-capture-oom", "cuda-graph-eagle-draft-capture-failed")
_WEIGHT_LOAD = {"torch-oom-weight-load": False, "torch-oom-transformers-fallback": True}
_COLLECTIVE = ("nccl-collective-timeout", "nccl-watchdog-terminated", "nccl-dist-backend-abort")
_KERNEL_FAULTS = {
    "cuda-illegal-memory-access": "illegal memory access",
    "cuda-device-side-assert": "device-side assert",
}
_MISSING = ("optional-package-missing", "python-module-missing", "hicache-storage-backend-missing")
_VERSIONS = (
    "native-extension-abi-mismatch",
    "transformers-import-name-missing",
    "transformers-api-incompatible",
    "transformers-unknown-model-type",
    "package-version-too-old",
)


def compute(inputs: Inputs, signature: str | None, captures: Mapping[str, str]) -> Action | None:
    """The action for this failure, or None to keep the signature's own fix."""
    if signature is None:
        return None
    message = inputs.finding.message
    if signature in _GRAPH or signature in _MEMORY_PHASES or signature in _WEIGHT_LOAD:
        oom = parse_oom(message)
        if oom is None:
            return None
        if signature in _GRAPH:
            return graph_capture_action(inputs, oom)
        if signature in _WEIGHT_LOAD:
            return weight_load_action(inputs, oom, _WEIGHT_LOAD[signature])
        if signature == "torch-oom-generic" and inputs.memory().after_pool is None:
            return None  # no KV pool yet: nothing says the fraction is what to move
        return memory_fraction_action(
            inputs, oom, _MEMORY_PHASES[signature], pool=signature == "torch-oom-kv-pool-alloc"
        )
    if signature == "nccl-watchdog-terminated":
        reason = captures.get("reason", "")
        for text, what in (
            ("illegal memory access", "illegal memory access"),
            ("device-side assert", "device-side assert"),
        ):
            if text in reason:
                return kernel_fault_action(inputs, what)
    if signature in _COLLECTIVE:
        return collective_timeout_action(inputs)
    if signature == "gloo-collective-timeout":
        return gloo_timeout_action(inputs, captures)
    if signature in _KERNEL_FAULTS:
        return kernel_fault_action(inputs, _KERNEL_FAULTS[signature])
    if signature in _MISSING:
        return missing_package_action(inputs, captures)
    if signature in _VERSIONS:
        return version_action(inputs, captures)
    return None


def refine(finding: Finding, ctx: UnitContext, fix: Fix) -> None:
    """`diagnosis.report.FixRefiner`: replace the signature's template fix with the computed one."""
    inputs = Inputs(finding, ctx.facts.flags, ctx.invocation)
    captures = finding.match.captures if finding.match else {}
    action = compute(inputs, finding.signature_id, captures)
    if action is None:
        return
    apply_action(fix, action)


def apply_action(fix: Fix, action: Action) -> None:
    replaced = {c.new_flag or c.flag for c in fix.changes} | {c.flag for c in action.changes}
    if action.summary is not None:
        fix.summary = action.summary
    fix.changes = list(action.changes)
    fix.why = list(action.why)
    # the template's "depends on something not in the log" warnings are answered by the computed values
    fix.warnings = [w for w in fix.warnings if not any(w.startswith(f"the value for {f} ") for f in replaced)]
    fix.warnings.extend(action.warnings)


Refiner = Callable[[Finding, UnitContext, Fix], None]
