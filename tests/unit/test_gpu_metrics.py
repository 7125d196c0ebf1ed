"""crashdoc_gpu_xid_total{gpu, xid, unit} and crashdoc_gpu_fault_info, read from the registry as Prometheus would."""

from __future__ import annotations

import threading
from collections import Counter

from crashdoc.diagnosis.gpus import CrashFacts, GpuRef, xid_labels
from crashdoc.diagnosis.hardware import decide, hardware_diagnosis
from crashdoc.events import Diagnosis, Fix, RootCause
from crashdoc.outputs.gpu_metrics import GpuFaultCollector
from crashdoc.outputs.metrics import exposition, make_registry
from crashdoc.sources.kernel_gpu import KernelGpuReader
from crashdoc.sources.nvidia_gpus import read_gpu_map
from support.gpu_faults import FAMILY_LINES, FAULT_LABELS, FIXTURE_ROOT, xid

GPUS = read_gpu_map(FIXTURE_ROOT)
UNITS = {
    "sglang-prefill.service": ({48213: "TP3"}, {"TP3": GpuRef(6, "0000:c1:00.0")}),
    "sglang-decode.service": ({}, {"TP0": GpuRef(0, "0000:19:00.0")}),
}


def tally(lines: list[str]) -> Counter[tuple[str, str, str]]:
    counts: Counter[tuple[str, str, str]] = Counter()
    reader = KernelGpuReader()
    for text in lines:
        for event in reader.feed(text, 1.0):
            counts.update(xid_labels(event, GPUS, UNITS))
    return counts


def software() -> Diagnosis:
    return Diagnosis(
        "sglang-prefill.service",
        None,
        "RuntimeError: CUDA error: unspecified launch failure",
        "cuda-graph",
        "critical",
        RootCause("RuntimeError", "x", "RuntimeError: CUDA error: unspecified launch failure"),
        [],
        Fix("none"),
        "fp1-0",
        kind="resource",
    )


def test_xids_are_counted_by_gpu_xid_and_the_unit_using_that_gpu() -> None:
    counts = tally(
        [
            FAMILY_LINES[79],  # pid 48213: TP3 of prefill, on GPU 6
            *[FAMILY_LINES[13]] * 3,
            xid(48, "DBE", bus="0000:19:00", pid="unknown"),  # the decode unit's GPU 0, by bus
            xid(79, "GPU has fallen off the bus.", bus="0000:bb:00", pid="unknown"),  # GPU 5: no unit uses it
            xid(31, "MMU Fault", bus="0000:ee:00", pid="unknown"),  # not on the host's map: its bus id
            "NVRM: GPU 0000:c1:00.0: GPU has fallen off the bus.",  # no Xid: not counted here
        ]
    )
    registry = make_registry(GpuFaultCollector(lambda: counts, list, threading.Lock()))
    value = registry.get_sample_value
    assert value("crashdoc_gpu_xid_total", {"gpu": "6", "xid": "79", "unit": "sglang-prefill.service"}) == 1.0
    assert value("crashdoc_gpu_xid_total", {"gpu": "6", "xid": "13", "unit": "sglang-prefill.service"}) == 3.0
    assert value("crashdoc_gpu_xid_total", {"gpu": "0", "xid": "48", "unit": "sglang-decode.service"}) == 1.0
    assert value("crashdoc_gpu_xid_total", {"gpu": "5", "xid": "79", "unit": ""}) == 1.0
    assert value("crashdoc_gpu_xid_total", {"gpu": "0000:ee:00.0", "xid": "31", "unit": ""}) == 1.0
    assert sum(counts.values()) == 7


def test_a_hardware_diagnosis_is_a_gpu_fault_series_with_its_action() -> None:
    crash = CrashFacts(
        "sglang-prefill.service",
        100.0,
        "TP3",
        "RuntimeError: CUDA error",
        "resource",
        {48213: "TP3"},
        {"TP3": GpuRef(6, "0000:c1:00.0", device=3)},
    )
    [event] = KernelGpuReader().feed(FAMILY_LINES[79], 99.0)
    hardware = hardware_diagnosis(software(), decide(crash, [event]))
    registry = make_registry(GpuFaultCollector(dict, lambda: [hardware, software()], threading.Lock()))
    assert registry.get_sample_value("crashdoc_gpu_fault_info", FAULT_LABELS) == 1.0
    text = exposition(registry).decode()
    assert text.count("crashdoc_gpu_fault_info{") == 1  # the software diagnosis is no GPU fault


def test_with_nothing_to_say_the_families_are_still_declared() -> None:
    text = exposition(make_registry(GpuFaultCollector(dict, list, threading.Lock()))).decode()
    assert "# TYPE crashdoc_gpu_xid_total counter" in text and "# TYPE crashdoc_gpu_fault_info gauge" in text
