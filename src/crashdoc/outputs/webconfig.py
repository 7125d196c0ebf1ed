"""The web configuration file: TLS, client certificates, basic auth and response headers for the HTTP view.

The format is exporter-toolkit's (`--web.config.file` of node_exporter, Prometheus, Alertmanager), so a
fleet that already writes one for its exporters writes the same for crashdoc. Relative paths in it are
relative to the file's own folder (as exporter-toolkit does), which is what makes systemd's
`LoadCredential=` work: the file and the certificates it names land in one folder.

The file and every file it names are watched; an edit is validated completely (the certificate and key
are loaded into a new TLS context) before it replaces the configuration in use, so a bad edit keeps the
last good one, is logged and counted. New connections use the new context: certificates are replaced
without a restart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from crashdoc.errors import ProblemsError
from crashdoc.outputs.metrics import Health
from crashdoc.yamlfile import LocatedYaml, read_located

# exporter-toolkit's client_auth_type values that crashdoc can enforce; the two that accept a certificate
# without verifying it (RequestClientCert, RequireAnyClientCert) authenticate nobody, so they are refused
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# the headers exporter-toolkit lets the file set, and the values it accepts where it restricts them
HEADERS = {
    "Content-Security-Policy": None,
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-Content-Type-Options": ("nosniff",),
    "X-XSS-Protection": None,
    "Strict-Transport-Security": None,
}
BCRYPT_HASH = re.compile(r"^\$2[abxy]?\$(\d\d)\$[./A-Za-z0-9]{53}$")
TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
UNSUPPORTED_TLS_KEYS = {
    "cert": "inline certificates are not supported; use cert_file",
    "key": "inline keys are not supported; use key_file",
    "client_ca": "an inline CA is not supported; use client_ca_file",
    "cipher_suites": "not supported (OpenSSL's defaults for TLS 1.2 apply; use min_version: TLS13 to pin suites)",
    "curve_preferences": "not supported (OpenSSL's defaults apply)",
    "client_allowed_sans": "not supported",
}
# crashdoc's one addition to the format: paths a load balancer or an uptime check may read without the
# password (still over TLS). Only the health check: every other path shows command lines and logs.
OPEN_PATHS_KEY = "unauthenticated_paths"
OPENABLE = ("/healthz",)
AUTH_CACHE_SIZE = 256
SETTLE = 0.3  # seconds of quiet after an edit before the files are read again


class WebConfigError(ProblemsError):
    """The web configuration file has problems (each as FILE:LINE: KEY: WHAT)."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    max_version: str = "TLS13"


@dataclass(slots=True)
class WebConfig:
    """One validated web configuration; `ssl_context` is None for plain HTTP."""

    path: Path | None = None
    tls: TlsSettings | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()
    open_paths: frozenset[str] = frozenset()  # served without basic auth (crashdoc's own key: /healthz only)
    ssl_context: ssl.SSLContext | None = None
    fingerprint: str = ""  # of the file and every file it names: an unchanged set is not reloaded
    _dummy: bytes = b""  # a hash of the users' cost, checked for unknown users so they take as long
    _cache: dict[bytes, bool] = field(default_factory=dict)
    _cache_lock: threading.Lock = field(default_factory=threading.Lock)
    _check_lock: threading.Lock = field(default_factory=threading.Lock)  # right passwords are cached: only guesses wait

    @property
    def files(self) -> list[Path]:
        named = [] if self.tls is None else [self.tls.cert_file, self.tls.key_file, self.tls.client_ca_file]
        return [p for p in (self.path, *named) if p is not None]

    def authorized(self, header: str | None) -> bool:
        """Basic auth against the bcrypt hashes. Every attempt costs one bcrypt check (a dummy one for
        an unknown user) and names are compared in constant time, so timing tells neither which users
        exist nor how much of a password was right. Results are cached by a digest of the attempt."""
        if not self.users:
            return True
        user, password = _basic_credentials(header)
        if user is None or password is None:
            return False
        stored = None
        for name, hashed in self.users.items():  # no early exit: every name is compared
            if hmac.compare_digest(name.encode(), user):
                stored = hashed
        target = stored if stored is not None else self._dummy
        key = hashlib.sha256(b"\0".join((user, password, target))).digest()
        with self._cache_lock:
            cached = self._cache.get(key)
        if cached is None:
            with self._check_lock:  # one uncached check at a time: guessing burns one core, not all of them
                try:
                    cached = bcrypt.checkpw(password, target)
                except ValueError:
                    cached = False
            with self._cache_lock:
                if len(self._cache) >= AUTH_CACHE_SIZE:
                    self._cache.clear()
                self._cache[key] = cached
        return cached and stored is not None


