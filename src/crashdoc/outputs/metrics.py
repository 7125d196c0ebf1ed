"""Prometheus exposition: one collector that reads the engine's unit views at scrape time.

Nothing is mirrored into client-library metric objects: the engine is the source of truth
and the collector translates it, so a scrape can never disagree with `/diagnoses`. The
families are declared as data (`UNIT_FAMILIES`, `GPU_FAMILIES`, `HEALTH_FAMILIES`): a new one is a row.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from crashdoc import __version__
from crashdoc.diagnosis.views import GpuView, UnitView
from crashdoc.events import HARDWARE, KINDS, GpuMap
from crashdoc.lean import package_modules
from crashdoc.outputs import promtext

with package_modules("prometheus_client"):  # its __init__ imports its exposition, HTTP servers and ssl (OpenSSL)
    from prometheus_client.metrics_core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        InfoMetricFamily,
    )
    from prometheus_client.registry import Collector, CollectorRegistry

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


Samples = Iterable[tuple[Sequence[str], float]]  # (label values, value)
V = TypeVar("V", UnitView, GpuView)


@dataclass(frozen=True)  # no slots: a generic dataclass with slots breaks on Python 3.11
class Family(Generic[V]):
    """A labelled metric family, its samples read from one of the engine's views (`V`)."""

    name: str
    kind: type[GaugeMetricFamily] | type[CounterMetricFamily]
    help: str
    labels: tuple[str, ...]
    samples: Callable[[V], Samples]


UnitFamily = Family[UnitView]  # a sample (or several) per watched unit
GpuFamily = Family[GpuView]  # the host's GPU faults: samples for GPUs, not units


@dataclass(frozen=True, slots=True)
class HealthFamily:
    """A metric family of one unlabelled value: one of crashdoc's own vital signs."""

    name: str
    kind: type[GaugeMetricFamily] | type[CounterMetricFamily]
    help: str
    value: Callable[[Health], float]


def _one(value: Callable[[UnitView], float | None]) -> Callable[[UnitView], Samples]:
    """One sample labelled with the unit's name; none when `value` is None."""

    def samples(u: UnitView) -> Samples:
        v = value(u)
        return [] if v is None else [((u.name,), v)]

    return samples


def _crashes(u: UnitView) -> Samples:
    by_signature = dict(u.crashes_by_signature)
    by_signature.setdefault("unknown", 0)
    return [((u.name, signature), float(count)) for signature, count in sorted(by_signature.items())]


def _diagnosis_info(u: UnitView) -> Samples:
    d = u.diagnosis
    if d is None:
        return []
    derived = "true" if d.derived else "false"
    return [
        ((u.name, d.signature or "unknown", d.category, d.severity, derived, d.subsystem or d.category, d.kind), 1.0)
    ]


def _gpu_fault(u: UnitView) -> Samples:
    """The loop's hardware diagnosis (a GPU fault caused it): which GPU, and what the hardware on-call does."""
    d = u.diagnosis
    if d is None or d.kind != HARDWARE:
        return []
    c = d.captures
    xid = c.get("xid") or c.get("gpu_event", "")
    gpu = c.get("gpu") or c.get("bus_id", "")
    return [((u.name, d.signature or "", xid, gpu, c.get("bus_id", ""), c.get("rank", ""), c.get("action", "")), 1.0)]


GAUGE, COUNTER = GaugeMetricFamily, CounterMetricFamily
LOOP_STATES = ("healthy", "crash-looping", "failed", "recovered", "stopped")

