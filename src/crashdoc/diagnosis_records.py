"""The records of a diagnosis: one failure as an on-call engineer reads it (`Diagnosis`), its root cause, its fix
and what the fix applies to. Apart from `events` so that a log without a failure never builds their classes;
`crashdoc.events` still names them (imported there at first use)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crashdoc.events import FlagChange


@dataclass(frozen=True, slots=True)
class FixTarget:
    """What a diagnosis's changes are applied to, as the engine saw it: the remedy stage (outside the
    engine) reads the launch script, /proc and /sys, and runs SGLang's checks, from these."""

    cmdline: tuple[str, ...] = ()  # the run's command: D-Bus's ExecStart, or the argv journald logged
    exec_start: tuple[str, ...] = ()  # D-Bus's ExecStart alone: the only command crashdoc runs a check with
    drop_in_paths: tuple[str, ...] = ()
    numa_policy: str = ""
    numa_mask: str = ""
    cpu_affinity: str = ""
    safety: str = ""  # the signature's `fix.safety` check ("" for none)
    kv_cache: tuple[tuple[int, str], ...] = ()  # (PID, text) of the run's "KV Cache is allocated" lines


@dataclass(slots=True)
class RootCause:
    type: str
    message: str
    line: str


@dataclass(slots=True)
class Fix:
    summary: str
    changes: list[FlagChange] = field(default_factory=list)
    command: str | None = None  # the corrected command line, secrets redacted
    diff: str | None = None  # unified diff of the file to edit (script or drop-in)
    apply: list[str] = field(default_factory=list)  # commands a human runs to apply it
    rollback: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # safety check results
    why: list[str] = field(default_factory=list)  # how a computed value follows from the run's own numbers
    verified: str | None = None  # what SGLang's own argument checks said of the corrected command (None: not tried)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """One failure as an on-call engineer reads it. Its `fix` holds the changes (flag, value); the remedy
    stage adds the command, diff and checks for `target`, and hands on a copy."""

    unit: str
    signature: str | None
    title: str
    category: str
    severity: str
    root_cause: RootCause
    flags: list[str]
    fix: Fix
    fingerprint: str
    evidence: list[str] = field(default_factory=list)
    restarts: int | None = None
    invocation: str = ""
    captures: dict[str, str] = field(default_factory=dict)
    confidence: float = 1.0
    crashes: int = 1
    exit: str | None = None  # "killed by SIGKILL", "exit status 1"
    timestamp: float = 0.0
    config_change: dict[str, object] | None = None  # the edit that started the loop, with the flag diff
    derived: bool = False  # answered by a signature derived from SGLang's source, not a reviewed one
    subsystem: str = ""  # which part of SGLang failed (the same value as `category`, kept for compatibility)
    kind: str = ""  # what kind of failure: one of KINDS, or HARDWARE (a GPU fault: diagnosis.hardware decides it)
    handled: str = ""  # for a warning: why the traceback did not end the process ("" for a failure)
    sglang_release: str | None = None  # the SGLang release the unit runs, when known (JSON: sglang_version)
    sglang_release_from: str | None = None  # how crashdoc knows it: the interpreter's files, the log, an option
    version_note: str | None = None  # the matched check exists only in other releases than the unit's
    target: FixTarget | None = None  # None: written by a crashdoc that applied fixes in the engine (final)
