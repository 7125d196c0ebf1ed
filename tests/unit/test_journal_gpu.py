"""Kernel GPU lines from real journal files (written by systemd-journal-remote with the fields journald gives
kernel messages), and the chain the daemon and `diagnose` run on them: journal -> engine (joined with the runs'
processes, ranks and GPUs) -> the hardware decision. Only `_TRANSPORT=kernel` (a field journald sets, no process
can forge it) speaks for the kernel: a unit printing "NVRM: Xid" on its stdout, or sending it to syslog as
"kernel", is no kernel line."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

from crashdoc.cli import main
from crashdoc.commands.pipeline import build_engine
from crashdoc.diagnosis.engine import feed
from crashdoc.events import GpuEvent, HostGpus, Lifecycle, LifecycleRecord, LogLine, UnitDevices, WatchRule
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
    illegal_access_run,
    kernel,
    xid79_loop_entries,
)
from support.journal_files import AT, UNIT, line, needs_journal_remote, write_journal

pytestmark = needs_journal_remote


def read(path: Path, gpu: bool = True) -> list[LogLine | LifecycleRecord | GpuEvent]:
    source = JournalSource(UnitFilter([WatchRule("sglang*.service")]), files=[str(path)])
    if gpu:
        source.read_gpu_events()
    source.seek_head()
    events: list[LogLine | LifecycleRecord | GpuEvent] = []
    while True:
        events += source.read(100)
        if source.at_end:
            return events


def gpu_events(events: list[LogLine | LifecycleRecord | GpuEvent]) -> list[GpuEvent]:
    return [e for e in events if isinstance(e, GpuEvent)]


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
    events = read(journal)
    assert [(e.kind, e.code, e.bus_id, e.timestamp) for e in gpu_events(events)] == [
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
    events = read(journal, gpu=False)
    assert gpu_events(events) == [] and [e.kind for e in events if isinstance(e, LifecycleRecord)] == [
        Lifecycle.OOM_KILL
    ]
    events = read(journal)
    assert [e.code for e in gpu_events(events)] == [79]
    assert [e.kind for e in events if isinstance(e, LifecycleRecord)] == [Lifecycle.OOM_KILL]


def test_the_batch_reader_of_diagnose_hands_kernel_lines_over_too(tmp_path: Path) -> None:
    folder = tmp_path / "journal"
    folder.mkdir()
    write_journal(folder, [line("[2026-05-01 12:00:00 TP0] Load weight begin."), kernel(FAMILY_LINES[95], T0)])
    source = JournalSource(
        UnitFilter([WatchRule("sglang*.service")]), directory=str(folder), once=True, build_dir=tmp_path / "build"
    )
    source.read_gpu_events()
    source.seek_head()
    events: list[LogLine | LifecycleRecord | GpuEvent] = []
    while not source.at_end:
        events += source.read(100)
    assert [(e.kind, e.code) for e in gpu_events(events)] == [("xid", 95)]
    assert [type(e) for e in events] == [LogLine, GpuEvent]  # in the journal's order


def _decide_runs(path: Path) -> list[tuple[str, str, str]]:
    """What the daemon does: the journal into the engine (fixture host, CUDA_VISIBLE_DEVICES=3,4,5,6 handed in as
    the runtime would), then each crash as the engine judged it, and the loop's diagnosis."""
    engine = build_engine(Matcher(LIBRARY))
    feed(engine, [HostGpus(read_gpu_map(FIXTURE_ROOT)), UnitDevices(UNIT, VISIBLE, "Environment=")])
    feed(engine, read(path))
    engine.finish()
    out = []
    crashes = [e.diagnosis for e in engine.events() if e.kind == "crash"]
    loop = engine.units()[UNIT].diagnosis
    for d in [*crashes, loop]:
        assert d is not None
        out.append((d.kind, d.captures.get("action", ""), d.captures.get("bus_id", "")))
    return out


