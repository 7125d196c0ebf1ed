"""Hardware or configuration? Whether a GPU fault the kernel logged is a crash's cause.

Pure: the facts of a crash (`gpus.CrashFacts`) and the kernel's GPU events in, a `Verdict` out;
`hardware_diagnosis` turns it into what the on-call engineer reads. The rules:

- Only an event before the crash's first error line, and at most WINDOW seconds before it, can be its cause.
  Events after it were logged while the crashed process was torn down (SGLang's watchdog waits about 60 s for
  CUDA core dumps before it exits): evidence, shown as "after the crash", never the cause.
- Only what NVIDIA's catalog points at the hardware or the driver, and does not call ignorable, can be a
  cause: a hardware Xid, a GPU that fell off the bus or failed to initialise, an uncorrectable ECC error.
  Application Xids (13, 31, 43, ...) are the program's own fault, the same one SGLang reports: evidence.
- Events of other processes or other GPUs, or long before the crash, change nothing.
- A configuration error (SGLang's own argument check) stays the diagnosis: the GPU did not make the flag
  wrong. A GPU fault beside it is evidence.
- A GPU that is gone (fell off the bus, failed to initialise, the driver asks for a reboot) and a unit that
  keeps failing on it: a loop restarts cannot heal. The action is "drain".
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass

from crashdoc.diagnosis.gpus import CrashFacts, GpuRef
from crashdoc.events import HARDWARE as HARDWARE  # the kind this module decides (kept where events' are)
from crashdoc.events import Diagnosis, Fix, GpuEvent, RootCause
from crashdoc.matching.gpu_catalog import XidCatalog, load_catalog, recovery_action

WINDOW = 30.0  # seconds before the crash's first error line in which a fault is taken as its cause
TEARDOWN = 300.0  # seconds after it in which GPU lines are shown as its teardown (later ones are another story)
MAX_EVIDENCE = 8
# what a crash says when the device it wants is not there (a GPU that fell off the bus stays gone until a reboot)
_DEVICE_MISSING = re.compile(
    r"no CUDA-capable device|CUDA-capable device\(s\) is/are busy or unavailable|No CUDA GPUs are available"
    r"|cudaErrorNoDevice|cudaErrorDevicesUnavailable|CUDA driver initialization failed|initialization error"
    r"|GPU is lost|GPU_IS_LOST|Found no NVIDIA driver|invalid device ordinal|device not ready",
    re.IGNORECASE,
)
_ACTIONS_IN_WORDS = {
    "drain": "drain the node",
    "reboot": "reboot the node",
    "reset-gpu": "reset the GPU",
    "restart-app": "restart the application",
    "service": "service the GPU",
    "update-driver": "update the driver",
    "none": "nothing",
}


def action_words(action: str) -> str:
    """What the hardware on-call does, in words: "drain" -> "drain the node"."""
    return _ACTIONS_IN_WORDS.get(action, action)


@dataclass(frozen=True, slots=True)
class GpuFinding:
    """A kernel GPU event joined with the crash."""

    event: GpuEvent
    rank: str
    gpu: GpuRef
    joined: str  # how the event was tied to the crash ("pid 48213 is TP3 of ...")
    before: float  # seconds before the crash's first error line
    action: str  # drain | reboot | reset-gpu | restart-app | service | update-driver
    gone: bool  # the GPU is gone until the node is rebooted or serviced: restarts cannot heal the unit


@dataclass(frozen=True, slots=True)
class Verdict:
    cause: GpuFinding | None = None
    evidence: tuple[str, ...] = ()
    recovery: str = ""  # what Xid 154 says the cause's GPU now needs, in the driver's words


def decide(
    crash: CrashFacts,
    events: Sequence[GpuEvent],
    catalog: XidCatalog | None = None,
    *,
    window: float = WINDOW,
    tolerance: float = 0.0,
    assume_joined: bool = False,
) -> Verdict:
    """The verdict on one crash. `tolerance`: how far after the first error line an event still counts as
    before it (clocks of whole seconds, as pasted dmesg -T and SGLang lines have). `assume_joined`: an event
    with nothing to join it on belongs to the crash (a paste: the user put the kernel lines next to it)."""
    catalog = catalog or load_catalog()
    crash_at = crash.first_error_at
    # the driver loaded again (a reboot, a module reload) before the crash: older faults were reset with it
    since = max(
        (e.timestamp for e in events if e.kind == "driver-loaded" and e.timestamp and e.timestamp <= crash_at),
        default=0.0,
    )
    candidates: list[GpuFinding] = []
    gone: list[GpuFinding] = []
    notes = _Notes()
    recoveries: list[tuple[str, str]] = []  # (bus, words) of Xid 154 lines
    joins: dict[tuple[str, int | None, str, int | None], tuple[str, GpuRef, str] | None] = {}
    for e in events:
        if e.kind == "driver-loaded" or (e.timestamp and (e.timestamp < since or e.timestamp > crash_at + TEARDOWN)):
            continue
        key = (e.kind, e.code, e.bus_id, e.pid)  # a storm of the same Xid is joined once
        joined = joins[key] if key in joins else joins.setdefault(key, _join(e, crash, catalog, assume_joined))
        if joined is None:
            continue
        rank, gpu, how = joined
        where = _where(gpu, rank)
        label = describe(e, catalog)
        if not e.timestamp or not crash_at:
            missing = "the time since boot only" if not e.timestamp else "no time for the crash"
            notes.add((key, "undated"), f"{label} on {where}: {missing}, so it cannot be ordered against the crash")
            continue
        before = crash_at - e.timestamp
        if before < -tolerance:
            text = f"{label} on {where}, {-before:.1f} s after the crash's first error line: after the crash (teardown)"
            notes.add((key, "after"), f"{text}, not its cause", f"the last {-before:.1f} s after")
            continue
        before = max(before, 0.0)
        if e.kind == "xid" and e.code == 154:
            recoveries.append((e.bus_id, e.recovery))
            notes.add(
                (key, e.recovery), f"{label} on {where}: the driver now asks for {e.recovery or 'a recovery action'}"
            )
            continue
        if not can_cause(e, catalog):
            if before <= window:
                text = f"{label} on {where}, {before:.1f} s before the crash's first error line: {why_not(e, catalog)}"
                notes.add((key, "before"), text, f"the last {before:.1f} s before")
            continue
        finding = GpuFinding(e, rank, gpu, how, before, action_of(e, catalog), is_gone(e))
        if before <= window:
            candidates.append(finding)
        elif finding.gone:
            gone.append(finding)
    if crash.kind == "config" and (candidates or gone):
        for f in candidates:
            notes.add(
                (f.event.kind, f.event.code, f.event.bus_id, "config"),
                f"{describe(f.event, catalog)} on {_where(f.gpu, f.rank)}, {f.before:.1f} s before the crash: the "
                "GPU failed too, but this crash is SGLang's own argument check: fix the flag, and "
                f"{_ACTIONS_IN_WORDS[f.action]}",
            )
        return Verdict(None, notes.lines())
    cause: GpuFinding | None = None
    if candidates:
        cause = min(candidates, key=lambda f: (not f.gone, _points(f.event, catalog) != "hardware", -f.before))
        for other in candidates:
            if other is not cause and other.event.bus_id != cause.event.bus_id:
                notes.add(
                    (other.event.kind, other.event.code, other.event.bus_id, "also"),
                    f"also {describe(other.event, catalog)} on {_where(other.gpu, other.rank)}, "
                    f"{other.before:.1f} s before",
                )
    elif gone and _DEVICE_MISSING.search(crash.exception):
        latest = max(gone, key=lambda f: f.event.timestamp)
        cause = dataclasses.replace(latest, action="drain", gone=True)
    recovery = next(
        (words for bus, words in reversed(recoveries) if cause is not None and bus == cause.event.bus_id), ""
    )
    if cause is not None and recovery and recovery_action(recovery) not in ("", "none"):
        wanted = recovery_action(recovery)  # Xid 154: the driver's own word on what the GPU needs now
        cause = dataclasses.replace(cause, action=wanted, gone=cause.gone or wanted in ("drain", "reboot"))
    if cause is not None and cause.gone:
        cause = dataclasses.replace(cause, action="drain")
    return Verdict(cause, notes.lines(), recovery)


def can_cause(e: GpuEvent, catalog: XidCatalog) -> bool:
    """Whether this kind of event can end a process by itself (rather than report the program's own fault,
    a harmless correction, or a consequence of another fault)."""
    if e.kind in ("fallen-off-bus", "init-failed", "reset-required"):
        return True
    if e.kind == "ecc":
        text = e.detail.lower()
        return "uncorrectable" in text or "double bit" in text or "dbe" in text.split()
    if e.kind != "xid":
        return False  # an NVSwitch SXid: the GPUs on its links report it as Xid 74
    entry = catalog.get(e.code)
    if entry is None or entry.points_at not in ("hardware", "driver") or e.code == 154:
        return False
    if e.severity == "non-fatal":  # NVLink5 (Xid 144-150) lines say it themselves
        return False
    return catalog.action(entry.immediate) != "none"


def is_gone(e: GpuEvent) -> bool:
    """The GPU is unreachable until the node is rebooted or serviced."""
    return e.kind in ("fallen-off-bus", "init-failed") or (e.kind == "xid" and e.code in (79, 143))


def action_of(e: GpuEvent, catalog: XidCatalog) -> str:
    if is_gone(e):
        return "drain"
    if e.kind == "xid":
        entry = catalog.get(e.code)
        action = catalog.action(entry.immediate) if entry is not None else "service"
        return "reset-gpu" if action in ("none", "recovery") else action
    return "reset-gpu"


def describe(e: GpuEvent, catalog: XidCatalog) -> str:
    """The event in a few words: "Xid 79 (GPU has fallen off the bus)"."""
    if e.kind == "xid":
        entry = catalog.get(e.code)
        return f"Xid {e.code} ({entry.description})" if entry is not None else f"Xid {e.code}"
    if e.kind == "sxid":
        severity = f" {e.severity}" if e.severity else ""
        return f"NVSwitch SXid {e.code}{severity} ({e.process or 'nvswitch'})"
    return {
        "fallen-off-bus": "the GPU fell off the bus",
        "init-failed": "the GPU failed to initialise (RmInitAdapter failed)",
        "reset-required": "the driver says the GPU needs a reset",
        "ecc": f"an ECC notice ({e.detail[:80]})",
    }.get(e.kind, e.kind)


def why_not(e: GpuEvent, catalog: XidCatalog) -> str:
    """Why an event is evidence rather than the cause."""
    if e.kind == "sxid":
        if e.severity == "fatal":
            return "a fatal NVSwitch error: the GPUs on its links report it as Xid 74, which would be the cause"
        return "a non-fatal NVSwitch error: evidence only"
    if e.kind == "ecc":
        return "a corrected or informational ECC notice: evidence only"
    entry = catalog.get(e.code)
    if entry is None:
        return "not in crashdoc's copy of NVIDIA's Xid catalog: evidence only"
    if entry.points_at == "application":
        return (
            f"NVIDIA's catalog ({entry.mnemonic}) counts it as the application's own fault, the same one SGLang "
            "reports: a software error, not the hardware"
        )
    if entry.points_at == "informational":
        return f"a consequence of another fault or a notice (NVIDIA: {entry.immediate}): never a cause by itself"
    return f"not fatal (NVIDIA's immediate action: {entry.immediate}): evidence, not the cause"


def _points(e: GpuEvent, catalog: XidCatalog) -> str:
    entry = catalog.get(e.code) if e.kind == "xid" else None
    return entry.points_at if entry is not None else "hardware"


def _join(e: GpuEvent, crash: CrashFacts, catalog: XidCatalog, assume: bool) -> tuple[str, GpuRef, str] | None:
    """(rank, GPU, how) when the event is about this crash's processes or GPUs; None otherwise."""
    if e.kind == "sxid":
        return "", GpuRef(), "an NVSwitch of this node"
    bus = e.bus_id
    if e.pid and e.pid in crash.pids:
        rank = crash.pids[e.pid]
        ref = crash.gpus.get(rank)
        gpu = ref if ref is not None and (not bus or ref.bus_id in ("", bus)) else GpuRef(bus_id=bus)
        if not gpu.bus_id and bus:
            gpu = dataclasses.replace(gpu, bus_id=bus)
        return rank, gpu, f"pid {e.pid} is {rank or 'the launcher'} of {crash.unit or 'the crashed server'}"
    other_process = bool(e.pid and crash.pids)
    if other_process and _points(e, catalog) == "application":
        return None  # another program's own fault
    if bus:
        for rank, ref in crash.gpus.items():
            if ref.bus_id == bus:
                return rank, ref, f"{bus} is {rank}'s GPU ({ref.how})"
    if other_process or (bus and any(ref.bus_id for ref in crash.gpus.values())):
        return None  # another process, another GPU
    if assume:
        who = crash.rank or "the crashed process"
        ref = crash.gpus.get(crash.rank, GpuRef())
        return crash.rank, dataclasses.replace(ref, bus_id=bus), f"assumed: the paste does not say which GPU {who} used"
    return None


