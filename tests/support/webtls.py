"""Certificates, bcrypt hashes and web configuration files for the TLS and basic-auth tests, and a client
that reports what a scraper would get (status, headers, body) or that the connection was refused."""

from __future__ import annotations

import base64
import http.client
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt
import trustme
import yaml

USER = "prometheus"
PASSWORD = "correct horse battery staple"


def bcrypt_hash(password: str, rounds: int = 4) -> str:
    """A `$2b$` hash as htpasswd -B writes it (cost 4: fast tests; production uses 10 or more)."""
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=rounds)).decode()


@dataclass
class Pki:
    """A CA with a server certificate for 127.0.0.1/localhost and a client certificate, in `folder`."""

    folder: Path
    name: str = "site"
    ca: trustme.CA = field(default_factory=trustme.CA)

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.ca.cert_pem.write_to_path(str(self.ca_file))

    @property
    def ca_file(self) -> Path:
        return self.folder / f"{self.name}-ca.crt"

    def server(self, cert: Path | None = None, key: Path | None = None) -> tuple[Path, Path]:
        """A fresh server certificate (a new serial each call) written to cert/key."""
        cert = cert or self.folder / "server.crt"
        key = key or self.folder / "server.key"
        issued = self.ca.issue_cert("127.0.0.1", "localhost")
        issued.private_key_pem.write_to_path(str(key))
        cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        return cert, key

    def client(self, common_name: str = "prometheus") -> tuple[Path, Path]:
        issued = self.ca.issue_cert(f"{common_name}.example.net", common_name=common_name)
        cert, key = self.folder / f"{self.name}-{common_name}.crt", self.folder / f"{self.name}-{common_name}.key"
        cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        issued.private_key_pem.write_to_path(str(key))
        return cert, key


def write_web_config(
    path: Path,
    *,
    cert: Path | None = None,
    key: Path | None = None,
    users: dict[str, str] | None = None,
    client_auth_type: str | None = None,
    client_ca: Path | None = None,
    headers: dict[str, str] | None = None,
) -> Path:
    doc: dict[str, object] = {}
    if cert is not None:
        tls: dict[str, object] = {"cert_file": str(cert), "key_file": str(key)}
        if client_auth_type:
            tls["client_auth_type"] = client_auth_type
        if client_ca is not None:
            tls["client_ca_file"] = str(client_ca)
        doc["tls_server_config"] = tls
    if users:
        doc["basic_auth_users"] = {u: bcrypt_hash(p) for u, p in users.items()}
    if headers:
        doc["http_server_config"] = {"headers": headers}
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    peer_cert_serial: int | None = None


def https_get(
    port: int,
    path: str,
    *,
    ca_file: Path | None,
    auth: tuple[str, str] | None = None,
    client_cert: tuple[Path, Path] | None = None,
    timeout: float = 5.0,
) -> Answer:
    """GET over TLS (plain HTTP when `ca_file` is None). Raises ssl.SSLError / OSError when the server
    refuses the connection (a handshake failure, or a reset right after it)."""
    headers = {}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    conn: http.client.HTTPConnection
    if ca_file is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    else:
        context = ssl.create_default_context(cafile=str(ca_file))
        if client_cert is not None:
            context.load_cert_chain(str(client_cert[0]), str(client_cert[1]))
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=context)
    try:
        conn.connect()
        serial = None
        if isinstance(conn.sock, ssl.SSLSocket):
            der = conn.sock.getpeercert(binary_form=True)
            if der:
                from cryptography import x509

                serial = x509.load_der_x509_certificate(der).serial_number
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, body, serial)
    finally:
        conn.close()


def cert_serial(cert: Path) -> int:
    from cryptography import x509

    return x509.load_pem_x509_certificate(cert.read_bytes()).serial_number
