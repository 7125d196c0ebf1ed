"""deploy/prometheus/crashdoc.rules.yml, checked and unit-tested by the real promtool (Debian 2.42).

The promtool tests (crashdoc.rules.test.yml) hold the firing, not-yet-firing (`for:`) and resolved
cases with the exact labels and annotations an on-call engineer receives; this module runs them and
makes sure no alert goes untested and none lacks what a page needs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "crashdoc.rules.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "crashdoc.rules.test.yml"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (scripts/install-debs.sh prometheus)")
    return path


def alerting_rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_check_rules() -> None:
    r = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(alerting_rules())} rules found" in r.stdout


def test_promtool_test_rules() -> None:
    r = subprocess.run(
        [promtool(), "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=RULE_TESTS.parent,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_every_alert_has_what_a_page_needs() -> None:
    """severity (set, or joined from the diagnosis), summary, description and runbook_url."""
    for rule in alerting_rules():
        name = rule["alert"]
        assert {"summary", "description", "runbook_url"} <= set(rule.get("annotations", {})), name
        joined = re.search(r"group_left\([^)]*\bseverity\b", rule["expr"])
        assert "severity" in rule.get("labels", {}) or joined, f"{name} has no severity"


def test_every_alert_is_tested_firing_and_silent() -> None:
    """Each alert has a promtool case where it fires and one where it must not (not yet, or resolved)."""
    cases = [c for t in yaml.safe_load(RULE_TESTS.read_text())["tests"] for c in t.get("alert_rule_test", [])]
    for rule in alerting_rules():
        mine = [c for c in cases if c["alertname"] == rule["alert"]]
        assert any(c.get("exp_alerts") for c in mine), f"{rule['alert']}: no firing case"
        assert any(not c.get("exp_alerts") for c in mine), f"{rule['alert']}: no silent case"