def _where(gpu: GpuRef, rank: str) -> str:
    return f"{gpu.name()}, {rank}" if rank else gpu.name()


@dataclass(slots=True)
class _Notes:
    """Evidence lines, one per kind of event and what it was to the crash: a burst of the same Xid at teardown
    (thousands a second in a bad case) is one line with its count; at most MAX_EVIDENCE lines."""

    items: dict[object, list] = dataclasses.field(default_factory=dict)  # key -> [text, count, last]

    def add(self, key: object, text: str, last: str = "") -> None:
        found = self.items.get(key)
        if found is None:
            self.items[key] = [text, 1, last]
        else:
            found[1] += 1
            found[2] = last

    def lines(self) -> tuple[str, ...]:
        out = [
            f"{text} (x{n}, {last})" if n > 1 and last else f"{text} (x{n})" if n > 1 else text
            for text, n, last in self.items.values()
        ]
        if len(out) > MAX_EVIDENCE:
            out = [*out[: MAX_EVIDENCE - 1], f"... and {len(out) - MAX_EVIDENCE + 1} more kinds of kernel GPU lines"]
        return tuple("GPU: " + line for line in out)


# --- the diagnosis -------------------------------------------------------------------------------------------------


def signature_of(e: GpuEvent, catalog: XidCatalog) -> str:
    """The id a hardware diagnosis carries (metrics label, runbook page): one per Xid family."""
    return f"gpu-fault-{catalog.family_of(e.kind, e.code)}"


