"""The shipped rules in a real Prometheus (Debian 2.42), delivered to a real Alertmanager (0.25).

crashdoc runs from deploy/systemd/crashdoc.service inside a private systemd next to the crash-looping
demo units. Prometheus runs on the host's loopback with the example fleet config (file_sd and its
relabelling, 1 s intervals) and the shipped rules; Alertmanager with the example routing (receivers
emptied, so nothing leaves the machine). The crash-loop alert must reach Alertmanager's API with the
signature, the host as `instance`, the receiver chosen by signature and severity, and a runbook link
that opens crashdoc's runbook page.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crashdoc.sandbox.demo import DECODE_UNIT, PREFILL_UNIT, demo_units
from support.deploy_sandbox import DEPLOY, UNIT, NotRunnable, deploy_workdir, install_crashdoc_unit
from support.e2e import CRASHDOC, free_port, wait_for

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
SIGNATURE = "dsv4-hicache-size-unsupported"
CONFIG = """
units:
  - name: sglang-prefill.service
    role: prefill
  - name: sglang-decode.service
    role: decode
listen: "{listen}"
"""


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def served(argv: list[str], log: Path, ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server until the block ends; it must answer `ready_url` within 30 s."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not ready(ready_url):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def prometheus_config(tmp: Path, crashdoc_port: int, alertmanager_port: int) -> Path:
    """The example fleet config with test intervals and addresses; relabelling and rules as shipped."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.example.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(DEPLOY / "prometheus" / "crashdoc.rules.yml")]
    config["alerting"]["alertmanagers"] = [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]
    (job,) = config["scrape_configs"]
    job.update(scrape_interval="1s", scrape_timeout="1s")
    (tmp / "targets").mkdir()
    (tmp / "targets" / "e2e.yml").write_text(
        yaml.safe_dump([{"targets": [f"127.0.0.1:{crashdoc_port}"], "labels": {"cluster": "e2e"}}])
    )
    job["file_sd_configs"] = [{"files": [str(tmp / "targets" / "*.yml")], "refresh_interval": "1s"}]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def alertmanager_config(tmp: Path) -> Path:
    """The example routing and inhibitions as shipped; receivers keep their names but send nowhere."""
    config = yaml.safe_load((DEPLOY / "alertmanager" / "alertmanager.example.yml").read_text())
    config["receivers"] = [{"name": r["name"]} for r in config["receivers"]]
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def deploy_dir() -> Iterator[Path]:
    with deploy_workdir() as path:
        yield path


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.skipif(
    PROMETHEUS is None or ALERTMANAGER is None,
    reason="prometheus / prometheus-alertmanager not installed (scripts/install-debs.sh)",
)
def test_crash_loop_alert_reaches_alertmanager(deploy_dir: Path, sandbox_factory, tmp_path: Path) -> None:
    began = time.monotonic()
    sandbox = sandbox_factory(demo_units(deploy_dir, CRASHDOC[0]), workdir=deploy_dir, start_units=[])
    try:
        cd, _ = install_crashdoc_unit(sandbox, deploy_dir, CONFIG)
    except NotRunnable as exc:
        pytest.skip(str(exc))
    sandbox.systemctl("start", UNIT, check=True, timeout=90)

    am_port, prom_port = free_port(), free_port()
    am_url, prom_url = f"http://127.0.0.1:{am_port}", f"http://127.0.0.1:{prom_port}"
    am_argv = [
        str(ALERTMANAGER),
        f"--config.file={alertmanager_config(tmp_path)}",
        f"--storage.path={tmp_path / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{am_port}",
        "--cluster.listen-address=",
    ]
    prom_argv = [
        str(PROMETHEUS),
        f"--config.file={prometheus_config(tmp_path, cd.port, am_port)}",
        f"--storage.tsdb.path={tmp_path / 'prom-data'}",
        f"--web.listen-address=127.0.0.1:{prom_port}",
    ]
    with (
        served(am_argv, tmp_path / "alertmanager.log", f"{am_url}/-/ready"),
        served(prom_argv, tmp_path / "prometheus.log", f"{prom_url}/-/ready"),
    ):
        sandbox.systemctl("start", PREFILL_UNIT, DECODE_UNIT, check=True)
        query = urllib.parse.quote('alertname="SGLangCrashLoop"')

        def delivered() -> list[dict[str, Any]]:
            return get_json(f"{am_url}/api/v2/alerts?filter={query}")

        alerts = wait_for(delivered, 75, "SGLangCrashLoop in Alertmanager", cd, interval=0.5)
        delivered_after = time.monotonic() - began

        (alert,) = alerts
        labels = alert["labels"]
        assert labels["unit"] == PREFILL_UNIT and labels["signature"] == SIGNATURE, labels
        assert (labels["severity"], labels["category"]) == ("critical", "hicache"), labels
        assert (labels["instance"], labels["job"], labels["cluster"]) == ("127.0.0.1", "crashdoc", "e2e"), labels
        assert alert["status"]["state"] == "active"
        assert [r["name"] for r in alert["receivers"]] == ["sglang-pager"]
        runbook = alert["annotations"]["runbook_url"]
        assert runbook == f"http://127.0.0.1:{cd.port}/runbook/{SIGNATURE}"
        assert "systemd restarts: " in alert["annotations"]["description"]
        assert "systemd restarts: unknown" not in alert["annotations"]["description"]
        with urllib.request.urlopen(runbook, timeout=5) as response:
            page = response.read().decode()
        assert SIGNATURE in page and "hicache-ratio" in page

        # nothing else fires: the healthy decode unit, crashdoc's health; and every rule evaluates cleanly
        firing = get_json(f"{prom_url}/api/v1/alerts")["data"]["alerts"]
        assert sorted((a["labels"]["alertname"], a["labels"].get("unit")) for a in firing) == [
            ("SGLangCrashLoop", PREFILL_UNIT)
        ], firing
        rules = [r for g in get_json(f"{prom_url}/api/v1/rules")["data"]["groups"] for r in g["rules"]]
        assert rules and all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    print(f"\ncrash-loop alert in Alertmanager {delivered_after:.1f} s after the sandbox was asked to boot")
