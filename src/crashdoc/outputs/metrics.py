"""Prometheus exposition: one collector that reads the engine's state at scrape time.

Nothing is mirrored into client-library metric objects: the engine is the source of truth
and the collector translates it, so a scrape can never disagree with `/diagnoses`. Label
values are bounded: unit names (from the configured patterns), signature ids (from the
library or the shipped derived signatures, or "unknown"), categories, severities and `derived`
(true|false); never messages, PIDs or paths.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from crashdoc import __version__
from crashdoc.diagnosis.views import UnitView
from crashdoc.events import KINDS

LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


@dataclass(slots=True)
class LatencyHistogram:
    """Bounded: bucket counts, not samples."""

    counts: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    total: int = 0
    sum: float = 0.0

    def observe(self, seconds: float) -> None:
        self.total += 1
        self.sum += seconds
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1


@dataclass(slots=True)
class Health:
    """crashdoc's own vital signs, updated by the daemon loop."""

    dbus_up: bool = False
    journal_last_entry_timestamp: float = 0.0
    journal_lag_seconds: float = 0.0
    journal_entries_read: int = 0
    journal_read_errors: int = 0
    journal_entries_skipped: int = 0  # gone before they could be read (rotated away and vacuumed)
    signatures_loaded: int = 0
    signature_reload_errors: int = 0
    signature_reloads: int = 0
    config_reloads: int = 0  # SIGHUP reloads of the configuration file that took effect
    config_reload_errors: int = 0  # rejected ones: the previous configuration stays active
    config_reload_ok: bool = True  # the last reload was taken (or there was none)
    web_config_reloads: int = 0  # web configuration (TLS, basic auth) edits that took effect
    web_config_reload_errors: int = 0  # rejected edits: the previous web configuration stays in use
    web_config_reload_ok: bool = True
    state_writable: bool = True
    state_write_errors: int = 0
    alerts_sent: int = 0
    alert_errors: int = 0
    journal_records_written: int = 0
    journal_record_errors: int = 0
    started_at: float = 0.0
    loop_errors: int = 0  # unexpected errors the daemon survived
    diagnosis_latency: LatencyHistogram = field(default_factory=LatencyHistogram)  # crash -> diagnosis


