"""Fleet settings: web_config_file and the Alertmanager client settings in the configuration (paths from
systemd's credentials folder), the runbook base URL a user passes, and `explain` checking its input
before it loads the library."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from crashdoc.cli import main
from crashdoc.config import ConfigError, load_config
from crashdoc.events import Diagnosis, Fix, RootCause
from crashdoc.outputs.alerts import AlertSender, HttpClientConfig
from crashdoc.outputs.metrics import Health
from support.e2e import CRASHDOC
from support.webtls import PASSWORD, USER, Pki, write_web_config

UNIT = "sglang-prefill.service"


# --- the runbook base URL ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given",
    [
        "https://oncall.example.net/crashdoc",
        "https://oncall.example.net/crashdoc/",
        "https://oncall.example.net/crashdoc/runbook",
        "https://oncall.example.net/crashdoc/runbook/",
    ],
)
def test_a_runbook_base_url_with_or_without_runbook_gives_working_links(tmp_path: Path, given: str) -> None:
    path = tmp_path / "crashdoc.yaml"
    path.write_text(f"runbook_base_url: {given}\n")
    assert load_config(path).runbook_base_url == "https://oncall.example.net/crashdoc"


def test_the_option_help_says_which_url_to_pass(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "alert links are URL/runbook/<signature> and URL/units/<unit>" in help_text
    assert "a URL ending in /runbook is taken too" in help_text


# --- explain checks its input first ---------------------------------------------------------------


def test_explain_says_an_input_is_empty_or_unreadable_before_loading_the_library(tmp_path: Path) -> None:
    """With a broken library, what the user hears about is their empty file: the input is checked first."""
    broken = tmp_path / "library"
    broken.mkdir()
    (broken / "bad.yaml").write_text("signatures: [\n")
    empty = tmp_path / "empty.log"
    empty.touch()
    for path, reason in ((empty, "empty file, nothing to diagnose"), (tmp_path, "Is a directory")):
        r = subprocess.run(
            [*CRASHDOC, "explain", str(path), "--signatures", str(broken)], capture_output=True, text=True, timeout=60
        )
        assert (r.returncode, r.stdout, r.stderr) == (3, "", f"crashdoc: cannot read {path}: {reason}\n")
    log = tmp_path / "sglang.log"
    log.write_text("hello\n")
    r = subprocess.run(
        [*CRASHDOC, "explain", str(log), "--signatures", str(broken)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 4 and "the signature library has problems" in r.stderr, "a good input still needs it"


# --- web_config_file in the configuration -----------------------------------------------------------


def test_web_config_file_is_found_in_the_credentials_folder(tmp_path: Path, monkeypatch) -> None:
    config = tmp_path / "etc" / "crashdoc.yaml"
    config.parent.mkdir()
    config.write_text("web_config_file: web.yml\nalertmanager:\n  basic_auth: {username: cd, password_file: am-pw}\n")
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    loaded = load_config(config)
    assert loaded.web_config_file == str(config.parent / "web.yml")
    assert loaded.alertmanager.client.password_file == str(config.parent / "am-pw")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", "/run/credentials/crashdoc.service")
    loaded = load_config(config)
    assert loaded.web_config_file == "/run/credentials/crashdoc.service/web.yml"
    assert loaded.alertmanager.client.password_file == "/run/credentials/crashdoc.service/am-pw"


def test_check_config_validates_the_web_config_and_the_client_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pki = Pki(tmp_path)
    cert, key = pki.server()
    write_web_config(tmp_path / "web.yml", cert=cert, key=key, users={USER: PASSWORD})
    config = tmp_path / "crashdoc.yaml"
    config.write_text("web_config_file: web.yml\n")
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"  web:           {tmp_path / 'web.yml'}: TLS TLS12+ with {cert}, basic auth: 1 user(s)" in out
    assert "  runbook links: https://127.0.0.1:10247/runbook/<signature>" in out, "TLS: the default links are https"

    (tmp_path / "web.yml").write_text("basic_auth_users:\n  prometheus: plaintext\n")
    config.write_text(
        "web_config_file: web.yml\n"
        "alertmanager:\n"
        "  url: https://am.example.net:9093\n"
        "  basic_auth: {username: crashdoc, password_file: missing-password}\n"
    )
    assert main(["check-config", str(config)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{tmp_path / 'web.yml'}:2: basic_auth_users.prometheus: must be a bcrypt hash")
    assert err[0].endswith(f"(web_config_file, {config}:1)")
    assert err[1] == (
        f"{config}:4: alertmanager.basic_auth.password_file: {tmp_path / 'missing-password'}: No such file or directory"
    )


def test_alertmanager_client_settings_are_checked_with_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "crashdoc.yaml"
    config.write_text(
        "alertmanager:\n"
        "  url: https://am.example.net:9093\n"
        "  tls_config: {cert_file: a.crt, verify: yes}\n"
        "  basic_auth: {username: crashdoc, password_file: pw}\n"
        "  bearer_token_file: token\n"
        "  proxy_url: socks://proxy\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(config)
    c = str(config)
    assert err.value.problems == [
        f"{c}:3: alertmanager.tls_config.verify: unknown key "
        "(known: ca_file, cert_file, key_file, insecure_skip_verify)",
        f"{c}:3: alertmanager.tls_config: cert_file and key_file go together",
        f"{c}:5: alertmanager.bearer_token_file: basic_auth and a bearer token are mutually exclusive",
        f"{c}:6: alertmanager.proxy_url: must be an http(s) URL",
    ]


# --- the Alertmanager push over TLS with basic auth -------------------------------------------------


class TlsAlertmanager:
    """A stand-in for Alertmanager's API behind TLS and basic auth: records what it was sent."""

    def __init__(self, pki: Pki, password: str) -> None:
        self.received: list[tuple[str | None, list]] = []
        cert, key = pki.server()
        me = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                auth = self.headers.get("Authorization")
                expected = "Basic " + base64.b64encode(f"crashdoc:{password}".encode()).decode()
                self.send_response(200 if auth == expected else 401)
                self.end_headers()
                if auth == expected:
                    me.received.append((auth, body))

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def tls_am(tmp_path: Path) -> Iterator[tuple[TlsAlertmanager, Pki]]:
    pki = Pki(tmp_path / "am")
    am = TlsAlertmanager(pki, "s3cret")
    yield am, pki
    am.close()


