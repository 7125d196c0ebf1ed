"""The C batch reader is optional: where it cannot be built, `diagnose` and the daemon read with
systemd-python alone and give the same answers (the daemon says why, once); a failed build is not
retried on every run."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from crashdoc.events import LogLine, WatchRule
from crashdoc.sources import fastread
from crashdoc.sources.journal import JournalSource, UnitFilter
from support.journal_files import TRACEBACK, line, pid1, write_journal


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
    monkeypatch.setattr(shutil, "which", lambda name: None)
    got, source = _events(tmp_path, tmp_path / "no-compiler")
    assert source._batch is None and not (tmp_path / "no-compiler").exists()
    assert got == expected and [e.text for e in got if isinstance(e, LogLine)] == TRACEBACK


def test_a_failed_build_is_remembered_and_not_retried_at_once(tmp_path: Path, monkeypatch) -> None:
    write_journal(tmp_path, [line(text) for text in TRACEBACK])
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    monkeypatch.setattr(shutil, "which", lambda name: "/bin/false" if name == "false" else None)
    _, source = _events(tmp_path, tmp_path / "build")
    assert source._batch is None
    (marker,) = (tmp_path / "build").glob("fastread-*.failed")
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a))
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
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(fastread, "built_library", lambda folder, path=None: (None, "no C compiler (cc or gcc)"))
    slow = daemon()
    said = capfd.readouterr().err
    assert said.count("the C batch reader is not in use: no C compiler (cc or gcc)") == 1, said
    assert slow.source._batch is None
    assert (slow.source.stats.lines, slow.source.stats.entries) == (fast.source.stats.lines, fast.source.stats.entries)
    assert slow.source.stats.lines == len(TRACEBACK)


def test_reading_ahead_gives_the_same_events_and_positions_as_reading_in_turn(tmp_path: Path) -> None:
    """`diagnose`, and the daemon while it catches up, read ahead (the next batch walked in a thread while the
    engine works): the same events, in order, and the same cursor after each read as the reader of a daemon
    that caught up (the plain batch reader); placing the reader or asking it anything in between waits for the
    walk and goes back to the last entry handed out."""
    unit = "sglang-decode.service"
    entries = []
    for run in range(3):  # each run: new processes (their first lines stop a batch), then PID 1's records
        for i in range(400):
            entries.append(line(f"Decode batch {run}-{i}", pid=str(100 + run * 10 + i % 3), unit=unit))
        entries.append(pid1("Main process exited, code=exited, status=1/FAILURE", unit=unit))
        entries.append(pid1("Started nginx.service.", unit="nginx.service"))  # a unit not watched: ends a walk
    write_journal(tmp_path, entries)
    units = UnitFilter((WatchRule("sglang*.service"),))

    def source(once: bool) -> JournalSource:
        s = JournalSource(units, directory=str(tmp_path), once=once, build_dir=tmp_path / "build")
        s.seek_head()
        return s

    ahead, turn = source(True), source(False)
    turn._following = True  # a daemon that caught up: the plain batch reader
    if ahead._ahead is None:
        pytest.skip(f"the C batch reader cannot be built here: {ahead.fast_reader}")
    got: list[object] = []
    expected: list[object] = []
    while not turn.at_end:  # the daemon's reader, in batches as long as the ahead reader's
        batch = ahead.read(150)
        got += batch
        expected += turn.read(ahead.stats.entries - turn.stats.entries) if not ahead.at_end else turn.read(10_000)
        assert (ahead.cursor, ahead.stats.last_timestamp) == (turn.cursor, turn.stats.last_timestamp)
        if len(got) > 500 and len(got) - len(batch) <= 500:
            assert ahead._ahead.position() is not None  # a walk runs past what was handed out
            ahead.newest_timestamp()  # the lag: the files' headers, the walk waited for and kept
            assert ahead._ahead.position() is not None
            ahead.fileno()  # uses the reader: the walk is dropped, the reader goes back
            assert ahead._ahead.position() is None
    while not ahead.at_end:
        got += ahead.read(150)
    assert got == expected and len([e for e in got if isinstance(e, LogLine)]) == 1_200


def test_the_first_walk_starts_where_the_reader_was_placed(tmp_path: Path) -> None:
    """`diagnose` starts walking right after placing the reader (at the head, or at a time: on no entry yet) while
    it loads its library: the same events as reading in turn; asked anything before its first read, the walk is
    dropped and the reader placed again where it was."""
    unit = "sglang-decode.service"
    entries = [line(f"Decode batch {i}", pid=str(100 + i % 3), unit=unit) for i in range(600)]
    entries.insert(300, pid1("Main process exited, code=exited, status=1/FAILURE", unit=unit))
    write_journal(tmp_path, entries)  # a millisecond apart from 1_800_000_000 s
    units = UnitFilter((WatchRule("sglang*.service"),))

    def events(since: float | None, start: bool, ask: bool) -> list[object]:
        s = JournalSource(units, directory=str(tmp_path), once=True, build_dir=tmp_path / "build")
        if s._ahead is None:
            pytest.skip(f"the C batch reader cannot be built here: {s.fast_reader}")
        s.seek_head() if since is None else s.seek_since(since)
        if start:
            s.start_reading(100)
            assert s._ahead is not None and s._ahead.position() is None  # no entry handed out yet
        if ask:
            assert s.newest_timestamp() == 1_800_000_000.6  # the last of 601 entries; the walk waited for, kept
            s.fileno()  # uses the reader: the walk is dropped, the reader placed again
        out: list[object] = []
        while not s.at_end:
            out += s.read(100)
        return out

    for since, lines in ((None, 600), (1_800_000_000.2505, 349)):
        plain = events(since, start=False, ask=False)
        assert len([e for e in plain if isinstance(e, LogLine)]) == lines
        assert events(since, start=True, ask=False) == plain
        assert events(since, start=True, ask=True) == plain


def test_the_daemon_reads_ahead_while_it_catches_up_and_reads_in_turn_once_caught_up(tmp_path: Path) -> None:
    """The daemon's reader walks ahead through a backlog, stops walking at the journal's end, and follows what
    is written next with the plain batch reader (no walk holds the reader between two wake-ups)."""
    unit = "sglang-decode.service"
    write_journal(tmp_path, [line(f"Decode batch {i}", pid="100", unit=unit) for i in range(1_000)])
    source = JournalSource(
        UnitFilter((WatchRule("sglang*.service"),)), directory=str(tmp_path), build_dir=tmp_path / "build"
    )
    if source._ahead is None:
        pytest.skip(f"the C batch reader cannot be built here: {source.fast_reader}")
    source.seek_head()
    got = source.read(300)
    assert source._ahead.position() is not None  # behind: the next batch is walked while the caller works
    while not source.at_end:
        got += source.read(300)
    assert [e.text for e in got if isinstance(e, LogLine)] == [f"Decode batch {i}" for i in range(1_000)]
    assert source._ahead.position() is None  # at the end: no walk goes on
    assert source.read(300) == [] and source.at_end and source._ahead.position() is None


def test_a_time_places_the_reader_where_systemd_pythons_reader_places_it(tmp_path: Path) -> None:
    """The source opens systemd-python's C reader (`_Reader`) and converts `--since` to microseconds itself: the
    first entry read is the one `systemd.journal.Reader.seek_realtime` finds, on an entry's microsecond, between
    two entries, before the first and after the last."""
    from datetime import datetime

    from systemd import journal

    unit = "sglang-decode.service"
    write_journal(tmp_path, [line(f"Decode batch {i}", pid="100", unit=unit) for i in range(50)])
    units = UnitFilter((WatchRule("sglang*.service"),))
    for since in (1_800_000_000.0205, 1_800_000_000.021, 1_800_000_000.020999, 1_799_999_999.0, 1_800_000_001.0):
        reference = journal.Reader(path=str(tmp_path))
        reference.seek_realtime(datetime.fromtimestamp(since))
        expected = [e["MESSAGE"] for e in reference]
        for build in (None, tmp_path / "build"):  # systemd-python's batches and the C reader's
            source = JournalSource(units, directory=str(tmp_path), once=True, build_dir=build)
            source.seek_since(since)
            got: list[object] = []
            while not source.at_end:
                got += source.read(20)
            assert [e.text for e in got if isinstance(e, LogLine)] == expected, (since, build)


def test_walking_says_whether_a_read_now_would_wait_for_the_walk(tmp_path: Path) -> None:
    """`diagnose` prepares its remedy stage while the next batch is walked: `walking()` is True only while a walk
    runs (a read would wait for it), never without the C reader, and False once the journal's end is reached."""
    unit = "sglang-decode.service"
    write_journal(tmp_path, [line(f"Decode batch {i}", pid="100", unit=unit) for i in range(3_000)])
    units = UnitFilter((WatchRule("sglang*.service"),))
    plain = JournalSource(units, directory=str(tmp_path), once=True)
    plain.seek_head()
    assert not plain.walking() and plain.read(100) and not plain.walking()
    source = JournalSource(units, directory=str(tmp_path), once=True, build_dir=tmp_path / "build")
    if source._ahead is None:
        pytest.skip(f"the C batch reader cannot be built here: {source.fast_reader}")
    source.seek_head()
    got = source.read(1_000)
    while not source.at_end:
        deadline = time.monotonic() + 30
        while source.walking():  # the walk of the next batch, started by the read, ends by itself
            assert time.monotonic() < deadline, "the walk did not end"
            time.sleep(0.001)
        got += source.read(1_000)
    assert not source.walking()
    assert [e.text for e in got if isinstance(e, LogLine)] == [f"Decode batch {i}" for i in range(3_000)]
