"""Real Prometheus (Debian's 2.42) and Alertmanager (0.25) on the host's loopback, for end-to-end tests,
optionally behind TLS and basic auth (their `--web.config.file`), and a webhook receiver that records
what Alertmanager notifies."""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import ssl
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.e2e import free_port, wait_for

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
needs_alertmanager = pytest.mark.skipif(
    ALERTMANAGER is None, reason="prometheus-alertmanager is not installed (scripts/install-debs.sh)"
)
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus is not installed (scripts/install-debs.sh)"
)


@dataclass(frozen=True)
class Access:
    """How to reach a server: its CA (None: plain HTTP) and basic-auth credentials."""

    ca_file: Path | None = None
    auth: tuple[str, str] | None = None

    def open(self, url: str, timeout: float = 5.0) -> Any:
        request = urllib.request.Request(url)
        if self.auth is not None:
            token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        context = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file is not None else None
        return urllib.request.urlopen(request, timeout=timeout, context=context)

    def get_json(self, url: str) -> Any:
        with self.open(url) as response:
            return json.loads(response.read())

    def ready(self, url: str) -> bool:
        try:
            with self.open(url, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False


def get_json(url: str) -> Any:
    return Access().get_json(url)


def ready(url: str) -> bool:
    return Access().ready(url)


@contextlib.contextmanager
def served(argv: list[str], log: Path, is_ready: Callable[[], bool] | str) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server until the block ends; it must be ready (a URL answering 200, or a predicate) within 30 s."""
    check = (lambda: ready(is_ready)) if isinstance(is_ready, str) else is_ready
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not check():
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


class Webhook:
    """Where Alertmanager sends its notifications: proves it processed firing and resolved alerts."""

    def __init__(self) -> None:
        self.notifications: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.notifications.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, status: str) -> list[dict[str, Any]]:
        return [a for n in list(self.notifications) for a in n["alerts"] if a["status"] == status]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Alertmanager:
    """A real Alertmanager on loopback, with its own config and storage; no clustering. With
    `web_config` (exporter-toolkit's file: TLS, basic auth), `access` says how to reach it."""

    workdir: Path
    webhook: Webhook
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    web_config: Path | None = None
    access: Access = field(default_factory=Access)

    @property
    def url(self) -> str:
        scheme = "https" if self.access.ca_file is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> Alertmanager:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "alertmanager.yml"
        config.write_text(
            "route:\n"
            "  receiver: hook\n"
            "  group_by: [alertname, unit]\n"
            "  group_wait: 0s\n"
            "  group_interval: 1s\n"
            "  repeat_interval: 1h\n"
            "receivers:\n"
            "  - name: hook\n"
            "    webhook_configs:\n"
            f"      - url: http://127.0.0.1:{self.webhook.port}/\n"
            "        send_resolved: true\n"
        )
        log = open(self.workdir / "alertmanager.log", "ab")  # noqa: SIM115 - owned by the process
        assert ALERTMANAGER is not None
        argv = [
            ALERTMANAGER,
            f"--config.file={config}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ]
        if self.web_config is not None:
            argv.append(f"--web.config.file={self.web_config}")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._ready, 20, "Alertmanager to be ready")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, (self.workdir / "alertmanager.log").read_text()
        return self.access.ready(f"{self.url}/-/ready")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def alerts(self) -> list[dict[str, Any]]:
        """Alertmanager's active alerts (resolved ones are not listed)."""
        return self.access.get_json(f"{self.url}/api/v2/alerts")

    def alert(self, unit: str) -> dict[str, Any] | None:
        found = [a for a in self.alerts() if a["labels"].get("unit") == unit]
        assert len(found) <= 1, found
        return found[0] if found else None


@dataclass
class Prometheus:
    """A real Prometheus on loopback scraping the given jobs every second; queried over its HTTP API."""

    workdir: Path
    scrape_configs: list[dict[str, Any]]
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @contextlib.contextmanager
    def running(self) -> Iterator[Prometheus]:
        assert PROMETHEUS is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": self.scrape_configs,
        }
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        argv = [
            PROMETHEUS,
            f"--config.file={path}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        with served(argv, self.workdir / "prometheus.log", f"{self.url}/-/ready"):
            yield self

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = get_json(f"{self.url}/api/v1/query?query={urllib.parse.quote(expr)}")
        return data["data"]["result"]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def target(self, job: str) -> dict[str, Any] | None:
        targets = get_json(f"{self.url}/api/v1/targets")["data"]["activeTargets"]
        found = [t for t in targets if t["labels"].get("job") == job]
        return found[0] if found else None
