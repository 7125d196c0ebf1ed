"""The kernel's GPU faults in the engine, as the daemon and `diagnose` feed them: each Xid joined with the PIDs and
ranks of the runs, the hardware decision taken when a crash is judged, what /metrics counts, and the state saved.

The host is the fixture's 8-GPU machine; the unit runs with CUDA_VISIBLE_DEVICES=3,4,5,6, so its TP3 is device 3,
GPU 6, 0000:c1:00.0 (what D-Bus and /proc/driver/nvidia/gpus would say, handed in as facts)."""

from __future__ import annotations

import functools
import threading
from pathlib import Path

from crashdoc.commands.pipeline import build_engine
from crashdoc.diagnosis.engine import Engine
from crashdoc.diagnosis.gpustate import MAX_REPEATS
from crashdoc.events import (
    Diagnosis,
    HostGpus,
    Lifecycle,
    LogLine,
    Thresholds,
    UnitDevices,
    UnitState,
)
from crashdoc.matching.derived import load_shipped
from crashdoc.matching.library import builtin_signature_dirs, load_library
from crashdoc.matching.matcher import Matcher
from crashdoc.outputs.metrics import CrashdocCollector, Health, exposition, make_registry
from crashdoc.sources.gpu_facts import GpuFactsReader, visible_devices
from crashdoc.sources.kernel_gpu import KernelGpuReader
from crashdoc.sources.nvidia_gpus import read_gpu_map
from support.engine_driver import UNIT, Host
from support.gpu_faults import (
    APPLICATION_XID13,
    CUDA_GRAPH_TRACEBACK,
    FAULT_LABELS,
    FIXTURE_ROOT,
    GONE_TRACEBACK,
    ILLEGAL_TRACEBACK,
    RANK_PIDS,
    TEARDOWN_XID13,
    VISIBLE,
    sglang,
    xid,
)

GPUS = read_gpu_map(FIXTURE_ROOT)
XID79 = xid(79, "GPU has fallen off the bus.", pid=RANK_PIDS["TP3"])


@functools.cache
def shipped() -> Matcher:
    return Matcher(load_library(builtin_signature_dirs()), load_shipped())


class GpuHost(Host):
    """A host whose unit runs SGLang with four TP ranks, and whose kernel logs GPU faults."""

    def __init__(self, facts: bool = True, library: bool = False) -> None:
        super().__init__()
        if library:  # the shipped signatures (illegal memory access, ...)
            self.engine = build_engine(shipped(), thresholds=Thresholds(recovery=10))
        self.kernel_lines = KernelGpuReader()
        if facts:
            self.facts(HostGpus(GPUS, str(FIXTURE_ROOT)), UnitDevices(UNIT, VISIBLE, "Environment="))

    def kernel(self, text: str, at: float) -> None:
        """A kernel line, as the journal source hands it over (`_TRANSPORT=kernel` entries only)."""
        self.feed(*self.kernel_lines.feed(text, at))

    def run(self, error: list[str], *, offset: int = 0, kernel: tuple[tuple[float, str], ...] = ()) -> float:
        """One run that crashes: every rank loads, TP3 raises `error` 5 s in, the launcher kills the tree; `kernel`
        lines (seconds from the error line, text) are logged around it. Returns the error line's time."""
        self.start()
        inv = f"inv{self.runs}"
        pids = {rank: pid + offset for rank, pid in RANK_PIDS.items()}
        args = "server_args=ServerArgs(model_path='/models/m', tp_size=4, base_gpu_id=0)"
        self.feed(LogLine(UNIT, pids[""], sglang(self.t, "", args), self.t, inv))
        for rank, pid in pids.items():
            if rank:
                self.feed(
                    LogLine(UNIT, pid, sglang(self.t, rank, "Load weight begin. avail mem=78.52 GB"), self.t, inv)
                )
        error_at = self.t + 5
        for when, text in sorted(k for k in kernel if k[0] < 0):
            self.kernel(text, error_at + when)
        self.t = error_at
        first, *rest = error
        self.feed(LogLine(UNIT, pids["TP3"], sglang(self.t, "TP3", first), self.t, inv))
        for text in rest:
            self.feed(LogLine(UNIT, pids["TP3"], text, self.t, inv))
        for when, text in sorted(k for k in kernel if k[0] >= 0):
            self.t = error_at + when
            self.kernel(text, self.t)
        self.t += 1
        self.pid1(Lifecycle.EXITED, exit_code="killed", exit_status="KILL")
        self.pid1(Lifecycle.FAILED, result="signal")
        self.t += 1
        self.restarts += 1
        self.pid1(Lifecycle.RESTART_SCHEDULED, n_restarts=self.restarts)
        return error_at


