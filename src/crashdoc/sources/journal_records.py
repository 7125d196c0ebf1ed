"""PID 1's records about the watched units and systemd-coredump's, read from journal entries.

They count only when journald says who wrote them: `_PID=1` (a trusted field: no process can forge it) for
PID 1's, root's systemd-coredump for core dumps. A line "Scheduled restart job" on a service's stdout, or a
forged MESSAGE_ID sent through the native protocol, moves nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from crashdoc.events import Lifecycle, LifecycleRecord
from crashdoc.sources.lifecycle import COREDUMP_MESSAGE_ID, MESSAGE_IDS, START_LIMIT_TEXT, normalise_exit_status

Get = Any  # systemd-python's Reader._get: field name -> raw bytes (KeyError when the entry has none)
RoleOf = Callable[[str], str | None]


def pid1_record(get: Get, realtime: Callable[[], int], role_of: RoleOf) -> LifecycleRecord | None:
    """PID 1's record about a watched unit (started, exited, restart scheduled, ...); None for anything else."""
    if get("_PID") != b"1":
        return None
    try:
        unit = get("UNIT").decode("utf-8", "replace")
    except KeyError:
        return None
    if role_of(unit) is None:
        return None
    message_id = optional(get, "MESSAGE_ID")
    kind = MESSAGE_IDS.get(message_id or "")
    message = optional(get, "MESSAGE") or ""
    if kind is None:
        if START_LIMIT_TEXT not in message:
            return None
        kind = Lifecycle.START_LIMIT_HIT
    if kind is Lifecycle.STARTED and optional(get, "JOB_TYPE") not in (None, "start", "restart"):
        return None
    code = optional(get, "EXIT_CODE")
    n_restarts = optional(get, "N_RESTARTS")
    result = optional(get, "UNIT_RESULT") or optional(get, "JOB_RESULT")
    if kind is Lifecycle.START_LIMIT_HIT:
        result = "start-limit-hit"
    if kind is Lifecycle.JOB_FAILED and result == "done":
        return None
    return LifecycleRecord(
        unit=unit,
        kind=kind,
        timestamp=realtime() / 1e6,
        invocation=optional(get, "INVOCATION_ID") or "",
        n_restarts=int(n_restarts) if n_restarts and n_restarts.isdigit() else None,
        exit_code=code,
        exit_status=normalise_exit_status(code, optional(get, "EXIT_STATUS")),
        result=result,
        message=message[:500],
    )


def coredump_record(get: Get, realtime: Callable[[], int], role_of: RoleOf) -> LifecycleRecord | None:
    """systemd-coredump's record of a watched unit's process that dumped core; None for anything else."""
    if optional(get, "MESSAGE_ID") != COREDUMP_MESSAGE_ID or optional(get, "_UID") != "0":
        return None
    unit = optional(get, "COREDUMP_UNIT")
    if not unit or role_of(unit) is None:
        return None
    signal = optional(get, "COREDUMP_SIGNAL_NAME") or optional(get, "COREDUMP_SIGNAL")
    return LifecycleRecord(
        unit=unit,
        kind=Lifecycle.COREDUMP,
        timestamp=realtime() / 1e6,
        exit_code="dumped",
        exit_status=(signal or "").removeprefix("SIG") or None,
        message=(optional(get, "MESSAGE") or "")[:500],
    )


def optional(get: Get, name: str) -> str | None:
    """A field's text, None when the entry has none."""
    try:
        return get(name).decode("utf-8", "replace")
    except KeyError:
        return None


def optional_raw(get: Get, name: str) -> bytes | None:
    """A field's bytes, None when the entry has none."""
    try:
        return get(name)
    except KeyError:
        return None
