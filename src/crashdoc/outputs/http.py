"""The HTTP view: /metrics, /diagnoses, /units/<unit>, /runbook/<signature>, /healthz.

A small threaded server from the standard library: the on-call link needs no framework.
It reads through a `View`, which takes the daemon's lock, so pages are consistent with the
metrics scraped at the same moment. It binds only the configured address.

Pages show text that came from logs, so every response (errors included) carries a CSP that
allows no script, no frames and no form targets, `nosniff`, no referrer and no caching; only
GET and HEAD are served, and a client that stalls is dropped after a timeout.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from crashdoc.outputs.render import redact_data

REQUEST_TIMEOUT = 10.0  # seconds a client may take to send its request
SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
)
TEXT = "text/plain; charset=utf-8"


class View(Protocol):
    def metrics(self) -> bytes: ...
    def diagnoses_json(self, unit: str | None) -> str: ...
    def unit_page(self, unit: str) -> bytes | None: ...
    def runbook_page(self, signature: str) -> bytes | None: ...
    def index_page(self) -> bytes: ...
    def health_status(self) -> tuple[bool, dict[str, object]]: ...


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up is no error of crashdoc's: no traceback in the journal for it."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class HttpServer:
    def __init__(self, view: View, host: str, port: int) -> None:
        handler = _handler_for(view)
        try:
            self.server = _QuietServer((host, port), handler)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="crashdoc-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler_for(view: View) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "crashdoc"
        sys_version = ""
        timeout = REQUEST_TIMEOUT

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            path = unquote(url.path)
            try:
                if path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, view.metrics())
                elif path == "/diagnoses":
                    unit = parse_qs(url.query).get("unit", [None])[0]
                    self._send(200, "application/json", view.diagnoses_json(unit).encode("utf-8", "replace"))
                elif path.startswith("/units/"):
                    self._html(view.unit_page(path[len("/units/") :]))
                elif path.startswith("/runbook/"):
                    self._html(view.runbook_page(path[len("/runbook/") :]))
                elif path == "/healthz":
                    ok, detail = view.health_status()
                    self._send(200 if ok else 503, "application/json", json.dumps(redact_data(detail)).encode())
                elif path in ("/", "/index.html"):
                    self._send(200, "text/html; charset=utf-8", view.index_page())
                else:
                    self._send(404, TEXT, b"not found\n")
            except ConnectionError:
                self.close_connection = True  # the client hung up mid-answer (a scraper timing out): nothing to say
            except Exception as exc:
                try:
                    self._send(500, TEXT, f"internal error: {type(exc).__name__}\n".encode())
                except ConnectionError:
                    self.close_connection = True

        def do_HEAD(self) -> None:
            self.do_GET()

        def _not_allowed(self) -> None:
            self._send(405, TEXT, b"only GET and HEAD\n", extra=(("Allow", "GET, HEAD"),))

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            """The standard library's errors (bad request line, URI too long, unknown method) as plain text
            with the same headers, instead of its HTML page that echoes the request."""
            self.close_connection = True
            if self.request_version == "HTTP/0.9":  # an unparsable request line: still answer with headers
                self.request_version = "HTTP/1.0"
            text = f"{code} {self.responses.get(code, ('error',))[0]}\n"
            self._send(code, TEXT, text.encode(), extra=(("Connection", "close"),))

        def _html(self, body: bytes | None) -> None:
            if body is None:
                self._send(404, TEXT, b"not found\n")
            else:
                self._send(200, "text/html; charset=utf-8", body)

        def _send(self, status: int, content_type: str, body: bytes, extra: tuple[tuple[str, str], ...] = ()) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (*SECURITY_HEADERS, *extra):
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # access logs would flood the journal on every scrape

    return Handler
