"""`diagnose`'s progress line: drawn on a terminal during a long read, erased at the end, never
written when stderr is a pipe or a file."""

from __future__ import annotations

import io
import os
import pty
import subprocess
from pathlib import Path

from crashdoc.outputs.progress import Progress
from support.e2e import CRASHDOC
from support.journal_files import TRACEBACK, line, write_journal
from support.terminal import read_pty


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_long_read_on_a_terminal_shows_entries_rate_and_time_left_then_erases_it() -> None:
    term, clock = Terminal(), Clock()
    progress = Progress(term, start=1_000.0, end=2_000.0, clock=clock)
    progress.update(10_000, 1_100.0)  # 0 s in: too early to say anything
    assert term.getvalue() == ""
    clock.now += 2.0
    progress.update(200_000, 1_250.0)  # a quarter of the journal's time span in 2 s
    shown = term.getvalue()
    assert "200,000 entries" in shown and "100,000/s" in shown and "about 6 s left" in shown
    clock.now += 0.1
    progress.update(210_000, 1_260.0)  # redrawn at most every 0.25 s
    assert term.getvalue() == shown
    clock.now += 60.0
    progress.update(5_000_000, 1_500.0)
    assert "about 1 min 02 s left" in term.getvalue()
    progress.finish()
    assert term.getvalue().endswith("\r\x1b[K")  # erased: the diagnosis prints on a clean line


def test_without_the_journal_span_the_line_has_no_time_left() -> None:
    term, clock = Terminal(), Clock()
    progress = Progress(term, start=None, end=None, clock=clock)
    clock.now += 5
    progress.update(50_000, None)
    assert "50,000 entries, 10,000/s\x1b[K" in term.getvalue() and "left" not in term.getvalue()


def test_nothing_is_written_to_a_pipe_or_a_file() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(out, start=0.0, end=10.0, after=0.0, clock=clock)
    for i in range(1, 5):
        clock.now += 1
        progress.update(i * 1000, float(i))
    progress.finish()
    assert not progress.enabled and out.getvalue() == ""


def _journal(tmp_path: Path) -> Path:
    entries = [line(text, pid="4100", unit="sglang-prefill.service") for text in TRACEBACK]
    write_journal(tmp_path, entries)
    return tmp_path


def test_diagnose_piped_writes_no_progress(tmp_path: Path) -> None:
    folder = _journal(tmp_path)
    out = subprocess.run([*CRASHDOC, "diagnose", "--directory", str(folder)], capture_output=True, text=True)
    assert out.returncode == 1, out.stderr  # a failure found
    assert "reading the journal" not in out.stderr and "\x1b[K" not in out.stderr
    assert "sglang-prefill" in out.stdout


def test_diagnose_on_a_terminal_leaves_no_progress_behind_after_a_short_read(tmp_path: Path) -> None:
    """A read shorter than a second draws nothing; whatever is on the terminal is the diagnosis."""
    folder = _journal(tmp_path)
    master, slave = pty.openpty()
    proc = subprocess.Popen([*CRASHDOC, "diagnose", "--directory", str(folder)], stdout=slave, stderr=slave)
    os.close(slave)
    seen = read_pty(master, proc).encode()
    os.close(master)
    assert proc.wait(timeout=60) == 1
    assert b"sglang-prefill" in seen and b"reading the journal" not in seen
