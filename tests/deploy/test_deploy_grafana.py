"""deploy/grafana: every PromQL query references only metrics crashdoc really exports, and parses.

The list of exported metrics is not written here: it is what `outputs/metrics.py`'s collector (its unit, GPU
and health families) puts in an exposition (plus Prometheus' own `up`).
Expressions are parsed by the real promtool (2.42), and the Grafana alert rules must use exactly the
Prometheus rules' expressions.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crashdoc.outputs.metrics import CrashdocCollector, Health, exposition, make_registry

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "crashdoc.json"
GRAFANA_RULES = REPO / "deploy" / "grafana" / "provisioning" / "alerting" / "crashdoc.yaml"
PROMETHEUS_RULES = REPO / "deploy" / "prometheus" / "crashdoc.rules.yml"
PROMETHEUS_OWN = {"up"}  # written by Prometheus for every target
# Grafana's variables, replaced by something PromQL accepts before parsing
GRAFANA_VARIABLES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h", "instance": ".*"}
KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
}


def exported_metrics() -> set[str]:
    """Sample names in crashdoc's exposition, from its collector (histograms expanded)."""
    registry = make_registry(CrashdocCollector(dict, Health(), threading.Lock()))
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition(registry).decode(), re.M):
        names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "histogram" else {name}
    return names


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (functions, keywords, labels and strings left out)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", e):
        if e[m.end() :].lstrip().startswith("(") or m.group(0).lower() in KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def substitute(expr: str) -> str:
    """Grafana variables -> PromQL; an unknown variable fails the test."""

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in GRAFANA_VARIABLES, f"unknown Grafana variable ${name} in {expr!r}"
        return GRAFANA_VARIABLES[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    dash = json.loads(DASHBOARD.read_text())
    out = [
        (f"panel {p['title']!r} {t['refId']}", t["expr"])
        for p in panels(dash["panels"])
        for t in p.get("targets", [])
        if "expr" in t
    ]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((.+),\s*\w+\)", query.strip())
            assert m, f"variable {var['name']}: {query}"
            out.append((f"variable {var['name']}", m.group(1)))
    return out


def grafana_rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(GRAFANA_RULES.read_text())["groups"] for r in g["rules"]]


def grafana_rule_queries() -> list[tuple[str, str]]:
    return [
        (f"Grafana rule {r['title']} {d['refId']}", d["model"]["expr"])
        for r in grafana_rules()
        for d in r["data"]
        if d["datasourceUid"] != "__expr__"
    ]


def prometheus_rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(PROMETHEUS_RULES.read_text())["groups"] for r in g["rules"]]


def all_queries() -> list[tuple[str, str]]:
    rules = [(f"Prometheus rule {r['alert']}", r["expr"]) for r in prometheus_rules()]
    return [*dashboard_queries(), *grafana_rule_queries(), *rules]


def test_metric_name_extraction() -> None:
    """The extractor the next test relies on: metrics only, never functions, labels or keywords."""
    expr = (
        'histogram_quantile(0.5, sum by (le) (increase(a_bucket{job="x", unit=~"s.*"}[5m]))) '
        "* on(instance) group_left(signature) b_info or vector(0) > bool 1e3 "
        'unless label_replace(c, "d", "e", "f", "g") offset 5m'
    )
    assert metric_names(expr) == {"a_bucket", "b_info", "c"}


def test_queries_use_only_exported_metrics() -> None:
    exported = exported_metrics() | PROMETHEUS_OWN
    assert "crashdoc_unit_crashloop" in exported and "crashdoc_unit_restarts_total" in exported
    unknown = {where: sorted(metric_names(substitute(q)) - exported) for where, q in all_queries()}
    assert {w: m for w, m in unknown.items() if m} == {}


def test_queries_parse(tmp_path: Path) -> None:
    """Every query as a recording rule through `promtool check rules`, which parses the PromQL."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (scripts/install-debs.sh prometheus)")
    queries = all_queries()
    rules = [{"record": f"crashdoc:check:{i}", "expr": substitute(q)} for i, (_, q) in enumerate(queries)]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "queries", "rules": rules}]}))
    r = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(queries)} rules found" in r.stdout


def test_grafana_alerts_are_the_prometheus_rules() -> None:
    """Same alerts, expressions, `for:` and labels as deploy/prometheus/crashdoc.rules.yml."""
    grafana = {r["title"]: r for r in grafana_rules()}
    prometheus = {r["alert"]: r for r in prometheus_rules()}
    assert sorted(grafana) == sorted(prometheus)
    for name, rule in prometheus.items():
        g = grafana[name]
        (query,) = [d for d in g["data"] if d["datasourceUid"] != "__expr__"]
        assert query["model"]["expr"].strip() == rule["expr"].strip(), name
        assert g["for"] == rule.get("for", "0s"), name
        assert g["labels"] == rule.get("labels", {}), name
        assert {"summary", "description", "runbook_url"} <= set(g["annotations"]), name
        assert "query" not in g["annotations"]["description"], f"{name}: Grafana templates have no `query`"


def test_dashboard_shows_what_on_call_needs() -> None:
    """Units in loop, restarts, crashes by signature, time to diagnosis and crashdoc's health."""
    used = set().union(*(metric_names(substitute(q)) for _, q in dashboard_queries()))
    wanted = {
        "crashdoc_unit_crashloop",
        "crashdoc_unit_restarts_total",
        "crashdoc_crashes_total",
        "crashdoc_time_to_diagnosis_seconds_bucket",
        "crashdoc_diagnosis_info",
        "crashdoc_journal_lag_seconds",
        "crashdoc_journal_last_entry_timestamp_seconds",
        "crashdoc_dbus_up",
        "crashdoc_signature_reload_errors_total",
        "up",
    }
    assert wanted - used == set()
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in panels(dash["panels"])]
    assert len(ids) == len(set(ids))
    for p in panels(dash["panels"]):
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