# What /metrics says of each unit, in this order. Label values are bounded: unit names (from the configured
# patterns), signature ids (from the library, the shipped derived signatures, or "unknown"), categories,
# severities, kinds and `derived` (true|false); never messages, PIDs or paths.
UNIT_FAMILIES: tuple[UnitFamily, ...] = (
    UnitFamily(
        "crashdoc_unit_crashloop",
        GAUGE,
        "1 while the unit is crash-looping (or failed after one)",
        ("unit",),
        _one(lambda u: 1.0 if u.crashloop else 0.0),
    ),
    UnitFamily(
        "crashdoc_unit_failed",
        GAUGE,
        "1 after the start limit was hit or the unit failed without a restart",
        ("unit",),
        _one(lambda u: 1.0 if u.failed else 0.0),
    ),
    UnitFamily(
        "crashdoc_unit_restarts",
        COUNTER,
        "restarts systemd scheduled (PID 1's restart records)",
        ("unit",),
        _one(lambda u: float(u.restarts_total)),
    ),
    UnitFamily(
        "crashdoc_unit_nrestarts",
        GAUGE,
        "systemd's NRestarts (since the last manual start)",
        ("unit",),
        _one(lambda u: None if u.n_restarts is None else float(u.n_restarts)),
    ),
    UnitFamily("crashdoc_crashes", COUNTER, "crashed runs by root-cause signature", ("unit", "signature"), _crashes),
    UnitFamily(
        "crashdoc_unit_last_crash_timestamp_seconds",
        GAUGE,
        "when the unit last crashed",
        ("unit",),
        _one(lambda u: u.last_crash_at or None),
    ),
    UnitFamily(
        "crashdoc_unit_loop_start_timestamp_seconds",
        GAUGE,
        "when the current crash loop began",
        ("unit",),
        _one(lambda u: u.loop_started_at if u.crashloop and u.loop_started_at else None),
    ),
    UnitFamily(
        "crashdoc_diagnosis_info",
        GAUGE,
        "the current crash loop's diagnosis (derived: answered by a signature derived from SGLang's source)",
        ("unit", "signature", "category", "severity", "derived", "subsystem", "kind"),
        _diagnosis_info,
    ),
    UnitFamily(
        "crashdoc_diagnosis_confidence",
        GAUGE,
        "share of the loop's crashes that have the diagnosed root cause",
        ("unit",),
        _one(lambda u: u.diagnosis.confidence if u.diagnosis is not None else None),
    ),
    UnitFamily(
        "crashdoc_line_failures",
        COUNTER,
        "failures that do not end the process (e.g. KV transfer), by signature",
        ("unit", "signature"),
        lambda u: [((u.name, sig), float(n)) for sig, n in sorted(u.line_failures.items())],
    ),
    UnitFamily(
        "crashdoc_warnings",
        COUNTER,
        "tracebacks a run survived (SGLang logged them and carried on, or served after them), by kind "
        "of failure: never a crash, never an alert",
        ("unit", "kind"),
        # every kind, so that rate() sees the first warning
        lambda u: [((u.name, kind), float(u.warnings_by_kind.get(kind, 0))) for kind in KINDS],
    ),
    UnitFamily(
        "crashdoc_unit_state",
        GAUGE,
        "loop state of the unit (one-hot)",
        ("unit", "state"),
        lambda u: [((u.name, state), 1.0 if u.loop_state == state else 0.0) for state in LOOP_STATES],
    ),
    UnitFamily(
        "crashdoc_gpu_fault_info",
        GAUGE,
        "1 while the unit's loop is a GPU fault (the GPU failed, not a flag); action: what the hardware on-call "
        "does (drain, reboot, reset-gpu, ...)",
        ("unit", "signature", "xid", "gpu", "bus_id", "rank", "action"),
        _gpu_fault,
    ),
)

# The host's GPU faults, after the units' families. Labels are bounded: the host's GPUs (a bus id for a GPU the
# driver does not list), the Xids of NVIDIA's catalog, the watched units ("" for a GPU no watched unit uses).
GPU_FAMILIES: tuple[GpuFamily, ...] = (
    GpuFamily(
        "crashdoc_gpu_xid",
        COUNTER,
        "Xids the NVIDIA driver logged in the kernel log, by GPU (host index), Xid and the unit using that GPU",
        ("gpu", "xid", "unit"),
        lambda g: [(labels, float(count)) for labels, count in sorted(g.xids.items())],
    ),
)
NO_GPUS = GpuView({}, GpuMap(), 0)