def xid79_loop(host: GpuHost, with_xid: bool = True) -> GpuHost:
    """Xid 79 on TP3's GPU 1 s before TP3's CUDA-graph error, then a run that cannot set its device."""
    host.run(CUDA_GRAPH_TRACEBACK, kernel=((-1.0, XID79),) if with_xid else ())
    host.run(GONE_TRACEBACK, offset=100)
    return host


def registry(engine: Engine):  # type: ignore[no-untyped-def]
    return make_registry(CrashdocCollector(engine.units, Health(), threading.Lock(), gpus=engine.gpus))


def loop_diagnosis(host: Host) -> Diagnosis:
    d = host.rec.diagnosis
    assert d is not None and host.rec.crashloop
    return d


# --- an Xid 79 on TP3's GPU, then the loop ------------------------------------------------------------------------


def test_an_xid_79_on_tp3s_gpu_then_the_loop_is_a_hardware_diagnosis_to_drain() -> None:
    host = xid79_loop(GpuHost())
    d = loop_diagnosis(host)
    assert (d.kind, d.signature, d.severity) == ("hardware", "gpu-fault-bus", "critical")
    assert d.title == (
        "Xid 79 (GPU has fallen off the bus) on GPU 6 (0000:c1:00.0) under TP3: the GPU is gone, restarts cannot "
        "heal the unit"
    )
    assert {k: d.captures[k] for k in ("xid", "gpu", "bus_id", "rank", "action")} == {
        "xid": "79",
        "gpu": "6",
        "bus_id": "0000:c1:00.0",
        "rank": "TP3",
        "action": "drain",
    }
    assert d.fix.changes == [] and d.flags == []  # no flag fix
    assert d.fix.summary.startswith("Drain this node: GPU 6 (0000:c1:00.0) is gone")
    assert d.confidence == 1.0 and d.crashes == 2
    assert dict(host.rec.crashes_by_signature) == {"gpu-fault-bus": 2}
    started = [e for e in host.engine.events() if e.kind == "loop-started"]
    assert len(started) == 1 and started[0].diagnosis is not None and started[0].diagnosis.kind == "hardware"


def test_the_metric_and_the_fault_series_say_which_gpu() -> None:
    host = xid79_loop(GpuHost())
    value = registry(host.engine).get_sample_value
    assert value("crashdoc_gpu_xid_total", {"gpu": "6", "xid": "79", "unit": UNIT}) == 1.0
    assert value("crashdoc_gpu_fault_info", FAULT_LABELS) == 1.0
    labels = {"unit": UNIT, "signature": "gpu-fault-bus", "category": "other", "severity": "critical"}  # set_device
    assert value("crashdoc_diagnosis_info", {**labels, "derived": "false", "subsystem": "other", "kind": "hardware"})
    assert value("crashdoc_crashes_total", {"unit": UNIT, "signature": "gpu-fault-bus"}) == 2.0


def test_the_same_crashes_without_the_xid_keep_todays_diagnosis() -> None:
    plain = xid79_loop(GpuHost(facts=False), with_xid=False)
    with_facts = xid79_loop(GpuHost(), with_xid=False)
    assert with_facts.engine.diagnoses() == plain.engine.diagnoses()
    assert loop_diagnosis(plain).kind != "hardware" and loop_diagnosis(plain).signature is None
    text = exposition(registry(with_facts.engine)).decode()
    assert "crashdoc_gpu_xid_total{" not in text and "crashdoc_gpu_fault_info{" not in text


def test_without_d_bus_or_the_hosts_gpus_the_kernel_names_the_gpu_by_its_bus_id() -> None:
    """`diagnose` over journal files of another host: no CUDA_VISIBLE_DEVICES, no PCI map. The Xid's pid names TP3's
    process, and its bus id names the GPU; the next run's TP3 is on the same GPU."""
    d = loop_diagnosis(xid79_loop(GpuHost(facts=False)))
    assert (d.kind, d.captures["bus_id"], d.captures["rank"], d.captures["gpu"]) == (
        "hardware",
        "0000:c1:00.0",
        "TP3",
        "",
    )
    assert "on GPU 0000:c1:00.0 under TP3" in d.title and "Drain this node" in d.fix.summary


def test_a_unit_moved_to_other_gpus_is_not_tied_to_the_gpu_that_fell_off() -> None:
    host = GpuHost()
    host.run(CUDA_GRAPH_TRACEBACK, kernel=((-1.0, XID79),))
    host.facts(UnitDevices(UNIT, "0,1,2,7", "EnvironmentFile=/etc/sglang/gpus.env"))  # TP3 -> GPU 7 now
    host.run(GONE_TRACEBACK, offset=100)
    [crash1, crash2] = [e.diagnosis for e in host.engine.events() if e.kind == "crash"]
    assert crash1 is not None and crash1.kind == "hardware"
    assert crash2 is not None and crash2.kind != "hardware"


