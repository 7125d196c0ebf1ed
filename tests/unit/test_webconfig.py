"""The HTTP view behind a web configuration file (exporter-toolkit's format): TLS, client certificates,
basic auth with bcrypt hashes, headers; validation with FILE:LINE, and reloads that keep the last good file."""

from __future__ import annotations

import base64
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crashdoc.outputs import http as http_module
from crashdoc.outputs.http import HttpServer
from crashdoc.outputs.metrics import Health
from crashdoc.outputs.webconfig import WebConfigError, WebConfigHolder, load_web_config
from support.webtls import PASSWORD, USER, Pki, bcrypt_hash, cert_serial, https_get, write_web_config

METRICS = b'crashdoc_unit_crashloop{unit="sglang-prefill.service"} 1.0\n'


class View:
    def metrics(self) -> bytes:
        return METRICS

    def diagnoses_json(self, unit: str | None) -> str:
        return '{"diagnoses": [{"unit": "sglang-prefill.service"}]}'

    def unit_page(self, unit: str) -> bytes | None:
        return b"<html>secret internals</html>"

    def runbook_page(self, signature: str) -> bytes | None:
        return b"<html>runbook</html>"

    def index_page(self) -> bytes:
        return b"<html>index</html>"

    def health_status(self) -> tuple[bool, dict[str, object]]:
        return True, {"dbus_up": True}


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path / "pki")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator:
    servers: list[HttpServer] = []
    logs: list[str] = []

    def make(web_config: Path) -> tuple[HttpServer, WebConfigHolder, list[str]]:
        holder = WebConfigHolder(web_config, Health(), log=logs.append)
        server = HttpServer(View(), "127.0.0.1", 0, web=holder)
        server.start()
        servers.append(server)
        return server, holder, logs

    yield make
    for server in servers:
        server.stop()


def test_tls_with_basic_auth_serves_every_endpoint_only_to_the_right_credentials(pki: Pki, serve, tmp_path) -> None:
    cert, key = pki.server()
    server, _, _ = serve(write_web_config(tmp_path / "web.yml", cert=cert, key=key, users={USER: PASSWORD}))
    port = server.address[1]
    ok = https_get(port, "/metrics", ca_file=pki.ca_file, auth=(USER, PASSWORD))
    assert (ok.status, ok.body) == (200, METRICS)
    for path in ("/metrics", "/diagnoses", "/units/sglang-prefill.service", "/runbook/x", "/healthz", "/", "/nope"):
        for auth in (None, (USER, "wrong"), ("mallory", PASSWORD), (USER, PASSWORD + "x"), (USER, "")):
            answer = https_get(port, path, ca_file=pki.ca_file, auth=auth)
            assert (answer.status, answer.body) == (401, b"Unauthorized\n"), (path, auth)
            assert answer.headers["www-authenticate"] == 'Basic realm="crashdoc"'
    for header in ("Bearer abc", "Basic !!!", "Basic " + "cHJvbWV0aGV1cw==", ""):  # no colon, junk, empty
        with socket.create_connection(("127.0.0.1", port)) as raw:
            tls = ssl.create_default_context(cafile=str(pki.ca_file)).wrap_socket(raw, server_hostname="127.0.0.1")
            tls.sendall(f"GET /metrics HTTP/1.0\r\nAuthorization: {header}\r\n\r\n".encode())
            answer = tls.makefile("rb").read()
        assert answer.startswith(b"HTTP/1.0 401") and b"crashdoc_unit" not in answer


def test_plain_http_to_the_tls_port_gets_no_data_and_a_silent_client_holds_up_no_one(
    pki: Pki, serve, tmp_path, monkeypatch, capfd
) -> None:
    monkeypatch.setattr(http_module, "HANDSHAKE_TIMEOUT", 1.0)
    cert, key = pki.server()
    server, _, _ = serve(write_web_config(tmp_path / "web.yml", cert=cert, key=key))
    port = server.address[1]
    plain = https_get(port, "/metrics", ca_file=None)
    assert plain.status == 400 and plain.body == b"Client sent an HTTP request to an HTTPS server.\n"
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]  # connect, say nothing
    try:
        answer = https_get(port, "/metrics", ca_file=pki.ca_file)
        assert (answer.status, answer.body) == (200, METRICS)
        silent[0].settimeout(5)
        assert silent[0].recv(100) == b"", "a silent client is dropped after the handshake timeout"
        with socket.create_connection(("127.0.0.1", port)) as raw:  # a TLS client that hangs up mid-request
            tls = ssl.create_default_context(cafile=str(pki.ca_file)).wrap_socket(raw, server_hostname="127.0.0.1")
            tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        assert https_get(port, "/metrics", ca_file=pki.ca_file).status == 200
    finally:
        for s in silent:
            s.close()
    assert "Traceback" not in capfd.readouterr().err


