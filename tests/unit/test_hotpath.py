"""The hot path's fast forms give exactly the answers of the plain forms they replaced.

bench/ made these paths faster (profile-driven); these tests pin that the results did not move:
the marker search against one `re` alternation of the literals, the RE2 set's direct call against
the wrapper, and `JournalSource.read()` against a straightforward field-by-field reading.
"""

from __future__ import annotations

import os
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from crashdoc.assembly.markers import MARKERS, find_marker
from crashdoc.events import LogLine

_ALTERNATION = re.compile("|".join(re.escape(literal) for _, literal in MARKERS))
_KIND = {literal: kind for kind, literal in MARKERS}
_PIECES = [literal for _, literal in MARKERS] + [
    "Scheduler or DataParallelController",
    "[2026-12-01 10:00:00 TP0] ",
    "server_args",
    "KV Cache is",
    "terminated",
    "x",
    " ",
]


def _bench(*names: str) -> list[object]:
    """Names from the bench package (the repository root is not on sys.path in tests); skips the test
    where systemd-journal-remote, which builds the journals, is missing."""
    import importlib
    import sys
    from pathlib import Path

    import pytest

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    try:
        common = importlib.import_module("bench.common")
        gen = importlib.import_module("bench.journal_gen")
    finally:
        sys.path.remove(str(root))
    if common.JOURNAL_REMOTE is None:
        pytest.skip("systemd-journal-remote is not installed")
    return [getattr(common, n) if hasattr(common, n) else getattr(gen, n) for n in names]


def _reference(text: str) -> tuple[str, str] | None:
    m = _ALTERNATION.search(text)
    if m is None:
        return None
    kind = _KIND[m.group(0)]
    if kind == "terminated" and "Scheduler or DataParallelController" not in text:
        return None
    return kind, m.group(0)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=5), max_size=8))
def test_find_marker_is_the_leftmost_literal_like_the_alternation(parts: list[str]) -> None:
    text = "".join(parts)
    marker = find_marker(LogLine("u.service", 7, text))
    expected = _reference(text)
    assert (marker.kind if marker else None) == (expected[0] if expected else None)


def test_find_marker_on_real_lines() -> None:
    lines = {
        "[2026-12-01 10:00:05] The server is fired up and ready to roll!": "ready",
        "[2026-12-01 10:00:05] Received sigquit from a child process. It usually means the child failed.": "sigquit",
        "[2026-12-01 10:00:05] SIGQUIT received. signum=None, frame=None. "
        "It usually means one child failed.": "sigquit",
        "[2026-12-01 10:00:05] Subprocess scheduler_0 (pid=7) crashed with exit code -9. Triggering SIGQUIT for "
        "cleanup...": "child-crashed",
        "[2026-12-01 10:00:05 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 611584": "kv-cache",
        "[2026-12-01 10:00:05 TP0] Decode batch, #running-req: 37, cuda graph: True": "serving",
        "Child process terminated with exit code 1": None,
    }
    for text, kind in lines.items():
        marker = find_marker(LogLine("u.service", 7, text))
        assert (marker.kind if marker else None) == kind, text


def test_runs_share_their_markers_and_server_flags_text() -> None:
    """Every run of a unit logs the same markers and server arguments, and the daemon keeps sixteen runs a unit: the
    texts are interned (0.46 MB of copies after a 2M-entry catch-up), the values as they were."""
    from crashdoc.assembly.markers import parse_server_args

    args = "server_args=ServerArgs(model_path='/models/x', tp_size=8, hicache_size=150, attention_backend='fa3')"
    first, second = (find_marker(LogLine("u.service", 7, f"[2026-12-01 10:00:0{i} TP0] {args}")) for i in (1, 2))
    assert first is not None and second is not None and first.text == args and first.text is second.text
    one, two = parse_server_args("x " + args), parse_server_args(args + " y")
    assert (
        one
        == two
        == {"--model-path": "/models/x", "--tp-size": "8", "--hicache-size": "150", "--attention-backend": "fa3"}
    )
    assert all(a is b and one[a] is two[b] for a, b in zip(one, two, strict=True))


