"""The sandbox's own cgroups, and the host's cgroup layout they are made in.

Why: each sandbox gets its own cgroup (``crashdoc-sandbox-<pid>-<n>`` under the caller's cgroup in every
hierarchy systemd needs) and a cgroup namespace rooted there, so two sandboxes (or a host systemd) never see or
kill each other's units. The boot script mounts the same hierarchies inside (``v1_mounts``, ``layout``). A
memory controller, when one can be delegated, makes ``MemoryMax=`` real (``memory_enforced``). The cgroups are
removed bottom-up on stop; empty ones left by killed test runs are swept on start (``leftovers``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path

from crashdoc.sandbox.errors import SandboxError

CGROUP_PREFIX = "crashdoc-sandbox-"


class SandboxCgroups:
    """One sandbox's cgroups: made by ``create`` (what exists is in ``paths`` even when it fails half-way, so
    ``remove`` takes it all down), and what the boot script needs to mount them inside."""

    def __init__(self) -> None:
        self.paths: list[Path] = []
        self.layout = "none"  # unified, hybrid or legacy: what PID 1 sees under /sys/fs/cgroup
        self.name = ""  # the folder name on the host (it appears in kernel OOM messages)
        self.v1_mounts = ""  # mount options of the cgroup v1 hierarchies PID 1 gets, space-separated
        self.memory_enforced = False

    def create(self, name: str) -> None:
        layout, v1, v2 = host_cgroups()
        self.layout = layout
        self.paths, self.memory_enforced = [], False
        self.name = name
        mounts: list[str] = []
        if v2 is not None:
            self.paths.append(_make_cgroup(v2, name))
            if layout == "unified":
                self.memory_enforced = _delegate_v2_memory(self.paths[-1])
        for opts, (mountpoint, own) in v1.items():
            if opts not in ("none,name=systemd", "memory"):
                continue
            try:
                self.paths.append(_make_cgroup((mountpoint, own), name))
            except OSError:
                if opts == "memory":
                    continue  # no memory limits then; tracking works without it
                raise
            mounts.append(opts)
            if opts == "memory":
                self.memory_enforced = True
        if layout in ("hybrid", "legacy") and "none,name=systemd" not in mounts:
            raise SandboxError("the host has cgroup v1 without a name=systemd hierarchy; systemd cannot run")
        self.v1_mounts = " ".join(mounts)

    def remove(self, deadline: float) -> None:
        remove_cgroups(self.paths, deadline)


def host_cgroups() -> tuple[str, dict[str, tuple[Path, str]], tuple[Path, str] | None]:
    """The host's cgroup layout and, per hierarchy, (mount point, this process's cgroup in it)."""
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, controllers, path = line.split(":", 2)
        own["" if hid == "0" else controllers] = path
    v1: dict[str, tuple[Path, str]] = {}
    v2: tuple[Path, str] | None = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(rfields) < 3 or fields[3] != "/":
            continue
        fstype, mountpoint, superopts = rfields[0], Path(fields[4]), rfields[2].split(",")
        if fstype == "cgroup2" and v2 is None and "" in own:
            v2 = (mountpoint, own[""])
        elif fstype == "cgroup":
            names = [o for o in superopts if o.startswith("name=")]
            ctrls = [
                o
                for o in superopts
                if o
                in (
                    "memory",
                    "pids",
                    "cpu",
                    "cpuacct",
                    "cpuset",
                    "devices",
                    "freezer",
                    "blkio",
                    "net_cls",
                    "net_prio",
                    "perf_event",
                    "hugetlb",
                    "rdma",
                    "misc",
                )
            ]
            key = ",".join(ctrls + names)
            if key in own and key not in v1:
                opts = f"none,{names[0]}" if names and not ctrls else ",".join(ctrls + names)
                v1[opts] = (mountpoint, own[key])
    if v2 is not None and not v1:
        return "unified", v1, v2
    if v1:
        return ("hybrid" if v2 is not None else "legacy"), v1, v2
    raise SandboxError("no cgroup file system is mounted under /sys/fs/cgroup; systemd cannot run")


def _make_cgroup(hierarchy: tuple[Path, str], name: str) -> Path:
    mountpoint, own = hierarchy
    path = mountpoint / own.lstrip("/") / name
    path.mkdir()
    return path


def _delegate_v2_memory(cgroup: Path) -> bool:
    """Best effort on a cgroup v2 host: the memory controller reaches the sandbox only if the parent
    may enable it for its children (it may not while processes sit in the parent itself)."""
    parent = cgroup.parent
    try:
        if "memory" not in (parent / "cgroup.controllers").read_text().split():
            return False
        if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
            (parent / "cgroup.subtree_control").write_text("+memory")
        return "memory" in (cgroup / "cgroup.controllers").read_text().split()
    except OSError:
        return False


def remove_cgroups(cgroups: Iterable[Path], deadline: float) -> None:
    """rmdir each sandbox cgroup bottom-up, waiting for the killed processes to leave them."""
    for top in cgroups:
        while top.exists():
            for dirpath, _dirs, _files in os.walk(top, topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(dirpath)
            if not top.exists() or time.monotonic() > deadline:
                break
            time.sleep(0.05)
