"""GPU faults end to end: `crashdoc run --directory D` inside a private systemd follows journal files whose kernel
entries carry the fields journald gives kernel messages (`_TRANSPORT=kernel`, written with systemd-journal-remote,
since no process can log a kernel line), next to a real Alertmanager (tests/support/monitoring.py).

An Xid 79 on the GPU of TP3, then the unit's crash loop: a hardware diagnosis naming the GPU, its bus id and the
rank, no flag fix, the Xid counted on /metrics, the hardware alert in Alertmanager (oncall="hardware", "drain"),
the journal record and the runbook page it links to. The same crashes with no Xid keep today's diagnosis.
`crashdoc diagnose` over the same files says the same as the daemon. How long after the second crash the
diagnosis shows is printed (the README says it), never asserted.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crashdoc.outputs.alerts import ALERTNAME
from crashdoc.outputs.journal_records import MESSAGE_ID_LOOP_STARTED
from support.e2e import CRASHDOC, Crashdoc, free_port, journal_json, start_crashdoc, wait_for
from support.gpu_faults import (
    FIXTURE_ROOT,
    HARDWARE_ALERT_LABELS,
    ILLEGAL_RUN,
    illegal_access_run,
    xid79_first_run,
    xid79_second_run,
)
from support.journal_files import AT, line, needs_journal_remote, write_journal
from support.monitoring import Alertmanager, Webhook, needs_alertmanager

GPUS_FOLDER = FIXTURE_ROOT / "proc" / "driver" / "nvidia" / "gpus"
RUNBOOK_BASE = "https://oncall.example.net/crashdoc"
BROKEN, HEALTHY_GPU = "sglang-prefill.service", "sglang-decode.service"  # the unit with the Xid, the one without
SAME = ("unit", "signature", "title", "kind", "category", "captures", "flags", "root_cause")


def config(am_url: str) -> str:
    return (
        "units:\n"
        f'  - {{name: "{BROKEN}", role: prefill}}\n'
        f'  - {{name: "{HEALTHY_GPU}", role: decode}}\n'
        "thresholds: {failed_grace: 600}\n"  # journal alone: no "failed" while the test reads
        'instance: "gpu-017"\n'
        "dbus: false\n"  # the units are in the journal files, not in this systemd
        f"nvidia_gpus: {GPUS_FOLDER}\n"  # the host's GPUs: the fixture's 8
        f'alertmanager: {{url: "{am_url}", resend_interval: 2, timeout: 2}}\n'
        f'runbook_base_url: "{RUNBOOK_BASE}"\n'
    )


def diagnosis_of(cd: Crashdoc, unit: str, condition: Any = lambda d: True) -> dict[str, Any] | None:
    try:
        found = [d for d in cd.diagnoses() if d["unit"] == unit]
    except (OSError, AssertionError):
        return None
    return found[0] if found and condition(found[0]) else None


Runs = Callable[[float], tuple[list[dict[str, str | bytes]], list[dict[str, str | bytes]]]]


def xid79_runs(unit: str, with_xid: bool) -> Runs:
    """The Xid 79 loop's two runs (with or without the Xid) from `t0`; the second ends 47 s after it."""
    return lambda t0: (xid79_first_run(with_xid, t0=t0, unit=unit), xid79_second_run(t0=t0, unit=unit))


