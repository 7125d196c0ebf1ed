"""crashdoc_gpu_xid_total{gpu, xid, unit} and crashdoc_gpu_fault_info, read from the registry as Prometheus would:
families of the one collector (outputs/metrics.py), fed by the engine the way the daemon feeds it."""

from __future__ import annotations

import threading

from crashdoc.diagnosis.views import GpuView, UnitView
from crashdoc.events import GpuMap, HostGpus, LogLine, UnitDevices
from crashdoc.outputs.metrics import CrashdocCollector, Health, exposition, make_registry
from crashdoc.sources.kernel_gpu import KernelGpuReader
from crashdoc.sources.nvidia_gpus import read_gpu_map
from support.engine_driver import Host
from support.gpu_faults import (
    FAMILY_LINES,
    FAULT_LABELS,
    FIXTURE_ROOT,
    cuda_graph_diagnosis,
    sglang,
    xid,
    xid79_hardware_diagnosis,
)

GPUS = read_gpu_map(FIXTURE_ROOT)
PREFILL, DECODE = "sglang-prefill.service", "sglang-decode.service"


def test_xids_are_counted_by_gpu_xid_and_the_unit_using_that_gpu() -> None:
    prefill = Host()  # TP3 is pid 48213, on GPU 6; decode runs on GPUs 0 and 1
    decode = Host(unit=DECODE)
    decode.engine = prefill.engine
    prefill.facts(HostGpus(GPUS), UnitDevices(PREFILL, "3,4,5,6"), UnitDevices(DECODE, "0,1"))
    prefill.start()
    args = sglang(prefill.t, "", "server_args=ServerArgs(model_path='/models/m', tp_size=4)")  # TP0..TP3
    prefill.feed(LogLine(PREFILL, 48200, args, prefill.t))
    prefill.feed(LogLine(PREFILL, 48213, sglang(prefill.t, "TP3", "Load weight begin. avail mem=78 GB"), prefill.t))
    decode.start()
    decode.feed(LogLine(DECODE, 52000, sglang(decode.t, "TP0", "Load weight begin. avail mem=78 GB"), decode.t))
    reader = KernelGpuReader()
    for text in [
        FAMILY_LINES[79],  # pid 48213: TP3 of prefill, on GPU 6
        *[FAMILY_LINES[13]] * 3,
        xid(48, "DBE", bus="0000:19:00", pid="unknown"),  # the decode unit's GPU 0, by bus
        xid(79, "GPU has fallen off the bus.", bus="0000:bb:00", pid="unknown"),  # GPU 5: prefill's TP2, by bus
        xid(79, "GPU has fallen off the bus.", bus="0000:dc:00", pid="unknown"),  # GPU 7: no unit uses it
        xid(31, "MMU Fault", bus="0000:ee:00", pid="unknown"),  # not on the host's map: its bus id
        "NVRM: GPU 0000:c1:00.0: GPU has fallen off the bus.",  # no Xid: not counted here
    ]:
        prefill.feed(*reader.feed(text, prefill.t))
    registry = make_registry(
        CrashdocCollector(prefill.engine.units, Health(), threading.Lock(), gpus=prefill.engine.gpus)
    )
    value = registry.get_sample_value
    assert value("crashdoc_gpu_xid_total", {"gpu": "6", "xid": "79", "unit": PREFILL}) == 1.0
    assert value("crashdoc_gpu_xid_total", {"gpu": "6", "xid": "13", "unit": PREFILL}) == 3.0
    assert value("crashdoc_gpu_xid_total", {"gpu": "0", "xid": "48", "unit": DECODE}) == 1.0
    assert value("crashdoc_gpu_xid_total", {"gpu": "5", "xid": "79", "unit": PREFILL}) == 1.0
    assert value("crashdoc_gpu_xid_total", {"gpu": "7", "xid": "79", "unit": ""}) == 1.0
    assert value("crashdoc_gpu_xid_total", {"gpu": "0000:ee:00.0", "xid": "31", "unit": ""}) == 1.0
    assert sum(prefill.engine.gpus().xids.values()) == 8


def test_a_hardware_diagnosis_is_a_gpu_fault_series_with_its_action() -> None:
    hardware = xid79_hardware_diagnosis(PREFILL)
    units = {
        name: UnitView(name, "any", "crash-looping", True, False, 2, 2, 2, {}, None, None, d, None, {}, {}, None)
        for name, d in ((PREFILL, hardware), (DECODE, cuda_graph_diagnosis(DECODE)))
    }
    registry = make_registry(CrashdocCollector(lambda: units, Health(), threading.Lock()))
    assert registry.get_sample_value("crashdoc_gpu_fault_info", FAULT_LABELS) == 1.0
    text = exposition(registry).decode()
    assert text.count("crashdoc_gpu_fault_info{") == 1  # the software diagnosis is no GPU fault


def test_with_nothing_to_say_the_families_are_still_declared() -> None:
    empty = GpuView({}, GpuMap(), 0)
    text = exposition(make_registry(CrashdocCollector(dict, Health(), threading.Lock(), gpus=lambda: empty))).decode()
    assert "# TYPE crashdoc_gpu_xid_total counter" in text and "# TYPE crashdoc_gpu_fault_info gauge" in text
