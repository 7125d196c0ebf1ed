"""SGLang's process plumbing, as in sglang.srt.utils.common: a child dies with its parent, a process names
itself (journald's ``_COMM``), and the launcher's exit path SIGKILLs its whole process tree."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

from crashdoc.sandbox.fake_sglang.messages import kill_process_tree_called, logger


def _prctl(option: int, arg: int | bytes) -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, arg, 0, 0, 0)


def kill_itself_when_parent_died() -> None:
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def set_process_title(title: str) -> None:
    """setproctitle also renames the thread, so journald's _COMM shows the first 15 bytes."""
    _prctl(15, title.encode()[:15])  # PR_SET_NAME


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_process_tree(parent_pid: int, include_parent: bool = True) -> None:
    """SIGKILL every descendant, then (include_parent) the process itself: SGLang's exit path."""
    logger.info(kill_process_tree_called(parent_pid, include_parent, os.getpid()))
    for child in _descendants(parent_pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    if include_parent:
        if parent_pid == os.getpid():
            os.kill(parent_pid, signal.SIGKILL)
            sys.exit(0)
        with contextlib.suppress(ProcessLookupError):
            os.kill(parent_pid, signal.SIGKILL)
