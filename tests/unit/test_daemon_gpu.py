"""The daemon's own wiring of GPU faults, in process (no systemd): real journal files with kernel transport fields
followed in a folder, the host's GPUs read from a fixture of /proc/driver/nvidia/gpus, and what comes out: the
diagnosis, /metrics, the journal record, the pushed alert and the on-call pages."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from crashdoc.config import AlertmanagerConfig
from crashdoc.outputs.alerts import AlertSender
from crashdoc.runtime.daemon import Daemon
from support.e2e import wait_for
from support.file_daemon import file_daemon
from support.gpu_faults import (
    FAULT_LABELS,
    FIXTURE_ROOT,
    HARDWARE_ALERT_LABELS,
    T0,
    kernel,
    xid79_first_run,
    xid79_second_run,
)
from support.journal_files import AT, UNIT, line, needs_journal_remote, write_journal

pytestmark = needs_journal_remote
GPUS_FOLDER = FIXTURE_ROOT / "proc" / "driver" / "nvidia" / "gpus"


@dataclass
class Outputs:
    records: list[dict[str, str]] = field(default_factory=list)
    posts: list[list[dict]] = field(default_factory=list)


@pytest.fixture
def followed(tmp_path: Path) -> Iterator[tuple[Daemon, Path, Outputs]]:
    journal = tmp_path / "journal"
    journal.mkdir()
    before = {**line("[2026-05-01 12:00:00] INFO: before", pid="7"), AT: str(int((T0 - 100) * 1e6))}
    write_journal(journal, [before], name="0-before.journal")  # older than everything the tests write later
    d = file_daemon(
        journal,
        tmp_path / "state",
        nvidia_gpus=str(GPUS_FOLDER),
        instance="gpu-017",
        runbook_base_url="https://oncall.example.net/crashdoc",
        alertmanager=AlertmanagerConfig(url="http://alertmanager.invalid:9093", resend_interval=60),
    )
    out = Outputs()
    d.effects.recorder.send = lambda **fields: out.records.append(fields)  # type: ignore[attr-defined]
    assert isinstance(d.effects.alerts, AlertSender)
    d.effects.alerts.post = lambda url, body, timeout: out.posts.append(json.loads(body))
    d.source.fileno()  # watch the folder (inotify), as the daemon's loop does
    d.prepare()
    d._drain()
    try:
        yield d, journal, out
    finally:
        d.effects.stop()
        d.remedies.stop(wait=1.0)


def follow(d: Daemon, journal: Path, entries: list, name: str, first_ms: int) -> None:
    """A file written into the followed folder (as a rotation would), and the daemon's turn on it."""
    write_journal(journal, entries, name=name, first_ms=first_ms)
    d.source.process()
    d._drain()


def test_the_daemon_follows_an_xid_79_and_the_loop_to_a_hardware_diagnosis_metric_record_alert_and_page(
    followed: tuple[Daemon, Path, Outputs],
) -> None:
    d, journal, out = followed
    follow(d, journal, xid79_first_run(), "1-first.journal", 1_000)
    assert d.engine.gpus().xids == {("6", "79", UNIT): 1}  # GPU 6: the fixture host's map, from the Xid's bus id
    follow(d, journal, xid79_second_run(), "2-second.journal", 100_000)
    [shown] = json.loads(d.view.diagnoses_json(UNIT))["diagnoses"]
    assert (shown["kind"], shown["signature"], shown["flags"], shown["fix"]["changes"]) == (
        "hardware",
        "gpu-fault-bus",
        [],
        [],
    )
    assert shown["title"].startswith("Xid 79 (GPU has fallen off the bus) on GPU 6 (0000:c1:00.0) under TP3")
    value = d.view.registry.get_sample_value
    assert value("crashdoc_gpu_xid_total", {"gpu": "6", "xid": "79", "unit": UNIT}) == 1.0
    assert value("crashdoc_gpu_fault_info", {**FAULT_LABELS}) == 1.0

    [record] = [r for r in out.records if r["CRASHDOC_EVENT"] == "loop-started"]
    assert (record["CRASHDOC_KIND"], record["CRASHDOC_ACTION"], record["CRASHDOC_GPU"]) == ("hardware", "drain", "6")
    assert (record["CRASHDOC_BUS_ID"], record["CRASHDOC_RANK"], record["CRASHDOC_XID"]) == ("0000:c1:00.0", "TP3", "79")
    assert "-- fix: Drain this node: GPU 6 (0000:c1:00.0) is gone" in record["MESSAGE"]
    assert record["CRASHDOC_RUNBOOK_URL"] == "https://oncall.example.net/crashdoc/runbook/gpu-fault-bus"

    posts = wait_for(lambda: out.posts, 10, "the alert's delivery")
    [alert] = posts[-1]  # type: ignore[index]
    labels = {k: v for k, v in alert["labels"].items() if k not in ("instance", "severity", "subsystem")}
    assert labels == {"alertname": "CrashdocCrashLoop", "unit": UNIT, **HARDWARE_ALERT_LABELS}
    assert alert["annotations"]["summary"].startswith(f"{UNIT}: drain the node: Xid 79")
    assert "Fix: Drain this node" in alert["annotations"]["description"]
    assert alert["annotations"]["runbook_url"].endswith("/runbook/gpu-fault-bus")

    page = d.view.runbook_page("gpu-fault-bus")
    assert page is not None
    text = page.decode()
    assert "GPU lost: fallen off the bus" in text and "Drain the node" in text and f"units/{UNIT}" in text
    unit_page = d.view.unit_page(UNIT)
    assert unit_page is not None
    assert "GPU 6 (0000:c1:00.0), TP3, Xid 79: drain the node" in unit_page.decode()
    assert "../runbook/gpu-fault-bus" in unit_page.decode()
    assert d.view.runbook_page("gpu-fault-nonsense") is None


def test_the_driver_loading_again_makes_the_daemon_read_the_hosts_gpus_again(
    followed: tuple[Daemon, Path, Outputs], tmp_path: Path
) -> None:
    d, journal, _ = followed
    assert len(d.engine.gpus().host.gpus) == 8
    d.gpu_facts.folder = tmp_path / "no-driver"  # the GPUs as the driver lists them after the reload: none here
    loaded = "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024"
    follow(d, journal, [kernel(loaded, T0 + 10)], "1-reload.journal", 1_000)
    assert d.engine.gpus().host.gpus == ()
    assert not d.source.driver_loaded


def test_the_daemons_one_turn_on_the_second_crash_gives_the_drain(followed: tuple[Daemon, Path, Outputs]) -> None:
    """No wait of the daemon's own between the second crash and the hardware diagnosis: one turn of its loop. The
    time it takes is printed, never asserted (tests/e2e/test_e2e_gpu.py measures it under a real systemd)."""
    d, journal, _ = followed
    follow(d, journal, xid79_first_run(), "1-first.journal", 1_000)
    began = time.monotonic()
    follow(d, journal, xid79_second_run(), "2-second.journal", 100_000)
    print(f"in process: the hardware diagnosis {time.monotonic() - began:.3f} s after the second crash was written")
    found = d.engine.units()[UNIT].diagnosis
    assert found is not None and found.kind == "hardware" and found.captures["action"] == "drain"