def test_client_certificates_from_another_ca_are_refused_when_required(pki: Pki, serve, tmp_path) -> None:
    cert, key = pki.server()
    other = Pki(tmp_path / "other", name="other")
    path = write_web_config(
        tmp_path / "web.yml",
        cert=cert,
        key=key,
        users={USER: PASSWORD},
        client_auth_type="RequireAndVerifyClientCert",
        client_ca=pki.ca_file,
    )
    server, _, _ = serve(path)
    port = server.address[1]
    good = https_get(port, "/metrics", ca_file=pki.ca_file, auth=(USER, PASSWORD), client_cert=pki.client())
    assert (good.status, good.body) == (200, METRICS)
    for client_cert in (other.client(), None):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            https_get(port, "/metrics", ca_file=pki.ca_file, auth=(USER, PASSWORD), client_cert=client_cert)


def test_a_replaced_certificate_is_served_without_a_restart_and_a_bad_edit_keeps_the_last_good(
    pki: Pki, serve, tmp_path
) -> None:
    cert, key = pki.server()
    path = write_web_config(tmp_path / "web.yml", cert=cert, key=key, users={USER: PASSWORD})
    server, holder, logs = serve(path)
    port = server.address[1]
    first = https_get(port, "/metrics", ca_file=pki.ca_file, auth=(USER, PASSWORD))
    assert first.peer_cert_serial == cert_serial(cert)

    pki.server(cert, key)  # renewed in place, as certbot or a CA agent does
    renewed = cert_serial(cert)
    deadline = time.monotonic() + 10
    while https_get(port, "/metrics", ca_file=pki.ca_file, auth=(USER, PASSWORD)).peer_cert_serial != renewed:
        assert time.monotonic() < deadline, f"the renewed certificate was not served; log: {logs}"
        time.sleep(0.1)
    assert holder.health.web_config_reloads >= 1

    errors = holder.health.web_config_reload_errors
    logs.clear()
    key.write_text("-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n")  # a bad edit
    deadline = time.monotonic() + 10
    while holder.health.web_config_reload_errors == errors:
        assert time.monotonic() < deadline, "the bad edit was not noticed"
        time.sleep(0.1)
    assert not holder.health.web_config_reload_ok
    assert any(f"{path}:" in line and "tls_server_config: cannot load the certificate and key" in line for line in logs)
    still = https_get(port, "/metrics", ca_file=pki.ca_file, auth=(USER, PASSWORD))
    assert (still.status, still.peer_cert_serial) == (200, renewed), "the last good configuration stays in use"


def test_configured_headers_are_sent_on_every_answer(pki: Pki, serve, tmp_path) -> None:
    cert, key = pki.server()
    hsts = "max-age=31536000"
    path = write_web_config(
        tmp_path / "web.yml", cert=cert, key=key, users={USER: PASSWORD}, headers={"Strict-Transport-Security": hsts}
    )
    server, _, _ = serve(path)
    for auth in ((USER, PASSWORD), None):
        answer = https_get(server.address[1], "/metrics", ca_file=pki.ca_file, auth=auth)
        assert answer.headers["strict-transport-security"] == hsts
        assert answer.headers["x-content-type-options"] == "nosniff"


def test_basic_auth_without_tls_and_the_htpasswd_2y_form(serve, tmp_path) -> None:
    hashed = bcrypt_hash(PASSWORD).replace("$2b$", "$2y$", 1)  # htpasswd -B writes $2y$
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  {USER}: '{hashed}'\n")
    server, _, _ = serve(path)
    assert https_get(server.address[1], "/metrics", ca_file=None, auth=(USER, PASSWORD)).status == 200
    assert https_get(server.address[1], "/metrics", ca_file=None, auth=(USER, "nope")).status == 401