def test_line_set_hits_match_the_re2_wrapper() -> None:
    from crashdoc.matching.library import builtin_signature_dirs, load_library
    from crashdoc.matching.matcher import Matcher

    matcher = Matcher(load_library(builtin_signature_dirs())).compile()
    texts = [ex.text for sig in matcher.library.signatures for ex in sig.examples]
    texts += ["", "plain line", "ünïcödé ✓ line", "[2026-12-01 10:00:05 TP0] Decode batch, #running-req: 37"]
    line_set = matcher._line_set
    assert line_set._set is not None
    for text in texts:
        for line in text.splitlines() or [text]:
            assert line_set.hits(line) == (line_set._set.Match(line) or [])


def test_scan_line_is_the_marker_check_and_the_line_match_in_one_pass() -> None:
    """The engine's one RE2 pass per line names the marker literal `find_marker`'s own search finds
    (or says there are several), and returns what `match_line` returns."""
    from crashdoc.assembly.markers import _leftmost
    from crashdoc.matching.library import builtin_signature_dirs, load_library
    from crashdoc.matching.matcher import Matcher

    matcher = Matcher(load_library(builtin_signature_dirs()))
    lines = [line for sig in matcher.library.signatures for ex in sig.examples for line in ex.text.splitlines()]
    lines += [f"[2026-12-01 10:00:05 TP0] {literal} (x)" for _, literal in MARKERS]
    lines += [f"{MARKERS[0][1]} then {MARKERS[-1][1]}", f"{MARKERS[-1][1]} before {MARKERS[0][1]}"]
    lines += ["", "plain line", "ünïcödé ✓ line", "[2026-12-01 10:00:05 TP0] Decode batch, #running-req: 37"]
    seen = {"none": 0, "one": 0, "several": 0}
    for line in lines:
        literal, match = matcher.scan_line(line)
        leftmost = _leftmost(line)
        assert (literal is None) == (leftmost is None), line
        if literal:
            assert literal == leftmost, line
        log_line = LogLine("u.service", 7, line)
        assert find_marker(log_line, literal or None) == find_marker(log_line) if literal is not None else True
        assert match == matcher.match_line(line), line
        seen["none" if literal is None else "one" if literal else "several"] += 1
    assert seen["one"] >= len(MARKERS) and seen["several"] == 2 and seen["none"] > 100


def test_journal_read_returns_every_watched_line_as_a_plain_reading_does(tmp_path, monkeypatch) -> None:
    """`JournalSource.read()` (inlined, per-process cache, mapped pages released as it goes) against
    systemd-python's own converters."""
    import fnmatch

    (build,) = _bench("build")
    from systemd import journal

    from crashdoc.events import WatchRule
    from crashdoc.sources import journal as journal_source
    from crashdoc.sources.journal import JournalSource, UnitFilter

    monkeypatch.setattr(journal_source, "TRIM_ABOVE", 0)  # release the mapped pages at every check on the way
    monkeypatch.setattr(journal_source, "TRIM_CHECK_EVERY", 100)
    js = build(8_000, seed=5, folder=tmp_path / "j", crash_every=(1_500, 3_000))
    files = [str(f) for f in js.files]
    expected = []
    for e in journal.Reader(files=files):
        unit = e.get("_SYSTEMD_UNIT", "")
        if not fnmatch.fnmatchcase(unit, "sglang*.service") or "MESSAGE" not in e or "_PID" not in e:
            continue
        invocation = e.get("_SYSTEMD_INVOCATION_ID")
        expected.append(
            (
                unit,
                e["_PID"],
                e["MESSAGE"],
                getattr(invocation, "hex", invocation or ""),
                round(e["__REALTIME_TIMESTAMP"].timestamp(), 6),
            )
        )
    source = JournalSource(UnitFilter((WatchRule("sglang*.service"),)), files=files)
    source.seek_head()
    got = []
    with_cmdline = set()
    while batch := source.read(777):
        for ev in batch:
            if isinstance(ev, LogLine):
                got.append((ev.unit, ev.pid, ev.text, ev.invocation, round(ev.timestamp, 6)))
                if ev.cmdline:
                    with_cmdline.add((ev.unit, ev.pid))
    assert got == expected and len(got) > 3_000
    assert with_cmdline == {(unit, pid) for unit, pid, *_ in expected}
    watched = sum(n for unit, n in js.meta["by_unit"].items() if unit.startswith("sglang") or unit == "init.scope")
    assert source.stats.entries == watched and source.stats.lines == len(got)  # files: unwatched units skipped


