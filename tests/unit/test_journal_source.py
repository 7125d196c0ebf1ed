"""The journal source over real journal files (written by systemd-journal-remote from export format).

What it reads decides what crashdoc believes, so the trust rules are pinned here: only PID 1
(`_PID=1`, a field journald sets and no process can forge) speaks for systemd; kernel OOM lines
and systemd-coredump records name their unit; binary fields do not break anything.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from crashdoc.events import Lifecycle, LifecycleRecord, LogLine, WatchRule
from crashdoc.sources.journal import JournalSource, UnitFilter
from support.journal_files import needs_journal_remote, write_journal

pytestmark = needs_journal_remote
UNIT = "sglang-prefill.service"
INV = "a1b2c3d4e5f60718293a4b5c6d7e8f90"


def pid1(message_id: str, message: str, **fields: str) -> dict[str, str | bytes]:
    return {
        "_PID": "1",
        "_SYSTEMD_UNIT": "init.scope",
        "_COMM": "systemd",
        "UNIT": UNIT,
        "MESSAGE_ID": message_id,
        "MESSAGE": f"{UNIT}: {message}",
        "INVOCATION_ID": INV,
        **fields,
    }


def line(text: str | bytes, pid: str = "4242", **fields: str) -> dict[str, str | bytes]:
    return {
        "_PID": pid,
        "_SYSTEMD_UNIT": UNIT,
        "_SYSTEMD_INVOCATION_ID": INV,
        "MESSAGE": text,
        "_CMDLINE": "/opt/venv/bin/python -m sglang.launch_server --tp-size 2",
        **fields,
    }


def read_all(path: Path) -> list[LogLine | LifecycleRecord]:
    source = JournalSource(UnitFilter([WatchRule("sglang*.service")]), files=[str(path)])
    source.seek_head()
    events: list[LogLine | LifecycleRecord] = []
    while True:
        events += source.read(100)
        if source.at_end:
            return events


def test_only_pid1_speaks_for_systemd(tmp_path: Path) -> None:
    journal = write_journal(
        tmp_path,
        [
            pid1("5eb03494b6584870a536b337290809b3", "Scheduled restart job, restart counter is at 3.", N_RESTARTS="3"),
            pid1(
                "98e322203f7a4ed290d09fe03c09fe15",
                "Main process exited, code=killed, status=9/KILL",
                EXIT_CODE="killed",
                EXIT_STATUS="9",
            ),
            # a service forging PID 1's record through the native protocol keeps its own _PID and unit
            {
                **pid1(
                    "5eb03494b6584870a536b337290809b3",
                    "Scheduled restart job, restart counter is at 99.",
                    N_RESTARTS="99",
                ),
                "_PID": "4242",
                "_SYSTEMD_UNIT": UNIT,
            },
            line("sglang-prefill.service: Scheduled restart job, restart counter is at 98."),
            pid1("", "Start request repeated too quickly."),
        ],
    )
    events = read_all(journal)
    records = [e for e in events if isinstance(e, LifecycleRecord)]
    assert [(r.kind, r.n_restarts) for r in records] == [
        (Lifecycle.RESTART_SCHEDULED, 3),
        (Lifecycle.EXITED, None),
        (Lifecycle.START_LIMIT_HIT, None),
    ]
    assert (records[1].exit_code, records[1].exit_status, records[1].invocation) == ("killed", "KILL", INV)
    lines = [e for e in events if isinstance(e, LogLine)]
    assert len(lines) == 2, "the forged record and the printed line are ordinary lines of the unit"


def test_kernel_oom_lines_and_core_dumps_name_their_unit(tmp_path: Path) -> None:
    journal = write_journal(
        tmp_path,
        [
            {
                "_TRANSPORT": "kernel",
                "MESSAGE": "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
                f"mems_allowed=0,oom_memcg=/system.slice/{UNIT},task_memcg=/system.slice/{UNIT},task=python3,pid=77,uid=0",
            },
            {
                "_TRANSPORT": "kernel",
                "MESSAGE": "oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/system.slice/x.service",
            },
            {"_TRANSPORT": "stdout", "MESSAGE": f"oom-kill:task_memcg=/system.slice/{UNIT}"},  # not the kernel
            {
                "_PID": "900",
                "_UID": "0",
                "_SYSTEMD_UNIT": "systemd-coredump@0-900-0.service",
                "MESSAGE_ID": "fc2e22bc6ee647b6b90729ab34a250b1",
                "COREDUMP_UNIT": UNIT,
                "COREDUMP_SIGNAL_NAME": "SIGSEGV",
                "MESSAGE": "Process 4242 (python3) of user 0 dumped core.",
            },
        ],
    )
    records = [e for e in read_all(journal) if isinstance(e, LifecycleRecord)]
    assert [(r.kind, r.unit) for r in records] == [(Lifecycle.OOM_KILL, UNIT), (Lifecycle.COREDUMP, UNIT)]
    assert records[1].exit_status == "SEGV"


def test_binary_and_broken_fields_are_read_as_text(tmp_path: Path) -> None:
    journal = write_journal(
        tmp_path,
        [
            line(b"bytes \xff\xfe not utf-8 \x00 with a NUL"),
            line("\x1b[1;33mcoloured\x1b[0m"),
            line("x" * 200_000),
            {"_PID": "4242", "_SYSTEMD_UNIT": UNIT},  # no MESSAGE at all
            line("after", pid="not-a-number"),
        ],
    )
    lines = [e for e in read_all(journal) if isinstance(e, LogLine)]
    assert lines[0].text.startswith("bytes \ufffd\ufffd not utf-8 \x00")
    assert lines[0].cmdline.endswith("--tp-size 2") and lines[0].invocation == INV
    assert len(lines[2].text) == 16 * 1024, "very long lines are cut"
    assert (lines[-1].text, lines[-1].pid) == ("after", 0), "a PID that is no number does not stop reading"


@pytest.mark.skipif(shutil.which("journalctl") is None, reason="journalctl missing")
def test_diagnose_reads_journal_files(tmp_path: Path) -> None:
    import contextlib
    import io
    import json

    from crashdoc.cli import main

    tb = [
        "[2026-05-01 12:00:03 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/x/sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py", line 661, in f',
        "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead.",
        "",
    ]
    entries: list[dict[str, str | bytes]] = [line(t) for t in tb]
    entries += [
        pid1("98e322203f7a4ed290d09fe03c09fe15", "Main process exited", EXIT_CODE="killed", EXIT_STATUS="9"),
        pid1("d9b373ed55a64feb8242e02dbe79a49c", "Failed with result 'signal'.", UNIT_RESULT="signal"),
    ]
    journal = write_journal(tmp_path, entries)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["diagnose", "--file", str(journal), "--json"]) == 1  # a failure found
    [d] = json.loads(out.getvalue())["diagnoses"]
    assert d["signature"] == "dsv4-hicache-size-unsupported" and d["exit"] == "killed by SIGKILL"
    assert d["invocation"] == INV