# --- the order says what the Xid is ------------------------------------------------------------------------------


def test_an_xid_13_at_teardown_and_an_application_xid_before_keep_the_software_diagnosis() -> None:
    teardown = xid(13, TEARDOWN_XID13, pid=48213)
    host = GpuHost(library=True)
    host.run(ILLEGAL_TRACEBACK, kernel=((-1.0, xid(13, APPLICATION_XID13, pid=48213)), (60.0, teardown)))
    host.run(ILLEGAL_TRACEBACK, offset=100, kernel=((60.0, teardown.replace("48213", "48313")),))
    d = loop_diagnosis(host)
    assert (d.signature, d.kind) == ("cuda-illegal-memory-access", "bug")
    gpu = [e for e in d.evidence if e.startswith("GPU:")]
    assert any("60.0 s after the crash's first error line: after the crash (teardown)" in e for e in gpu), gpu
    baseline = GpuHost(library=True)
    baseline.run(ILLEGAL_TRACEBACK)
    baseline.run(ILLEGAL_TRACEBACK, offset=100)
    assert d.fix == loop_diagnosis(baseline).fix  # the flag fix stands
    first = GpuHost(library=True)
    first.run(ILLEGAL_TRACEBACK, kernel=((-1.0, xid(13, APPLICATION_XID13, pid=48213)),))
    [crash] = [e.diagnosis for e in first.engine.events() if e.kind == "crash"]
    assert crash is not None and crash.kind == "bug"
    assert any("the application's own fault" in e for e in crash.evidence), crash.evidence


def test_a_fault_read_after_the_crash_was_judged_joins_the_loops_evidence_never_its_cause() -> None:
    """journald reads the kernel's ring buffer and the units' pipes apart: a teardown Xid may be read after the
    crash was judged. The loop's diagnosis is made again with it (as evidence: it came after the first error)."""
    host = GpuHost()
    host.run(CUDA_GRAPH_TRACEBACK)
    error_at = host.run(CUDA_GRAPH_TRACEBACK, offset=100)
    before = loop_diagnosis(host)
    host.engine.events()
    host.kernel(xid(79, "GPU has fallen off the bus.", pid=48313), error_at + 61)
    after = loop_diagnosis(host)
    assert after.kind == before.kind != "hardware" and after.signature == before.signature
    assert [e for e in after.evidence if e not in before.evidence] == [
        "GPU: Xid 79 (GPU has fallen off the bus) on GPU 6 (0000:c1:00.0), TP3, 61.0 s after the crash's first error "
        "line: after the crash (teardown), not its cause"
    ]
    assert host.kinds() == []  # the same root cause: no new record, no new alert


def test_xids_of_other_processes_other_gpus_or_long_before_change_nothing() -> None:
    others = (
        (-1.0, xid(79, "GPU has fallen off the bus.", bus="0000:19:00", pid=51000)),  # GPU 0: another program's
        (-1.0, xid(48, "An uncorrectable double bit error (DBE)", bus="0000:dc:00", pid="unknown")),  # GPU 7: unused
        (-3600.0, xid(79, "GPU has fallen off the bus.", pid=48213)),  # an hour before, a pid reused since
    )
    baseline = GpuHost()
    for offset in (0, 100):
        baseline.run(CUDA_GRAPH_TRACEBACK, offset=offset)
    host = GpuHost()
    for offset in (0, 100):
        host.run(CUDA_GRAPH_TRACEBACK, offset=offset, kernel=others if not offset else ())
    assert host.engine.diagnoses() == baseline.engine.diagnoses()
    value = registry(host.engine).get_sample_value
    assert value("crashdoc_gpu_xid_total", {"gpu": "0", "xid": "79", "unit": ""}) == 1.0  # no watched unit uses it
    assert value("crashdoc_gpu_xid_total", {"gpu": "7", "xid": "48", "unit": ""}) == 1.0


