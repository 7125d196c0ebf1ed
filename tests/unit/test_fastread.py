"""The C batch reader is optional: where it cannot be built, `diagnose` and the daemon read with
systemd-python alone and give the same answers (the daemon says why, once); a failed build is not
retried on every run."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashdoc.events import LogLine, WatchRule
from crashdoc.sources import fastread
from crashdoc.sources.journal import JournalSource, UnitFilter
from support.journal_files import TRACEBACK, line, write_journal


def _events(folder: Path, build_dir: Path) -> tuple[list[object], JournalSource]:
    source = JournalSource(
        UnitFilter((WatchRule("sglang*.service"),)), directory=str(folder), once=True, build_dir=build_dir
    )
    source.seek_head()
    out: list[object] = []
    while True:
        out.extend(source.read(100))
        if source.at_end:
            return out, source


def test_without_a_compiler_the_journal_is_read_with_systemd_python(tmp_path: Path, monkeypatch) -> None:
    write_journal(tmp_path, [line(text) for text in TRACEBACK])
    expected, _ = _events(tmp_path, tmp_path / "none-built")  # whatever this machine builds
    monkeypatch.setattr(fastread.shutil, "which", lambda name: None)
    got, source = _events(tmp_path, tmp_path / "no-compiler")
    assert source._batch is None and not (tmp_path / "no-compiler").exists()
    assert got == expected and [e.text for e in got if isinstance(e, LogLine)] == TRACEBACK


def test_a_failed_build_is_remembered_and_not_retried_at_once(tmp_path: Path, monkeypatch) -> None:
    write_journal(tmp_path, [line(text) for text in TRACEBACK])
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    monkeypatch.setattr(fastread.shutil, "which", lambda name: "/bin/false" if name == "false" else None)
    _, source = _events(tmp_path, tmp_path / "build")
    assert source._batch is None
    (marker,) = (tmp_path / "build").glob("fastread-*.failed")
    calls = []
    monkeypatch.setattr(fastread.subprocess, "run", lambda *a, **k: calls.append(a))
    got, source = _events(tmp_path, tmp_path / "build")
    assert source._batch is None and calls == [] and marker.exists()
    assert [e.text for e in got if isinstance(e, LogLine)] == TRACEBACK


def test_the_daemon_says_once_why_it_reads_with_systemd_python(tmp_path: Path, monkeypatch, capfd) -> None:
    """The daemon reads through the C batch reader too; where it cannot be built it reads the same events with
    systemd-python and says why, once, at start."""
    from support.file_daemon import file_daemon

    journal = tmp_path / "journal"
    journal.mkdir()
    write_journal(journal, [line(text) for text in TRACEBACK])

    def daemon():
        d = file_daemon(journal, tmp_path / "state")
        d.prepare()
        d.source.seek_head()
        d._drain()
        return d

    fast = daemon()
    if fast.source._batch is None:
        pytest.skip(f"the C batch reader cannot be built here: {fast.source.fast_reader}")
    assert "C batch reader" not in capfd.readouterr().err
    monkeypatch.setattr(fastread.shutil, "which", lambda name: None)
    monkeypatch.setattr(fastread, "_built", lambda folder: (None, "no C compiler (cc or gcc)"))
    slow = daemon()
    said = capfd.readouterr().err
    assert said.count("the C batch reader is not in use: no C compiler (cc or gcc)") == 1, said
    assert slow.source._batch is None
    assert (slow.source.stats.lines, slow.source.stats.entries) == (fast.source.stats.lines, fast.source.stats.entries)
    assert slow.source.stats.lines == len(TRACEBACK)