def hardware_diagnosis(d: Diagnosis, verdict: Verdict, catalog: XidCatalog | None = None) -> Diagnosis:
    """The software diagnosis `d` as the verdict leaves it: the same one with the GPU evidence added, or,
    when a GPU fault caused the crash, a hardware diagnosis with NVIDIA's resolution instead of a flag fix."""
    catalog = catalog or load_catalog()
    cause = verdict.cause
    if cause is None:
        if not verdict.evidence:
            return d
        return dataclasses.replace(d, evidence=[*d.evidence, *verdict.evidence])
    e = cause.event
    entry = catalog.get(e.code) if e.kind == "xid" else None
    gpu = cause.gpu if cause.gpu.bus_id or not e.bus_id else dataclasses.replace(cause.gpu, bus_id=e.bus_id)
    target = str(gpu.index) if gpu.index is not None else (gpu.bus_id or "<gpu>")
    label = describe(e, catalog)
    under = f" under {cause.rank}" if cause.rank else ""
    title = f"{label} on {gpu.name()}{under}: the GPU failed, not a flag"
    if cause.gone:
        title = f"{label} on {gpu.name()}{under}: the GPU is gone, restarts cannot heal the unit"
    unit = d.unit or "UNIT"  # in commands
    the_unit = d.unit or "the unit"  # in words
    line = " ".join(e.text.split()) if e.text else label
    why = [f"the kernel logged: {line}", f"tied to the crash: {cause.joined}"]
    if entry is not None:
        why.append(
            f"NVIDIA's Xid catalog ({catalog.version}): Xid {e.code} {entry.mnemonic}, "
            f"immediate action {entry.immediate} "
            f"({catalog.meaning(entry.immediate)}), investigatory action {entry.investigatory}; "
            f"points at the {entry.points_at}"
        )
    if verdict.recovery:
        why.append(f"Xid 154 on this GPU: the driver asks for {verdict.recovery}")
    checks = [f"nvidia-smi -q -d ROW_REMAPPER,ECC -i {target}"]
    if cause.gone:
        summary = (
            f"Drain this node: {gpu.name()} is gone and {the_unit} cannot recover by restarting. Reboot the node "
            "(NVIDIA: RESTART_BM); if the GPU is still missing after the reboot, service it (NVIDIA: CONTACT_SUPPORT)."
        )
        checks = ["nvidia-smi -L", "journalctl -k -b -g 'NVRM|SXid'", f"systemctl stop {unit}"]
    elif cause.action == "reboot":
        asked = verdict.recovery or "NVIDIA: RESTART_BM"
        summary = f"Reboot the node: the driver asks for it ({asked}). No flag change helps."
    elif cause.action == "service":
        summary = f"Service {gpu.name()} (NVIDIA: CONTACT_SUPPORT): the fault is in the hardware; no flag change helps."
    elif cause.action == "restart-app":
        summary = (
            f"{gpu.name()} reported a fault the application cannot survive but the GPU recovers from (NVIDIA: "
            f"RESTART_APP): the restart is the recovery. If {the_unit} keeps crashing, reset the GPU; if the Xid comes "
            "back, service it."
        )
        checks += [f"systemctl stop {unit}", f"nvidia-smi -r -i {target}", f"systemctl start {unit}"]
    else:
        summary = (
            f"Reset {gpu.name()}: stop {the_unit} (nothing may use the GPU), check it, reset it, start it again "
            f"(NVIDIA: {entry.immediate if entry is not None else 'RESET_GPU'}). If the fault comes back, service it."
        )
        checks += [f"systemctl stop {unit}", f"nvidia-smi -r -i {target}", f"systemctl start {unit}"]
    if catalog.family_of(e.kind, e.code) == "nvlink" and not cause.gone:
        checks.insert(1, f"nvidia-smi nvlink -s -i {target}")
    warnings = []
    if d.fix.changes or d.signature is not None:
        warnings.append(
            f"crashdoc's answer to the software error would not help (the GPU failed first): {d.fix.summary}"
        )
    crash_line = (
        f"the crash: {cause.rank + ' ' if cause.rank else ''}{d.root_cause.line}, "
        f"{cause.before:.1f} s after {label.split(' (')[0]}"
    )
    captures = {
        "gpu_event": e.kind,
        "xid": str(e.code) if e.code is not None and e.kind == "xid" else "",
        "bus_id": gpu.bus_id,
        "gpu": str(gpu.index) if gpu.index is not None else "",
        "rank": cause.rank,
        "action": cause.action,
    }
    if gpu.device is not None:
        captures["device"] = str(gpu.device)
    if entry is not None:
        captures |= {"nvidia_immediate": entry.immediate, "nvidia_investigatory": entry.investigatory}
    return dataclasses.replace(
        d,
        signature=signature_of(e, catalog),
        title=title,
        kind=HARDWARE,
        severity="critical",
        root_cause=RootCause(
            type=f"Xid {e.code}" if e.kind == "xid" else label,
            message=f"{entry.mnemonic}: {entry.description}; {e.detail}" if entry is not None else e.detail,
            line=line,
        ),
        flags=[],
        fix=Fix(summary=summary, apply=checks, warnings=warnings, why=why),
        evidence=[crash_line, *verdict.evidence, *d.evidence],
        captures=captures,
        derived=False,
    )
