"""The sandbox's unit folder: the private ``SYSTEMD_UNIT_PATH`` and what goes in it.

Why a folder of its own: PID 1 must see only journald, D-Bus, a target and the test units, never the host's
units (no systemd-tmpfiles, whose clean-up would empty the host's /tmp; no generators either, their folder is
empty). The host's journald and D-Bus units are copied with their ``Symlinks=`` dropped (the /dev/log symlink
would land in the host's /dev), and every service, socket, timer and path unit gets ``DefaultDependencies=no``:
the sandbox has no sysinit.target, basic.target or shutdown.target, so default dependencies would make every
job fail.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from crashdoc.sandbox.errors import SandboxError
from crashdoc.sandbox.host import HOST_UNITS, host_unit_text

TARGET = "crashdoc-sandbox.target"

_TARGET_TEXT = """[Unit]
Description=crashdoc private systemd
Wants=systemd-journald.socket systemd-journald-dev-log.socket systemd-journald.service
Wants=dbus.socket dbus.service
After=systemd-journald.service dbus.service
AllowIsolate=yes
"""


def write_unit_folder(unit_dir: Path, units: Mapping[str, str]) -> None:
    """Fill the (empty) private unit path: copies of the host's journald and D-Bus units, the target PID 1
    boots into, and ``units`` (name -> text)."""
    for name in HOST_UNITS:
        (unit_dir / name).write_text(_adapt_host_unit(name, host_unit_text(name)))
    (unit_dir / TARGET).write_text(_TARGET_TEXT)
    for name, text in units.items():
        write_unit(unit_dir, name, text)


def _adapt_host_unit(name: str, text: str) -> str:
    """Copies of host units: no /dev/log symlink on the host, no default dependencies."""
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith("Symlinks=")]
    return _with_default_deps_off("\n".join(lines) + "\n")


def _with_default_deps_off(text: str) -> str:
    """Add DefaultDependencies=no unless the unit says otherwise: the sandbox has no sysinit.target,
    basic.target or shutdown.target, so default dependencies would make every job fail."""
    if re.search(r"^\s*DefaultDependencies\s*=", text, re.M):
        return text
    if re.search(r"^\[Unit\]\s*$", text, re.M):
        return re.sub(r"^\[Unit\]\s*$", "[Unit]\nDefaultDependencies=no", text, count=1, flags=re.M)
    return "[Unit]\nDefaultDependencies=no\n\n" + text


def write_unit(unit_dir: Path, name: str, text: str) -> Path:
    """Write one unit into the private unit path; the name is checked so it cannot escape it."""
    if not re.fullmatch(r"[\w@:.\\-]+\.(service|socket|target|timer|path|slice|mount)", name) or name.startswith("."):
        raise SandboxError(f"not a unit file name: {name!r}")
    path = unit_dir / name
    path.write_text(_with_default_deps_off(text) if path.suffix in (".service", ".socket", ".timer", ".path") else text)
    return path