def test_an_xid_79_on_tp3s_gpu_then_the_loop_is_hardware_and_drain(tmp_path: Path) -> None:
    journal = write_journal(tmp_path, xid79_loop_entries())
    assert _decide_runs(journal) == [("hardware", "drain", "0000:c1:00.0")] * 3  # both crashes and the loop


def test_the_same_loop_without_the_xid_or_with_a_forged_one_is_not_hardware(tmp_path: Path) -> None:
    (tmp_path / "none").mkdir()
    (tmp_path / "forged").mkdir()
    plain = _decide_runs(write_journal(tmp_path / "none", xid79_loop_entries(with_xid=False)))
    forged = _decide_runs(write_journal(tmp_path / "forged", xid79_loop_entries(forged=True)))
    assert len(plain) == 3 and all(kind != "hardware" for kind, _, _ in plain)
    assert forged == plain


def diagnose(folder: Path, *options: str) -> tuple[int, dict]:
    """`crashdoc diagnose --directory FOLDER --json` through the real entry point."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["diagnose", "--directory", str(folder), "--json", "--no-verify", *options])
    return status, json.loads(out.getvalue())


def test_diagnose_over_the_journal_files_says_hardware_drain_and_names_gpu_bus_id_and_rank(tmp_path: Path) -> None:
    """Journal files copied from the GPU host: no D-Bus, and this host's GPUs are not theirs, so the GPU is named by
    the bus id the kernel gave; with the host's GPU list (`nvidia_gpus:` pointing at a copy of it), by its index."""
    folder = tmp_path / "journal"
    folder.mkdir()
    write_journal(folder, xid79_loop_entries())
    status, doc = diagnose(folder)
    [d] = doc["diagnoses"]
    assert status == 1 and (d["kind"], d["signature"], d["flags"], d["fix"]["changes"]) == (
        "hardware",
        "gpu-fault-bus",
        [],
        [],
    )
    assert (d["captures"]["bus_id"], d["captures"]["rank"], d["captures"]["action"]) == ("0000:c1:00.0", "TP3", "drain")
    assert d["fix"]["summary"].startswith("Drain this node: GPU 0000:c1:00.0 is gone")
    config = tmp_path / "crashdoc.yaml"
    config.write_text(f"nvidia_gpus: {FIXTURE_ROOT / 'proc' / 'driver' / 'nvidia' / 'gpus'}\n")
    _, doc = diagnose(folder, "--config", str(config))
    [d] = doc["diagnoses"]
    assert (d["kind"], d["captures"]["gpu"], d["captures"]["bus_id"]) == ("hardware", "6", "0000:c1:00.0")
    assert d["title"].startswith("Xid 79 (GPU has fallen off the bus) on GPU 6 (0000:c1:00.0) under TP3")


def test_diagnose_over_the_same_crashes_without_the_xid_keeps_todays_diagnosis(tmp_path: Path) -> None:
    folder = tmp_path / "journal"
    folder.mkdir()
    write_journal(folder, xid79_loop_entries(with_xid=False))
    _, doc = diagnose(folder)
    [d] = doc["diagnoses"]
    assert d["kind"] == "resource" and d["root_cause"]["line"] == "RuntimeError: CUDA error: unspecified launch failure"
    assert not any(e.startswith("GPU:") for e in d["evidence"])