def _basic_credentials(header: str | None) -> tuple[bytes | None, bytes | None]:
    if not header:
        return None, None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None, None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None, None
    user, sep, password = decoded.partition(b":")
    return (user, password) if sep else (None, None)


def load_web_config(path: str | Path) -> WebConfig:
    """Read and validate a web configuration file, loading its certificates; raises WebConfigError with
    every problem as FILE:LINE: KEY: WHAT."""
    path = Path(path)
    doc, raw = read_located(path, WebConfigError)
    return _build(doc, path, raw)


def _build(doc: LocatedYaml, path: Path, raw: bytes) -> WebConfig:
    name = str(path)
    problems: list[str] = []
    data = doc.data if doc.data is not None else {}

    def bad(where: tuple[Any, ...], message: str) -> None:
        problems.append(doc.problem(name, where, message))

    def file_at(where: tuple[Any, ...], value: object) -> Path | None:
        if not isinstance(value, str) or not value:
            bad(where, "must be a file path")
            return None
        p = Path(value)
        p = p if p.is_absolute() else path.parent / p
        if not p.is_file():
            bad(where, f"{p}: no such file")
            return None
        if not os.access(p, os.R_OK):
            bad(where, f"{p}: not readable by this user")
            return None
        return p

    if not isinstance(data, dict):
        raise WebConfigError([f"{name}:1: the web configuration must be a mapping"])
    config = WebConfig(path=path)
    for key in data:
        if key not in ("tls_server_config", "basic_auth_users", "http_server_config", OPEN_PATHS_KEY):
            bad(
                (key,),
                "not supported by crashdoc"
                if key == "rate_limit"
                else f"unknown key (known: tls_server_config, basic_auth_users, http_server_config, {OPEN_PATHS_KEY})",
            )
    open_paths = data.get(OPEN_PATHS_KEY)
    if open_paths is not None:
        if not isinstance(open_paths, list) or any(p not in OPENABLE for p in open_paths):
            bad((OPEN_PATHS_KEY,), f"may only list {', '.join(OPENABLE)} (the other paths show the host's internals)")
        else:
            config.open_paths = frozenset(open_paths)

    tls = data.get("tls_server_config")
    if tls is not None:
        if not isinstance(tls, dict):
            bad(("tls_server_config",), "must be a mapping")
        else:
            config.tls = _tls(tls, bad, file_at)
            if config.tls is not None and not problems:
                try:
                    config.ssl_context = server_context(config.tls)
                except (ssl.SSLError, OSError, ValueError) as exc:
                    bad(("tls_server_config",), f"cannot load the certificate and key: {_ssl_reason(exc)}")

    users = data.get("basic_auth_users")
    if users is not None:
        if not isinstance(users, dict):
            bad(("basic_auth_users",), "must map user names to bcrypt hashes")
        else:
            cost = 4
            for user, hashed in users.items():
                match = BCRYPT_HASH.match(hashed) if isinstance(hashed, str) else None
                if not isinstance(user, str) or not user or ":" in user:
                    bad(("basic_auth_users", user), "a user name must be a non-empty string without ':'")
                elif match is None:
                    bad(
                        ("basic_auth_users", user),
                        "must be a bcrypt hash like $2y$10$... (htpasswd -nBC 10 \"\" | tr -d ':\\n'); "
                        "the password itself never goes in this file",
                    )
                else:
                    config.users[user] = hashed.encode()
                    cost = max(cost, int(match.group(1)))
            if config.users:
                config._dummy = bcrypt.hashpw(b"crashdoc: no such user", bcrypt.gensalt(rounds=min(cost, 31)))

    server = data.get("http_server_config")
    if server is not None:
        if not isinstance(server, dict):
            bad(("http_server_config",), "must be a mapping")
        else:
            for key, value in server.items():
                if key == "http2":
                    if not isinstance(value, bool):
                        bad(("http_server_config", key), "must be true or false")  # HTTP/1.1 is served either way
                elif key == "headers":
                    config.headers = _headers(value, bad)
                else:
                    bad(("http_server_config", key), "unknown key (known: headers, http2)")

    if problems:
        raise WebConfigError(problems)
    config.fingerprint = _fingerprint(raw, config.files[1:])
    return config


