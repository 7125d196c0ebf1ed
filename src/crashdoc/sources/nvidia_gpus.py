"""The host's NVIDIA GPUs as the driver lists them: /proc/driver/nvidia/gpus/<bus id>/information.

An Xid names a PCI address; a unit names GPUs by index (CUDA_VISIBLE_DEVICES=4,5,6,7) or UUID. The index is
the GPU's place in PCI bus order, which is what nvidia-smi shows (and CUDA with CUDA_DEVICE_ORDER=PCI_BUS_ID;
CUDA's default "fastest first" order is the same on hosts of identical GPUs). No GPU and no NVML needed:
the driver's files are read, and tests read fixtures of them.
"""

from __future__ import annotations

import os
from pathlib import Path

from crashdoc.events import GpuInfo, GpuMap
from crashdoc.sources.kernel_gpu import normalize_bus_id

GPUS_DIR = Path("proc/driver/nvidia/gpus")
DEFAULT_FOLDER = Path("/") / GPUS_DIR
__all__ = ["DEFAULT_FOLDER", "GPUS_DIR", "GpuInfo", "GpuMap", "read_gpu_map"]


def read_gpu_map(root: Path = Path("/"), folder: Path | None = None) -> GpuMap:
    """The GPUs under `root` (a fake tree in tests), or in `folder` (the driver's gpus/ folder itself, e.g. the
    host's /proc mounted elsewhere); an empty map where the NVIDIA driver is not loaded."""
    folder = folder if folder is not None else root / GPUS_DIR
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return GpuMap()
    except OSError as exc:
        return GpuMap(problems=(f"cannot list {folder}: {exc.strerror}",))
    found: list[tuple[str, str, int | None, str]] = []
    problems: list[str] = []
    for name in names:
        path = folder / name / "information"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            problems.append(f"cannot read {path}: {exc.strerror}")
            continue
        fields = _fields(text)
        bus = normalize_bus_id(fields.get("bus location", "")) or normalize_bus_id(name)
        if not bus:
            problems.append(f"{path}: no bus location")
            continue
        minor = fields.get("device minor", "")
        found.append(
            (bus, fields.get("gpu uuid", ""), int(minor) if minor.isdigit() else None, fields.get("model", ""))
        )
    found.sort(key=lambda g: g[0])
    gpus = tuple(GpuInfo(i, bus, uuid, minor, model) for i, (bus, uuid, minor, model) in enumerate(found))
    return GpuMap(gpus, tuple(problems))


def _fields(text: str) -> dict[str, str]:
    """`Key: \\t\\t value` lines, keys lower-cased."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out