def test_every_problem_of_a_web_config_is_named_with_file_line_and_key(pki: Pki, tmp_path: Path) -> None:
    cert, _ = pki.server()
    path = tmp_path / "web.yml"
    path.write_text(
        "tls_server_config:\n"
        f"  cert_file: {cert}\n"
        "  key_file: missing.key\n"
        "  client_auth_type: RequireAnyClientCert\n"
        "  min_version: TLS9\n"
        "basic_auth_users:\n"
        "  alice: hunter2\n"
        "http_server_config:\n"
        "  headers:\n"
        "    X-Frame-Options: allow\n"
        "    Set-Cookie: a=b\n"
        "colour: blue\n"
    )
    with pytest.raises(WebConfigError) as err:
        load_web_config(path)
    p = str(path)
    assert err.value.problems == [
        f"{p}:12: colour: unknown key (known: tls_server_config, basic_auth_users, http_server_config, "
        "unauthenticated_paths)",
        f"{p}:3: tls_server_config.key_file: {tmp_path / 'missing.key'}: no such file",
        f"{p}:4: tls_server_config.client_auth_type: 'RequireAnyClientCert' is not supported (it accepts "
        "certificates without verifying them); use one of NoClientCert, VerifyClientCertIfGiven, "
        "RequireAndVerifyClientCert",
        f"{p}:5: tls_server_config.min_version: 'TLS9' is not one of TLS10, TLS11, TLS12, TLS13",
        f"{p}:7: basic_auth_users.alice: must be a bcrypt hash like $2y$10$... "
        "(htpasswd -nBC 10 \"\" | tr -d ':\\n'); the password itself never goes in this file",
        f"{p}:10: http_server_config.headers.X-Frame-Options: must be one of deny, sameorigin, got 'allow'",
        f"{p}:11: http_server_config.headers.Set-Cookie: cannot be set (allowed: Content-Security-Policy, "
        "X-Frame-Options, X-Content-Type-Options, X-XSS-Protection, Strict-Transport-Security)",
    ]
    path.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    (tmp_path / "server.crt").write_text("not a certificate\n")
    (tmp_path / "server.key").write_text("not a key\n")
    with pytest.raises(WebConfigError) as err:
        load_web_config(path)
    [problem] = err.value.problems
    assert problem.startswith(f"{p}:2: tls_server_config: cannot load the certificate and key: "), problem
    path.write_text("tls_server_config: [\n")
    with pytest.raises(WebConfigError) as err:
        load_web_config(path)
    assert err.value.problems[0].startswith(f"{p}:2: invalid YAML")


def test_relative_paths_are_relative_to_the_web_config_file(pki: Pki, tmp_path: Path) -> None:
    """As exporter-toolkit does, and as systemd's LoadCredential= needs: everything in one folder."""
    folder = tmp_path / "credentials"
    folder.mkdir()
    pki.server(folder / "crashdoc.crt", folder / "crashdoc.key")
    (folder / "web.yml").write_text("tls_server_config: {cert_file: crashdoc.crt, key_file: crashdoc.key}\n")
    config = load_web_config(folder / "web.yml")
    assert config.ssl_context is not None and config.tls is not None
    assert config.tls.cert_file == folder / "crashdoc.crt"


def test_healthz_may_stay_open_when_the_file_says_so_and_nothing_else_may(pki: Pki, serve, tmp_path) -> None:
    cert, key = pki.server()
    path = write_web_config(tmp_path / "web.yml", cert=cert, key=key, users={USER: PASSWORD})
    path.write_text(path.read_text() + "unauthenticated_paths: [/healthz]\n")
    server, _, _ = serve(path)
    port = server.address[1]
    assert https_get(port, "/healthz", ca_file=pki.ca_file).status == 200
    assert https_get(port, "/healthz?x=1", ca_file=pki.ca_file).status == 200
    for other in ("/metrics", "/diagnoses", "/", "/healthz/../metrics", "/%68ealthz/x"):
        assert https_get(port, other, ca_file=pki.ca_file).status == 401, other
    path.write_text(path.read_text().replace("[/healthz]", "[/healthz, /metrics]"))
    with pytest.raises(WebConfigError) as err:
        load_web_config(path)
    line = path.read_text().splitlines().index("unauthenticated_paths: [/healthz, /metrics]") + 1
    assert err.value.problems == [
        f"{path}:{line}: unauthenticated_paths: may only list /healthz (the other paths show the host's internals)"
    ]


def test_the_shipped_example_is_valid_and_its_placeholder_hash_lets_no_one_in(pki: Pki, tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "deploy" / "web-config.example.yml"
    folder = tmp_path / "credentials"
    folder.mkdir()
    pki.server(folder / "crashdoc.crt", folder / "crashdoc.key")
    (folder / "web-config.yml").write_text(example.read_text())
    config = load_web_config(folder / "web-config.yml")
    assert config.ssl_context is not None and list(config.users) == ["prometheus"]
    assert config.headers == (("Strict-Transport-Security", "max-age=31536000"),)
    for password in ("", "prometheus", "change-me", "password"):
        token = base64.b64encode(f"prometheus:{password}".encode()).decode()
        assert not config.authorized(f"Basic {token}")