def _tls(tls: dict[str, Any], bad: Callable[..., None], file_at: Callable[..., Path | None]) -> TlsSettings | None:
    where = ("tls_server_config",)
    ok = True
    for key in tls:
        if key in UNSUPPORTED_TLS_KEYS:
            bad((*where, key), UNSUPPORTED_TLS_KEYS[key])
            ok = False
        elif key not in TLS_KEYS and key != "prefer_server_cipher_suites":
            bad((*where, key), f"unknown key (known: {', '.join(sorted(TLS_KEYS))})")
            ok = False
    cert = key_file = None
    for key in ("cert_file", "key_file"):
        if key not in tls:
            bad((*where, key), "required (the server's certificate and its key, PEM)")
            ok = False
    if "cert_file" in tls:
        cert = file_at((*where, "cert_file"), tls["cert_file"])
    if "key_file" in tls:
        key_file = file_at((*where, "key_file"), tls["key_file"])
    auth = tls.get("client_auth_type", "NoClientCert")
    if auth not in CLIENT_AUTH:
        why = (
            " (it accepts certificates without verifying them)"
            if auth in ("RequestClientCert", "RequireAnyClientCert")
            else ""
        )
        bad((*where, "client_auth_type"), f"{auth!r} is not supported{why}; use one of {', '.join(CLIENT_AUTH)}")
        ok = False
    ca = None
    if tls.get("client_ca_file") is not None:
        ca = file_at((*where, "client_ca_file"), tls["client_ca_file"])
        ok = ok and ca is not None
    elif auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert"):
        bad(
            (*where, "client_ca_file"), f"required with client_auth_type {auth} (the CA that signs client certificates)"
        )
        ok = False
    versions = {}
    for key, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        value = tls.get(key, default)
        if value not in TLS_VERSIONS:
            bad((*where, key), f"{value!r} is not one of {', '.join(TLS_VERSIONS)}")
            ok = False
        versions[key] = value
    if ok and TLS_VERSIONS[versions["min_version"]] > TLS_VERSIONS[versions["max_version"]]:
        bad((*where, "min_version"), "is above max_version")
        ok = False
    if not ok or cert is None or key_file is None:
        return None
    return TlsSettings(cert, key_file, auth, ca, versions["min_version"], versions["max_version"])


def _headers(value: object, bad: Callable[..., None]) -> tuple[tuple[str, str], ...]:
    where = ("http_server_config", "headers")
    if not isinstance(value, dict):
        bad(where, "must map header names to values")
        return ()
    out = []
    for header, text in value.items():
        canonical = next((h for h in HEADERS if h.lower() == str(header).lower()), None)
        if canonical is None:
            bad((*where, header), f"cannot be set (allowed: {', '.join(HEADERS)})")
        elif not isinstance(text, str) or "\n" in text or "\r" in text:
            bad((*where, header), "must be a one-line string")
        elif text == "":
            continue  # exporter-toolkit: unset if blank
        elif HEADERS[canonical] is not None and text.lower() not in HEADERS[canonical]:  # type: ignore[operator]
            bad((*where, header), f"must be one of {', '.join(HEADERS[canonical] or ())}, got {text!r}")
        else:
            out.append((canonical, text))
    return tuple(out)


