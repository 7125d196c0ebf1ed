"""Kernel GPU lines from real journal files (written by systemd-journal-remote with the fields journald gives
kernel messages), and the chain the daemon will run on them: journal -> engine -> which rank and GPU -> the
hardware decision. Only `_TRANSPORT=kernel` (a field journald sets, no process can forge it) speaks for the
kernel: a unit printing "NVRM: Xid" on its stdout, or sending it to syslog as "kernel", is no kernel line."""

from __future__ import annotations

from pathlib import Path

from crashdoc.diagnosis.engine import Engine
from crashdoc.diagnosis.gpus import crash_of_run
from crashdoc.diagnosis.hardware import decide, hardware_diagnosis
from crashdoc.events import GpuEvent, Lifecycle, LifecycleRecord, LogLine, WatchRule
from crashdoc.matching.matcher import Matcher
from crashdoc.sources.journal import JournalSource, UnitFilter
from crashdoc.sources.nvidia_gpus import read_gpu_map
from support.engine_driver import LIBRARY
from support.gpu_faults import (
    FAMILY_LINES,
    FELL_OFF_MULTILINE,
    FIXTURE_ROOT,
    T0,
    VISIBLE,
    kernel,
    xid79_loop_entries,
)
from support.journal_files import UNIT, line, needs_journal_remote, write_journal

pytestmark = needs_journal_remote


def read(path: Path, gpu: bool = True) -> tuple[list[LogLine | LifecycleRecord], list[GpuEvent]]:
    source = JournalSource(UnitFilter([WatchRule("sglang*.service")]), files=[str(path)])
    if gpu:
        source.read_gpu_events()
    source.seek_head()
    events: list[LogLine | LifecycleRecord] = []
    while True:
        events += source.read(100)
        if source.at_end:
            return events, source.gpu_events


def test_kernel_entries_give_gpu_events_and_forged_ones_do_not(tmp_path: Path) -> None:
    forged = FAMILY_LINES[79]
    journal = write_journal(
        tmp_path,
        [
            kernel(FAMILY_LINES[48], T0),
            line(forged),  # the watched unit prints it on stdout
            line(forged, unit="other.service"),  # another unit does
            {**line(forged), "_TRANSPORT": "syslog", "SYSLOG_IDENTIFIER": "kernel"},  # syslog(3) as "kernel"
            kernel(FELL_OFF_MULTILINE, T0 + 1),  # one record of three lines
            kernel("usb 1-1: new high-speed USB device number 2 using xhci_hcd", T0 + 2),
        ],
    )
    events, gpu = read(journal)
    assert [(e.kind, e.code, e.bus_id, e.timestamp) for e in gpu] == [
        ("xid", 48, "0000:c1:00.0", T0),
        ("fallen-off-bus", None, "0000:c1:00.0", T0 + 1),
    ]
    lines = [e for e in events if isinstance(e, LogLine)]
    assert [e.text for e in lines] == [forged, forged]  # the unit's own lines stay its lines


def test_without_asking_nothing_changes_and_oom_kills_still_count(tmp_path: Path) -> None:
    oom = (
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        f"task_memcg=/system.slice/{UNIT},task=python3,pid=4242,uid=0"
    )
    journal = write_journal(tmp_path, [kernel(FAMILY_LINES[79], T0), kernel(oom, T0 + 1)])
    events, gpu = read(journal, gpu=False)
    assert gpu == [] and [e.kind for e in events if isinstance(e, LifecycleRecord)] == [Lifecycle.OOM_KILL]
    events, gpu = read(journal)
    assert [e.code for e in gpu] == [79] and [e.kind for e in events if isinstance(e, LifecycleRecord)] == [
        Lifecycle.OOM_KILL
    ]


def test_the_batch_reader_of_diagnose_hands_kernel_lines_over_too(tmp_path: Path) -> None:
    folder = tmp_path / "journal"
    folder.mkdir()
    write_journal(folder, [line("[2026-05-01 12:00:00 TP0] Load weight begin."), kernel(FAMILY_LINES[95], T0)])
    source = JournalSource(
        UnitFilter([WatchRule("sglang*.service")]), directory=str(folder), once=True, build_dir=tmp_path / "build"
    )
    source.read_gpu_events()
    source.seek_head()
    while not source.at_end:
        source.read(100)
    assert [(e.kind, e.code) for e in source.gpu_events] == [("xid", 95)]


def _decide_runs(path: Path) -> list[tuple[str, str, str]]:
    """What the daemon will do: the journal into the engine and the GPU events, then each crashed run of the
    unit joined with its GPUs (fixture host, CUDA_VISIBLE_DEVICES=3,4,5,6) and decided."""
    events, gpu = read(path)
    engine = Engine(Matcher(LIBRARY))
    for event in events:
        if isinstance(event, LogLine):
            engine.on_line(event)
        else:
            engine.on_lifecycle(event)
    engine.finish()
    rec = engine.units()[UNIT]
    gpus = read_gpu_map(FIXTURE_ROOT)
    out = []
    for run in engine.runs(UNIT):
        if not run.crashed:
            continue
        crash = crash_of_run(UNIT, run, "bug", {"--tp-size": "4"}, VISIBLE, gpus)
        assert crash is not None
        verdict = decide(crash, gpu)
        assert rec.diagnosis is not None
        d = hardware_diagnosis(rec.diagnosis, verdict)
        out.append((d.kind, d.captures.get("action", ""), d.captures.get("bus_id", "")))
    return out


def test_an_xid_79_on_tp3s_gpu_then_the_loop_is_hardware_and_drain(tmp_path: Path) -> None:
    journal = write_journal(tmp_path, xid79_loop_entries())
    assert _decide_runs(journal) == [("hardware", "drain", "0000:c1:00.0"), ("hardware", "drain", "0000:c1:00.0")]


def test_the_same_loop_without_the_xid_or_with_a_forged_one_is_not_hardware(tmp_path: Path) -> None:
    (tmp_path / "none").mkdir()
    (tmp_path / "forged").mkdir()
    plain = _decide_runs(write_journal(tmp_path / "none", xid79_loop_entries(with_xid=False)))
    forged = _decide_runs(write_journal(tmp_path / "forged", xid79_loop_entries(forged=True)))
    assert len(plain) == 2 and all(kind != "hardware" for kind, _, _ in plain)
    assert forged == plain