def test_journal_matches_skip_unwatched_units_and_return_the_same_events(tmp_path, monkeypatch) -> None:
    """libsystemd matches let only what crashdoc reads through (files, a folder, the host journal alike); the
    events must equal those of a walk over every entry."""
    import subprocess

    journal_remote, boot_id, build = _bench("JOURNAL_REMOTE", "boot_id", "build")
    from crashdoc.events import WatchRule
    from crashdoc.sources import journal as journal_source
    from crashdoc.sources.journal import JournalSource, UnitFilter
    from crashdoc.sources.lifecycle import COREDUMP_MESSAGE_ID

    monkeypatch.setattr(journal_source, "TRIM_ABOVE", 0)
    monkeypatch.setattr(journal_source, "TRIM_CHECK_EVERY", 50)

    folder = tmp_path / "j"
    build(6_000, seed=9, folder=folder, crash_every=(1_500, 3_000))
    boot, now = boot_id(), 1_796_000_000_000_000
    extra = [  # what only the match's other terms let through
        {
            "_TRANSPORT": "kernel",
            "MESSAGE": "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
            "mems_allowed=0,oom_memcg=/system.slice/sglang-prefill.service,task_memcg=/system.slice/"
            "sglang-prefill.service,task=python3,pid=4242,uid=0",
            "PRIORITY": "3",
        },
        {
            "_SYSTEMD_UNIT": "systemd-coredump@0-4243-0.service",
            "MESSAGE_ID": COREDUMP_MESSAGE_ID,
            "_UID": "0",
            "COREDUMP_UNIT": "sglang-decode.service",
            "COREDUMP_SIGNAL_NAME": "SIGSEGV",
            "MESSAGE": "Process dumped",
        },
        {"_SYSTEMD_UNIT": "other.service", "_PID": "77", "MESSAGE": "Scheduled restart job, restart counter is at 9."},
        {
            "_SYSTEMD_UNIT": "sglang-decode.service",
            "_PID": "4300",
            "MESSAGE": "a line after the others",
            "_SYSTEMD_INVOCATION_ID": "0" * 32,
        },
    ]
    stream = b""
    for i, fields in enumerate(extra):
        head = f"__REALTIME_TIMESTAMP={now + i}\n__MONOTONIC_TIMESTAMP={i + 1}\n_BOOT_ID={boot}\n"
        stream += (head + "".join(f"{k}={v}\n" for k, v in fields.items()) + "\n").encode()
    subprocess.run(
        [journal_remote, "--split-mode=none", f"--output={folder}/extra.journal", "-"], input=stream, check=True
    )
    units = UnitFilter((WatchRule("sglang*.service"),))

    def events(**where):
        source = JournalSource(units, **where)
        source.seek_head()
        out = []
        while True:
            out.extend(source.read(1_000))
            if source.at_end:
                return out, source.stats.entries

    by_files, stepped_files = events(files=[str(p) for p in sorted(folder.glob("*.journal"))])
    by_folder, stepped_folder = events(directory=str(folder))
    with monkeypatch.context() as m:  # no matches: every entry reaches read()
        m.setattr(JournalSource, "_match", lambda self: self.reader.flush_matches())
        every, stepped_every = events(directory=str(folder))
    assert by_files == by_folder == every
    kinds = {type(e).__name__ + ":" + str(getattr(e, "kind", "")) for e in by_files}
    assert {"LifecycleRecord:oom-kill", "LifecycleRecord:coredump", "LifecycleRecord:restart-scheduled"} <= kinds
    assert stepped_every == 6_000 + len(extra) > stepped_files == stepped_folder  # the unwatched entries skipped


def test_release_journal_pages_drops_them_from_rss_and_reading_goes_on(tmp_path) -> None:
    proc_status, build = _bench("proc_status", "build")
    from systemd import journal

    from crashdoc.sources.journal import release_journal_pages

    js = build(6_000, seed=11, folder=tmp_path / "j", crash_every=(2_000, 3_000))
    r = journal.Reader(files=[str(f) for f in js.files])
    messages = []
    while r._next():
        messages.append(r._get("MESSAGE"))
        if len(messages) == 3_000:
            mapped = proc_status(os.getpid()).get("RssFile", 0)
            assert release_journal_pages() > 0
            assert proc_status(os.getpid()).get("RssFile", 0) < mapped
    assert len(messages) == 6_000  # libsystemd went on reading through the released windows
    r.seek_head()
    assert r._next() and r._get("MESSAGE") == messages[0]


