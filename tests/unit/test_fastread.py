"""The C batch reader is optional: where it cannot be built, `diagnose` reads with systemd-python
alone and gives the same answers; a failed build is not retried on every run."""

from __future__ import annotations

from pathlib import Path

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
