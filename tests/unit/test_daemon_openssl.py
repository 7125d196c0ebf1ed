"""A daemon without TLS loads no OpenSSL (libcrypto and libssl: ~5 MB of its RSS, issue 26): its digests come from
the interpreter's own hash modules, its /metrics text from crashdoc's writer, and `ssl` (which `http.client`
imports) is run only when HTTPS is used. The digests and the text are the same as hashlib's and prometheus_client's."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    StateSetMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from systemd.journal import Reader as journal_reader

from crashdoc import lean
from crashdoc.outputs import promtext
from support.e2e import CRASHDOC, free_port
from support.journal_files import JOURNAL_REMOTE, crash_loop_entries, write_journal


@pytest.mark.parametrize("data", [b"", b"abc", "fp1\x1fRuntimeError\x1fCUDA error: \u00e9".encode() * 300])
def test_the_builtin_digests_are_hashlibs(data: bytes) -> None:
    assert lean.sha1(data).hexdigest() == hashlib.sha1(data).hexdigest()
    assert lean.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    assert lean.blake2b(data, digest_size=16).digest() == hashlib.blake2b(data, digest_size=16).digest()
    parts = lean.blake2b(digest_size=20)
    for i in range(0, len(data), 7):
        parts.update(data[i : i + 7])
    assert parts.hexdigest() == hashlib.blake2b(data, digest_size=20).hexdigest()


class _Families(Collector):
    def collect(self):  # type: ignore[no-untyped-def]
        c = CounterMetricFamily("crashes", 'with "quotes", a \\ and\na new line', labels=["unit"], created=12.5)
        c.add_metric(['sglang "a"\\b\nc.service'], 3.0, timestamp=1700000000.25)
        c.add_metric(["ünïcode.service"], math.inf)
        yield c
        g = GaugeMetricFamily("lag_seconds", "lag", labels=["unit", "role"])
        g.add_metric(["a", "prefill"], math.nan)
        g.add_metric(["b", ""], -math.inf)
        g.add_metric(["c", "x"], 1e-7)
        yield g
        yield GaugeMetricFamily("empty", "no samples")
        yield InfoMetricFamily("build", "version", value={"version": "1.2.3", "python": "3.11"})
        h = HistogramMetricFamily("latency_seconds", "detection", labels=["unit"])
        h.add_metric(["a"], [("0.1", 1.0), ("1.0", 4.0), ("+Inf", 5.0)], 2.5)
        yield h
        yield GaugeHistogramMetricFamily("queue", "gh", buckets=[("1.0", 2.0), ("+Inf", 3.0)], gsum_value=4.0)
        yield StateSetMetricFamily("state", "ss", value={"up": True, "down": False})
        yield SummaryMetricFamily("sizes", "s", count_value=3, sum_value=9.5)


def test_the_metrics_text_is_prometheus_clients() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families())
    assert promtext.text(registry) == generate_latest(registry)


@pytest.mark.skipif(JOURNAL_REMOTE is None, reason="systemd-journal-remote is missing")
def test_a_daemon_without_tls_maps_no_openssl_and_serves_its_metrics(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    journal.mkdir()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")
    # this boot's: the daemon follows the journal of the boot it runs in; tracebacks: their fingerprints are digests
    write_journal(journal, [{**e, "_BOOT_ID": boot} for e in crash_loop_entries()])
    config = tmp_path / "crashdoc.yaml"
    config.write_text('units:\n  - {name: "sglang-prefill.service", role: prefill}\ndbus: false\n')
    state = tmp_path / "state"
    state.mkdir()
    reader = journal_reader(files=[str(f) for f in journal.glob("*.journal")])
    reader.seek_head()
    reader._next()
    cursor = reader._get_cursor()  # saved by a daemon that stopped before the loop: it reads the loop at its start
    reader.close()
    (state / "state.json").write_text(json.dumps({"version": 1, "cursor": cursor, "saved_at": 0, "data": {}}))
    port = free_port()
    argv = [*CRASHDOC, "run", "--config", str(config), "--directory", str(journal)]
    argv += ["--state-directory", str(state), "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    caught_up = threading.Event()
    said: list[str] = []

    def listen() -> None:
        assert proc.stderr is not None
        for text in proc.stderr:
            said.append(text)
            if "caught up with the journal" in text:
                caught_up.set()

    threading.Thread(target=listen, daemon=True).start()
    try:
        assert caught_up.wait(60), "".join(said)[-2000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            content_type, metrics = response.headers["Content-Type"], response.read().decode()
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert "# TYPE crashdoc_crashes_total counter\n" in metrics and "crashdoc_build_info{" in metrics
    assert "libcrypto" not in maps and "libssl" not in maps and "_hashlib" not in maps


_SSL_CHILD = """
import sys
from crashdoc.lean import ssl_at_first_use
ssl_at_first_use()
import http.client, http.server, urllib.request
before = "_ssl" in sys.modules
import ssl
context = http.client.HTTPSConnection("localhost", 1)._context  # HTTPS as it was: a default context, verifying
print(before, "_ssl" in sys.modules, http.client.ssl.SSLError is ssl.SSLError, context.verify_mode == ssl.CERT_REQUIRED)
"""


def test_ssl_is_run_at_its_first_use_and_is_then_the_one_module() -> None:
    said = subprocess.run([sys.executable, "-c", _SSL_CHILD], capture_output=True, text=True, check=True, timeout=60)
    assert said.stdout.split() == ["False", "True", "True", "True"], said
