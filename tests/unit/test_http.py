"""The HTTP view survives clients that hang up mid-answer, without tracebacks in the journal."""

from __future__ import annotations

import socket
import time

from crashdoc.outputs.http import HttpServer


class BigView:
    def metrics(self) -> bytes:
        return b"# a scrape too large to finish\n" * 200_000

    def diagnoses_json(self, unit: str | None) -> str:
        return '{"diagnoses": []}'

    def unit_page(self, unit: str) -> bytes | None:
        return None

    def runbook_page(self, signature: str) -> bytes | None:
        return None

    def index_page(self) -> bytes:
        return b"<html></html>"

    def health_status(self) -> tuple[bool, dict[str, object]]:
        return True, {}


def test_a_client_hanging_up_leaves_no_traceback_and_the_server_answers_on(capfd) -> None:
    server = HttpServer(BigView(), "127.0.0.1", 0)
    server.start()
    host, port = server.address
    try:
        for _ in range(5):
            with socket.create_connection((host, port)) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                s.recv(100)  # then hang up with a reset, mid-body
        time.sleep(0.5)
        with socket.create_connection((host, port)) as s:
            s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            answer = s.makefile("rb").read()
        assert answer.startswith(b"HTTP/1.0 200")
    finally:
        server.stop()
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