def loop_of(
    sandbox: Any, workdir: Path, cfg: Path, unit: str, runs: Runs, length: float = 47
) -> tuple[Crashdoc, dict, float, Path]:
    """A daemon following a fresh folder; the unit's first run written into it, then, once read, its second crash
    (`runs(t0)`, the second ending `length` s after t0: now). Returns the daemon, its diagnosis, when the second
    crash's entries began to be written (time.time()), and the folder."""
    journal = workdir / f"journal-{unit}"
    journal.mkdir()
    now = time.time()
    before = {  # where the daemon starts: before all of the runs' entries, the kernel's older ones too
        **line("[2026-05-01 12:00:00] INFO: before", pid="7", unit=unit),
        AT: str(int((now - length - 900) * 1e6)),
    }
    write_journal(journal, [before], name="0-before.journal")
    port = free_port()
    args = ["--config", str(cfg), "--listen", f"127.0.0.1:{port}", "--state-directory", str(workdir / f"state-{unit}")]
    cd = start_crashdoc(sandbox, args=[*args, "--directory", str(journal)], port=port, name=f"crashdoc-{unit}")
    first, second = runs(time.time() - length)  # the second run ends now: as fresh as a real crash's entries
    write_journal(journal, first, name="1-first.journal")
    wait_for(lambda: cd.metric("crashdoc_unit_restarts_total", unit=unit) == 1.0, 30, "the first crash", cd)
    written = time.time()
    write_journal(journal, second, name="2-second.journal")
    d = wait_for(lambda: diagnosis_of(cd, unit, lambda d: d["crashes"] == 2), 30, "the loop's diagnosis", cd, 0.02)
    print(f"\n{unit}: the loop's diagnosis on /diagnoses {time.time() - written:.2f} s after the second crash")
    return cd, d, written, journal  # type: ignore[return-value]