def test_teardown_and_application_xids_forged_lines_and_others_xids_keep_the_software_diagnosis(tmp_path: Path) -> None:
    """An illegal memory access loop: TP3's application Xid 13 before each error, a teardown Xid 13 60 s after it,
    another program's Xid 79 on GPU 0, an ECC error on GPU 7, a hardware Xid on TP3's GPU ten minutes before and
    an "NVRM: Xid 79" TP3 prints itself. `diagnose` says what it says of the same crashes alone, the Xid 13s as
    evidence (the host's GPUs given, the unit's CUDA_VISIBLE_DEVICES not known: journal files of another host)."""
    config = tmp_path / "crashdoc.yaml"
    config.write_text(f"nvidia_gpus: {FIXTURE_ROOT / 'proc' / 'driver' / 'nvidia' / 'gpus'}\n")
    found = {}
    for name, kernel_lines in (("alone", False), ("noisy", True)):
        folder = tmp_path / name
        folder.mkdir()
        runs = [illegal_access_run(second, xids=kernel_lines, forged=kernel_lines) for second in (False, True)]
        write_journal(folder, sorted([*runs[0], *runs[1]], key=lambda e: int(e[AT])))
        status, doc = diagnose(folder, "--config", str(config))
        [found[name]] = doc["diagnoses"]
        assert status == 1
    alone, noisy = found["alone"], found["noisy"]
    assert (noisy["kind"], noisy["signature"], noisy["crashes"]) == ("bug", "cuda-illegal-memory-access", 2)
    same = ("title", "kind", "category", "captures", "flags", "root_cause", "fix", "confidence")
    assert {k: noisy[k] for k in same} == {k: alone[k] for k in same}
    gpu = [e for e in noisy["evidence"] if e.startswith("GPU:")]
    assert any("1.0 s before the crash's first error line" in e and "the application's own fault" in e for e in gpu)
    assert any("60.0 s after the crash's first error line: after the crash (teardown), not its cause" in e for e in gpu)
    assert all(e.startswith("GPU: Xid 13 ") and "(0000:c1:00.0), TP3" in e for e in gpu), gpu  # no 79, no 48
    assert not any(e.startswith("GPU:") for e in alone["evidence"])


def test_each_xid_is_counted_under_the_unit_whose_process_it_names_when_all_come_in_one_read(tmp_path: Path) -> None:
    """The whole journal in one batch (as `diagnose` and a daemon catching up read it): an Xid read before a run's
    processes logged, then the run, then its processes' Xids; those name the run's processes."""
    entries = [*illegal_access_run(False, xids=True), *illegal_access_run(True, xids=True)]
    journal = write_journal(tmp_path, sorted(entries, key=lambda e: int(e[AT])))
    engine = build_engine(Matcher(LIBRARY))
    feed(engine, [HostGpus(read_gpu_map(FIXTURE_ROOT))])
    feed(engine, read(journal))
    assert dict(engine.gpus().xids) == {
        ("6", "48", ""): 1,  # ten minutes before: no process of the unit named, its GPU not known yet
        ("0", "79", ""): 1,  # another program's
        ("7", "48", ""): 1,  # a GPU the unit does not use
        ("6", "13", UNIT): 4,  # TP3's own, two a run
    }


def test_the_kernel_gpu_reader_is_imported_with_the_first_driver_line(tmp_path: Path) -> None:
    """Asked for GPU events, the source imports the kernel's GPU reader (its patterns and the GPU records, ~7 ms
    of `diagnose`) at the first kernel line the driver may have written: a journal with other kernel lines only
    never loads it; one with an Xid does, and gives its event."""
    code = (
        "import json, sys\n"
        "from crashdoc.events import WatchRule\n"
        "from crashdoc.sources.journal import JournalSource, UnitFilter\n"
        "source = JournalSource(UnitFilter([WatchRule('sglang*.service')]), files=[sys.argv[1]])\n"
        "source.read_gpu_events()\n"
        "source.seek_head()\n"
        "events = []\n"
        "while not source.at_end:\n"
        "    events += source.read(100)\n"
        "kinds = sorted({type(e).__name__ for e in events})\n"
        "print(json.dumps([kinds, 'crashdoc.sources.kernel_gpu' in sys.modules]))"
    )
    usb = kernel("usb 1-1: new high-speed USB device number 2 using xhci_hcd", T0)
    plain = write_journal(tmp_path, [line("Decode batch", unit=UNIT), usb], name="plain.journal")
    driver = write_journal(tmp_path, [line("Decode batch", unit=UNIT), usb, kernel(FAMILY_LINES[48], T0 + 1)])
    said = []
    for path in (plain, driver):
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
        said.append(json.loads(out.stdout))
    assert said == [[["LogLine"], False], [["GpuEvent", "LogLine"], True]]
