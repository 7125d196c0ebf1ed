"""The HTTP view: /metrics, /diagnoses, /units/<unit>, /runbook/<signature>, /healthz.

A small threaded server from the standard library: the on-call link needs no framework.
It reads through a `View`, which takes the daemon's lock, so pages are consistent with the
metrics scraped at the same moment. It binds only the configured address.

Pages show text that came from logs, so every response (errors included) carries a CSP that
allows no script, no frames and no form targets, `nosniff`, no referrer and no caching; only
GET and HEAD are served, and a client that stalls is dropped after a timeout.

With a web configuration (outputs.webconfig), connections are TLS and every path needs the basic-auth
credentials. The TLS handshake runs in the connection's own thread with its own timeout, so a client
that connects and says nothing, or speaks plain HTTP to the TLS port (it gets a fixed 400 line, as Go's
servers answer), never holds up other clients. Each connection takes the web configuration in use when
it arrives, so a replaced certificate is served from the next connection on.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from typing import TYPE_CHECKING, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from crashdoc.lean import ssl_at_first_use
from crashdoc.outputs.promtext import CONTENT_TYPE as CONTENT_TYPE_LATEST
from crashdoc.outputs.render import redact_data

ssl_at_first_use()  # http.server imports http.client, which imports ssl for HTTPS only: no TLS, no OpenSSL
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402

if TYPE_CHECKING:  # TLS and basic auth (bcrypt) are loaded only with a web configuration file
    from crashdoc.outputs.webconfig import WebConfig

REQUEST_TIMEOUT = 10.0  # seconds a client may take to send its request
HANDSHAKE_TIMEOUT = 5.0  # seconds a client may take to finish the TLS handshake
PLAIN_HTTP_ANSWER = (
    b"HTTP/1.0 400 Bad Request\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)
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


class WebConfigSource(Protocol):
    @property
    def current(self) -> WebConfig: ...


class _QuietServer(ThreadingHTTPServer):
    web: WebConfigSource | None = None

    def finish_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        """In the connection's thread: the TLS handshake (bounded by its timeout), then the request."""
        context = self.web.current.ssl_context if self.web is not None else None
        if context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT)
        try:
            first = request.recv(5, socket.MSG_PEEK)
            if not first or first[0] != 0x16:  # not a TLS handshake record: plain HTTP, or junk
                if first[:1].isalpha():
                    request.sendall(PLAIN_HTTP_ANSWER)
                return
            tls = context.wrap_socket(request, server_side=True)
        except OSError:  # ssl.SSLError is one
            return  # a failed handshake (wrong CA, no client certificate, a timeout) gets nothing more
        try:
            super().finish_request(tls, client_address)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up is no error of crashdoc's: no traceback in the journal for it."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            return
        if self.web is not None:  # TLS may be served: ssl is loaded (without it no error can be ssl's)
            import ssl

            if isinstance(error, ssl.SSLError):
                return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class HttpServer:
    def __init__(self, view: View, host: str, port: int, web: WebConfigSource | None = None) -> None:
        handler = _handler_for(view, web)
        try:
            self.server = _QuietServer((host, port), handler)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        self.server.web = web
        self.web = web
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="crashdoc-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    @property
    def scheme(self) -> str:
        return "https" if self.web is not None and self.web.current.ssl_context is not None else "http"

    def start(self) -> None:
        start = getattr(self.web, "start", None)
        if start is not None:
            start()  # watch the web configuration and its certificates
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        stop = getattr(self.web, "stop", None)
        if stop is not None:
            stop()


def _handler_for(view: View, web: WebConfigSource | None = None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "crashdoc"
        sys_version = ""
        timeout = REQUEST_TIMEOUT

        def _authorized(self) -> bool:
            """Basic auth when the web configuration has users: anything else gets a bare 401."""
            if web is None:
                return True
            current = web.current
            if self.command in ("GET", "HEAD") and unquote(urlsplit(self.path).path) in current.open_paths:
                return True
            if current.authorized(self.headers.get("Authorization")):
                return True
            self.close_connection = True
            self._send(401, TEXT, b"Unauthorized\n", extra=(("WWW-Authenticate", 'Basic realm="crashdoc"'),))
            return False

        def do_GET(self) -> None:
            if not self._authorized():
                return
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
            if not self._authorized():
                return
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
            configured = web.current.headers if web is not None else ()
            chosen = {h.lower() for h, _ in configured}
            for name, value in (*(h for h in SECURITY_HEADERS if h[0].lower() not in chosen), *configured, *extra):
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # access logs would flood the journal on every scrape

    return Handler
