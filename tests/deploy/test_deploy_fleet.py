"""The fleet examples: Prometheus scrape config (file_sd) and Alertmanager routing, checked by the
real tools (promtool 2.42, amtool 0.25) exactly as an SRE would before shipping them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_EXAMPLE = REPO / "deploy" / "prometheus" / "prometheus.example.yml"
ALERTMANAGER_EXAMPLE = REPO / "deploy" / "alertmanager" / "alertmanager.example.yml"
SYSUSERS = REPO / "deploy" / "systemd" / "crashdoc.sysusers"


def tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (scripts/install-debs.sh {package})")
    return path


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_prometheus_example_is_valid() -> None:
    """Syntax, the rule file it loads, and the file_sd target files it points at."""
    r = run(tool("promtool", "prometheus"), "check", "config", str(PROMETHEUS_EXAMPLE))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 1 rule files found" in r.stdout


def test_alertmanager_example_is_valid() -> None:
    r = run(tool("amtool", "prometheus-alertmanager"), "check-config", str(ALERTMANAGER_EXAMPLE))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        # a loop with a flag to change pages the serving on-call
        (
            {"alertname": "SGLangCrashLoop", "signature": "dsv4-hicache-size-unsupported", "severity": "critical"},
            "sglang-pager",
        ),
        # the same loop pushed by crashdoc itself (alertmanager.url) is routed the same way
        (
            {"alertname": "CrashdocCrashLoop", "signature": "dsv4-hicache-size-unsupported", "severity": "critical"},
            "sglang-pager",
        ),
        # nobody knows this error yet: page, and tell the signature writers
        (
            {"alertname": "SGLangCrashLoopUnknown", "signature": "unknown", "severity": "critical"},
            "sglang-pager,crashdoc-signature-gaps",
        ),
        # the fabric, not a flag
        (
            {"alertname": "SGLangCrashLoop", "signature": "nccl-watchdog-terminated", "severity": "critical"},
            "fabric-pager",
        ),
        (
            {"alertname": "SGLangCrashLoop", "signature": "pd-kv-bootstrap-timeout", "severity": "critical"},
            "fabric-pager",
        ),
        # a PD flag mismatch is a flag: serving on-call, not the fabric team
        (
            {"alertname": "SGLangCrashLoop", "signature": "pd-kv-cache-dtype-mismatch", "severity": "critical"},
            "sglang-pager",
        ),
        ({"alertname": "SGLangCrashLoop", "signature": "pd-kv-transfer-slow", "severity": "warning"}, "sglang-chat"),
        (
            {"alertname": "SGLangUnitFailed", "signature": "dsv4-hicache-size-unsupported", "severity": "critical"},
            "sglang-pager",
        ),
        # crashdoc's own health never pages
        ({"alertname": "CrashdocDown", "severity": "warning"}, "observability-chat"),
        ({"alertname": "CrashdocJournalLagging", "severity": "warning"}, "observability-chat"),
    ],
)
def test_alertmanager_routes_by_signature_and_severity(labels: dict[str, str], receivers: str) -> None:
    r = run(
        tool("amtool", "prometheus-alertmanager"),
        "config",
        "routes",
        "test",
        f"--config.file={ALERTMANAGER_EXAMPLE}",
        *(f"{k}={v}" for k, v in labels.items()),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == receivers


def test_sysusers_file_is_valid() -> None:
    """systemd-sysusers accepts the user definition (dry run: the host is not changed)."""
    r = run(tool("systemd-sysusers", "systemd"), "--dry-run", str(SYSUSERS))
    assert r.returncode == 0, r.stdout + r.stderr
    assert str(SYSUSERS) not in r.stderr, r.stderr  # parse problems are reported as FILE:LINE
