"""What the reader's libsystemd matches let through while the journal is followed, with both batch readers.

The matches name the watched units, so a unit that matches a glob but was not in the journal when the
reader opened must still be read: PID 1's start record names it (its lines printed before that record
are read back), D-Bus may name it first, and a configuration reload matches what the new rules watch.
Real journal files; a second file written into the followed folder later, as a rotation would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crashdoc.events import Lifecycle, LifecycleRecord, LogLine, WatchRule
from crashdoc.sources import journal as journal_source
from crashdoc.sources.journal import JournalSource, UnitFilter
from support.journal_files import line, needs_journal_remote, pid1, write_journal

pytestmark = needs_journal_remote
STARTED = "39f53479d3a045ac8e11786248231fbf"
NEW = "sglang-new.service"


def noise(n: int, start: int = 0) -> list[dict[str, str | bytes]]:
    return [line(f"kubelet line {i}", pid="77", unit="kubelet.service") for i in range(start, start + n)]


@pytest.fixture(params=["systemd-python", "C"])
def build_dir(request, tmp_path: Path) -> Path | None:
    return None if request.param == "systemd-python" else tmp_path / "build"


def follow(folder: Path, build_dir: Path | None, rules=("sglang*.service",)) -> JournalSource:
    source = JournalSource(UnitFilter([WatchRule(r) for r in rules]), directory=str(folder), build_dir=build_dir)
    if build_dir is not None and source._batch is None:
        pytest.skip(f"the C batch reader cannot be built here: {source.fast_reader}")
    source.fileno()  # watch the folder (inotify), as the daemon does
    source.seek_head()
    return source


def read_on(source: JournalSource) -> list[LogLine | LifecycleRecord]:
    source.process()
    out: list[LogLine | LifecycleRecord] = []
    while True:
        out += source.read(100)
        if source.at_end:
            return out


def texts(events) -> list[str]:
    return [e.text if isinstance(e, LogLine) else f"<{e.kind} {e.unit}>" for e in events]


def test_a_unit_new_to_the_journal_is_found_by_pid1s_start_record(tmp_path: Path, build_dir) -> None:
    write_journal(tmp_path, [*noise(50), line("prefill ready")])
    source = follow(tmp_path, build_dir)
    assert texts(read_on(source)) == ["prefill ready"]
    write_journal(
        tmp_path,
        [
            *noise(20, 50),
            line("printed before PID 1's record", pid="900", unit=NEW, _CMDLINE="python3 -m sglang.launch_server"),
            pid1(f"Started {NEW}.", unit=NEW, MESSAGE_ID=STARTED, JOB_TYPE="start", JOB_RESULT="done"),
            *[line(f"new {i}", pid="900", unit=NEW) for i in range(3)],
            *noise(20, 70),
            line("new 3", pid="901", unit=NEW),
        ],
        name="later.journal",
        first_ms=1_000,
    )
    got = read_on(source)
    assert texts(got) == [
        "printed before PID 1's record",
        f"<{Lifecycle.STARTED} {NEW}>",
        "new 0",
        "new 1",
        "new 2",
        "new 3",
    ]
    assert [(e.unit, e.pid, bool(e.cmdline)) for e in got if isinstance(e, LogLine)][::3] == [
        (NEW, 900, True),
        (NEW, 900, False),
    ]
    assert source.stats.entries < 50 + 20 + 20 + 8, "the kubelet lines never reached Python"


def test_units_dbus_names_are_matched_before_they_write(tmp_path: Path, build_dir) -> None:
    write_journal(tmp_path, [*noise(10), line("prefill ready")])
    source = follow(tmp_path, build_dir)
    read_on(source)
    source.watch_units(["sglang-quiet.service", "kubelet.service"])  # kubelet: not watched, not matched
    write_journal(
        tmp_path,
        [line("quiet at last", pid="5", unit="sglang-quiet.service"), *noise(5, 10)],
        name="later.journal",
        first_ms=1_000,
    )
    assert texts(read_on(source)) == ["quiet at last"]


def test_a_reload_matches_what_the_new_rules_watch(tmp_path: Path, build_dir) -> None:
    write_journal(tmp_path, [line("decode 0", pid="8", unit="sglang-decode.service"), line("prefill 0")])
    source = follow(tmp_path, build_dir, rules=("sglang-prefill.service",))
    assert texts(read_on(source)) == ["prefill 0"]
    source.rewatch([WatchRule("sglang-decode.service")])
    write_journal(
        tmp_path,
        [line("decode 1", pid="8", unit="sglang-decode.service"), line("prefill 1")],
        name="later.journal",
        first_ms=1_000,
    )
    assert texts(read_on(source)) == ["decode 1"]


def test_both_readers_make_lines_with_the_one_definition(tmp_path: Path, monkeypatch) -> None:
    """fastread.c does not build lines itself: a change to `line_of` reaches both readers."""
    write_journal(tmp_path, [line(f"line {i}") for i in range(5)] + [line("\x1b[31mred\x1b[0m \xe9")])

    def tagged(template: LogLine, text: str, timestamp: float) -> LogLine:
        return LogLine(template.unit, template.pid, "tagged: " + text, timestamp, template.invocation)

    monkeypatch.setattr(journal_source, "line_of", tagged)
    by_python = read_on(follow(tmp_path, None))
    by_c = read_on(follow(tmp_path, tmp_path / "build"))
    assert by_c == by_python
    assert texts(by_c) == [*(f"tagged: line {i}" for i in range(5)), "tagged: red \xe9"]


def test_the_journal_ends_are_read_whatever_the_matches(tmp_path: Path) -> None:
    """The lag metric, the newest entry read (caught up: passed) and diagnose's progress need the journal's
    first and last entries, which the matches may well skip (a neighbour's lines)."""
    write_journal(tmp_path, [*noise(3), line("prefill ready"), *noise(3, 3)])
    source = follow(tmp_path, None)
    assert source.newest_timestamp(oldest=True) == 1_800_000_000.0
    assert source.newest_timestamp() == 1_800_000_000.006
    assert texts(read_on(source)) == ["prefill ready"] and source.stats.last_timestamp == 1_800_000_000.006
