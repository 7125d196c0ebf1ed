"""Host processes by PID, read from /proc: a process's children, its name, whether it lives; and the kill of a
session the sandbox started. Nothing here finds a process by name to signal it."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
from pathlib import Path
from typing import Any


def children_of(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(p) for p in text.split()]
    except OSError:
        pass
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
    return out


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the session we started ``proc`` in (nsenter and its child inside the namespaces)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                with contextlib.suppress(OSError):
                    proc.kill()
