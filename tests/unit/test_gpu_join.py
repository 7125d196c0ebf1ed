"""Which unit, which rank, which GPU: the host's PCI-to-index map (fixtures of /proc/driver/nvidia), SGLang's
device for a rank, CUDA_VISIBLE_DEVICES, and the engine's published runs joined with kernel GPU events."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from crashdoc.diagnosis.gpus import (
    GpuRef,
    attribute,
    crash_of_run,
    device_of_rank,
    gpu_of_device,
    processes_of_run,
    unit_gpus,
    visible_devices,
)
from crashdoc.events import GpuEvent, Lifecycle
from crashdoc.sources.nvidia_gpus import read_gpu_map
from support.engine_driver import Host
from support.gpu_faults import BUSES, CUDA_GRAPH_TRACEBACK, FIXTURE_ROOT, VISIBLE, sglang

GPUS = read_gpu_map(FIXTURE_ROOT)


def test_the_pci_map_is_read_in_bus_order_as_nvidia_smi_numbers_it() -> None:
    assert [g.bus_id for g in GPUS.gpus] == list(BUSES)
    assert [g.index for g in GPUS.gpus] == list(range(8))
    gpu = GPUS.by_bus("0000:c1:00.0")
    assert gpu is not None and (gpu.index, gpu.uuid, gpu.model) == (
        6,
        "GPU-6f3a8e2c-1d44-4b8e-9c1a-0e6b7d2f9a36",
        "NVIDIA H100 80GB HBM3",
    )
    # the driver's minor numbers do not follow the bus order on this host: the index does
    assert [g.minor for g in GPUS.gpus] == [0, 1, 2, 3, 5, 4, 6, 7]
    assert GPUS.problems == ()


def test_no_driver_no_gpus_and_an_unreadable_file_is_said(tmp_path: Path) -> None:
    assert read_gpu_map(tmp_path).gpus == ()
    shutil.copytree(FIXTURE_ROOT, tmp_path / "host")
    broken = tmp_path / "host/proc/driver/nvidia/gpus/0000:3b:00.0/information"
    broken.unlink()
    broken.mkdir()  # reading it fails (EISDIR), as a vanished GPU's file would
    found = read_gpu_map(tmp_path / "host")
    assert len(found.gpus) == 7 and found.gpus[1].bus_id == "0000:4c:00.0"
    assert len(found.problems) == 1 and "0000:3b:00.0/information" in found.problems[0]


@pytest.mark.parametrize(
    ("rank", "flags", "device"),
    [
        ("TP3", {"--tp-size": "4"}, 3),
        ("TP3", {}, 3),  # no server_args: the rank's own number
        ("TP3", {"--tp-size": "4", "--base-gpu-id": "4"}, 7),
        ("TP1", {"--tp-size": "4", "--gpu-id-step": "2"}, 2),
        ("PP1 TP1", {"--tp-size": "2", "--pp-size": "2"}, 3),
        ("TP9", {"--tp-size": "16", "--nnodes": "2"}, 1),  # the second node's second GPU
        ("DP1 TP1", {"--tp-size": "2", "--dp-size": "2"}, 3),  # a replica per DP rank
        ("DP1 TP1", {"--tp-size": "2", "--dp-size": "2", "--enable-dp-attention": "True"}, 1),
        ("", {"--tp-size": "4"}, None),  # the launcher uses no GPU
    ],
)
def test_sglang_gives_each_rank_its_device(rank: str, flags: dict[str, str], device: int | None) -> None:
    assert device_of_rank(rank, flags) == device


def test_cuda_visible_devices_picks_the_host_gpu() -> None:
    ref = gpu_of_device(3, VISIBLE, GPUS)
    assert (ref.index, ref.bus_id) == (6, "0000:c1:00.0")
    assert ref.how == "device 3 -> CUDA_VISIBLE_DEVICES=3,4,5,6 -> 6 -> GPU 6 at 0000:c1:00.0"
    assert gpu_of_device(3, None, GPUS).bus_id == "0000:5d:00.0"  # unset: device = index
    by_uuid = gpu_of_device(0, "GPU-6f3a8e2c,GPU-7f3a8e2c", GPUS)
    assert (by_uuid.index, by_uuid.bus_id) == (6, "0000:c1:00.0")
    assert gpu_of_device(5, VISIBLE, GPUS).bus_id == ""  # not visible: no GPU, said so
    assert "not in CUDA_VISIBLE_DEVICES" in gpu_of_device(5, VISIBLE, GPUS).how
    assert gpu_of_device(0, "", GPUS).bus_id == ""


def test_visible_devices_from_the_units_environment() -> None:
    assert visible_devices(["HF_HOME=/models", "CUDA_VISIBLE_DEVICES=3,4,5,6"]) == "3,4,5,6"
    assert visible_devices(["CUDA_VISIBLE_DEVICES='0,1'", "CUDA_VISIBLE_DEVICES=2"]) == "2"
    assert visible_devices(["PATH=/usr/bin"]) is None


def test_unit_gpus_for_every_rank() -> None:
    found = unit_gpus(["", "TP0", "TP3"], {"--tp-size": "4"}, VISIBLE, GPUS)
    assert {rank: ref.bus_id for rank, ref in found.items()} == {"TP0": "0000:5d:00.0", "TP3": "0000:c1:00.0"}


def _crashed_host() -> Host:
    host = Host()
    host.start()
    host.line(sglang(host.t, "", "server_args=ServerArgs(model_path='/models/m', tp_size=4)"), pid=10)
    for rank in range(4):
        host.line(sglang(host.t, f"TP{rank}", "Load weight begin. avail mem=78.52 GB"), pid=20 + rank)
    host.t += 5
    for text in CUDA_GRAPH_TRACEBACK:
        host.line(sglang(host.t, "TP3", text) if text.startswith("Scheduler") else text, pid=23)
    host.t += 1
    host.pid1(Lifecycle.EXITED, exit_code="killed", exit_status="KILL")
    host.pid1(Lifecycle.FAILED, result="signal")
    return host


def test_the_runs_processes_and_their_ranks_from_what_the_engine_published() -> None:
    host = _crashed_host()
    run = host.runs_seen()[0]
    assert processes_of_run(run) == {11: "", 21: "TP0", 22: "TP1", 23: "TP2", 24: "TP3"}  # Host adds the run number
    crash = crash_of_run(host.unit, run, "bug", {"--tp-size": "4"}, VISIBLE, GPUS)
    assert crash is not None
    assert (crash.rank, crash.exception, crash.first_error_at) == (
        "TP3",
        "RuntimeError: CUDA error: unspecified launch failure",
        1_800_000_005.0,
    )
    assert crash.gpus["TP3"].bus_id == "0000:c1:00.0" and crash.gpus["TP0"].bus_id == "0000:5d:00.0"


def test_an_event_belongs_to_a_unit_by_pid_then_by_gpu() -> None:
    units = {
        "sglang-prefill.service": ({24: "TP3"}, {"TP3": GpuRef(6, "0000:c1:00.0")}),
        "sglang-decode.service": ({90: "TP0"}, {"TP0": GpuRef(0, "0000:19:00.0")}),
    }
    assert attribute(GpuEvent("xid", 1.0, "0000:c1:00.0", 13, pid=24), units) == [("sglang-prefill.service", "TP3")]
    assert attribute(GpuEvent("xid", 1.0, "0000:19:00.0", 79), units) == [("sglang-decode.service", "TP0")]
    assert attribute(GpuEvent("xid", 1.0, "0000:bb:00.0", 79), units) == []  # a GPU no unit uses
    assert attribute(GpuEvent("xid", 1.0, "", 79, pid=5), units) == []  # another process, no bus to go on
