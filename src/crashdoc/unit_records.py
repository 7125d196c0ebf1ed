"""What crashdoc knows of a systemd unit besides its log: which units it watches (`WatchRule`), what D-Bus says of
one (`UnitState`) and what its files on disk say (`LaunchFacts`). The daemon and `diagnose` make them; a pasted log
never does, so they live apart from `events` (a paste's `explain` does not build their classes, issue 26);
`crashdoc.events` still names them (imported there at first use)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class WatchRule:
    """Which units crashdoc watches (a name or a glob) and the role they play in a PD deployment."""

    pattern: str  # unit name or glob
    role: str = "any"


@dataclass(slots=True)
class UnitState:
    """What D-Bus says about a unit right now."""

    unit: str
    active_state: str = ""
    sub_state: str = ""
    result: str = ""
    n_restarts: int | None = None
    exec_main_status: int | None = None
    exec_main_code: int | None = None
    invocation: str = ""
    exec_start: tuple[str, ...] = ()  # the real argv of the first ExecStart=
    fragment_path: str = ""
    drop_in_paths: tuple[str, ...] = ()
    environment_files: tuple[str, ...] = ()
    numa_policy: str = ""  # NUMAPolicy=: bind, preferred, interleave, local, default ("": not set)
    numa_mask: str = ""  # NUMAMask= as a Linux list ("0", "0-1")
    cpu_affinity: str = ""  # CPUAffinity= as a Linux list ("0-31,64-95")
    loaded: bool = True
    active_enter_timestamp: float = 0.0  # when the current run became active (0: unknown)
    timestamp: float = 0.0
    # the GPU entries of Environment= (CUDA_VISIBLE_DEVICES=...), never the others: they may hold secrets
    environment: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LaunchFacts:
    """What crashdoc read from disk about a command a unit runs: its SGLang flags (a launch script's
    included) and the SGLang release its interpreter imports. The runtime reads them before the engine's
    step and hands them in ahead of the event that needs them, so that the engine reads no file."""

    unit: str
    cmdline: tuple[str, ...]
    flags: Mapping[str, str] = field(default_factory=dict)  # canonical names (`--tp` -> `--tp-size`)
    sglang_release: str = ""  # "" when unknown
    sglang_release_from: str = ""  # where it was read