class CrashdocCollector(Collector):
    def __init__(self, units: Callable[[], dict[str, UnitView]], health: Health, lock: threading.Lock) -> None:
        self._units = units
        self._health = health
        self._lock = lock

    def collect(self) -> Iterator:
        with self._lock:
            units = list(self._units().values())
            yield from self._unit_families(units)
            yield from self._health_families(self._health)

    def _unit_families(self, units: list[UnitView]) -> Iterator:
        crashloop = GaugeMetricFamily(
            "crashdoc_unit_crashloop", "1 while the unit is crash-looping (or failed after one)", labels=["unit"]
        )
        failed = GaugeMetricFamily(
            "crashdoc_unit_failed",
            "1 after the start limit was hit or the unit failed without a restart",
            labels=["unit"],
        )
        restarts = CounterMetricFamily(
            "crashdoc_unit_restarts", "restarts systemd scheduled (PID 1's restart records)", labels=["unit"]
        )
        nrestarts = GaugeMetricFamily(
            "crashdoc_unit_nrestarts", "systemd's NRestarts (since the last manual start)", labels=["unit"]
        )
        crashes = CounterMetricFamily(
            "crashdoc_crashes", "crashed runs by root-cause signature", labels=["unit", "signature"]
        )
        last_crash = GaugeMetricFamily(
            "crashdoc_unit_last_crash_timestamp_seconds", "when the unit last crashed", labels=["unit"]
        )
        loop_start = GaugeMetricFamily(
            "crashdoc_unit_loop_start_timestamp_seconds", "when the current crash loop began", labels=["unit"]
        )
        info = GaugeMetricFamily(
            "crashdoc_diagnosis_info",
            "the current crash loop's diagnosis (derived: answered by a signature derived from SGLang's source)",
            labels=["unit", "signature", "category", "severity", "derived", "subsystem", "kind"],
        )
        confidence = GaugeMetricFamily(
            "crashdoc_diagnosis_confidence",
            "share of the loop's crashes that have the diagnosed root cause",
            labels=["unit"],
        )
        line_failures = CounterMetricFamily(
            "crashdoc_line_failures",
            "failures that do not end the process (e.g. KV transfer), by signature",
            labels=["unit", "signature"],
        )
        warnings = CounterMetricFamily(
            "crashdoc_warnings",
            "tracebacks a run survived (SGLang logged them and carried on, or served after them), by kind "
            "of failure: never a crash, never an alert",
            labels=["unit", "kind"],
        )
        state = GaugeMetricFamily("crashdoc_unit_state", "loop state of the unit (one-hot)", labels=["unit", "state"])
        for rec in units:
            name = rec.name
            crashloop.add_metric([name], 1.0 if rec.crashloop else 0.0)
            failed.add_metric([name], 1.0 if rec.failed else 0.0)
            restarts.add_metric([name], float(rec.restarts_total))
            if rec.n_restarts is not None:
                nrestarts.add_metric([name], float(rec.n_restarts))
            by_signature = dict(rec.crashes_by_signature)
            by_signature.setdefault("unknown", 0)
            for signature, count in sorted(by_signature.items()):
                crashes.add_metric([name, signature], float(count))
            if rec.last_crash_at:
                last_crash.add_metric([name], rec.last_crash_at)
            if rec.crashloop and rec.loop_started_at:
                loop_start.add_metric([name], rec.loop_started_at)
            d = rec.diagnosis
            if d is not None:
                derived = "true" if d.derived else "false"
                labels = [name, d.signature or "unknown", d.category, d.severity, derived]
                info.add_metric([*labels, d.subsystem or d.category, d.kind], 1.0)
                confidence.add_metric([name], d.confidence)
            for signature, count in sorted(rec.line_failures.items()):
                line_failures.add_metric([name, signature], float(count))
            for kind in KINDS:  # every kind, so that rate() sees the first warning
                warnings.add_metric([name, kind], float(rec.warnings_by_kind.get(kind, 0)))
            for value in ("healthy", "crash-looping", "failed", "recovered", "stopped"):
                state.add_metric([name, value], 1.0 if rec.loop_state == value else 0.0)
        yield from (
            crashloop,
            failed,
            restarts,
            nrestarts,
            crashes,
            last_crash,
            loop_start,
            info,
            confidence,
            line_failures,
            warnings,
            state,
        )

    def _health_families(self, h: Health) -> Iterator:
        build = InfoMetricFamily("crashdoc_build", "crashdoc version")
        build.add_metric([], {"version": __version__})
        yield build
        yield GaugeMetricFamily(
            "crashdoc_dbus_up", "1 when the D-Bus connection to systemd works", value=float(h.dbus_up)
        )
        yield GaugeMetricFamily(
            "crashdoc_journal_last_entry_timestamp_seconds",
            "timestamp of the newest journal entry read",
            value=h.journal_last_entry_timestamp,
        )
        yield GaugeMetricFamily(
            "crashdoc_journal_lag_seconds",
            "how far reading is behind the newest entry written",
            value=h.journal_lag_seconds,
        )
        yield CounterMetricFamily("crashdoc_journal_entries_read", "journal entries read", value=h.journal_entries_read)
        yield CounterMetricFamily(
            "crashdoc_journal_read_errors", "journal entries that could not be read", value=h.journal_read_errors
        )
        yield CounterMetricFamily(
            "crashdoc_journal_entries_skipped",
            "journal entries gone before they could be read (rotated away and vacuumed)",
            value=h.journal_entries_skipped,
        )
        yield GaugeMetricFamily(
            "crashdoc_signatures_loaded", "signatures in the active library", value=h.signatures_loaded
        )
        yield CounterMetricFamily(
            "crashdoc_signature_reload_errors",
            "library reloads rejected (the previous library stays active)",
            value=h.signature_reload_errors,
        )
        yield CounterMetricFamily(
            "crashdoc_signature_reloads", "library reloads that took effect", value=h.signature_reloads
        )
        yield CounterMetricFamily(
            "crashdoc_config_reloads", "configuration reloads (SIGHUP) that took effect", value=h.config_reloads
        )
        yield CounterMetricFamily(
            "crashdoc_config_reload_errors",
            "configuration reloads rejected (the previous configuration stays active)",
            value=h.config_reload_errors,
        )
        yield GaugeMetricFamily(
            "crashdoc_config_last_reload_successful",
            "0 after a rejected configuration reload, until one is taken",
            value=float(h.config_reload_ok),
        )
        yield CounterMetricFamily(
            "crashdoc_web_config_reloads",
            "web configuration (TLS, basic auth) edits that took effect",
            value=h.web_config_reloads,
        )
        yield CounterMetricFamily(
            "crashdoc_web_config_reload_errors",
            "web configuration edits rejected (the previous one stays in use)",
            value=h.web_config_reload_errors,
        )
        yield GaugeMetricFamily(
            "crashdoc_web_config_last_reload_successful",
            "0 after a rejected web configuration edit, until a good one is read",
            value=float(h.web_config_reload_ok),
        )
        yield GaugeMetricFamily(
            "crashdoc_state_writable", "1 when the cursor can be saved", value=float(h.state_writable)
        )
        yield CounterMetricFamily("crashdoc_state_write_errors", "failed cursor saves", value=h.state_write_errors)
        yield CounterMetricFamily(
            "crashdoc_alerts_sent", "alert batches delivered to Alertmanager", value=h.alerts_sent
        )
        yield CounterMetricFamily("crashdoc_alert_errors", "failed deliveries to Alertmanager", value=h.alert_errors)
        yield CounterMetricFamily(
            "crashdoc_journal_records_written",
            "diagnosis records written to the journal",
            value=h.journal_records_written,
        )
        yield GaugeMetricFamily("crashdoc_start_time_seconds", "when this crashdoc started", value=h.started_at)
        yield CounterMetricFamily(
            "crashdoc_internal_errors", "unexpected errors the daemon survived", value=h.loop_errors
        )
        latency = HistogramMetricFamily(
            "crashdoc_time_to_diagnosis_seconds", "from a crash's last log line to its diagnosis"
        )
        hist = h.diagnosis_latency
        buckets = [(str(b), float(c)) for b, c in zip(LATENCY_BUCKETS, hist.counts, strict=True)]
        buckets.append(("+Inf", float(hist.total)))
        latency.add_metric([], buckets, hist.sum)
        yield latency


def make_registry(collector: Collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
