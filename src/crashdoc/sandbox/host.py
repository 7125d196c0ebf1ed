"""What the host must offer to boot a private systemd (root, the tools, systemd, dbus-daemon, cgroup
namespaces) and the host files the sandbox copies: journald's and D-Bus's units."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from crashdoc.sandbox.errors import SandboxError

# The only units copied from the host: journald and its sockets, and the socket-activated bus.
HOST_UNITS = (
    "systemd-journald.socket",
    "systemd-journald-dev-log.socket",
    "systemd-journald.service",
    "dbus.socket",
    "dbus.service",
)
_HOST_UNIT_DIRS = (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"), Path("/etc/systemd/system"))
_SYSTEMD_BINARIES = (Path("/usr/lib/systemd/systemd"), Path("/lib/systemd/systemd"))


def check_prerequisites() -> None:
    """Raise SandboxError saying exactly what is missing to boot a private systemd here."""
    reason = unavailable_reason()
    if reason:
        raise SandboxError(reason)


def unavailable_reason() -> str | None:
    """Why a private systemd cannot be booted on this machine, or None (tests skip with this)."""
    if os.geteuid() != 0:
        return "the private systemd needs root (PID, mount and cgroup namespaces, cgroup writes)"
    for tool in ("unshare", "nsenter", "systemctl", "journalctl", "busctl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (util-linux / systemd)"
    if systemd_binary() is None:
        return "systemd is not installed (no /usr/lib/systemd/systemd)"
    if not Path("/usr/bin/dbus-daemon").exists() and shutil.which("dbus-daemon") is None:
        return "dbus-daemon is not installed"
    for name in HOST_UNITS:
        if _find_host_unit(name) is None:
            return f"the host has no {name} to copy into the sandbox"
    if not Path("/proc/self/ns/cgroup").exists():
        return "the kernel has no cgroup namespaces"
    return None


def systemd_binary() -> Path | None:
    return next((p for p in _SYSTEMD_BINARIES if p.exists()), None)


def _find_host_unit(name: str) -> Path | None:
    return next((d / name for d in _HOST_UNIT_DIRS if (d / name).is_file()), None)


def host_unit_text(name: str) -> str:
    path = _find_host_unit(name)
    if path is None:
        raise SandboxError(f"the host has no {name}")
    return path.read_text()
