"""Bad input (issue 2): a journal without the asked-for unit, files that are not what a command reads,
a damaged or unreadable state file. Each gives a clear message and a documented exit status, never a
traceback (diagnose, explain: 0 no failure, 1 a failure, 3 an input not read, said on stderr; 2 usage).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from crashdoc.sources.cursor import CursorStore
from support.e2e import CRASHDOC, free_port
from support.journal_files import (
    DSV4,
    TRACEBACK,
    UNIT,
    crash_loop_entries,
    needs_journal_remote,
    write_journal,
)


def crashdoc(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*CRASHDOC, *args], input=stdin or b"", capture_output=True, timeout=120)
    out = subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(), r.stderr.decode())
    assert "Traceback" not in out.stderr, out.stderr
    return out


# --- diagnose ------------------------------------------------------------------------------------------


@needs_journal_remote
def test_diagnose_a_unit_the_journal_does_not_hold(tmp_path: Path) -> None:
    journal = write_journal(tmp_path, crash_loop_entries())
    r = crashdoc("diagnose", "--unit", "sglang-decode.service", "--file", str(journal))
    assert r.returncode == 3 and r.stdout == ""
    assert r.stderr == "crashdoc: sglang-decode.service: no such unit in these journal files\n"
    # one found, one missing: the diagnosis, the other named; the worst (not read) is the exit status
    r = crashdoc("diagnose", "--json", "--unit", "sglang-decode", "--unit", UNIT, "--file", str(journal))
    assert r.returncode == 3
    assert r.stderr == "crashdoc: sglang-decode: no such unit in these journal files\n"
    assert json.loads(r.stdout)["problems"] == ["sglang-decode: no such unit in these journal files"]
    [d] = json.loads(r.stdout)["diagnoses"]
    assert d["unit"] == UNIT and d["root_cause"]["line"] == DSV4 and d["restarts"] == 2


@needs_journal_remote
def test_diagnose_names_each_file_that_is_no_journal(tmp_path: Path) -> None:
    good = write_journal(tmp_path, crash_loop_entries())
    text = tmp_path / "sglang.log"
    text.write_text("\n".join(TRACEBACK))
    empty = tmp_path / "empty.journal"
    empty.touch()
    folder = tmp_path / "folder"
    folder.mkdir()
    missing = tmp_path / "missing.journal"
    r = crashdoc("diagnose", "--no-verify", *(f"--file={p}" for p in (good, text, empty, folder, missing)))
    assert r.returncode == 3 and DSV4 in r.stdout  # the journal file is diagnosed, each other file is named
    assert r.stderr.splitlines() == [
        f"crashdoc: {empty} is empty, not a journal file",
        f"crashdoc: {folder} is a folder: use --directory {folder}",
        f"crashdoc: cannot read {missing}: No such file or directory",
        f"crashdoc: {text} is not a journal file (a text log? use `crashdoc explain {text}`)",
    ]
    r = crashdoc("diagnose", "--directory", str(missing))
    assert r.returncode == 3
    assert r.stderr == f"crashdoc: journal folder {missing} does not exist\n"


# --- explain -------------------------------------------------------------------------------------------


@needs_journal_remote
def test_explain_says_what_a_file_is_when_it_is_no_text_log(tmp_path: Path) -> None:
    journal = write_journal(tmp_path, crash_loop_entries())
    compressed = tmp_path / "sglang.log.gz"
    compressed.write_bytes(gzip.compress("\n".join(TRACEBACK).encode()))
    binary = tmp_path / "core"
    binary.write_bytes(b"\x7fELF\x02\x01\x01" + os.urandom(4096))
    empty = tmp_path / "empty.log"
    empty.touch()
    folder = tmp_path / "logs"
    folder.mkdir()
    cases = {
        journal: f"a journal file, not a text log: use `crashdoc diagnose --file {journal}`",
        compressed: f"gzip-compressed: `zcat {compressed} | crashdoc explain -`",
        binary: "binary data, not a text log",
        empty: "empty file, nothing to diagnose",
        folder: "Is a directory",
        tmp_path / "missing.log": "No such file or directory",
    }
    for path, reason in cases.items():
        r = crashdoc("explain", str(path))
        assert (r.returncode, r.stdout, r.stderr) == (3, "", f"crashdoc: cannot read {path}: {reason}\n")


def test_explain_still_reads_a_log_with_some_junk_and_stdin(tmp_path: Path) -> None:
    """A log with a few NUL, invalid or escape bytes is text: it is read, not refused."""
    log = tmp_path / "sglang.log"
    log.write_bytes(b"\x00\xff\x1b[31mstart\x1b[0m\n" + "\n".join(TRACEBACK).encode() + b"\n")
    r = crashdoc("explain", str(log))
    assert r.returncode == 1 and DSV4 in r.stdout
    r = crashdoc("explain", stdin=log.read_bytes())
    assert r.returncode == 1 and DSV4 in r.stdout
    r = crashdoc("explain", stdin=b"")
    assert (r.returncode, r.stdout, r.stderr) == (3, "", "crashdoc: standard input is empty, nothing to diagnose\n")


# --- the state file ------------------------------------------------------------------------------------

DAMAGED = {
    "not-json": b'{"version": 1, "cursor": ',
    "binary": bytes(range(256)) * 4,
    "other-version": b'{"version": 99, "cursor": "s=1;i=2"}',
    "cursor-not-text": b'{"version": 1, "cursor": 5}',
    "engine-not-base64": b'{"version": 1, "cursor": "s=1;i=2", "engine": "***"}',
    "engine-wrong-type": b'{"version": 1, "cursor": "s=1;i=2", "engine": 5}',
    "saved-at-list": b'{"version": 1, "cursor": "s=1;i=2", "saved_at": [1]}',
    "saved-at-infinite": b'{"version": 1, "cursor": "s=1;i=2", "saved_at": "1e999"}',
    "deeply-nested": b"[" * 100_000 + b"]" * 100_000,
    "empty": b"",
}


@pytest.mark.parametrize("damage", DAMAGED, ids=list(DAMAGED))
def test_a_damaged_state_file_is_a_warning_and_a_fresh_start(tmp_path: Path, damage: str) -> None:
    (tmp_path / "state.json").write_bytes(DAMAGED[damage])
    saved = CursorStore(tmp_path).load()
    assert saved.cursor is None and saved.engine is None and saved.legacy_engine == b""
    assert saved.warning.startswith(f"{tmp_path / 'state.json'} is unreadable (")
    assert saved.warning.endswith(f" (kept as {tmp_path / 'state.json.unusable'}); starting at the journal's end")
    # kept aside, byte for byte: the next save does not destroy what another crashdoc might still read
    assert not (tmp_path / "state.json").exists()
    assert (tmp_path / "state.json.unusable").read_bytes() == DAMAGED[damage]


def test_an_unreadable_state_file_is_a_warning_too(tmp_path: Path) -> None:
    (tmp_path / "state.json").mkdir()
    saved = CursorStore(tmp_path).load()
    assert saved.cursor is None
    assert saved.warning == f"cannot read {tmp_path / 'state.json'}: Is a directory; starting at the journal's end"


@needs_journal_remote
@pytest.mark.parametrize("damage", ["not-json", "engine-wrong-type", "directory"])
def test_the_daemon_starts_at_the_journal_end_after_a_damaged_state_file(tmp_path: Path, damage: str) -> None:
    """`crashdoc run` over a journal folder that already holds a crash loop, with a damaged state file:
    it says so once, starts at the end (the old loop is history, not news) and runs."""
    folder = tmp_path / "journal"
    folder.mkdir()
    write_journal(folder, crash_loop_entries())
    state = tmp_path / "state"
    state.mkdir()
    if damage == "directory":
        (state / "state.json").mkdir()
    else:
        (state / "state.json").write_bytes(DAMAGED[damage])
    config = tmp_path / "crashdoc.yaml"
    config.write_text("dbus: false\n")
    port = free_port()
    log = tmp_path / "crashdoc.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *CRASHDOC,
                "run",
                "--config",
                str(config),
                "--directory",
                str(folder),
                "--state-directory",
                str(state),
                "--listen",
                f"127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        body = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and "crashdoc_journal_entries_read" not in body:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    body = response.read().decode()
            except OSError:
                time.sleep(0.2)
        assert proc.poll() is None, log.read_text()
        time.sleep(2)  # a start from the head would have read the loop by now
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read().decode()
        text = log.read_text()
        assert "starting at the journal's end" in text and "Traceback" not in text, text
        assert "crashdoc_unit_crashloop{" not in body and "crashdoc_unit_restarts_total{" not in body
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0


def test_an_unknown_error_naming_a_secret_flag_shows_its_value_redacted(tmp_path: Path) -> None:
    key = "sk-abcdefabcdefabcdef12"
    log = tmp_path / "crash.log"
    log.write_text(
        f"[2026-05-01 12:00:01] server_args=ServerArgs(model_path='m', api_key='{key}', enable_metrics=True)\n"
        "[2026-05-01 12:00:02] Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/server_args.py", line 9, in _handle_auth\n'
        "ValueError: --api-key cannot be combined with --enable-metrics.\n"
    )
    for args in (("--json",), ()):
        r = crashdoc("explain", str(log), *args)
        assert r.returncode == 1 and key not in r.stdout and key[:8] not in r.stdout
        assert "This run has --api-key <redacted>" in r.stdout and "--enable-metrics" in r.stdout
