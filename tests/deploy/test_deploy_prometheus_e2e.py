"""The shipped rules in a real Prometheus (Debian 2.42), delivered to a real Alertmanager (0.25).

crashdoc runs from deploy/systemd/crashdoc.service with the TLS drop-in (crashdoc.service.d/tls.conf:
the web configuration, certificate and key as systemd credentials) inside a private systemd next to
the crash-looping demo units. Prometheus runs on the host's loopback with the example fleet config
(https, tls_config, basic_auth, file_sd and its relabelling, 1 s intervals) and the shipped rules;
Alertmanager with the example routing (receivers emptied, so nothing leaves the machine). The
crash-loop alert must reach Alertmanager's API with the signature, the host as `instance`, the
receiver chosen by signature and severity, and a runbook link that opens crashdoc's runbook page.
The same scrape with a wrong password gets 401 and nothing else.
"""

from __future__ import annotations

import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crashdoc.sandbox.demo import DECODE_UNIT, PREFILL_UNIT, demo_units
from support.deploy_sandbox import (
    DEPLOY,
    UNIT,
    NotRunnable,
    deploy_workdir,
    install_crashdoc_unit,
    install_tls_dropin,
)
from support.e2e import CRASHDOC, free_port, wait_for
from support.monitoring import get_json, served
from support.webtls import PASSWORD, USER, Pki, https_get, write_web_config

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
web_config_file: web-config.yml
"""


def prometheus_config(tmp: Path, crashdoc_port: int, alertmanager_port: int, ca_file: Path) -> Path:
    """The example fleet config with test intervals, addresses and credential files; TLS, basic auth,
    relabelling and rules as shipped. A second job scrapes the same crashdoc with a wrong password."""
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
    assert job["scheme"] == "https" and set(job["tls_config"]) == {"ca_file"}, "the example scrapes over TLS"
    assert job["basic_auth"]["username"] == USER
    job["tls_config"]["ca_file"] = str(ca_file)
    (tmp / "crashdoc-password").write_text(PASSWORD + "\n")
    job["basic_auth"]["password_file"] = str(tmp / "crashdoc-password")
    (tmp / "wrong-password").write_text("not the password\n")
    wrong = {**job, "job_name": "crashdoc-wrong-password", "basic_auth": {**job["basic_auth"]}}
    wrong["basic_auth"]["password_file"] = str(tmp / "wrong-password")
    config["scrape_configs"].append(wrong)
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
    # the web configuration, certificate and key as root-only files, handed over by LoadCredential=
    secrets = deploy_dir / "etc-crashdoc"
    pki = Pki(secrets)
    cert, key = pki.server(secrets / "crashdoc.crt", secrets / "crashdoc.key")
    web = write_web_config(secrets / "web-config.yml", cert=cert, key=key, users={USER: PASSWORD})
    web.write_text(web.read_text().replace(str(cert), "crashdoc.crt").replace(str(key), "crashdoc.key"))
    for path in (cert, key, web):
        path.chmod(0o600)
    install_tls_dropin(sandbox, {"web-config.yml": web, "crashdoc.crt": cert, "crashdoc.key": key})
    cd.ca_file, cd.auth = pki.ca_file, (USER, PASSWORD)
    started = sandbox.systemctl("start", UNIT, timeout=90)
    assert started.returncode == 0, cd.log()
    assert cd.get("/healthz")[0] == 200, cd.log()

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
        f"--config.file={prometheus_config(tmp_path, cd.port, am_port, pki.ca_file)}",
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
        assert runbook == f"https://127.0.0.1:{cd.port}/runbook/{SIGNATURE}"
        assert "systemd restarts: " in alert["annotations"]["description"]
        assert "systemd restarts: unknown" not in alert["annotations"]["description"]
        status, page = cd.get(urllib.parse.urlsplit(runbook).path)  # over TLS, with the password
        assert status == 200 and SIGNATURE in page.decode() and "hicache-ratio" in page.decode()

        # the same scrape with a wrong password: 401 and nothing else
        wrong = wait_for(
            lambda: next(
                (
                    t
                    for t in get_json(f"{prom_url}/api/v1/targets")["data"]["activeTargets"]
                    if t["labels"]["job"] == "crashdoc-wrong-password" and t["health"] == "down"
                ),
                None,
            ),
            30,
            "the wrong-password scrape to fail",
            cd,
        )
        assert wrong["lastError"] == "server returned HTTP status 401 Unauthorized", wrong
        answer = https_get(cd.port, "/metrics", ca_file=pki.ca_file, auth=(USER, "not the password"))
        assert (answer.status, answer.body) == (401, b"Unauthorized\n")
        up = get_json(f"{prom_url}/api/v1/query?query=" + urllib.parse.quote('up{job="crashdoc-wrong-password"}'))
        assert [r["value"][1] for r in up["data"]["result"]] == ["0"]
        scraped = get_json(
            f"{prom_url}/api/v1/query?query="
            + urllib.parse.quote('count({job="crashdoc-wrong-password", __name__=~"crashdoc_.*"})')
        )
        assert scraped["data"]["result"] == [], "a 401 scrape must carry no crashdoc series"
        loop = get_json(
            f"{prom_url}/api/v1/query?query="
            + urllib.parse.quote(f'crashdoc_unit_crashloop{{job="crashdoc", unit="{PREFILL_UNIT}"}}')
        )
        assert [r["value"][1] for r in loop["data"]["result"]] == ["1"], "scraped over TLS with basic auth"

        # nothing else fires: the healthy decode unit, crashdoc's health; and every rule evaluates cleanly
        firing = get_json(f"{prom_url}/api/v1/alerts")["data"]["alerts"]
        assert sorted((a["labels"]["alertname"], a["labels"].get("unit")) for a in firing) == [
            ("SGLangCrashLoop", PREFILL_UNIT)
        ], firing
        rules = [r for g in get_json(f"{prom_url}/api/v1/rules")["data"]["groups"] for r in g["rules"]]
        assert rules and all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    print(f"\ncrash-loop alert in Alertmanager {delivered_after:.1f} s after the sandbox was asked to boot")
