"""What a sandbox leaves on the host while it runs (its cgroups, its work folder), how its work folder is made
and marked, and the sweep of what sandboxes of killed processes left behind.

Why: a test run killed by SIGKILL never reaches ``stop()``. Its private PID 1 dies with it (the launcher
chain's death signal), but empty cgroups and the work folder stay; the next ``start()`` removes those whose
launching process is gone, and ``traces_of`` lets a test of a clean stop see that nothing is left. The work
folder defaults to ``/var/tmp/crashdoc-sandbox-<pid>-XXXX``, outside /tmp, marked as the sandbox's own.

A unit with ``PrivateTmp=`` gets a folder ``/var/tmp/systemd-private-<boot id>-<unit>-XXXX`` on the host (the
sandbox hides /tmp, not /var/tmp); systemd removes it when the unit stops, which a killed PID 1 never does.
``private_tmp_folders`` names the ones this sandbox's processes have mounted, read before the kill, so that
``stop()`` removes exactly those (never another sandbox's or the host's, whose names look the same).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from crashdoc.sandbox.cgroups import CGROUP_PREFIX, host_cgroups, remove_cgroups
from crashdoc.sandbox.errors import SandboxError
from crashdoc.sandbox.processes import alive

WORKDIR_PARENT = Path("/var/tmp")
MARKER = ".crashdoc-sandbox"


def make_workdir() -> Path:
    """A fresh work folder outside /tmp (``/var/tmp/crashdoc-sandbox-<pid>-XXXX``), marked as ours so
    the sandbox deletes it on stop and a later run sweeps it if this process is killed first."""
    WORKDIR_PARENT.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{CGROUP_PREFIX}{os.getpid()}-", dir=WORKDIR_PARENT)).resolve()
    path.chmod(0o755)
    (path / MARKER).write_text(f"{os.getpid()}\n")
    return path


_PRIVATE_TMP = re.compile(r"/(systemd-private-[0-9a-f]{32}-[^/\s]+-[A-Za-z0-9]{6})(?:/|$)")


def private_tmp_folders(cgroups: list[Path]) -> set[Path]:
    """The host /var/tmp folders that units' PrivateTmp= gave the processes in `cgroups` (their /var/tmp)."""
    found: set[Path] = set()
    try:
        host_var_tmp = os.stat(WORKDIR_PARENT).st_dev
    except OSError:
        return found
    pids: set[str] = set()
    for cgroup in cgroups:
        with contextlib.suppress(OSError):
            for procs in cgroup.rglob("cgroup.procs"):
                pids.update(procs.read_text().split())
    for pid in pids:
        try:
            mounts = Path(f"/proc/{pid}/mountinfo").read_text()
        except OSError:
            continue  # gone meanwhile
        for row in mounts.splitlines():
            fields = row.split()
            if len(fields) > 4 and fields[4] == "/var/tmp" and (m := _PRIVATE_TMP.search(fields[3])):
                folder = WORKDIR_PARENT / m.group(1)
                with contextlib.suppress(OSError):
                    if folder.is_dir() and not folder.is_symlink() and folder.stat().st_dev == host_var_tmp:
                        found.add(folder)
    return found


def sweep_stale() -> None:
    """Remove sandbox cgroups and auto work folders whose launching process is gone (a killed test run)."""
    for pid, path, is_cgroup in list(_traces()):
        if alive(pid):
            continue
        if is_cgroup:
            remove_cgroups([path], deadline=0)
        else:
            shutil.rmtree(path, ignore_errors=True)


def traces_of(pid: int) -> list[Path]:
    """The cgroups and auto work folders of sandboxes that process `pid` launched and that still exist: none
    once they are stopped (what a test of a clean stop looks for)."""
    return [path for owner, path, _ in _traces() if owner == pid]


def _traces() -> Iterator[tuple[int, Path, bool]]:
    """(launching PID, path, is a cgroup) of every sandbox cgroup and auto work folder on this host."""
    pattern = re.compile(re.escape(CGROUP_PREFIX) + r"(\d+)-")
    try:
        _, v1, v2 = host_cgroups()
    except (SandboxError, OSError):
        v1, v2 = {}, None
    for mountpoint, own in [*v1.values(), *([v2] if v2 else [])]:
        parent = mountpoint / own.lstrip("/")
        with contextlib.suppress(OSError):
            for entry in list(parent.iterdir()):
                m = pattern.match(entry.name)
                if m and entry.is_dir():
                    yield int(m.group(1)), entry, True
    with contextlib.suppress(OSError):
        for entry in list(WORKDIR_PARENT.iterdir()):
            m = pattern.match(entry.name)
            if m and (entry / MARKER).is_file():
                yield int(m.group(1)), entry, False
