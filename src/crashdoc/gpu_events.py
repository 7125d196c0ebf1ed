"""The kernel's GPU faults and the host's GPUs: records only the GPU paths make (a journal's or a paste's kernel
lines, the NVIDIA driver's files, a unit's CUDA_VISIBLE_DEVICES). Apart from `events` so that a log without kernel
lines never builds them; `crashdoc.events` still names them (imported there at first use)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class GpuEvent:
    """A GPU fault the NVIDIA driver wrote to the kernel log (an Xid, an NVSwitch SXid, a GPU that fell off the
    bus, ...). Read only from kernel lines (`_TRANSPORT=kernel`, or a paste's dmesg and `kernel:` lines): a unit
    that prints "NVRM: Xid" on its own stdout has written no kernel line."""

    kind: str  # xid | sxid | fallen-off-bus | reset-required | init-failed | ecc | driver-loaded
    timestamp: float = 0.0  # seconds since the epoch; 0.0 when the line only said the time since boot
    bus_id: str = ""  # the device's PCI address as "0000:c1:00.0" ("" when the line names none)
    code: int | None = None  # the Xid or SXid number
    pid: int | None = None  # the process the driver named (`pid=`); None when it named none or '<unknown>'
    process: str = ""  # that process's name (`name=`)
    detail: str = ""  # the driver's words after the code
    severity: str = ""  # the line's own word where it has one: "fatal" or "non-fatal" (SXid, Xid 144-150)
    recovery: str = ""  # Xid 154: the recovery action the driver now asks for, as it says it
    uuid: str = ""  # the GPU's UUID when the driver named it ("NVRM: GPU at PCI:...: GPU-...")
    uptime: float | None = None  # dmesg's seconds since boot, when the line carried them
    text: str = ""  # the kernel line as logged (bounded)


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU of the host as the NVIDIA driver lists it (/proc/driver/nvidia/gpus/<bus id>/information)."""

    index: int  # nvidia-smi's index: the place in PCI bus order
    bus_id: str  # "0000:c1:00.0"
    uuid: str = ""  # "GPU-5f3a..."
    minor: int | None = None  # /dev/nvidiaN (not always the index)
    model: str = ""


@dataclass(frozen=True, slots=True)
class GpuMap:
    """The host's GPUs by PCI address, index and UUID (empty where the NVIDIA driver is not loaded)."""

    gpus: tuple[GpuInfo, ...] = ()
    problems: tuple[str, ...] = ()  # files that could not be read, said plainly

    def by_bus(self, bus_id: str) -> GpuInfo | None:
        return next((g for g in self.gpus if g.bus_id == bus_id), None)

    def by_index(self, index: int) -> GpuInfo | None:
        return next((g for g in self.gpus if g.index == index), None)

    def by_uuid(self, uuid: str) -> GpuInfo | None:
        wanted = uuid.lower()
        # CUDA_VISIBLE_DEVICES may hold a UUID's unique prefix ("GPU-5f3a8e2c")
        found = [g for g in self.gpus if g.uuid and g.uuid.lower().startswith(wanted)]
        return found[0] if len(found) == 1 else None


@dataclass(frozen=True, slots=True)
class HostGpus:
    """The host's GPUs, read by the runtime before the engine's step (at start, and again when the driver
    loads): what turns an Xid's PCI address into the GPU index a unit's CUDA_VISIBLE_DEVICES names."""

    gpus: GpuMap
    where: str = ""  # the folder it was read from


@dataclass(frozen=True, slots=True)
class UnitDevices:
    """A unit's CUDA_VISIBLE_DEVICES as systemd starts it (Environment=, then its EnvironmentFile=s, which win),
    read by the runtime before the engine's step: which host GPU each of the unit's CUDA devices is."""

    unit: str
    visible_devices: str | None  # None: not set (device N is GPU N)
    where: str = ""  # "Environment=", or the environment file that set it
