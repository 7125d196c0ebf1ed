"""PID 1's records about a unit: restarts, exits, failures.

From the journal they are recognised by MESSAGE_ID (systemd's catalog) and read from
structured fields; from pasted text (`journalctl -o short`) by systemd 252's wording.
Only records written by PID 1 count: anyone can print "Scheduled restart job" on stdout.
"""

from __future__ import annotations

import re

from crashdoc.events import Lifecycle, LifecycleRecord
from crashdoc.text import LazyPattern

MESSAGE_IDS: dict[str, Lifecycle] = {
    "5eb03494b6584870a536b337290809b3": Lifecycle.RESTART_SCHEDULED,
    "98e322203f7a4ed290d09fe03c09fe15": Lifecycle.EXITED,
    "d9b373ed55a64feb8242e02dbe79a49c": Lifecycle.FAILED,
    "be02cf6855d2428ba40df7e9d022f03d": Lifecycle.JOB_FAILED,
    "39f53479d3a045ac8e11786248231fbf": Lifecycle.STARTED,  # a start job finished (JOB_RESULT=done)
    "7ad2d189f7e94e70a38c781354912448": Lifecycle.DEACTIVATED,
    "fe6faa94e7774663a0da52717891d8ef": Lifecycle.OOM_KILL,
}
COREDUMP_MESSAGE_ID = "fc2e22bc6ee647b6b90729ab34a250b1"
START_LIMIT_TEXT = "Start request repeated too quickly"

_UNIT_PREFIX = LazyPattern(r"^(?P<unit>[\w@:.\\-]+\.(?:service|socket|target|scope|mount|timer)): (?P<rest>.*)$")
_TEXT_RULES: tuple[tuple[LazyPattern, Lifecycle], ...] = (
    (LazyPattern(r"Scheduled restart job, restart counter is at (?P<n>\d+)"), Lifecycle.RESTART_SCHEDULED),
    (
        LazyPattern(r"Main process exited, code=(?P<code>\w+), status=(?P<status>[^\s/]+)(?:/(?P<name>\S+))?"),
        Lifecycle.EXITED,
    ),
    (LazyPattern(r"Failed with result '(?P<result>[\w-]+)'"), Lifecycle.FAILED),
    (LazyPattern(re.escape(START_LIMIT_TEXT)), Lifecycle.START_LIMIT_HIT),
    (LazyPattern(r"killed by the OOM killer"), Lifecycle.OOM_KILL),
    (LazyPattern(r"Deactivated successfully"), Lifecycle.DEACTIVATED),
)
_STARTED = LazyPattern(r"^Started (?P<unit>[\w@:.\\-]+\.service)\b")
_FAILED_TO_START = LazyPattern(r"^Failed to start (?P<unit>[\w@:.\\-]+\.service)\b")


def parse_pid1_text(message: str, timestamp: float = 0.0) -> LifecycleRecord | None:
    """Classify one line PID 1 wrote, by systemd 252's wording."""
    m = _UNIT_PREFIX.match(message)
    if m is None:
        s = _STARTED.match(message)
        if s is not None:
            return LifecycleRecord(s.group("unit"), Lifecycle.STARTED, timestamp, message=message)
        f = _FAILED_TO_START.match(message)
        if f is not None:
            return LifecycleRecord(f.group("unit"), Lifecycle.JOB_FAILED, timestamp, result="failed", message=message)
        return None
    unit, rest = m.group("unit"), m.group("rest")
    for pattern, kind in _TEXT_RULES:
        r = pattern.search(rest)
        if r is None:
            continue
        groups = r.groupdict()
        return LifecycleRecord(
            unit,
            kind,
            timestamp,
            n_restarts=int(groups["n"]) if groups.get("n") else None,
            exit_code=groups.get("code"),
            exit_status=groups.get("name") or groups.get("status"),
            result=groups.get("result") or ("start-limit-hit" if kind is Lifecycle.START_LIMIT_HIT else None),
            message=message,
        )
    return None


def normalise_exit_status(code: str | None, status: str | None) -> str | None:
    """systemd writes EXIT_STATUS as "9" or "KILL"; keep the signal name when it is a signal."""
    if status is None:
        return None
    if code in ("killed", "dumped") and status.isdigit():
        return _SIGNALS.get(int(status), status)
    return status


_SIGNALS = {
    1: "HUP",
    2: "INT",
    3: "QUIT",
    4: "ILL",
    6: "ABRT",
    7: "BUS",
    8: "FPE",
    9: "KILL",
    11: "SEGV",
    13: "PIPE",
    14: "ALRM",
    15: "TERM",
}


def describe_exit(code: str | None, status: str | None) -> str | None:
    if code is None:
        return None
    if code == "exited":
        return f"exited with status {status}"
    if code in ("killed", "dumped"):
        name = normalise_exit_status(code, status)
        verb = "killed by" if code == "killed" else "dumped core on"
        return f"{verb} SIG{name}" if name and not name.isdigit() else f"{verb} signal {status}"
    return f"{code} {status or ''}".strip()


_OOM_TASK_MEMCG = LazyPattern(r"task_memcg=(?P<cgroup>[^,\s]+)")


def kernel_oom_unit(message: str) -> str | None:
    """The unit whose cgroup the kernel's OOM killer picked a process from, from its
    `oom-kill:constraint=...,task_memcg=/system.slice/x.service,task=python3,pid=...` line."""
    if "oom-kill:" not in message:
        return None
    m = _OOM_TASK_MEMCG.search(message)
    if m is None:
        return None
    for part in reversed(m.group("cgroup").split("/")):
        if part.endswith((".service", ".scope")):
            return part
    return None


def may_be_gpu_line(message: bytes) -> bool:
    """The cheap test the journal source runs on every kernel entry before decoding it (`sources.kernel_gpu`
    reads the lines it lets through; imported only once one comes)."""
    return b"NVRM" in message or b"SXid" in message
