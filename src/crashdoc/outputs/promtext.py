"""Prometheus' text format (0.0.4) of a registry: what prometheus_client's `generate_latest` writes, byte for byte.

The daemon does not import `prometheus_client.exposition` (nor the package's `__init__`, which imports it): that
module brings HTTP servers, WSGI, gzip, urllib's HTTPS handler and `ssl` (OpenSSL, ~5 MB of RSS) to a daemon that
only needs the text of a scrape. The rules below are generate_latest's (prometheus_client 0.26, default escaping):
counters are named `<name>_total`, info families `<name>_info` and typed gauge, OpenMetrics' `_created`, `_gsum` and
`_gcount` samples come after the family as gauges of their own. `tests/unit/test_promtext.py` compares the two.
"""

from __future__ import annotations

from crashdoc.lean import package_modules

with package_modules("prometheus_client"):  # its __init__ imports the exposition module this one replaces
    from prometheus_client.openmetrics.exposition import escape_label_name, escape_metric_name
    from prometheus_client.registry import Collector
    from prometheus_client.samples import Sample
    from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # prometheus_client's CONTENT_TYPE_LATEST
_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}
_SUFFIXES = {"counter": "_total", "info": "_info"}
_OPENMETRICS_ONLY = ("_created", "_gsum", "_gcount")


def _label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _sample_line(s: Sample) -> str:
    labels = ""
    if s.labels:
        pairs = ",".join(f'{escape_label_name(k)}="{_label_value(v)}"' for k, v in sorted(s.labels.items()))
        labels = "{" + pairs + "}"
    stamp = "" if s.timestamp is None else f" {int(float(s.timestamp) * 1000):d}"
    return f"{escape_metric_name(s.name)}{labels} {floatToGoString(s.value)}{stamp}\n"


def text(registry: Collector) -> bytes:
    out: list[str] = []
    for metric in registry.collect():
        name = escape_metric_name(metric.name + _SUFFIXES.get(metric.type, ""))
        out.append(f"# HELP {name} {_help(metric.documentation)}\n")
        out.append(f"# TYPE {name} {_TYPES.get(metric.type, metric.type)}\n")
        later: dict[str, list[str]] = {}
        for s in metric.samples:
            suffix = next((x for x in _OPENMETRICS_ONLY if s.name == metric.name + x), None)
            if suffix is None:
                out.append(_sample_line(s))
            else:
                later.setdefault(suffix, []).append(_sample_line(s))
        for suffix, lines in sorted(later.items()):
            name = escape_metric_name(metric.name + suffix)
            out.append(f"# HELP {name} {_help(metric.documentation)}\n")
            out.append(f"# TYPE {name} gauge\n")
            out.extend(lines)
    return "".join(out).encode("utf-8")