def diagnosis() -> Diagnosis:
    return Diagnosis(
        UNIT, "sig", "title", "hicache", "critical", RootCause("ValueError", "m", "ValueError: m"), [], Fix("fix"), "fp"
    )


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_push_over_tls_with_a_password_file_keeps_the_alert_until_the_settings_work(
    tls_am: tuple[TlsAlertmanager, Pki], tmp_path: Path
) -> None:
    """Missing password file, then a wrong password, then the right one: each failure is one clear line,
    and the firing alert is delivered once the settings work (nothing is lost while retrying)."""
    am, pki = tls_am
    password_file = tmp_path / "am-password"
    client = HttpClientConfig(ca_file=str(pki.ca_file), username="crashdoc", password_file=str(password_file))
    logs: list[str] = []
    health = Health()
    sender = AlertSender(
        am.url,
        "gpu-7",
        lambda s, u: f"https://x/runbook/{s}",
        health,
        60,
        2,
        0.05,
        0.2,
        post=client.post,
        log=logs.append,
    )
    try:
        sender.update({UNIT: diagnosis()})
        wait_until(lambda: health.alert_errors >= 1)
        assert logs[0] == (
            f"cannot send alerts to {am.url}/api/v2/alerts: cannot read basic_auth.password_file ({password_file}): "
            "No such file or directory; retrying with backoff (up to 0.2 s)"
        )
        password_file.write_text("wrong\n")
        errors = health.alert_errors
        wait_until(lambda: health.alert_errors > errors + 1)
        assert sender.last_error.startswith(f"cannot send alerts to {am.url}/api/v2/alerts: HTTP 401")
        password_file.write_text("s3cret\n")
        wait_until(lambda: am.received)
        [alert] = am.received[0][1]
        assert alert["labels"]["unit"] == UNIT and alert["annotations"]["runbook_url"] == "https://x/runbook/sig"
        assert "s3cret" not in " ".join(logs)
    finally:
        sender.stop()


def test_push_to_a_server_of_an_unknown_ca_says_so(tls_am: tuple[TlsAlertmanager, Pki], tmp_path: Path) -> None:
    am, _ = tls_am
    other = Pki(tmp_path / "other", name="other")
    client = HttpClientConfig(ca_file=str(other.ca_file), username="crashdoc", password="s3cret")
    health = Health()
    sender = AlertSender(am.url, "gpu-7", lambda s, u: "u", health, 60, 2, 0.05, 0.2, post=client.post)
    try:
        sender.update({UNIT: diagnosis()})
        wait_until(lambda: health.alert_errors >= 1)
        assert sender.last_error == (f"cannot send alerts to {am.url}/api/v2/alerts: TLS: certificate verify failed"), (
            sender.last_error
        )
        assert am.received == []
    finally:
        sender.stop()


def test_push_through_a_proxy_with_a_bearer_token_file(tmp_path: Path) -> None:
    """proxy_url: the request goes to the proxy (absolute URL); bearer_token_file: read per delivery."""
    seen: list[tuple[str, str | None]] = []

    class Proxy(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.path, self.headers.get("Authorization")))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text("tok-1\n")
    client = HttpClientConfig(bearer_token_file=str(token), proxy_url=f"http://127.0.0.1:{proxy.server_address[1]}")
    try:
        client.post("http://alertmanager.invalid:9093/api/v2/alerts", b"[]", 5)
        token.write_text("tok-2\n")  # rotated: the next delivery uses it
        client.post("http://alertmanager.invalid:9093/api/v2/alerts", b"[]", 5)
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert seen == [
        ("http://alertmanager.invalid:9093/api/v2/alerts", "Bearer tok-1"),
        ("http://alertmanager.invalid:9093/api/v2/alerts", "Bearer tok-2"),
    ]
