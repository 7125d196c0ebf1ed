"""A fleet's crashdoc behind TLS and basic auth, end to end on the private systemd.

crashdoc runs inside a private systemd next to the crash-looping demo prefill unit, with a web
configuration file (exporter-toolkit's format). A real Prometheus 2.42 on the host's loopback scrapes
it over TLS with basic auth and a client certificate; a second job presents a client certificate from
another CA. The web configuration is edited while crashdoc runs (client certificates required, a renewed
certificate, a broken edit) and a real Alertmanager 0.25 behind TLS and basic auth receives crashdoc's
own alert.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from crashdoc.sandbox.demo import PREFILL_UNIT, demo_units
from support.e2e import CRASHDOC, checked_hicache_ratio, free_port, start_crashdoc, wait_for
from support.monitoring import Access, Alertmanager, Prometheus, Webhook, needs_alertmanager, needs_prometheus
from support.webtls import PASSWORD, USER, Pki, cert_serial, https_get, write_web_config

SIGNATURE = "dsv4-hicache-size-unsupported"
CONFIG = 'units:\n  - {name: "sglang-prefill.service", role: prefill}\ninstance: "gpu-node-7"\n'


def scrape_job(name: str, port: int, pki: Pki, password_file: Path, client: tuple[Path, Path]) -> dict[str, Any]:
    """A scrape job as deploy/prometheus/prometheus.example.yml writes it, with a client certificate."""
    return {
        "job_name": name,
        "scheme": "https",
        "tls_config": {"ca_file": str(pki.ca_file), "cert_file": str(client[0]), "key_file": str(client[1])},
        "basic_auth": {"username": USER, "password_file": str(password_file)},
        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
    }


@needs_prometheus
@pytest.mark.sandbox
@pytest.mark.slow
def test_prometheus_scrapes_over_tls_client_certificates_are_enforced_and_a_renewed_certificate_is_served(
    sandbox_factory, sandbox_workdir: Path, tmp_path: Path
) -> None:
    pki = Pki(sandbox_workdir / "pki")
    other = Pki(tmp_path / "other-ca", name="other")
    cert, key = pki.server()
    web = write_web_config(sandbox_workdir / "web.yml", cert=cert, key=key, users={USER: PASSWORD})
    sandbox = sandbox_factory(demo_units(sandbox_workdir, CRASHDOC[0]), workdir=sandbox_workdir, start_units=[])
    port = free_port()
    args = ["--listen", f"127.0.0.1:{port}", "--state-directory", str(sandbox_workdir / "state")]
    cd = start_crashdoc(
        sandbox,
        config=CONFIG,
        args=[*args, "--web-config-file", str(web)],
        port=port,
        ca_file=pki.ca_file,
        auth=(USER, PASSWORD),
    )
    try:
        pid = cd.pid
        sandbox.systemctl("start", PREFILL_UNIT, check=True)
        wait_for(lambda: cd.metric("crashdoc_unit_crashloop", unit=PREFILL_UNIT) == 1.0, 60, "the crash loop", cd)
        assert "https://127.0.0.1:" in cd.log()

        password_file = tmp_path / "crashdoc-password"
        password_file.write_text(PASSWORD + "\n")
        jobs = [
            scrape_job("crashdoc", port, pki, password_file, pki.client("prometheus")),
            scrape_job("crashdoc-other-ca", port, pki, password_file, other.client("prometheus")),
        ]
        with Prometheus(tmp_path / "prometheus", jobs).running() as prom:
            loop = f'crashdoc_unit_crashloop{{job="crashdoc", unit="{PREFILL_UNIT}"}}'
            wait_for(lambda: prom.value(loop) == 1.0, 30, "Prometheus to scrape the crash loop over TLS", cd)
            info = prom.query(f'crashdoc_diagnosis_info{{job="crashdoc", unit="{PREFILL_UNIT}"}}')
            assert [r["metric"]["signature"] for r in info] == [SIGNATURE]

            # client certificates required (an edit of the running crashdoc's web configuration)
            write_web_config(
                web,
                cert=cert,
                key=key,
                users={USER: PASSWORD},
                client_auth_type="RequireAndVerifyClientCert",
                client_ca=pki.ca_file,
            )
            refused = wait_for(
                lambda: (t := prom.target("crashdoc-other-ca")) and t["health"] == "down" and t,
                30,
                "the other CA's client certificate to be refused",
                cd,
            )
            print(f"\nclient certificate of another CA: {refused['lastError']}")
            # refused in the handshake: the TLS alert, or on a loaded host a reset that overtakes it
            said = refused["lastError"].lower()
            assert any(w in said for w in ("tls", "certificate", "connection reset by peer")), refused
            for client_cert in (other.client("intruder"), None):
                with pytest.raises(OSError):  # ssl.SSLError or a reset: no HTTP answer at all
                    https_get(port, "/metrics", ca_file=pki.ca_file, auth=(USER, PASSWORD), client_cert=client_cert)
            own = pki.client("oncall")
            answer = https_get(port, "/metrics", ca_file=pki.ca_file, auth=(USER, PASSWORD), client_cert=own)
            assert answer.status == 200
            assert prom.target("crashdoc")["health"] == "up"

            # the certificate is renewed in place: served from the next connection on, no restart
            before = answer.peer_cert_serial
            assert before == cert_serial(cert)
            pki.server(cert, key)
            renewed_at = time.time()
            wait_for(
                lambda: (
                    https_get(
                        port, "/healthz", ca_file=pki.ca_file, auth=(USER, PASSWORD), client_cert=own
                    ).peer_cert_serial
                    == cert_serial(cert)
                ),
                15,
                "the renewed certificate to be served",
                cd,
            )
            assert cd.pid == pid, "crashdoc was not restarted"
            wait_for(
                lambda: (t := prom.target("crashdoc"))["health"] == "up" and _epoch(t["lastScrape"]) > renewed_at + 0.5,
                15,
                "Prometheus to scrape after the renewal",
                cd,
            )
            assert prom.value(loop) == 1.0

            # a broken edit: logged, counted, and the last good configuration stays in use
            web.write_text("tls_server_config:\n  cert_file: /nonexistent/crashdoc.crt\n  key_file: x\n")
            errors = 'crashdoc_web_config_reload_errors_total{job="crashdoc"}'
            wait_for(lambda: prom.value(errors) == 1.0, 20, "the rejected edit on Prometheus", cd)
            assert prom.value('crashdoc_web_config_last_reload_successful{job="crashdoc"}') == 0.0
            assert f"{web}:2: tls_server_config.cert_file: /nonexistent/crashdoc.crt: no such file" in cd.log()
            assert prom.target("crashdoc")["health"] == "up"
            assert prom.target("crashdoc-other-ca")["health"] == "down"
            assert cd.pid == pid
    finally:
        cd.stop()


def _epoch(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")[:26] + "+00:00").timestamp()


@needs_alertmanager
@pytest.mark.sandbox
def test_alertmanager_behind_tls_and_basic_auth_receives_the_alert_with_fix_and_runbook_link(
    sandbox_factory, sandbox_workdir: Path, tmp_path: Path
) -> None:
    am_pki = Pki(tmp_path / "am-pki", name="alertmanager")
    am_cert, am_key = am_pki.server()
    am_password = "alertmanager push secret"
    am_web = write_web_config(tmp_path / "am-web.yml", cert=am_cert, key=am_key, users={"crashdoc": am_password})
    webhook = Webhook()
    am = Alertmanager(
        tmp_path / "alertmanager", webhook, web_config=am_web, access=Access(am_pki.ca_file, ("crashdoc", am_password))
    )
    # what crashdoc needs, where LoadCredential= would put it
    credentials = sandbox_workdir / "credentials"
    credentials.mkdir()
    (credentials / "alertmanager-password").write_text(am_password + "\n")
    (credentials / "alertmanager-ca.crt").write_bytes(am_pki.ca_file.read_bytes())
    sandbox = sandbox_factory(demo_units(sandbox_workdir, CRASHDOC[0]), workdir=sandbox_workdir, start_units=[])
    try:
        am.start()
        assert not Access(am_pki.ca_file, ("crashdoc", "wrong")).ready(f"{am.url}/-/ready"), "AM requires the password"
        config = CONFIG + (
            "alertmanager:\n"
            f"  url: {am.url}\n"
            "  resend_interval: 2\n"
            "  tls_config: {ca_file: alertmanager-ca.crt}\n"
            "  basic_auth: {username: crashdoc, password_file: alertmanager-password}\n"
            # the runbook page's own address, as a user might paste it: taken as the base
            "runbook_base_url: https://oncall.example.net/crashdoc/runbook\n"
        )
        cd = start_crashdoc(sandbox, config=config, env={"CREDENTIALS_DIRECTORY": str(credentials)})
        try:
            sandbox.systemctl("start", PREFILL_UNIT, check=True)
            alert = wait_for(lambda: am.alert(PREFILL_UNIT), 60, "the alert in Alertmanager behind TLS", cd)
            assert alert["labels"]["signature"] == SIGNATURE and alert["labels"]["instance"] == "gpu-node-7"
            notes = alert["annotations"]
            assert notes["runbook_url"] == f"https://oncall.example.net/crashdoc/runbook/{SIGNATURE}"
            fix = next(d["fix"] for d in cd.diagnoses() if d["unit"] == PREFILL_UNIT)
            checked_hicache_ratio(fix)  # the value this machine's memory accepts (2.0 where it fits)
            assert f"Fix: {fix['summary']}" in notes["description"]
            assert "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size" in notes["description"]
            assert cd.metric("crashdoc_alert_errors_total") == 0.0
            wait_for(lambda: webhook.alerts("firing"), 15, "Alertmanager to notify its receiver", cd)
            assert am_password not in cd.log()
        finally:
            cd.stop()
    finally:
        am.stop()
        webhook.close()
