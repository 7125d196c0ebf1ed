"""The kernel's GPU faults as the engine keeps them, and the GPU facts the runtime handed in (working state).

Only the engine changes a `GpuRecord`; what others read of it is `view()` (diagnosis.views.GpuView). What it
holds is bounded: the faults of the last HORIZON seconds (a GPU that is gone, GONE_HORIZON), at most MAX_EVENTS,
and of one storm (thousands of the same Xid a second at a teardown) the first and the latest MAX_REPEATS.

A crash is put before `hardware.decide` when its diagnosis is made (`judge`): the run's first error line, its
processes and ranks, and the GPU of each rank, from the unit's CUDA_VISIBLE_DEVICES and the host's GPUs
(`UnitDevices`, `HostGpus`), or from what the kernel itself said of a rank's process (an Xid naming a pid of the
unit's TP3 names TP3's GPU: the next run's TP3 uses the same one).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from crashdoc.diagnosis.gpus import GpuRef, attribute, crash_of_run, rank_parts, unit_gpus, xid_labels
from crashdoc.diagnosis.hardware import HARDWARE, decide, hardware_diagnosis, is_gone
from crashdoc.diagnosis.run import Run
from crashdoc.diagnosis.views import GpuView, RunView
from crashdoc.events import Diagnosis, GpuEvent, GpuMap, HostGpus, UnitDevices
from crashdoc.sources.kernel_gpu import normalize_bus_id

MAX_EVENTS = 512
MAX_REPEATS = 16  # events kept of one (kind, Xid, GPU, pid): the first ones and the latest
HORIZON = 3600.0  # seconds a fault is kept, for diagnoses made again later (a loop's older runs)
GONE_HORIZON = 86_400.0  # a GPU that fell off the bus stays gone until the node is rebooted
PRUNE_EVERY = 60.0  # seconds of the kernel's clock between two prunes by age
MAX_XID_SERIES = 4096  # (gpu, xid, unit) series counted: GPUs x Xids x units, bounded against a hostile journal
MAX_LEARNED = 64  # ranks per unit whose GPU the kernel named

# unit -> (pid -> rank, rank -> GPU): what a GPU event is joined with (diagnosis.gpus.attribute)
Joins = Mapping[str, tuple[Mapping[int, str], Mapping[str, GpuRef]]]


@dataclass(slots=True)
class GpuRecord:
    host: GpuMap = field(default_factory=GpuMap)  # the host's GPUs (HostGpus)
    visible: dict[str, str | None] = field(default_factory=dict)  # unit -> CUDA_VISIBLE_DEVICES (UnitDevices)
    visible_from: dict[str, str] = field(default_factory=dict)  # unit -> where it was set
    learned: dict[str, dict[str, str]] = field(default_factory=dict)  # unit -> rank -> the bus id the kernel named
    events: list[GpuEvent] = field(default_factory=list)  # in the order read, bounded
    xids: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (gpu, xid, unit) -> Xids counted
    # units a new event joined: their loop's diagnosis is made again (`Engine.judge`); never saved
    dirty: set[str] = field(default_factory=set)
    kept: Counter[tuple[str, int | None, str, int | None]] = field(default_factory=Counter)  # of `events`, by key
    pruned_at: float = 0.0  # the time of the event that last pruned them

    # --- inputs -----------------------------------------------------------------------------------------------

    def on_fact(self, fact: HostGpus | UnitDevices) -> None:
        if isinstance(fact, HostGpus):
            self.host = fact.gpus
            return
        if fact.unit in self.visible and self.visible[fact.unit] != fact.visible_devices:
            self.learned.pop(fact.unit, None)  # the unit was moved to other GPUs: what the kernel said is past
        self.visible[fact.unit] = fact.visible_devices
        self.visible_from[fact.unit] = fact.where

    def add(self, event: GpuEvent, joins: Joins) -> None:
        """One kernel GPU event: counted (an Xid, by GPU, Xid and the unit it belongs to), tied to the units whose
        processes or GPUs it names, and kept for the crashes it may explain."""
        owners = attribute(event, joins)
        if event.kind == "xid" and event.code is not None:
            for labels in xid_labels(event, self.host, joins):
                if labels in self.xids or len(self.xids) < MAX_XID_SERIES:
                    self.xids[labels] += 1
        bus = normalize_bus_id(event.bus_id) if event.bus_id else ""
        for unit, rank in owners:
            self.dirty.add(unit)
            pids = joins[unit][0]
            if event.pid and event.pid in pids and bus and rank_parts(rank):  # the kernel named this rank's GPU
                ranks = self.learned.setdefault(unit, {})
                if rank in ranks or len(ranks) < MAX_LEARNED:
                    ranks[rank] = bus
        self._keep(event)

    def forget_unit(self, unit: str) -> None:
        self.visible.pop(unit, None)
        self.visible_from.pop(unit, None)
        self.learned.pop(unit, None)

    # --- the decision ---------------------------------------------------------------------------------------------

    def judge(self, unit: str, run: RunView, d: Diagnosis) -> Diagnosis:
        """The crash diagnosis `d` of `run` as the kernel's GPU faults leave it: unchanged with none on record,
        with the faults as evidence, or a hardware diagnosis when one on the crash's GPU caused it."""
        if not self.events or d.kind == HARDWARE:
            return d
        crash = crash_of_run(unit, run, d.kind, run.flags, self.visible.get(unit), self.host)
        if crash is None:
            return d
        crash = dataclasses.replace(crash, gpus=self._known(unit, crash.gpus))
        known = self.learned.get(unit, {})
        if known:
            gpus = dict(crash.gpus)
            for rank, bus in known.items():
                if self._named_wins(unit, gpus.get(rank)):
                    info = self.host.by_bus(bus)
                    how = f"{rank}'s GPU, as the kernel named it for an earlier process of {rank}"
                    gpus[rank] = GpuRef(info.index if info else None, bus, info.uuid if info else "", how=how)
            crash = dataclasses.replace(crash, gpus=gpus)
        verdict = decide(crash, self._of_run(run.started_at))
        cause = verdict.cause
        if cause is not None and cause.gpu.index is None and cause.gpu.bus_id:
            info = self.host.by_bus(cause.gpu.bus_id)  # the kernel named the bus: the host's map names the GPU
            if info is not None:
                gpu = dataclasses.replace(cause.gpu, index=info.index, uuid=cause.gpu.uuid or info.uuid)
                verdict = dataclasses.replace(verdict, cause=dataclasses.replace(cause, gpu=gpu))
        return hardware_diagnosis(d, verdict)

    def joins(self, units: Iterable[tuple[str, Iterable[Run], Mapping[str, str]]]) -> dict:
        """What events are joined with: each unit's processes (of `runs`: the ones in progress or just ended)
        and the GPU of each rank its command has (tensor and pipeline ranks) or its processes named."""
        out: dict[str, tuple[dict[int, str], dict[str, GpuRef]]] = {}
        for unit, runs, flags in units:
            pids: dict[int, str] = {}
            for run in runs:
                for pid, rank in ((m.pid, m.rank) for m in run.markers):
                    if pid and (pid not in pids or (rank and not pids[pid])):
                        pids[pid] = rank
                for tb in run.tracebacks:
                    if tb.pid and (tb.pid not in pids or (tb.rank and not pids[tb.pid])):
                        pids[tb.pid] = tb.rank
            ranks = set(pids.values()) | set(command_ranks(flags)) | set(self.learned.get(unit, {}))
            gpus = self._known(unit, unit_gpus(sorted(r for r in ranks if r), flags, self.visible.get(unit), self.host))
            for rank, bus in self.learned.get(unit, {}).items():
                if self._named_wins(unit, gpus.get(rank)):
                    gpus[rank] = GpuRef(bus_id=bus, how=f"{rank}'s GPU, as the kernel named it")
            out[unit] = (pids, gpus)
        return out

    def _of_run(self, started_at: float) -> list[GpuEvent]:
        """The events as a run sees them: a pid named before the run started is another process's (PIDs are
        reused), so such an event is joined by its GPU alone."""
        if not started_at:
            return self.events
        return [
            dataclasses.replace(e, pid=None) if e.pid and e.timestamp and e.timestamp < started_at else e
            for e in self.events
        ]

    def _known(self, unit: str, worked_out: Mapping[str, GpuRef]) -> dict[str, GpuRef]:
        """The GPUs worked out from a unit's command, as far as they are known. Without the unit's
        CUDA_VISIBLE_DEVICES (no D-Bus: `dbus: false`, `diagnose` over journal files) a rank's device is no GPU
        of the host (device 3 is GPU 3 only when nothing narrows the unit's GPUs): another program's Xid on GPU 0
        is not the unit's. Then only the kernel naming a rank's process ties the rank to a GPU."""
        if unit in self.visible:
            return dict(worked_out)
        return {
            rank: GpuRef(
                device=ref.device,
                how=f"{ref.how.split(' -> ')[0]} -> device {ref.device}, CUDA_VISIBLE_DEVICES not known",
            )
            for rank, ref in worked_out.items()
        }

    def _named_wins(self, unit: str, worked_out: GpuRef | None) -> bool:
        """Whether the GPU the kernel named for a rank's process stands over the one worked out from the unit's
        command: when that one has no bus id (always so when the unit's CUDA_VISIBLE_DEVICES is not known: `_known`),
        or the unit's CUDA_VISIBLE_DEVICES is not known."""
        return worked_out is None or not worked_out.bus_id or unit not in self.visible

    # --- what others read ----------------------------------------------------------------------------------------

    def view(self) -> GpuView:
        return GpuView(dict(self.xids), self.host, len(self.events))

    # --- internals -----------------------------------------------------------------------------------------------

    def _keep(self, event: GpuEvent) -> None:
        events = self.events
        if len(self.kept) == 0 and events:  # restored from a snapshot (not saved: counted again)
            self.kept.update(_key(e) for e in events)
        key = _key(event)
        if self.kept[key] >= MAX_REPEATS:  # a storm: its first ones stay, the latest replaces the one before it
            last = next(i for i in range(len(events) - 1, -1, -1) if _key(events[i]) == key)
            del events[last]
            self.kept[key] -= 1
        events.append(event)
        self.kept[key] += 1
        if len(events) > MAX_EVENTS or event.timestamp - self.pruned_at > PRUNE_EVERY:
            self._prune(event.timestamp)

    def _prune(self, now: float) -> None:
        """Faults older than their horizon go; past MAX_EVENTS the oldest go, down to 3/4 of it (a storm of many
        processes' Xids prunes now and then, not at every event)."""
        self.pruned_at = now
        kept = [
            e
            for e in self.events
            if not e.timestamp or not now or e.timestamp >= now - (GONE_HORIZON if is_gone(e) else HORIZON)
        ]
        self.events = kept if len(kept) <= MAX_EVENTS else kept[-(MAX_EVENTS * 3 // 4) :]
        self.kept = Counter(_key(e) for e in self.events)


def _key(e: GpuEvent) -> tuple[str, int | None, str, int | None]:
    return e.kind, e.code, e.bus_id, e.pid


def command_ranks(flags: Mapping[str, str]) -> list[str]:
    """The scheduler ranks a command starts ("TP0".."TP3" for --tp-size 4; with --pp-size, "PP1 TP0", ...)."""

    def size(*names: str) -> int:
        for name in names:
            value = flags.get(name, "").strip()
            if value.isdigit():
                return max(1, min(int(value), 64))
        return 1

    tp = size("--tp-size", "--tensor-parallel-size")
    pp = size("--pp-size", "--pipeline-parallel-size")
    if pp == 1:
        return [f"TP{t}" for t in range(tp)] if tp > 1 or flags else []
    return [f"PP{p} TP{t}" for p in range(pp) for t in range(tp)]
