"""The Alertmanager sender without an Alertmanager: what it sends, and that a dead or hanging peer
never reaches the daemon's loop. Delivery to a real Alertmanager is in test_e2e_alertmanager.py."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from crashdoc.events import Diagnosis, Fix, FlagChange, RootCause
from crashdoc.outputs.alerts import ALERTNAME, AlertSender, alert_annotations, alert_labels
from crashdoc.outputs.metrics import Health
from support.peers import accept_in_thread

UNIT = "sglang-prefill.service"
KEY = "sk-live-0123456789abcdef0123456789"
RUNBOOK = "https://oncall.example.net/crashdoc"


def runbook_url(signature: str | None, unit: str) -> str:
    return f"{RUNBOOK}/runbook/{signature}" if signature else f"{RUNBOOK}/units/{unit}"


def diagnosis(signature: str | None = "dsv4-hicache-size-unsupported", **fix: Any) -> Diagnosis:
    return Diagnosis(
        unit=UNIT,
        signature=signature,
        title="DeepSeek V4 HiCache rejects --hicache-size",
        category="hicache",
        severity="critical",
        root_cause=RootCause(
            "ValueError",
            "DeepSeek V4 HiCache currently does not support --hicache-size",
            "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead.",
        ),
        flags=["--hicache-size", "--hicache-ratio"],
        fix=Fix(
            summary=fix.get("summary", "replace `--hicache-size 150` with `--hicache-ratio 2.0`"),
            changes=[FlagChange("replace", "--hicache-size", "2.0", "--hicache-ratio")],
            command=fix.get("command", "python -m sglang.launch_server --hicache-ratio 2.0 --api-key <redacted>"),
            warnings=fix.get("warnings", []),
        ),
        fingerprint="f00",
        restarts=3,
        crashes=2,
        exit="killed by SIGKILL",
        subsystem="hicache",
        kind="config",
    )


class Recorder:
    """A transport that records what would be posted, failing the first `fail` times."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.bodies: list[list[dict[str, Any]]] = []
        self.attempts: list[float] = []
        self.posted = threading.Event()

    def __call__(self, url: str, body: bytes, timeout: float) -> None:
        self.attempts.append(time.monotonic())
        if self.fail > 0:
            self.fail -= 1
            raise ConnectionRefusedError(111, "Connection refused")
        self.bodies.append(json.loads(body))
        self.posted.set()

    def wait(self, n: int, timeout: float = 10.0) -> list[list[dict[str, Any]]]:
        deadline = time.monotonic() + timeout
        while len(self.bodies) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self.bodies) >= n, f"{len(self.bodies)} posts, wanted {n}"
        return self.bodies


def sender(post: Any, **kw: Any) -> AlertSender:
    return AlertSender("http://127.0.0.1:9/", "gpu-node-7", runbook_url, Health(), post=post, **kw)


@pytest.fixture
def senders() -> Iterator[list[AlertSender]]:
    made: list[AlertSender] = []
    yield made
    for s in made:
        s.stop(wait=5)


def epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp()


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")


# --- what is sent ------------------------------------------------------------------------------------


def test_labels_identify_the_loop_and_annotations_say_what_to_change() -> None:
    d = diagnosis()
    assert alert_labels(UNIT, d, "gpu-node-7") == {
        "alertname": ALERTNAME,
        "unit": UNIT,
        "signature": "dsv4-hicache-size-unsupported",
        "severity": "critical",
        "instance": "gpu-node-7",
        "subsystem": "hicache",  # the two axes: which part of SGLang, and what kind of failure (bounded values)
        "kind": "config",
    }
    assert alert_labels(UNIT, diagnosis(signature=None), "h")["signature"] == "unknown"
    a = alert_annotations(UNIT, d, runbook_url(d.signature, UNIT))
    assert a["summary"] == f"{UNIT} is crash-looping: DeepSeek V4 HiCache rejects --hicache-size"
    assert a["runbook_url"] == f"{RUNBOOK}/runbook/dsv4-hicache-size-unsupported"
    assert d.root_cause.line in a["description"]
    assert "Fix: replace `--hicache-size 150` with `--hicache-ratio 2.0`" in a["description"]
    assert "Corrected command: python -m sglang.launch_server --hicache-ratio 2.0" in a["description"]
    assert "killed by SIGKILL" in a["description"]