def diagnose(folder: Path, cfg: Path) -> dict[str, Any]:
    r = subprocess.run(
        [*CRASHDOC, "diagnose", "--directory", str(folder), "--config", str(cfg), "--json", "--no-verify"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr  # a failure found
    [d] = json.loads(r.stdout)["diagnoses"]
    return d


@needs_journal_remote
@needs_alertmanager
@pytest.mark.sandbox
def test_an_xid_79_on_tp3s_gpu_then_the_loop_is_hardware_drain_and_the_same_loop_without_it_is_not(
    sandbox_factory, sandbox_workdir: Path, alertmanager: Alertmanager, webhook: Webhook
) -> None:
    am = alertmanager.start()
    sandbox = sandbox_factory({}, workdir=sandbox_workdir, start_units=[])
    cfg = sandbox_workdir / "crashdoc.yaml"
    cfg.write_text(config(am.url))

    cd, d, written, journal = loop_of(sandbox, sandbox_workdir, cfg, BROKEN, xid79_runs(BROKEN, True))
    try:
        assert (d["kind"], d["signature"], d["severity"], d["flags"], d["fix"]["changes"]) == (
            "hardware",
            "gpu-fault-bus",
            "critical",
            [],
            [],
        )
        assert d["title"] == (
            "Xid 79 (GPU has fallen off the bus) on GPU 6 (0000:c1:00.0) under TP3: the GPU is gone, restarts cannot "
            "heal the unit"
        )
        assert {k: d["captures"][k] for k in ("gpu", "bus_id", "rank", "xid", "action")} == {
            "gpu": "6",
            "bus_id": "0000:c1:00.0",
            "rank": "TP3",
            "xid": "79",
            "action": "drain",
        }
        assert d["fix"]["summary"].startswith("Drain this node: GPU 6 (0000:c1:00.0) is gone")
        assert cd.metric("crashdoc_gpu_xid_total", gpu="6", xid="79", unit=BROKEN) == 1.0
        fault = {"unit": BROKEN, "signature": "gpu-fault-bus", "xid": "79", "gpu": "6", "bus_id": "0000:c1:00.0"}
        assert cd.metric("crashdoc_gpu_fault_info", **fault, rank="TP3", action="drain") == 1.0

        alert = wait_for(lambda: am.alert(BROKEN), 15, "the hardware alert in Alertmanager", cd, interval=0.05)
        print(f"the hardware alert in Alertmanager {time.time() - written:.2f} s after the second crash")
        assert alert["labels"] == {
            "alertname": ALERTNAME,
            "unit": BROKEN,
            "severity": "critical",
            "instance": "gpu-017",
            "subsystem": d["category"],
            **HARDWARE_ALERT_LABELS,
        }
        assert alert["annotations"]["summary"].startswith(f"{BROKEN}: drain the node: Xid 79")
        assert alert["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}/runbook/gpu-fault-bus"
        status, page = cd.get("/runbook/gpu-fault-bus")
        assert status == 200 and "Drain the node" in page.decode() and f"units/{BROKEN}" in page.decode()
        status, page = cd.get(f"/units/{BROKEN}")
        assert status == 200 and "GPU 6 (0000:c1:00.0), TP3, Xid 79: drain the node" in page.decode()
        [record] = wait_for(
            lambda: journal_json(sandbox, f"MESSAGE_ID={MESSAGE_ID_LOOP_STARTED}", f"CRASHDOC_UNIT={BROKEN}"),
            15,
            "the journal record",
            cd,
        )  # type: ignore[misc]
        assert (record["CRASHDOC_KIND"], record["CRASHDOC_ACTION"], record["CRASHDOC_GPU"]) == (
            "hardware",
            "drain",
            "6",
        )
        assert "-- fix: Drain this node" in record["MESSAGE"]
        wait_for(lambda: any(a["labels"].get("oncall") == "hardware" for a in webhook.alerts("firing")), 15, "a notice")
    finally:
        cd.stop()
    one_shot = diagnose(journal, cfg)
    assert {k: one_shot[k] for k in SAME} == {k: d[k] for k in SAME}
    assert one_shot["fix"]["summary"] == d["fix"]["summary"]

    cd, plain, _, journal = loop_of(sandbox, sandbox_workdir, cfg, HEALTHY_GPU, xid79_runs(HEALTHY_GPU, False))
    try:
        assert (plain["kind"], plain["signature"]) == ("resource", None)
        assert plain["root_cause"]["line"] == "RuntimeError: CUDA error: unspecified launch failure"
        assert not any(e.startswith("GPU:") for e in plain["evidence"])
        alert = wait_for(lambda: am.alert(HEALTHY_GPU), 15, "the loop's alert", cd, interval=0.05)
        assert alert["labels"]["kind"] == "resource" and "oncall" not in alert["labels"]
        assert cd.metric("crashdoc_gpu_xid_total", gpu="6", xid="79", unit=HEALTHY_GPU) is None
    finally:
        cd.stop()
    one_shot = diagnose(journal, cfg)
    assert {k: one_shot[k] for k in SAME} == {k: plain[k] for k in SAME}


@needs_journal_remote
@needs_alertmanager
@pytest.mark.sandbox
def test_teardown_and_application_xids_a_forged_one_and_other_gpus_xids_keep_the_software_loop(
    sandbox_factory, sandbox_workdir: Path, alertmanager: Alertmanager
) -> None:
    """An illegal-memory-access loop of TP3: its application Xid 13 one second before each error and a teardown
    Xid 13 sixty seconds after (SGLang waits for CUDA core dumps before it exits), another program's Xid 79 on
    GPU 0, an ECC error on GPU 7, a hardware Xid 48 on TP3's GPU ten minutes before, and an "NVRM: Xid 79" line
    TP3 prints on its own stdout. The daemon keeps the software diagnosis (the Xid 13s as evidence), counts every
    Xid, and pages the service owner; `diagnose` over the same files says the same."""
    am = alertmanager.start()
    sandbox = sandbox_factory({}, workdir=sandbox_workdir, start_units=[])
    cfg = sandbox_workdir / "crashdoc.yaml"
    cfg.write_text(config(am.url))

    def runs(t0: float) -> tuple[list[dict[str, str | bytes]], list[dict[str, str | bytes]]]:
        return (
            illegal_access_run(False, t0, BROKEN, xids=True, forged=True),
            illegal_access_run(True, t0, BROKEN, xids=True, forged=True),
        )

    cd, d, _, journal = loop_of(sandbox, sandbox_workdir, cfg, BROKEN, runs, length=ILLEGAL_RUN + 67)
    try:
        assert (d["kind"], d["signature"], d["crashes"]) == ("bug", "cuda-illegal-memory-access", 2)
        assert d["root_cause"]["line"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
        gpu = [e for e in d["evidence"] if e.startswith("GPU:")]
        assert any("1.0 s before the crash's first error line" in e and "application's own fault" in e for e in gpu)
        assert any("60.0 s after the crash's first error line: after the crash (teardown)" in e for e in gpu), gpu
        assert all(e.startswith("GPU: Xid 13 (Graphics Engine Exception) on GPU 6 (0000:c1:00.0), TP3") for e in gpu)
        metric = cd.metric
        xid13 = {"gpu": "6", "xid": "13", "unit": BROKEN}  # two a run: the teardown one follows the diagnosis
        wait_for(
            lambda: metric("crashdoc_gpu_xid_total", **xid13) == 4.0,
            5,
            "the teardown Xids",
            cd,
            seen=lambda: [x for x in cd.get("/metrics")[1].decode().splitlines() if "xid_total{" in x],
        )
        assert metric("crashdoc_gpu_xid_total", gpu="0", xid="79", unit="") == 1.0  # not the unit's, not its stdout's
        assert metric("crashdoc_gpu_xid_total", gpu="7", xid="48", unit="") == 1.0
        assert metric("crashdoc_gpu_xid_total", gpu="6", xid="48", unit="") == 1.0  # before TP3's GPU was known
        assert metric("crashdoc_gpu_xid_total", gpu="6", xid="79", unit=BROKEN) is None
        assert "crashdoc_gpu_fault_info{" not in cd.get("/metrics")[1].decode()
        alert = wait_for(lambda: am.alert(BROKEN), 15, "the loop's alert", cd, interval=0.05)
        assert alert["labels"]["kind"] == "bug" and "oncall" not in alert["labels"]
        assert alert["labels"]["signature"] == "cuda-illegal-memory-access"
        d = diagnosis_of(cd, BROKEN)  # type: ignore[assignment]  # as it stands once every line was read
    finally:
        cd.stop()
    one_shot = diagnose(journal, cfg)
    assert {k: one_shot[k] for k in SAME} == {k: d[k] for k in SAME}
    unverified = [{k: v for k, v in fix.items() if k != "verified"} for fix in (one_shot["fix"], d["fix"])]
    assert unverified[0] == unverified[1] and one_shot["evidence"] == d["evidence"]  # diagnose: --no-verify


@pytest.mark.sandbox
def test_a_units_cuda_visible_devices_is_read_as_systemd_starts_it_and_nothing_else_of_its_environment(
    sandbox_factory, sandbox_workdir: Path
) -> None:
    """D-Bus's Environment= of a real systemd, then its EnvironmentFile=s (which win; a missing `-` file is
    skipped); the unit's other variables (an API key, a token) never reach crashdoc's records."""
    env_file = sandbox_workdir / "gpus.env"
    env_file.write_text("# this server's GPUs\nHF_TOKEN=hf_secret_token\nCUDA_VISIBLE_DEVICES=3,4,5,6\n")
    unit = (
        "[Service]\n"
        'Environment="CUDA_VISIBLE_DEVICES=0,1" "SGLANG_API_KEY=sk-secret-api-key" "CUDA_DEVICE_ORDER=PCI_BUS_ID"\n'
        f"EnvironmentFile=-{sandbox_workdir}/missing.env\n"
        f"EnvironmentFile={env_file}\n"
        "ExecStart=/bin/sleep 3600\n"
    )
    sandbox = sandbox_factory({BROKEN: unit}, workdir=sandbox_workdir, start_units=[])
    probe = (
        "import json\n"
        "from crashdoc.events import WatchRule\n"
        "from crashdoc.sources.gpu_facts import GpuFactsReader\n"
        "from crashdoc.sources.journal import UnitFilter\n"
        "from crashdoc.sources.units import UnitWatcher\n"
        "w = UnitWatcher(UnitFilter([WatchRule('sglang*.service')]))\n"
        "assert w.connect(), w.last_error\n"
        f"st = w.state({BROKEN!r})\n"
        "facts = GpuFactsReader(None).for_state(st)\n"
        "print(json.dumps({'environment': st.environment, 'files': st.environment_files,\n"
        "                  'visible': facts.visible_devices, 'where': facts.where}))\n"
    )
    r = sandbox.run([CRASHDOC[0], "-c", probe], timeout=60)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert seen["environment"] == ["CUDA_VISIBLE_DEVICES=0,1", "CUDA_DEVICE_ORDER=PCI_BUS_ID"]
    assert seen["files"] == [f"{sandbox_workdir}/missing.env", str(env_file)]  # D-Bus says "-" apart
    assert (seen["visible"], seen["where"]) == ("3,4,5,6", f"EnvironmentFile={env_file}")
    assert "secret" not in r.stdout
