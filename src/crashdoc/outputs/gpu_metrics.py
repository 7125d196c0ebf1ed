"""Prometheus families of GPU faults, read at scrape time like the rest of crashdoc's metrics.

- `crashdoc_gpu_xid_total{gpu, xid, unit}`: Xids the kernel logged, by GPU (the host's index; its bus id
  when the driver does not list it), Xid and the unit they were joined with ("" when none uses that GPU).
- `crashdoc_gpu_fault_info{unit, signature, xid, gpu, bus_id, rank, action}`: 1 while a unit's diagnosis is a
  GPU fault (kind hardware); `action` is what the hardware on-call does (drain, reboot, reset-gpu, ...). The
  hardware alert (deploy/prometheus) routes on it.

A collector of its own: the daemon registers it beside `metrics.CrashdocCollector` on the same registry.
Every label is bounded (GPUs of the host, Xids of NVIDIA's catalog, watched units, ranks, a handful of actions).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from crashdoc.diagnosis.hardware import HARDWARE
from crashdoc.events import Diagnosis

XidCounts = Mapping[tuple[str, str, str], int]  # (gpu, xid, unit) -> Xids counted


class GpuFaultCollector(Collector):
    def __init__(
        self,
        xids: Callable[[], XidCounts],
        diagnoses: Callable[[], Iterable[Diagnosis]],
        lock: threading.Lock,
    ) -> None:
        self._xids = xids
        self._diagnoses = diagnoses
        self._lock = lock

    def collect(self) -> Iterator:
        with self._lock:
            counts = dict(self._xids())
            current = [d for d in self._diagnoses() if d.kind == HARDWARE]
        xids = CounterMetricFamily(
            "crashdoc_gpu_xid",
            "Xids the NVIDIA driver logged in the kernel log, by GPU (host index), Xid and the unit using that GPU",
            labels=["gpu", "xid", "unit"],
        )
        for (gpu, xid, unit), count in sorted(counts.items()):
            xids.add_metric([gpu, xid, unit], float(count))
        faults = GaugeMetricFamily(
            "crashdoc_gpu_fault_info",
            "1 while the unit's diagnosis is a GPU fault (the GPU failed, not a flag); action: what to do",
            labels=["unit", "signature", "xid", "gpu", "bus_id", "rank", "action"],
        )
        for d in current:
            c = d.captures
            xid = c.get("xid") or c.get("gpu_event", "")
            gpu = c.get("gpu") or c.get("bus_id", "")
            faults.add_metric(
                [d.unit, d.signature or "", xid, gpu, c.get("bus_id", ""), c.get("rank", ""), c.get("action", "")],
                1.0,
            )
        yield xids
        yield faults