def test_the_pages_bound_releases_once_caught_up_unless_the_reader_ends_there(monkeypatch) -> None:
    """The daemon gives its journal pages back once caught up (it lives on); `diagnose` (`once`: no bound of its own
    once caught up) leaves them to the process's end, and releases only past its looser bound while reading."""
    from crashdoc.sources import journal_pages

    mapped, released = [10 << 20], []
    monkeypatch.setattr(journal_pages, "mapped_bytes", lambda: mapped[0])
    monkeypatch.setattr(journal_pages, "release_journal_pages", lambda: released.append(mapped[0]) or 0)
    daemon, once = journal_pages.MappedPages(2 << 20, 1 << 19), journal_pages.MappedPages(64 << 20, None)
    mapped[0] += 1 << 20  # 1 MB read since
    for pages in (daemon, once):
        pages.bound(caught_up=False)
    assert released == []
    daemon.bound(caught_up=True)
    once.bound(caught_up=True)
    assert released == [11 << 20]  # the daemon's release alone
    mapped[0] += 64 << 20
    once.bound(caught_up=True)
    assert released == [11 << 20, 75 << 20]  # past its own bound, `once` releases too


def test_the_daemon_gives_back_what_asking_the_newest_time_mapped_once_caught_up(tmp_path, monkeypatch) -> None:
    """Caught up, the daemon asks the journal's newest time, which touches every file's header (a 2M-entry journal
    of 12 files: ~0.8 MB of pages): the bound is checked after it, so those pages do not stay until the next read."""
    from crashdoc.events import WatchRule
    from crashdoc.sources import journal_pages
    from crashdoc.sources.journal import JournalSource, UnitFilter
    from support.journal_files import line, write_journal

    write_journal(tmp_path, [line(f"Decode batch {i}", pid="7", unit="sglang-decode.service") for i in range(50)])
    mapped, released = [10 << 20], []
    monkeypatch.setattr(journal_pages, "mapped_bytes", lambda: mapped[0])
    monkeypatch.setattr(journal_pages, "release_journal_pages", lambda: released.append(mapped[0]) or 0)
    source = JournalSource(UnitFilter((WatchRule("sglang*.service"),)), directory=str(tmp_path))
    source.seek_head()
    newest = source.newest_timestamp

    def touching_every_header(oldest: bool = False) -> float | None:
        mapped[0] += 1 << 20
        return newest(oldest)

    monkeypatch.setattr(source, "newest_timestamp", touching_every_header)
    released.clear()
    assert len(source.read(1000)) == 50 and source.at_end
    assert released == [11 << 20], "the headers' pages given back right away"


def test_catching_up_gives_back_the_pages_a_walk_mapped_during_the_last_release(monkeypatch) -> None:
    """A release while the read-ahead walk runs measures what the walk mapped meanwhile as the new floor: those pages
    were never given back (3.9 MB after a 2M-entry catch-up). Arriving at the end, the daemon releases everything."""
    from crashdoc.sources import journal_pages

    mapped, released = [10 << 20], []
    monkeypatch.setattr(journal_pages, "mapped_bytes", lambda: mapped[0])
    monkeypatch.setattr(journal_pages, "release_journal_pages", lambda: released.append(mapped[0]) or 0)
    daemon, once = journal_pages.MappedPages(2 << 20, 1 << 19), journal_pages.MappedPages(64 << 20, None)
    mapped[0] += 4 << 20  # the walk mapped 4 MB while the last release ran: the floor includes them
    daemon.after_release = once.after_release = mapped[0]
    for pages in (daemon, once):
        pages.bound(caught_up=False)
        pages.bound(caught_up=True)
    assert released == [14 << 20], "the daemon, arriving at the end, released; `diagnose` leaves them to its exit"
    daemon.bound(caught_up=True)
    assert released == [14 << 20], "caught up already: nothing grown, nothing released"
    daemon.bound(caught_up=False)
    daemon.bound(caught_up=True)
    assert released == [14 << 20, 14 << 20], "behind again (a flood), then caught up: released again"


