"""What the engine's GPU joins need from disk, read before its step so that the engine reads no file.

- The host's GPUs (`HostGpus`): the NVIDIA driver's list, which turns an Xid's PCI address into the index a
  unit's CUDA_VISIBLE_DEVICES names. Read at start and again when the driver loads (a reload, a reset can
  change it). Journal files copied from another host are read without it: this host's GPUs are not theirs.
- A unit's CUDA_VISIBLE_DEVICES (`UnitDevices`): its Environment= (from D-Bus) and then its
  EnvironmentFile=s, which win, as systemd starts it. Handed in when it is first known and when it changes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from crashdoc.sources.units import environment_file_entries

if TYPE_CHECKING:  # the GPU records and the driver's reader: imported where a fact is made (journal files copied
    # from another host read none: `diagnose` of them imports neither, ~5 ms)
    from crashdoc.events import HostGpus, UnitDevices, UnitState

VISIBLE = "CUDA_VISIBLE_DEVICES"
MAX_UNITS = 4096  # units whose last fact is remembered (a hostile bus cannot grow it without bound)


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read(1 << 20)


class GpuFactsReader:
    """`folder`: the driver's gpus/ folder (/proc/driver/nvidia/gpus), None to read no host GPUs."""

    def __init__(self, folder: Path | None, *, read: Callable[[str], str] = _read_text) -> None:
        self.folder = folder
        self._read = read
        self._given: dict[str, tuple[str | None, str]] = {}  # unit -> what was last handed in

    def host(self) -> HostGpus | None:
        """The host's GPUs now; None when none are to be read (journal files of another host)."""
        if self.folder is None:
            return None
        from crashdoc.events import HostGpus
        from crashdoc.sources.nvidia_gpus import read_gpu_map

        return HostGpus(read_gpu_map(folder=self.folder), str(self.folder))

    def for_state(self, state: UnitState) -> UnitDevices | None:
        """The unit's CUDA_VISIBLE_DEVICES as systemd would start it now, when it is new or changed."""
        if not state.loaded:
            return None
        visible, where = visible_devices(state, self._read)
        if self._given.get(state.unit) == (visible, where):
            return None
        if len(self._given) >= MAX_UNITS:
            self._given.clear()
        self._given[state.unit] = (visible, where)
        from crashdoc.events import UnitDevices

        return UnitDevices(state.unit, visible, where)


def visible_devices(state: UnitState, read: Callable[[str], str] = _read_text) -> tuple[str | None, str]:
    """(CUDA_VISIBLE_DEVICES, where it was set) for a unit: Environment=, then each EnvironmentFile= in order (a
    later one wins; a missing `-`file is skipped, as systemd does); (None, "") when nothing sets it."""
    found: tuple[str | None, str] = (None, "")
    for entry in state.environment:
        name, _, value = entry.partition("=")
        if name == VISIBLE:
            found = (value, "Environment=")
    for path in state.environment_files:
        try:
            text = read(path.lstrip("-"))
        except (OSError, UnicodeDecodeError):
            continue  # systemd would not start the unit without a required file: its journal says so
        for entry in environment_file_entries(text):
            name, _, value = entry.partition("=")
            if name == VISIBLE:
                found = (value, f"EnvironmentFile={path.lstrip('-')}")
    return found