def test_without_the_units_cuda_visible_devices_another_programs_xid_on_gpu_0_is_not_tp0s() -> None:
    """No D-Bus (`dbus: false`, `diagnose` over journal files): the unit's device 0 is not known to be the host's
    GPU 0, so another program's Xid 79 there changes nothing. When D-Bus says the unit sets no
    CUDA_VISIBLE_DEVICES, device 0 is GPU 0: the GPU TP0 used is gone, and that is the loop's cause."""
    other = ((-1.0, xid(79, "GPU has fallen off the bus.", bus="0000:19:00", pid=51000)),)
    baseline = GpuHost(facts=False)
    unknown = GpuHost(facts=False)
    unset = GpuHost(facts=False)
    unknown.facts(HostGpus(GPUS, str(FIXTURE_ROOT)))
    unset.facts(HostGpus(GPUS, str(FIXTURE_ROOT)), UnitDevices(UNIT, None, ""))
    for host in (baseline, unknown, unset):
        for offset in (0, 100):
            host.run(CUDA_GRAPH_TRACEBACK, offset=offset, kernel=other if host is not baseline and not offset else ())
    assert unknown.engine.diagnoses() == baseline.engine.diagnoses()
    assert registry(unknown.engine).get_sample_value("crashdoc_gpu_xid_total", {"gpu": "0", "xid": "79", "unit": ""})
    d = loop_diagnosis(unset)
    assert (d.kind, d.captures["gpu"], d.captures["rank"]) == ("hardware", "0", "TP0"), d.title


def test_a_pid_the_kernel_named_before_the_run_began_is_another_process() -> None:
    """PIDs are reused: an Xid 79 that named pid 48213 on GPU 0 two minutes before this run began is not about this
    run's TP3 (pid 48213 again), even when TP3 then fails to find its device."""
    baseline = GpuHost()
    baseline.run(GONE_TRACEBACK)
    host = GpuHost()
    host.t += 120
    host.kernel(xid(79, "GPU has fallen off the bus.", bus="0000:19:00", pid=48213), host.t - 120)
    host.run(GONE_TRACEBACK)
    [before, after] = [h.engine.diagnoses()[0] for h in (baseline, host)]
    assert after.kind == before.kind != "hardware" and after.title == before.title


def test_a_storm_of_one_xid_is_counted_whole_and_kept_bounded() -> None:
    host = GpuHost()
    host.start()
    host.feed(LogLine(UNIT, 48213, sglang(host.t, "TP3", "Load weight begin. avail mem=78.52 GB"), host.t, "inv1"))
    storm = xid(13, "Graphics SM Warp Exception on (GPC 2, TPC 1, SM 0): Out Of Range Address", pid=48213)
    for i in range(5000):
        host.kernel(storm, host.t + i / 1000)
    host.kernel(XID79, host.t + 5)
    view = host.engine.gpus()
    assert view.xids[("6", "13", UNIT)] == 5000 and view.xids[("6", "79", UNIT)] == 1
    assert view.kept == MAX_REPEATS + 1  # the storm's first and latest, and the Xid 79 after it


# --- what is saved ------------------------------------------------------------------------------------------------


def test_the_gpu_faults_are_saved_and_a_state_without_them_loads() -> None:
    host = xid79_loop(GpuHost())
    saved = host.engine.snapshot()
    again = GpuHost(facts=False)
    again.engine.restore(saved)
    assert again.engine.gpus() == host.engine.gpus()
    assert again.engine.diagnoses() == host.engine.diagnoses()
    older = {**saved, "data": {k: v for k, v in saved["data"].items() if k != "gpus"}}  # a file from before them
    before = GpuHost(facts=False)
    before.engine.restore(older)
    assert before.engine.gpus().xids == {} and before.rec.crashes_total == 2


# --- the facts the runtime reads -----------------------------------------------------------------------------------


def test_cuda_visible_devices_as_systemd_starts_the_unit(tmp_path: Path) -> None:
    env = tmp_path / "gpus.env"
    env.write_text("# the GPUs of this server\nHF_HOME=/models\nCUDA_VISIBLE_DEVICES='4,5,6,7'\n")
    state = UnitState(UNIT, environment=("CUDA_VISIBLE_DEVICES=0,1",), environment_files=(str(env), "-/missing.env"))
    assert visible_devices(state) == ("4,5,6,7", f"EnvironmentFile={env}")  # a file wins over Environment=
    assert visible_devices(UnitState(UNIT, environment=("CUDA_VISIBLE_DEVICES=0,1",))) == ("0,1", "Environment=")
    assert visible_devices(UnitState(UNIT)) == (None, "")
    reader = GpuFactsReader(FIXTURE_ROOT / "proc" / "driver" / "nvidia" / "gpus")
    assert reader.for_state(state) == UnitDevices(UNIT, "4,5,6,7", f"EnvironmentFile={env}")
    assert reader.for_state(state) is None  # handed in once, until it changes
    env.write_text("CUDA_VISIBLE_DEVICES=0,1,2,3\n")
    assert reader.for_state(state) == UnitDevices(UNIT, "0,1,2,3", f"EnvironmentFile={env}")
    host = reader.host()
    assert host is not None and host.gpus == GPUS
    assert GpuFactsReader(None).host() is None  # journal files of another host: its GPUs are not these