def server_context(tls: TlsSettings) -> ssl.SSLContext:
    """A server-side TLS context from the settings: certificate chain, client verification, versions."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[tls.min_version]
    context.maximum_version = TLS_VERSIONS[tls.max_version]
    context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    context.verify_mode = CLIENT_AUTH[tls.client_auth_type]
    if tls.client_ca_file is not None:
        context.load_verify_locations(cafile=str(tls.client_ca_file))
    return context


def _ssl_reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or getattr(exc, "strerror", None) or exc).replace("_", " ").lower()


def _fingerprint(raw: bytes, files: list[Path]) -> str:
    digest = hashlib.sha256(raw)
    for p in files:
        try:
            digest.update(p.read_bytes())
        except OSError:
            digest.update(b"\0unreadable")
    return digest.hexdigest()


class WebConfigHolder:
    """The web configuration in use, replaced only by a complete, valid one.

    The HTTP server reads `current` for each connection; `start()` watches the files (watchdog) and
    reloads them `SETTLE` seconds after edits stop. A rejected edit is logged with every problem, counted
    in `crashdoc_web_config_reload_errors_total`, and `crashdoc_web_config_last_reload_successful` is 0
    until a good one is taken.
    """

    def __init__(self, path: str | Path, health: Health | None = None, log: Callable[[str], None] = print) -> None:
        self.path = Path(path)
        self.health = health if health is not None else Health()
        self._log = log
        self._current = load_web_config(self.path)  # at start, a bad file is an error (no last good one)
        self._lock = threading.Lock()
        self._observer: Any = None
        self._timer: threading.Timer | None = None
        self.last_error = ""

    @property
    def current(self) -> WebConfig:
        return self._current

    def reload(self) -> bool:
        """Read the files again; True when a changed, valid configuration took effect."""
        with self._lock:
            try:
                new = load_web_config(self.path)
            except WebConfigError as exc:
                said = "\n".join(exc.problems)
                if said != self.last_error:  # the same bad file is said once, not on every event
                    self.health.web_config_reload_errors += 1
                    self.health.web_config_reload_ok = False
                    self.last_error = said
                    self._log(exc.said("web configuration rejected, the previous one stays in use"))
                return False
            self.last_error = ""
            self.health.web_config_reload_ok = True
            if new.fingerprint == self._current.fingerprint:
                return False
            self._current = new
            self.health.web_config_reloads += 1
            self._log(f"web configuration reloaded from {self.path} ({describe(new)})")
            return True

    def start(self) -> None:
        """Watch the folders of the file and the files it names (the set is fixed at start: a new
        folder in an edit is read, but watched only after a restart)."""
        handler = _Handler(self._changed)
        self._observer = Observer()
        folders = {p.resolve().parent for p in self._current.files if p.resolve().parent.is_dir()}
        folders |= {p.parent for p in self._current.files if p.parent.is_dir()}
        for folder in folders:
            self._observer.schedule(handler, str(folder), recursive=False)
        self._observer.daemon = True
        self._observer.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)

    def _changed(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = threading.Timer(SETTLE, self._reload_quietly)
        self._timer.daemon = True
        self._timer.start()

    def _reload_quietly(self) -> None:
        try:
            self.reload()
        except Exception as exc:  # the watcher's thread must survive anything
            self._log(f"web configuration reload failed: {type(exc).__name__}: {exc}")


class _Handler(FileSystemEventHandler):
    def __init__(self, on_change: Callable[[], None]) -> None:
        self.on_change = on_change
        self.last_event = 0.0

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        self.last_event = time.monotonic()
        self.on_change()


def describe(config: WebConfig) -> str:
    """One line for the log and `check-config`: what the file turns on."""
    parts = []
    if config.tls is not None:
        parts.append(f"TLS {config.tls.min_version}+ with {config.tls.cert_file}")
        if config.tls.client_auth_type != "NoClientCert":
            parts.append(f"client certificates: {config.tls.client_auth_type}")
    else:
        parts.append("no TLS")
    parts.append(f"basic auth: {len(config.users)} user(s)" if config.users else "no basic auth")
    return ", ".join(parts)
