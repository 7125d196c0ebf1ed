"""crashdoc's alert in a real Alertmanager (Debian's prometheus-alertmanager), end to end.

Alertmanager runs on loopback on the host; crashdoc runs inside a private systemd, which shares the
host's network namespace, next to the crash-looping demo prefill unit. The test reads Alertmanager's
own API (`GET /api/v2/alerts`) and the notifications Alertmanager sends to a webhook receiver: the alert
arrives with crashdoc's labels and runbook link, is kept alive by re-sends, and is resolved once the
diagnosis' own fix is applied and the unit recovers. With Alertmanager down, crashdoc keeps diagnosing,
counts the failed deliveries, and the alert arrives once Alertmanager is up.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
import urllib.error
import urllib.request
from datetime import datetime

import pytest

from crashdoc.events import Diagnosis, Fix, RootCause
from crashdoc.outputs.alerts import ALERTNAME, AlertSender
from crashdoc.outputs.metrics import Health
from crashdoc.sandbox.demo import DECODE_UNIT, DEMO_API_KEY, PREFILL_UNIT, demo_units
from support.e2e import (
    CRASHDOC,
    PROCESS_EXITED,
    checked_hicache_ratio,
    free_port,
    pid1_records,
    start_crashdoc,
    wait_for,
)
from support.monitoring import Alertmanager, Webhook, needs_alertmanager

SIGNATURE = "dsv4-hicache-size-unsupported"
RUNBOOK_BASE = "https://oncall.example.net/crashdoc"


def epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp()


def diagnosis(signature: str) -> Diagnosis:
    return Diagnosis(
        PREFILL_UNIT,
        signature,
        "title",
        "hicache",
        "critical",
        RootCause("ValueError", "m", "ValueError: m"),
        [],
        Fix("fix it"),
        "fp",
    )


# --- the sender against a real Alertmanager (no sandbox) ---------------------------------------------


@needs_alertmanager
def test_alertmanager_keeps_the_alert_while_it_is_resent_and_resolves_it(
    alertmanager: Alertmanager, webhook: Webhook
) -> None:
    am = alertmanager.start()
    health = Health()
    sender = AlertSender(am.url, "gpu-node-7", lambda s, u: f"{RUNBOOK_BASE}/runbook/{s}", health, resend_interval=1)
    try:
        sender.update({PREFILL_UNIT: diagnosis(SIGNATURE)})
        first = wait_for(lambda: am.alert(PREFILL_UNIT), 10, "the alert")
        assert first["status"]["state"] == "active"
        later = wait_for(
            lambda: (a := am.alert(PREFILL_UNIT)) and a["updatedAt"] != first["updatedAt"] and a, 10, "a re-send"
        )
        assert epoch(later["endsAt"]) > epoch(first["endsAt"]), "a re-send moves the end ahead"
        assert later["startsAt"] == first["startsAt"]

        sender.update({PREFILL_UNIT: diagnosis("other-signature")})  # another root cause: another alert
        wait_for(
            lambda: (a := am.alert(PREFILL_UNIT)) and a["labels"]["signature"] == "other-signature", 10, "the new alert"
        )
        wait_for(
            lambda: any(a["labels"]["signature"] == SIGNATURE for a in webhook.alerts("resolved")),
            15,
            "the old alert's resolved notification",
        )

        sender.update({})
        wait_for(lambda: am.alert(PREFILL_UNIT) is None, 10, "the alert to be resolved")
        wait_for(
            lambda: any(a["labels"]["signature"] == "other-signature" for a in webhook.alerts("resolved")),
            15,
            "the resolved notification",
        )
        assert health.alert_errors == 0 and health.alerts_sent >= 4
    finally:
        sender.stop()


# --- crashdoc run in a private systemd ---------------------------------------------------------------


def config(am_url: str | None) -> str:
    text = (
        "units:\n"
        '  - {name: "sglang-prefill.service", role: prefill}\n'
        '  - {name: "sglang-decode.service", role: decode}\n'
        "thresholds: {recovery: 4}\n"
        'instance: "gpu-node-7"\n'
    )
    if am_url:
        text += f'alertmanager: {{url: "{am_url}", resend_interval: 2, timeout: 2}}\n'
        text += f'runbook_base_url: "{RUNBOOK_BASE}"\n'
    return text


@needs_alertmanager
@pytest.mark.sandbox
def test_crash_loop_alert_arrives_is_resent_and_resolves_after_the_fix(
    sandbox_factory, sandbox_workdir, alertmanager: Alertmanager, webhook: Webhook
) -> None:
    am = alertmanager.start()
    sandbox = sandbox_factory(demo_units(sandbox_workdir, CRASHDOC[0]), workdir=sandbox_workdir, start_units=[])
    cd = start_crashdoc(sandbox, config=config(am.url))
    try:
        sandbox.systemctl("start", PREFILL_UNIT, DECODE_UNIT, check=True)
        looping_at = wait_for(
            lambda: cd.metric("crashdoc_unit_crashloop", unit=PREFILL_UNIT) == 1.0 and time.time(),
            60,
            "the crash loop",
            cd,
            interval=0.05,
        )
        alert = wait_for(lambda: am.alert(PREFILL_UNIT), 15, "the alert in Alertmanager", cd, interval=0.05)
        arrived_at = time.time()
        second_crash = int(pid1_records(sandbox, PREFILL_UNIT, PROCESS_EXITED)[1]["__REALTIME_TIMESTAMP"]) / 1e6
        print(
            f"\nalert in Alertmanager {arrived_at - looping_at:.2f} s after the loop showed on /metrics, "
            f"{arrived_at - second_crash:.2f} s after the 2nd crash"
        )

        assert alert["labels"] == {
            "alertname": ALERTNAME,
            "unit": PREFILL_UNIT,
            "signature": SIGNATURE,
            "severity": "critical",
            "instance": "gpu-node-7",
            "subsystem": "hicache",
            "kind": "config",
        }
        notes = alert["annotations"]
        assert notes["runbook_url"] == f"{RUNBOOK_BASE}/runbook/{SIGNATURE}"
        assert notes["summary"] == f"{PREFILL_UNIT} is crash-looping: DeepSeek V4 HiCache rejects --hicache-size"
        assert "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size" in notes["description"]
        fix = next(d["fix"] for d in cd.diagnoses() if d["unit"] == PREFILL_UNIT)
        ratio = checked_hicache_ratio(fix)  # the value this machine's memory accepts (2.0 where it fits)
        assert f"Fix: {fix['summary']}" in notes["description"]
        assert "Fix: replace `--hicache-size 150` with `--hicache-ratio" in notes["description"] or ratio is None
        assert "--api-key <redacted>" in notes["description"]
        assert alert["generatorURL"] == f"{RUNBOOK_BASE}/units/{PREFILL_UNIT}"
        # what the link points at is served by crashdoc: the runbook with the latest evidence and the fix
        status, page = cd.get(f"/runbook/{SIGNATURE}")
        assert status == 200
        assert f"Latest on <a href='../units/{PREFILL_UNIT}'>{PREFILL_UNIT}</a>" in page.decode()
        assert f"--hicache-ratio {ratio}" in page.decode() or ratio is None
        assert "Change to make:" in page.decode()

        # re-sent while active: updatedAt keeps moving and endsAt stays ahead
        seen: list[tuple[float, float]] = []
        deadline = time.monotonic() + 7
        while time.monotonic() < deadline:
            a = am.alert(PREFILL_UNIT)
            assert a is not None, "the alert must stay active while the unit loops"
            assert epoch(a["endsAt"]) > time.time()
            updated = epoch(a["updatedAt"])
            if not seen or seen[-1][0] != updated:
                seen.append((updated, epoch(a["endsAt"])))
            time.sleep(0.1)
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(seen)]
        print(f"updatedAt moved every {', '.join(f'{g:.2f}' for g in gaps)} s (resend_interval 2 s)")
        assert len(seen) >= 3 and max(gaps) <= 2 + 1.0, seen
        assert seen[-1][1] > seen[0][1]
        assert cd.metric("crashdoc_alerts_sent_total") >= 3
        assert cd.metric("crashdoc_alert_errors_total") == 0
        assert am.alert(DECODE_UNIT) is None
        firing = webhook.alerts("firing")
        assert any(a["labels"]["unit"] == PREFILL_UNIT for a in firing), "Alertmanager notified the receiver"

        # apply the fix the diagnosis gives, as the on-call engineer would
        d = next(x for x in cd.diagnoses() if x["unit"] == PREFILL_UNIT)
        for command in d["fix"]["apply"]:
            sandbox.run(["sh", "-c", command], check=True)
        recovered_at = wait_for(
            lambda: cd.metric("crashdoc_unit_crashloop", unit=PREFILL_UNIT) == 0.0 and time.time(),
            60,
            "the unit to recover",
            cd,
            interval=0.05,
        )
        wait_for(lambda: am.alert(PREFILL_UNIT) is None, 10, "the alert to be resolved", cd, interval=0.05)
        resolved_at = time.time()
        print(f"alert resolved in Alertmanager {resolved_at - recovered_at:.2f} s after the recovery")
        resolved = wait_for(
            lambda: [a for a in webhook.alerts("resolved") if a["labels"]["unit"] == PREFILL_UNIT],
            15,
            "the resolved notification",
        )
        assert abs(epoch(resolved[0]["endsAt"]) - recovered_at) < 2.0, "endsAt is when crashdoc saw the recovery"
        everything = json.dumps([am.alerts(), webhook.notifications])
        assert DEMO_API_KEY not in everything
    finally:
        cd.stop()


@needs_alertmanager
@pytest.mark.sandbox
def test_alertmanager_down_then_up(sandbox_factory, sandbox_workdir, alertmanager: Alertmanager) -> None:
    """`--alertmanager-url` pointing at nothing: diagnosis goes on, errors are counted, the alert comes late."""
    sandbox = sandbox_factory(demo_units(sandbox_workdir, CRASHDOC[0]), workdir=sandbox_workdir, start_units=[])
    port = free_port()
    args = [
        "--listen",
        f"127.0.0.1:{port}",
        "--state-directory",
        str(sandbox_workdir / "state"),
        "--alertmanager-url",
        alertmanager.url,
        "--runbook-base-url",
        RUNBOOK_BASE,
    ]
    cd = start_crashdoc(sandbox, config=config(None), args=args, port=port)
    try:
        sandbox.systemctl("start", PREFILL_UNIT, check=True)
        wait_for(lambda: cd.metric("crashdoc_unit_crashloop", unit=PREFILL_UNIT) == 1.0, 60, "the crash loop", cd)
        wait_for(lambda: (cd.metric("crashdoc_alert_errors_total") or 0) >= 2, 15, "failed deliveries", cd)
        restarts = cd.metric("crashdoc_unit_restarts_total", unit=PREFILL_UNIT) or 0
        wait_for(
            lambda: (cd.metric("crashdoc_unit_restarts_total", unit=PREFILL_UNIT) or 0) > restarts,
            15,
            "crashdoc to keep counting restarts",
            cd,
        )
        assert cd.metric("crashdoc_alerts_sent_total") == 0
        assert [d["signature"] for d in cd.diagnoses() if d["unit"] == PREFILL_UNIT] == [SIGNATURE]
        status, _ = cd.get(f"/units/{PREFILL_UNIT}")
        assert status == 200

        errors_before = cd.metric("crashdoc_alert_errors_total")
        alertmanager.start()
        up_at = time.time()
        alert = wait_for(lambda: alertmanager.alert(PREFILL_UNIT), 40, "the alert after Alertmanager came up", cd)
        print(
            f"\nalert delivered {time.time() - up_at:.2f} s after Alertmanager came up "
            f"({errors_before:.0f} failed deliveries before)"
        )
        assert alert["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}/runbook/{SIGNATURE}"
        assert (cd.metric("crashdoc_alerts_sent_total") or 0) >= 1
        log = cd.log()
        assert log.count("cannot send alerts") == 1, "a down Alertmanager is logged once"
        assert "takes alerts again" in log
        with contextlib.suppress(urllib.error.URLError):
            assert DEMO_API_KEY not in json.dumps(alertmanager.alerts())
    finally:
        cd.stop()