def test_the_c_batch_reader_returns_exactly_what_read_returns(tmp_path, monkeypatch) -> None:
    """`diagnose`'s C batch reader (sources/fastread.c) against `read()`'s systemd-python loop, on a
    generated journal with crashes plus the entries it must leave to Python or get right: PID 1's
    records, a core dump, an OOM kill, a process's first line, a compressed 20K line (cut at 16K),
    bytes that are not UTF-8, terminal escapes, entries without MESSAGE or _PID."""
    (build,) = _bench("build")
    from crashdoc.events import WatchRule
    from crashdoc.sources import journal as journal_source
    from crashdoc.sources.journal import JournalSource, UnitFilter
    from crashdoc.sources.lifecycle import COREDUMP_MESSAGE_ID
    from support.journal_files import line, pid1, write_journal

    monkeypatch.setattr(journal_source, "TRIM_ABOVE", 0)
    monkeypatch.setattr(journal_source, "TRIM_CHECK_EVERY", 64)
    folder = tmp_path / "j"
    build(5_000, seed=13, folder=folder, crash_every=(1_200, 2_500))
    unit = "sglang-decode.service"
    extra = [
        line("first line of a new process", pid="9001", unit=unit, _CMDLINE="python3 -m sglang.launch_server"),
        line(b"\xff\xfe not UTF-8 \xc3", pid="9001", unit=unit),
        line("colour \x1b[31mred\x1b[0m and a bell \x07", pid="9001", unit=unit),
        line("y" * 20_000, pid="9001", unit=unit),
        {"_SYSTEMD_UNIT": unit, "_PID": "9001", "_TRANSPORT": "stdout"},  # no MESSAGE
        {"_SYSTEMD_UNIT": unit, "MESSAGE": "no pid", "_TRANSPORT": "stdout"},
        pid1(
            "Main process exited, code=exited, status=1/FAILURE",
            unit=unit,
            MESSAGE_ID="98e322203f7a4ed290d09fe03c09fe15",
            EXIT_CODE="exited",
            EXIT_STATUS="1",
        ),
        {
            "_SYSTEMD_UNIT": "systemd-coredump@0-9001-0.service",
            "MESSAGE_ID": COREDUMP_MESSAGE_ID,
            "_UID": "0",
            "COREDUMP_UNIT": unit,
            "COREDUMP_SIGNAL_NAME": "SIGSEGV",
            "MESSAGE": "Process 9001 (python3) of user 0 dumped core.",
        },
        {
            "_TRANSPORT": "kernel",
            "MESSAGE": "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
            f"oom_memcg=/system.slice/{unit},task_memcg=/system.slice/{unit},task=python3,pid=9001,uid=0",
        },
        line("a line after the others", pid="9001", unit=unit),
    ]
    write_journal(folder, extra)
    units = UnitFilter((WatchRule("sglang*.service"),))

    def events(following: bool = False, **where):
        source = JournalSource(units, directory=str(folder), **where)
        source._following = following  # a daemon that caught up reads with the plain batch reader, no thread
        source.seek_head()
        out = []
        while True:
            out.extend(source.read(1_000))
            if source.at_end:
                return out, source

    plain, _ = events()
    import pytest

    batched, source = events(once=True, build_dir=tmp_path / "build")
    if source._batch is None:
        pytest.skip("the C batch reader cannot be built here (no C compiler, Python headers or libsystemd-dev)")
    assert source._ahead is not None  # `diagnose` reads ahead: the next batch walked in a thread
    caught_up, daemon_source = events(build_dir=tmp_path / "build")  # the daemon behind: reads ahead too
    assert daemon_source._ahead is not None and daemon_source._following  # at the end: no more walks
    followed, _ = events(True, build_dir=tmp_path / "build")  # the daemon once caught up: the C reader in turn
    assert batched == plain and caught_up == plain and followed == plain
    assert len(plain) > 2_000 and source.stats.errors == 0
    texts = [e.text for e in plain if isinstance(e, LogLine) and e.pid == 9001]
    assert texts[1].startswith("\ufffd\ufffd not UTF-8") and len(texts[3]) == 16 * 1024
    kinds = {str(getattr(e, "kind", "")) for e in plain}
    assert {"oom-kill", "coredump", "exited"} <= kinds
