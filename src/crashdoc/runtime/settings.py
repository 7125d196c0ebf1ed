"""Which configuration settings a reload (SIGHUP) applies while running, and which wait for a restart."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from crashdoc.config import Config

LIVE_SETTINGS = ("units", "thresholds", "runbook_base_url", "signature_folders", "builtin_signatures")
RESTART_SETTINGS = (
    "listen",
    "state_directory",
    "journal_directory",
    "alertmanager",
    "instance",
    "dbus",
    "web_config_file",  # the file's contents are re-read on change; its path only at start
    "nvidia_gpus",  # its GPUs are read again when the driver loads; the folder only at start
    "sglang_checks",  # the check threads start with the daemon
)


@dataclass(frozen=True, slots=True)
class SettingsChange:
    """A reload's outcome: the configuration to use now, what changed live, what waits for a restart."""

    config: Config
    live: tuple[str, ...]
    later: tuple[str, ...]


def settings_change(old: Config, new: Config) -> SettingsChange:
    live = tuple(name for name in LIVE_SETTINGS if getattr(new, name) != getattr(old, name))
    later = tuple(name for name in RESTART_SETTINGS if getattr(new, name) != getattr(old, name))
    kept = dataclasses.replace(new, **{name: getattr(old, name) for name in RESTART_SETTINGS})
    return SettingsChange(kept, live, later)
