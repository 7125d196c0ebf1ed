"""The on-call pages under hostile log content, through the real HTTP server of a real daemon.

A crash-looping process controls what it prints: script tags and quotes in exception messages, ANSI
escapes, NUL bytes, its own secrets. The daemon is built as `crashdoc run` builds it (journal, engine,
library, HTTP server; no D-Bus), its engine is fed the lines and PID 1 records of two crash loops, and
the pages are read over HTTP: only crashdoc's own markup may reach the browser, and no secret.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, urljoin

import pytest

from crashdoc.commands.pipeline import daemon_engine
from crashdoc.config import Config
from crashdoc.events import Lifecycle, LifecycleRecord, LogLine, UnitState, WatchRule
from crashdoc.matching.library import builtin_signature_dirs
from crashdoc.outputs.http import HttpServer
from crashdoc.runtime.build import build
from crashdoc.runtime.daemon import Daemon
from support.e2e import free_port

HOSTILE_UNIT = "sglang-\"x'<img src=x onerror=alert(1)>.service"
PREFILL = "sglang-prefill.service"
SIGNATURE = "dsv4-hicache-size-unsupported"
API_KEY = "sk-hostile-4e5f6a7b8c9d0e1f2a3b4c5d"
BEARER = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.c2lnbmF0dXJlLXZhbHVl"
URL_PASSWORD = "hunter2-url-password"
SECRETS = (API_KEY, BEARER, URL_PASSWORD, "tok3n-in-argv-0123456789")

HOSTILE_TRACEBACK = [
    "[2026-05-01 12:00:03 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/sglang/srt/managers/scheduler.py", line 100, in run_scheduler_process',
    f"    launch(['--api-key', '{API_KEY}'])",
    '  File "/opt/sglang/srt/<script>evil</script>.py", line 7, in load',
    f"    requests.get(url, headers={{'Authorization': 'Bearer {BEARER}'}})",
    'RuntimeError: \x1b[31mcannot load\x1b[0m <script>alert("pwned")</script> " onmouseover="alert(1)" '
    f"\x00 from https://admin:{URL_PASSWORD}@hf.example.net/model --api-key {API_KEY} "
    f"Authorization: Bearer {BEARER} \u202egnp.exe",
    "",
]
DSV4_TRACEBACK = [
    "[2026-05-01 12:00:03 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 6361, '
    "in run_scheduler_process",
    "    scheduler = Scheduler(",
    '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/mem_cache/hybrid_cache/'
    'hybrid_pool_assembler.py", line 661, in _deepseek_v4_num_host_pages',
    "    raise ValueError(",
    "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead.",
    "",
]
PREFILL_ARGV = (
    "/usr/bin/python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    f"https://u:{URL_PASSWORD}@hf.example.net/m",
    "--tp-size",
    "2",
    "--enable-hierarchical-cache",
    "--hicache-size",
    "150",
    "--api-key",
    API_KEY,
    "--hf-token",
    "tok3n-in-argv-0123456789",
)

# what crashdoc's pages may contain: its own tags and attributes, nothing a log could add
TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "h1",
    "h2",
    "h3",
    "h4",
    "p",
    "table",
    "tr",
    "th",
    "td",
    "pre",
    "code",
    "span",
    "ul",
    "li",
    "a",
    "strong",
}
ATTRIBUTES = {"charset", "class", "href"}


@dataclass
class Served:
    daemon: Daemon
    http: HttpServer

    @property
    def base(self) -> str:
        host, port = self.http.address
        return f"http://{host}:{port}"

    def get(self, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.base + path, method=method)
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()


def crash_loop(daemon: Daemon, unit: str, traceback: list[str], argv: tuple[str, ...] = ()) -> None:
    """Two runs that die at start-up, as journald and PID 1 report them."""
    engine = daemon.engine
    t = 1_800_000_000.0
    with daemon.lock:
        if argv:
            engine.on_unit_state(UnitState(unit, active_state="activating", exec_start=argv, timestamp=t))
        for run in (1, 2):
            inv = f"{run:032x}"
            engine.on_lifecycle(LifecycleRecord(unit, Lifecycle.STARTED, t, invocation=inv))
            for text in traceback:
                engine.on_line(LogLine(unit, 100 + run, text, t, inv))
            t += 0.5
            engine.on_lifecycle(
                LifecycleRecord(unit, Lifecycle.EXITED, t, invocation=inv, exit_code="exited", exit_status="1")
            )
            engine.on_lifecycle(
                LifecycleRecord(unit, Lifecycle.RESTART_SCHEDULED, t + 1, invocation=inv, n_restarts=run)
            )
            t += 2
        engine.tick(t)
        engine.events()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    journal = tmp_path / "journal"
    journal.mkdir()
    config = Config(
        units=(WatchRule("*.service", "any"),),
        listen=f"127.0.0.1:{free_port()}",
        state_directory=str(tmp_path / "state"),
        journal_directory=str(journal),
        dbus=False,
        builtin_signatures=False,
        signature_folders=(str(builtin_signature_dirs()[0] / "sglang" / "hicache.yaml"),),
    )
    daemon, http = build(config, daemon_engine)
    daemon.prepare()
    http.start()
    crash_loop(daemon, HOSTILE_UNIT, HOSTILE_TRACEBACK)
    crash_loop(daemon, PREFILL, DSV4_TRACEBACK, PREFILL_ARGV)
    assert {u for u, r in daemon.engine.units().items() if r.crashloop} == {HOSTILE_UNIT, PREFILL}
    try:
        yield Served(daemon, http)
    finally:
        http.stop()


class Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        for name, value in attrs:
            self.attributes.add(name)
            if name == "href" and value is not None:
                self.links.append(value)


def check_headers(headers: dict[str, str]) -> None:
    csp = headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "script" not in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Cache-Control"] == "no-store"


def check_page(body: bytes) -> Markup:
    text = body.decode("utf-8")
    for secret in SECRETS:
        assert secret not in text
    assert "\x00" not in text and "\x1b" not in text and "\u202e" not in text
    markup = Markup()
    markup.feed(text)
    assert markup.tags <= TAGS, markup.tags - TAGS
    assert markup.attributes <= ATTRIBUTES, markup.attributes - ATTRIBUTES
    for link in markup.links:
        assert not link.lower().startswith(("javascript:", "data:", "//")) and ":" not in link.split("/")[0], link
    return markup


def test_unit_page_escapes_and_redacts_what_the_process_printed(served: Served) -> None:
    status, headers, body = served.get("/units/" + quote(HOSTILE_UNIT, safe=""))
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    check_headers(headers)
    check_page(body)
    text = body.decode()
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in text  # shown, as text
    assert "&quot; onmouseover=&quot;alert(1)&quot;" in text
    assert "cannot load" in text and "[31m" not in text
    assert "--api-key &lt;redacted&gt;" in text and "Bearer &lt;redacted&gt;" in text
    assert "https://admin:&lt;redacted&gt;@hf.example.net/model" in text
    assert "sglang-&quot;x&#x27;&lt;img src=x onerror=alert(1)&gt;.service: crash-looping" in text


def test_the_index_links_reach_every_unit_page(served: Served) -> None:
    status, headers, body = served.get("/")
    assert status == 200
    check_headers(headers)
    links = check_page(body).links
    unit_links = [link for link in links if link.startswith("units/")]
    assert len(unit_links) == 2
    for link in unit_links:
        status, _, page = served.get("/" + link)  # what a browser at / asks for
        assert status == 200, link
        check_page(page)
    assert urljoin(served.base + "/", "units/x") == served.base + "/units/x"


def test_runbook_page_shows_the_runbook_latest_evidence_and_the_fix(served: Served) -> None:
    status, headers, body = served.get(f"/runbook/{SIGNATURE}")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    check_headers(headers)
    markup = check_page(body)
    text = body.decode()
    assert "<h1>DeepSeek V4 HiCache rejects --hicache-size</h1>" in text
    assert "<h3>Why it happens</h3>" in text  # the runbook, rendered
    assert f"Latest on <a href='../units/{PREFILL}'>{PREFILL}</a> (crash-looping)" in text
    assert "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size" in text
    assert "Corrected command:" in text and "--hicache-ratio 2.0" in text
    assert "<span class='add'>" in text and "crashdoc-fix.conf" in text  # the diff of the drop-in
    assert "--api-key &lt;redacted&gt;" in text and "--hf-token &lt;redacted&gt;" in text
    assert f"../units/{PREFILL}" in markup.links
    # the unit page links back to it and carries the runbook too
    status, _, page = served.get(f"/units/{PREFILL}")
    assert status == 200
    assert f"href='../runbook/{SIGNATURE}'" in page.decode() and "<h3>Why it happens</h3>" in page.decode()
    check_page(page)


def test_diagnoses_json_is_valid_and_redacted(served: Served) -> None:
    status, headers, body = served.get("/diagnoses")
    assert status == 200 and headers["Content-Type"] == "application/json"
    check_headers(headers)
    raw = body.decode("utf-8")
    for secret in SECRETS:
        assert secret not in raw
    diagnoses = json.loads(raw)["diagnoses"]
    assert {d["unit"] for d in diagnoses} == {HOSTILE_UNIT, PREFILL}
    hostile = next(d for d in diagnoses if d["unit"] == HOSTILE_UNIT)
    assert hostile["signature"] is None and "<script>" in hostile["root_cause"]["line"]  # JSON is data, not markup
    status, _, body = served.get("/diagnoses?unit=" + quote(HOSTILE_UNIT, safe=""))
    assert [d["unit"] for d in json.loads(body)["diagnoses"]] == [HOSTILE_UNIT]
    status, headers, body = served.get("/healthz")
    assert status == 200 and json.loads(body)["signatures_loaded"] == 1


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/units/no-such.service", 404),
        ("GET", "/runbook/no-such-signature", 404),
        ("GET", "/runbook/%3Cscript%3E", 404),
        ("GET", "/units/%00", 404),
        ("GET", "/nothing-here", 404),
        ("POST", "/diagnoses", 405),
        ("DELETE", "/units/sglang-prefill.service", 405),
        ("HEAD", "/", 200),
    ],
)
def test_other_requests(served: Served, method: str, path: str, status: int) -> None:
    got, headers, body = served.get(path, method)
    assert got == status
    check_headers(headers)
    if method == "HEAD":
        assert body == b"" and int(headers["Content-Length"]) > 0
    else:
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert b"<" not in body
    if status == 405:
        assert headers["Allow"] == "GET, HEAD"


def test_a_malformed_request_gets_a_plain_error_that_does_not_echo_it(served: Served) -> None:
    host, port = served.http.address
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"GET /<script>alert(1)</script> HTTP/9.9 extra\r\n\r\n")
        reply = s.recv(65536).decode("latin-1")
    head, _, body = reply.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.0 400 ")
    assert "Content-Type: text/plain; charset=utf-8" in head and "Content-Security-Policy:" in head
    assert "script" not in body
