"""The deploy kit for GPU faults: the hardware alerts reach the hardware on-call (amtool, and a real
Alertmanager running the shipped example, whose inhibition keeps the service owner's loop page quiet), the
Xids the warning alert counts are the catalog's, and the dashboard shows them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from crashdoc.diagnosis.hardware import can_cause
from crashdoc.events import GpuEvent
from crashdoc.matching.gpu_catalog import load_catalog
from crashdoc.outputs.alerts import alert_labels
from support.e2e import free_port, wait_for
from support.gpu_faults import FAULT_LABELS, cuda_graph_diagnosis, xid79_hardware_diagnosis
from support.monitoring import ALERTMANAGER, Access, needs_alertmanager

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "crashdoc.rules.yml"
ALERTMANAGER_EXAMPLE = REPO / "deploy" / "alertmanager" / "alertmanager.example.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "crashdoc.json"
GPU_FAULT = {
    "alertname": "SGLangGPUFault",
    "instance": "gpu-030",
    **FAULT_LABELS,
    "severity": "critical",
    "oncall": "hardware",
}


def rule(name: str) -> dict:
    return next(r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if r.get("alert") == name)


def test_the_warning_alert_counts_exactly_the_xids_the_catalog_lets_end_a_process() -> None:
    catalog = load_catalog()
    fatal = {c for c in catalog.entries if can_cause(GpuEvent("xid", code=c), catalog) and not 144 <= c <= 150}
    [listed] = re.findall(r'xid=~"([\d|]+)"', rule("GPUHardwareXid")["expr"])
    assert {int(x) for x in listed.split("|")} == fatal
    assert {13, 31, 43, 63}.isdisjoint(fatal)


def test_hardware_alerts_carry_the_label_that_routes_them() -> None:
    for name in ("SGLangGPUFault", "GPUHardwareXid"):
        assert rule(name)["labels"]["oncall"] == "hardware"
    assert 'kind!="hardware"' in rule("SGLangCrashLoop")["expr"]  # the service owner's page stays silent


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (GPU_FAULT, "hardware-pager"),
        (
            {"alertname": "GPUHardwareXid", "gpu": "6", "xid": "79", "severity": "warning", "oncall": "hardware"},
            "hardware-chat",
        ),
    ],
)
def test_amtool_routes_hardware_alerts_to_the_hardware_on_call(labels: dict[str, str], receiver: str) -> None:
    assert amtool_route(labels) == receiver


def amtool_route(labels: dict[str, str]) -> str:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool is not installed (scripts/install-debs.sh prometheus-alertmanager)")
    argv = [amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER_EXAMPLE}"]
    r = subprocess.run([*argv, *(f"{k}={v}" for k, v in labels.items())], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip()


def test_crashdocs_own_alert_for_a_gpu_fault_pages_the_hardware_on_call_and_a_flag_one_the_service_owner() -> None:
    """Where there is no Prometheus, crashdoc pushes its own alert (CrashdocCrashLoop): for a hardware diagnosis its
    labels route it to the hardware on-call, like SGLangGPUFault's."""
    software, hardware = cuda_graph_diagnosis(), xid79_hardware_diagnosis()
    labels = alert_labels("sglang-prefill.service", hardware, "gpu-030")
    assert (labels["oncall"], labels["action"], labels["kind"]) == ("hardware", "drain", "hardware")
    assert amtool_route(labels) == "hardware-pager"
    owner = amtool_route(alert_labels("sglang-prefill.service", software, "gpu-030"))
    assert owner.split(",")[0] == "sglang-pager", owner  # an unknown error: the signature writers are told too


@needs_alertmanager
def test_the_shipped_alertmanager_inhibits_the_service_owners_pages_for_a_gpu_fault(tmp_path: Path) -> None:
    port = free_port()
    assert ALERTMANAGER is not None
    argv = [
        ALERTMANAGER,
        f"--config.file={ALERTMANAGER_EXAMPLE}",
        f"--storage.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
        "--log.level=warn",
    ]
    with open(tmp_path / "alertmanager.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    access = Access()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: access.ready(f"{url}/-/ready"), 20, "Alertmanager to be ready")
        same_unit = {k: GPU_FAULT[k] for k in ("instance", "unit")}
        sent = [
            GPU_FAULT,
            {**same_unit, "alertname": "SGLangCrashLoop", "signature": "gpu-fault-bus", "severity": "critical"},
            {**same_unit, "alertname": "SGLangUnitFailed", "severity": "critical"},
            {
                "alertname": "SGLangCrashLoop",
                "instance": "gpu-030",
                "unit": "sglang-decode.service",
                "signature": "dsv4-hicache-size-unsupported",
                "severity": "critical",
            },
        ]
        body = json.dumps([{"labels": labels, "annotations": {"summary": "s"}} for labels in sent]).encode()
        request = urllib.request.Request(
            f"{url}/api/v2/alerts", data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200

        def states() -> dict[tuple[str, str], list[str]]:
            found = access.get_json(f"{url}/api/v2/alerts")
            return {(a["labels"]["alertname"], a["labels"]["unit"]): a["status"]["inhibitedBy"] for a in found}

        wait_for(lambda: len(states()) == 4, 10, "the four alerts")
        wait_for(lambda: bool(states()[("SGLangCrashLoop", "sglang-prefill.service")]), 10, "the inhibition")
        now = states()
        assert now[("SGLangGPUFault", "sglang-prefill.service")] == []
        assert (
            now[("SGLangCrashLoop", "sglang-prefill.service")] and now[("SGLangUnitFailed", "sglang-prefill.service")]
        )
        assert now[("SGLangCrashLoop", "sglang-decode.service")] == []  # another unit still pages its owner
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_dashboard_shows_gpu_faults_and_xids() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = {p["title"]: [t["expr"] for t in p.get("targets", [])] for p in dash["panels"]}
    assert any("crashdoc_gpu_fault_info" in e for e in exprs["GPU faults behind crash loops"])
    assert any("crashdoc_gpu_xid_total" in e for e in exprs["Xids by GPU"])
    table = next(p for p in dash["panels"] if p["title"] == "GPU faults behind crash loops")
    assert list(table["transformations"][0]["options"]["indexByName"])[:3] == ["instance", "unit", "action"]