# crashdoc's own vital signs, in this order, between crashdoc_build and the latency histogram.
HEALTH_FAMILIES: tuple[HealthFamily, ...] = (
    HealthFamily("crashdoc_dbus_up", GAUGE, "1 when the D-Bus connection to systemd works", lambda h: float(h.dbus_up)),
    HealthFamily(
        "crashdoc_journal_last_entry_timestamp_seconds",
        GAUGE,
        "timestamp of the newest journal entry read",
        lambda h: h.journal_last_entry_timestamp,
    ),
    HealthFamily(
        "crashdoc_journal_lag_seconds",
        GAUGE,
        "how far reading is behind the newest entry written",
        lambda h: h.journal_lag_seconds,
    ),
    HealthFamily("crashdoc_journal_entries_read", COUNTER, "journal entries read", lambda h: h.journal_entries_read),
    HealthFamily(
        "crashdoc_journal_read_errors",
        COUNTER,
        "journal entries that could not be read",
        lambda h: h.journal_read_errors,
    ),
    HealthFamily(
        "crashdoc_journal_entries_skipped",
        COUNTER,
        "journal entries gone before they could be read (rotated away and vacuumed)",
        lambda h: h.journal_entries_skipped,
    ),
    HealthFamily(
        "crashdoc_signatures_loaded", GAUGE, "signatures in the active library", lambda h: h.signatures_loaded
    ),
    HealthFamily(
        "crashdoc_signature_reload_errors",
        COUNTER,
        "library reloads rejected (the previous library stays active)",
        lambda h: h.signature_reload_errors,
    ),
    HealthFamily(
        "crashdoc_signature_reloads", COUNTER, "library reloads that took effect", lambda h: h.signature_reloads
    ),
    HealthFamily(
        "crashdoc_config_reloads",
        COUNTER,
        "configuration reloads (SIGHUP) that took effect",
        lambda h: h.config_reloads,
    ),
    HealthFamily(
        "crashdoc_config_reload_errors",
        COUNTER,
        "configuration reloads rejected (the previous configuration stays active)",
        lambda h: h.config_reload_errors,
    ),
    HealthFamily(
        "crashdoc_config_last_reload_successful",
        GAUGE,
        "0 after a rejected configuration reload, until one is taken",
        lambda h: float(h.config_reload_ok),
    ),
    HealthFamily(
        "crashdoc_web_config_reloads",
        COUNTER,
        "web configuration (TLS, basic auth) edits that took effect",
        lambda h: h.web_config_reloads,
    ),
    HealthFamily(
        "crashdoc_web_config_reload_errors",
        COUNTER,
        "web configuration edits rejected (the previous one stays in use)",
        lambda h: h.web_config_reload_errors,
    ),
    HealthFamily(
        "crashdoc_web_config_last_reload_successful",
        GAUGE,
        "0 after a rejected web configuration edit, until a good one is read",
        lambda h: float(h.web_config_reload_ok),
    ),
    HealthFamily("crashdoc_state_writable", GAUGE, "1 when the cursor can be saved", lambda h: float(h.state_writable)),
    HealthFamily("crashdoc_state_write_errors", COUNTER, "failed cursor saves", lambda h: h.state_write_errors),
    HealthFamily("crashdoc_alerts_sent", COUNTER, "alert batches delivered to Alertmanager", lambda h: h.alerts_sent),
    HealthFamily("crashdoc_alert_errors", COUNTER, "failed deliveries to Alertmanager", lambda h: h.alert_errors),
    HealthFamily(
        "crashdoc_journal_records_written",
        COUNTER,
        "diagnosis records written to the journal",
        lambda h: h.journal_records_written,
    ),
    HealthFamily("crashdoc_start_time_seconds", GAUGE, "when this crashdoc started", lambda h: h.started_at),
    HealthFamily("crashdoc_internal_errors", COUNTER, "unexpected errors the daemon survived", lambda h: h.loop_errors),
)


class CrashdocCollector(Collector):
    """Reads the engine's unit views and crashdoc's health at scrape time, by the families declared above."""

    def __init__(
        self,
        units: Callable[[], dict[str, UnitView]],
        health: Health,
        lock: threading.Lock,
        gpus: Callable[[], GpuView] = lambda: NO_GPUS,
    ) -> None:
        self._units = units
        self._health = health
        self._lock = lock
        self._gpus = gpus

    def collect(self) -> Iterator:
        with self._lock:
            units = list(self._units().values())
            for family in UNIT_FAMILIES:
                metric = family.kind(family.name, family.help, labels=list(family.labels))
                for unit in units:
                    for labels, value in family.samples(unit):
                        metric.add_metric(list(labels), value)
                yield metric
            gpus = self._gpus()
            for gpu_family in GPU_FAMILIES:
                metric = gpu_family.kind(gpu_family.name, gpu_family.help, labels=list(gpu_family.labels))
                for labels, value in gpu_family.samples(gpus):
                    metric.add_metric(list(labels), value)
                yield metric
            h = self._health
            build = InfoMetricFamily("crashdoc_build", "crashdoc version")
            build.add_metric([], {"version": __version__})
            yield build
            for one in HEALTH_FAMILIES:
                yield one.kind(one.name, one.help, value=one.value(h))
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
    return promtext.text(registry)
