"""Real journal files built from entries: systemd-journal-remote writes them from the export format,
which can hold any bytes in any field (trusted ones included), so a test controls every field."""

from __future__ import annotations

import struct
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest

CRASHDOC = [sys.executable, "-m", "crashdoc"]
JOURNAL_REMOTE = next(
    (p for p in ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote") if Path(p).exists()),
    None,
)
needs_journal_remote = pytest.mark.skipif(JOURNAL_REMOTE is None, reason="systemd-journal-remote is not installed")

UNIT = "sglang-prefill.service"
BOOT = uuid.uuid4().hex
RESTART = "5eb03494b6584870a536b337290809b3"
EXITED = "98e322203f7a4ed290d09fe03c09fe15"
FAILED = "d9b373ed55a64feb8242e02dbe79a49c"
DSV4 = "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."
TRACEBACK = [
    "[2026-05-01 12:00:03 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 6361, '
    "in run_scheduler_process",
    "    scheduler = Scheduler(",
    '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py", '
    "line 661, in _deepseek_v4_num_host_pages",
    "    raise ValueError(",
    DSV4,
    "",
]
# what a terminal must never receive from a log: escapes (CSI, OSC title, C1 CSI), BEL, NUL, backspace
TERMINAL_HOSTILE = ("\x1b", "\x07", "\x00", "\x08", "\x9b")


# --- journal files in export format --------------------------------------------------------------


def export_entry(fields: Mapping[str, str | bytes], usec: int) -> bytes:
    """One entry of the journal export format; values that are not plain text use the binary form."""
    out = [b"__REALTIME_TIMESTAMP=%d\n__MONOTONIC_TIMESTAMP=%d\n_BOOT_ID=%s\n" % (usec, usec, BOOT.encode())]
    for name, value in fields.items():
        raw = value.encode() if isinstance(value, str) else value
        if all(32 <= b < 127 for b in raw):
            out.append(name.encode() + b"=" + raw + b"\n")
        else:
            out.append(name.encode() + b"\n" + struct.pack("<Q", len(raw)) + raw + b"\n")
    return b"".join(out) + b"\n"


AT = "__REALTIME_TIMESTAMP"  # an entry holding it is written at that time (microseconds since the epoch)


def write_journal(
    folder: Path, entries: list[Mapping[str, str | bytes]], name: str = "crafted.journal", first_ms: int = 0
) -> Path:
    """A real journal file holding `entries` in order, a millisecond apart unless an entry says its time (AT),
    from `first_ms` after a fixed start (a second file written later into a followed folder, as a rotation
    would)."""
    assert JOURNAL_REMOTE is not None
    path = folder / name
    stream = b"".join(
        export_entry(
            {k: v for k, v in e.items() if k != AT}, int(e.get(AT, 1_800_000_000_000_000 + (first_ms + i) * 1000))
        )
        for i, e in enumerate(entries)
    )
    subprocess.run(
        [JOURNAL_REMOTE, "--split-mode=none", f"--output={path}", "-"],
        input=stream,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return path


def line(
    message: str | bytes,
    pid: str | bytes = "4242",
    invocation: str = "a" * 32,
    unit: str | bytes = UNIT,
    **extra: str | bytes,
) -> dict[str, str | bytes]:
    return {
        "_TRANSPORT": "stdout",
        "_PID": pid,
        "_SYSTEMD_UNIT": unit,
        "_SYSTEMD_INVOCATION_ID": invocation,
        "_COMM": "python3",
        "MESSAGE": message,
        **extra,
    }


def pid1(
    message: str, unit: str | bytes = UNIT, pid: str = "1", scope: str = "init.scope", **extra: str | bytes
) -> dict[str, str | bytes]:
    return {
        "_TRANSPORT": "journal",
        "_PID": pid,
        "_SYSTEMD_UNIT": scope,
        "_COMM": "systemd",
        "UNIT": unit,
        "INVOCATION_ID": "a" * 32,
        "MESSAGE": message,
        **extra,
    }


def crash_loop_entries() -> list[dict[str, str | bytes]]:
    """Two crashed runs of UNIT with SGLang's traceback and PID 1's records."""
    entries: list[dict[str, str | bytes]] = []
    for run in (1, 2):
        invocation = f"{run:032x}"
        entries += [line(text, pid=str(100 + run), invocation=invocation) for text in TRACEBACK]
        entries += [
            {
                **pid1(
                    f"{UNIT}: Main process exited, code=exited, status=1/FAILURE",
                    MESSAGE_ID=EXITED,
                    EXIT_CODE="exited",
                    EXIT_STATUS="1",
                ),
                "INVOCATION_ID": invocation,
            },
            {
                **pid1(f"{UNIT}: Failed with result 'exit-code'.", MESSAGE_ID=FAILED, UNIT_RESULT="exit-code"),
                "INVOCATION_ID": invocation,
            },
            pid1(
                f"{UNIT}: Scheduled restart job, restart counter is at {run}.", MESSAGE_ID=RESTART, N_RESTARTS=str(run)
            ),
        ]
    return entries
