"""How crashdoc connects to Alertmanager (Prometheus' `alertmanager_config` client settings): what the
configuration holds, apart from the alert sender (outputs.alerts), so that reading the configuration (every
`diagnose`) imports neither the sender nor what it needs (threads, JSON, the diagnosis records)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: only a delivery needs them
    import ssl
    import urllib.request


class ClientSetupError(OSError):
    """A client setting that cannot be used right now (a missing password file, a bad certificate)."""


@dataclass(frozen=True, slots=True)
class HttpClientConfig:
    """How crashdoc connects to Alertmanager: Prometheus' `alertmanager_config` client settings.
    Paths are absolute here (config.py resolves them); secrets are read from their files per delivery."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure_skip_verify: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    password_file: str | None = None
    bearer_token_file: str | None = None
    proxy_url: str | None = None

    def files(self) -> list[tuple[str, str]]:
        """(setting, path) of every file the settings name, for `check-config`."""
        named = (
            ("tls_config.ca_file", self.ca_file),
            ("tls_config.cert_file", self.cert_file),
            ("tls_config.key_file", self.key_file),
            ("basic_auth.password_file", self.password_file),
            ("bearer_token_file", self.bearer_token_file),
        )
        return [(k, v) for k, v in named if v]

    def post(self, url: str, body: bytes, timeout: float) -> None:
        """POST JSON with these settings; raises OSError (ClientSetupError, URLError, HTTPError, timeouts)."""
        headers = {"Content-Type": "application/json", "User-Agent": "crashdoc"}
        if self.username is not None:
            password = self.password or ""
            if self.password_file:
                password = _read_secret("basic_auth.password_file", self.password_file)
            import base64

            token = base64.b64encode(f"{self.username}:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        elif self.bearer_token_file:
            headers["Authorization"] = f"Bearer {_read_secret('bearer_token_file', self.bearer_token_file)}"
        import urllib.request

        handlers: list[urllib.request.BaseHandler] = []
        if url.startswith("https://"):
            handlers.append(urllib.request.HTTPSHandler(context=self.ssl_context()))
        if self.proxy_url:
            handlers.append(urllib.request.ProxyHandler({"http": self.proxy_url, "https": self.proxy_url}))
        opener = urllib.request.build_opener(*handlers)
        request = urllib.request.Request(url, data=body, method="POST", headers=headers)
        with opener.open(request, timeout=timeout) as response:
            response.read(65536)

    def ssl_context(self) -> ssl.SSLContext:
        """A client context: the system's CAs, or `ca_file`; the client certificate when set."""
        import ssl

        try:
            context = ssl.create_default_context(cafile=self.ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise ClientSetupError(f"tls_config.ca_file: {self.ca_file}: {_reason(exc)}") from exc
        if self.insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            try:
                context.load_cert_chain(self.cert_file, self.key_file)
            except (ssl.SSLError, OSError) as exc:
                raise ClientSetupError(
                    f"tls_config.cert_file/key_file: {self.cert_file}, {self.key_file}: {_reason(exc)}"
                ) from exc
        return context


def _read_secret(setting: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ClientSetupError(f"cannot read {setting} ({path}): {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc)
