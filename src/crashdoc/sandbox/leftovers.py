"""What a sandbox leaves on the host while it runs (its cgroups, its work folder), how its work folder is made
and marked, and the sweep of what sandboxes of killed processes left behind.

Why: a test run killed by SIGKILL never reaches ``stop()``. Its private PID 1 dies with it (the launcher
chain's death signal), but empty cgroups and the work folder stay; the next ``start()`` removes those whose
launching process is gone, and ``traces_of`` lets a test of a clean stop see that nothing is left. The work
folder defaults to ``/var/tmp/crashdoc-sandbox-<pid>-XXXX``, outside /tmp, marked as the sandbox's own.
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