def test_secrets_never_reach_alertmanager(senders: list[AlertSender]) -> None:
    d = diagnosis(
        summary="set the header; the old one was Authorization: Bearer abcdef0123456789abcdef",
        command=f"python -m sglang.launch_server --api-key {KEY} --model-path s3://AKIA:hunter2secret@bucket/m",
        warnings=["HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123 is set in the environment"],
    )
    d.root_cause.line = f"ValueError: bad --api-key {KEY}"
    rec = Recorder()
    s = sender(rec)
    senders.append(s)
    s.update({UNIT: d})
    body = json.dumps(rec.wait(1)[0])
    for secret in (KEY, "abcdef0123456789abcdef", "hunter2secret", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"):
        assert secret not in body
    assert body.count("<redacted>") >= 4


def test_active_alerts_are_resent_with_end_ahead_and_resolved_with_end_now(senders: list[AlertSender]) -> None:
    rec = Recorder()
    s = sender(rec, resend_interval=0.2)
    senders.append(s)
    s.update({UNIT: diagnosis()})
    first, second, third = rec.wait(3)[:3]
    assert [len(b) for b in (first, second, third)] == [1, 1, 1]
    assert first[0]["startsAt"] == third[0]["startsAt"], "a resend must not restart the alert"
    assert first[0]["endsAt"] < second[0]["endsAt"] < third[0]["endsAt"], "each resend moves endsAt ahead"
    gaps = [b - a for a, b in itertools.pairwise(rec.attempts)]
    assert min(gaps) >= 0.2 - 0.01, gaps
    n = len(rec.bodies)
    before = time.time()
    s.update({})
    resolved = rec.wait(n + 1)[n]
    assert len(resolved) == 1 and resolved[0]["labels"] == first[0]["labels"]
    ends = resolved[0]["endsAt"]
    assert before - 0.01 <= epoch(ends) <= time.time(), "endsAt is the recovery time"
    time.sleep(0.5)
    assert all(b == [] or b[0]["endsAt"] == ends for b in rec.bodies[n + 1 :]), "a delivered resolution stops"


def test_a_new_root_cause_resolves_the_old_alert_and_fires_a_new_one(senders: list[AlertSender]) -> None:
    rec = Recorder()
    s = sender(rec)
    senders.append(s)
    s.update({UNIT: diagnosis()})
    rec.wait(1)
    s.update({UNIT: diagnosis(signature="cuda-oom-kv-pool")})
    body = rec.wait(2)[1]
    by_signature = {a["labels"]["signature"]: a for a in body}
    assert set(by_signature) == {"dsv4-hicache-size-unsupported", "cuda-oom-kv-pool"}
    old, new = by_signature["dsv4-hicache-size-unsupported"], by_signature["cuda-oom-kv-pool"]
    assert old["endsAt"] < new["endsAt"]
    assert new["annotations"]["runbook_url"].endswith("/runbook/cuda-oom-kv-pool")
    assert s.firing() == {UNIT: new["labels"]}


def test_an_unchanged_state_is_not_resent_early(senders: list[AlertSender]) -> None:
    """The daemon calls update() after every batch of events: only changes are sent at once."""
    rec = Recorder()
    s = sender(rec, resend_interval=60)
    senders.append(s)
    for _ in range(20):
        s.update({UNIT: diagnosis()})
    rec.wait(1)
    time.sleep(0.3)
    assert len(rec.bodies) == 1


# --- failures stay inside the sender -----------------------------------------------------------------


def test_a_down_alertmanager_is_retried_with_growing_backoff_and_the_state_is_kept(
    senders: list[AlertSender],
) -> None:
    rec = Recorder(fail=5)
    s = sender(rec, backoff_initial=0.05, backoff_max=0.4)
    senders.append(s)
    s.update({UNIT: diagnosis()})
    s.update({})  # recovered while Alertmanager was down: the resolution must still go out
    body = rec.wait(1)[0]
    assert s.health.alert_errors == 5 and s.health.alerts_sent == 1
    gaps = [b - a for a, b in itertools.pairwise(rec.attempts)]
    for gap, backoff in zip(gaps, (0.05, 0.1, 0.2, 0.4, 0.4), strict=False):
        assert gap >= backoff - 0.01, gaps
    assert [a["labels"]["unit"] for a in body] == [UNIT]
    assert epoch(body[0]["endsAt"]) <= time.time(), "sent as resolved"
    assert s.last_error == ""


def test_refused_connections_count_as_errors_through_the_real_transport(senders: list[AlertSender]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    logged: list[str] = []
    s = AlertSender(
        f"http://127.0.0.1:{port}",
        "h",
        runbook_url,
        Health(),
        timeout=1,
        backoff_initial=0.05,
        backoff_max=0.1,
        log=logged.append,
    )
    senders.append(s)
    s.update({UNIT: diagnosis()})
    wait_until(lambda: s.health.alert_errors >= 4)
    assert s.health.alerts_sent == 0
    assert "Connection refused" in s.last_error and f"127.0.0.1:{port}/api/v2/alerts" in s.last_error
    assert len(logged) == 1, "a down Alertmanager is logged once, not on every retry"


def sending_to(url: str, senders: list[AlertSender], timeout: float) -> AlertSender:
    """A sender with the real HTTP transport to `url`, sending one diagnosis (stopped by the fixture)."""
    s = AlertSender(url, "h", runbook_url, Health(), timeout=timeout)
    senders.append(s)
    s.update({UNIT: diagnosis()})
    return s


def test_update_returns_while_alertmanager_hangs(senders: list[AlertSender]) -> None:
    """A peer that accepts and never answers: the daemon's calls return at once, the POST times out."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []
    got = threading.Event()

    def hold(conn: socket.socket) -> None:  # accepted, never answered
        accepted.append(conn)
        got.set()

    accept_in_thread(server, hold)
    try:
        s = sending_to(f"http://127.0.0.1:{server.getsockname()[1]}", senders, timeout=1.0)
        s.tick()
        # had update() waited for the POST, the 1 s timeout would already have counted an error
        assert s.health.alert_errors == 0 and s.health.alerts_sent == 0
        assert got.wait(5), "the sender thread did connect"
        s.update({UNIT: diagnosis(summary="changed")})
        assert s.health.alert_errors == 0
        wait_until(lambda: s.health.alert_errors >= 1)
        assert "timed out" in s.last_error
    finally:
        server.close()
        for conn in accepted:
            conn.close()


def test_a_bug_in_the_transport_does_not_kill_the_sender(senders: list[AlertSender]) -> None:
    calls = []

    def broken(url: str, body: bytes, timeout: float) -> None:
        calls.append(body)
        if len(calls) == 1:
            raise ValueError("unexpected")

    s = sender(broken, backoff_initial=0.05)
    senders.append(s)
    s.update({UNIT: diagnosis()})
    wait_until(lambda: s.health.alerts_sent == 1)
    assert s.health.alert_errors == 1 and "ValueError" not in s.last_error


def test_the_endpoint_is_the_v2_alerts_path() -> None:
    for url in ("http://am:9093", "http://am:9093/", "http://am:9093/api/v2/alerts"):
        assert AlertSender(url, "h", runbook_url).endpoint == "http://am:9093/api/v2/alerts"


def test_an_alertmanager_whose_certificate_is_not_trusted_is_a_tls_error(senders: list[AlertSender], tmp_path) -> None:
    import ssl

    from support.webtls import Pki

    cert, key = Pki(tmp_path).server()  # issued by a CA the sender does not know
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = socket.create_server(("127.0.0.1", 0))

    def handshake(conn: socket.socket) -> None:
        try:
            context.wrap_socket(conn, server_side=True).close()
        except OSError:
            conn.close()

    accept_in_thread(server, handshake)
    try:
        s = sending_to(f"https://127.0.0.1:{server.getsockname()[1]}", senders, timeout=2)
        wait_until(lambda: s.health.alert_errors >= 1)
        assert "TLS: certificate verify failed" in s.last_error, s.last_error
    finally:
        server.close()
