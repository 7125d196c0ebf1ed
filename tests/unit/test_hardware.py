"""Hardware or configuration: the decision on a crash and the kernel's GPU events, and the diagnosis it gives.

Each case is what an on-call engineer would be told: a hardware diagnosis with NVIDIA's resolution and no
flag fix, or the software diagnosis kept, with the GPU lines as evidence."""

from __future__ import annotations

import dataclasses

import pytest

from crashdoc.diagnosis.gpus import CrashFacts, GpuRef
from crashdoc.diagnosis.hardware import HARDWARE, TEARDOWN, WINDOW, decide, hardware_diagnosis
from crashdoc.events import Diagnosis, Fix, FlagChange, GpuEvent, RootCause
from crashdoc.sources.kernel_gpu import KernelGpuReader
from support.gpu_faults import FAMILY_LINES, FELL_OFF, SXID_FATAL, xid

T = 1_800_000_030.0  # the crash's first error line
TP3_GPU = GpuRef(6, "0000:c1:00.0", device=3, how="TP3 -> device 3 -> CUDA_VISIBLE_DEVICES=3,4,5,6 -> 6")
CRASH = CrashFacts(
    unit="sglang-prefill.service",
    first_error_at=T,
    rank="TP3",
    exception="RuntimeError: CUDA error: unspecified launch failure",
    kind="bug",
    pids={48200: "", 48210: "TP0", 48213: "TP3"},
    gpus={"TP0": GpuRef(3, "0000:5d:00.0", device=0), "TP3": TP3_GPU},
)


def event(text: str, at: float) -> GpuEvent:
    [found] = KernelGpuReader().feed(text, at)
    return found


def software(kind: str = "bug", changes: bool = False) -> Diagnosis:
    fix = Fix("switch --attention-backend", [FlagChange("set", "--attention-backend", "triton")] if changes else [])
    return Diagnosis(
        unit="sglang-prefill.service",
        signature="cuda-illegal-memory-access" if changes else None,
        title="RuntimeError: CUDA error: unspecified launch failure",
        category="cuda-graph",
        severity="critical",
        root_cause=RootCause("RuntimeError", "CUDA error: unspecified launch failure", CRASH.exception),
        flags=["--attention-backend"] if changes else [],
        fix=fix,
        fingerprint="fp1-300fcf6fcea889c6",
        evidence=["Scheduler process (TP3) raised: RuntimeError: CUDA error: unspecified launch failure"],
        kind=kind,
    )


def test_xid_79_on_tp3s_gpu_just_before_the_crash_is_a_hardware_diagnosis() -> None:
    verdict = decide(CRASH, [event(FAMILY_LINES[79], T - 1)])
    assert verdict.cause is not None and verdict.cause.gone and verdict.cause.action == "drain"
    assert verdict.cause.joined == "pid 48213 is TP3 of sglang-prefill.service"
    d = hardware_diagnosis(software(changes=True), verdict)
    assert (d.kind, d.signature, d.severity) == (HARDWARE, "gpu-fault-bus", "critical")
    assert d.title == (
        "Xid 79 (GPU has fallen off the bus) on GPU 6 (0000:c1:00.0) under TP3: the GPU is gone, restarts cannot "
        "heal the unit"
    )
    assert d.captures | {} == {
        "gpu_event": "xid",
        "xid": "79",
        "bus_id": "0000:c1:00.0",
        "gpu": "6",
        "rank": "TP3",
        "action": "drain",
        "device": "3",
        "nvidia_immediate": "RESTART_BM",
        "nvidia_investigatory": "CONTACT_SUPPORT",
    }
    assert d.fix.changes == [] and d.fix.command is None and d.flags == []  # no flag fix
    assert d.fix.summary.startswith("Drain this node: GPU 6 (0000:c1:00.0) is gone")
    assert "RESTART_BM" in d.fix.summary and "nvidia-smi -L" in d.fix.apply
    assert any("would not help" in w and "--attention-backend" in w for w in d.fix.warnings)
    assert d.root_cause.line == FAMILY_LINES[79] and d.root_cause.type == "Xid 79"
    assert d.evidence[0] == "the crash: TP3 RuntimeError: CUDA error: unspecified launch failure, 1.0 s after Xid 79"


def test_a_memory_xid_resets_the_gpu_with_the_commands_to_check() -> None:
    verdict = decide(CRASH, [event(xid(95, "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No"), T - 2)])
    d = hardware_diagnosis(software(), verdict)
    assert verdict.cause is not None and not verdict.cause.gone
    assert (d.signature, d.captures["action"], d.captures["xid"]) == ("gpu-fault-memory", "reset-gpu", "95")
    assert d.fix.apply == [
        "nvidia-smi -q -d ROW_REMAPPER,ECC -i 6",
        "systemctl stop sglang-prefill.service",
        "nvidia-smi -r -i 6",
        "systemctl start sglang-prefill.service",
    ]
    assert "NVIDIA: RESET_GPU" in d.fix.summary
    assert d.fix.warnings == []  # an unknown software error had no fix to withhold


def test_nvlink_gets_the_link_state_check_and_154_changes_the_action() -> None:
    alone = hardware_diagnosis(software(), decide(CRASH, [event(FAMILY_LINES[74], T - 3)]))
    assert (alone.signature, alone.captures["action"]) == ("gpu-fault-nvlink", "reset-gpu")
    assert alone.fix.apply[:2] == ["nvidia-smi -q -d ROW_REMAPPER,ECC -i 6", "nvidia-smi nvlink -s -i 6"]
    events = [
        event(FAMILY_LINES[74], T - 3),
        event(xid(154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"), T - 2),
    ]
    verdict = decide(CRASH, events)
    assert verdict.cause is not None and verdict.cause.event.code == 74 and verdict.recovery == "Node Reboot Required"
    d = hardware_diagnosis(software(), verdict)
    assert (
        d.captures["action"] == "drain" and "Xid 154 on this GPU: the driver asks for Node Reboot Required" in d.fix.why
    )
    assert any("the driver now asks for Node Reboot Required" in e for e in d.evidence)


def test_a_fallen_off_bus_line_without_an_xid_is_enough() -> None:
    verdict = decide(CRASH, [event(FELL_OFF, T - 0.5)])
    assert verdict.cause is not None and verdict.cause.event.kind == "fallen-off-bus"
    assert verdict.cause.joined.startswith("0000:c1:00.0 is TP3's GPU (TP3 -> device 3")  # no pid: joined by bus
    assert hardware_diagnosis(software(), verdict).signature == "gpu-fault-bus"


@pytest.mark.parametrize("code", [13, 31, 43])
def test_application_xids_before_the_crash_are_evidence_never_hardware(code: int) -> None:
    verdict = decide(CRASH, [event(FAMILY_LINES[code], T - 1)])
    assert verdict.cause is None
    [note] = verdict.evidence
    assert f"Xid {code}" in note and "the application's own fault" in note and "1.0 s before" in note
    d = hardware_diagnosis(software(kind="bug", changes=True), verdict)
    assert (d.kind, d.signature, d.fix.changes) == (
        "bug",
        "cuda-illegal-memory-access",
        software(changes=True).fix.changes,
    )
    assert d.evidence[-1] == note


def test_an_xid_logged_during_teardown_is_after_the_crash() -> None:
    verdict = decide(CRASH, [event(FAMILY_LINES[13], T + 60), event(FAMILY_LINES[79], T + 61)])
    assert verdict.cause is None  # even a hardware Xid after the first error line is a consequence
    assert verdict.evidence == (
        "GPU: Xid 13 (Graphics Engine Exception) on GPU 6 (0000:c1:00.0), TP3, 60.0 s after the crash's first error "
        "line: after the crash (teardown), not its cause",
        "GPU: Xid 79 (GPU has fallen off the bus) on GPU 6 (0000:c1:00.0), TP3, 61.0 s after the crash's first error "
        "line: after the crash (teardown), not its cause",
    )


def test_a_burst_of_teardown_xids_is_one_line_with_its_count() -> None:
    burst = [event(FAMILY_LINES[13], T + 60 + i / 2) for i in range(12)]
    later = event(FAMILY_LINES[13], T + TEARDOWN + 1)  # long after: another story, not this crash's teardown
    verdict = decide(CRASH, [*burst, later])
    assert len(verdict.evidence) == 1
    assert verdict.evidence[0].endswith(
        "60.0 s after the crash's first error line: after the crash (teardown), not its "
        "cause (x12, the last 65.5 s after)"
    )


def test_other_processes_other_gpus_and_old_faults_change_nothing() -> None:
    other_pid = event(xid(79, "GPU has fallen off the bus.", bus="0000:19:00", pid=777), T - 1)
    other_gpu = event(xid(79, "GPU has fallen off the bus.", bus="0000:bb:00", pid="unknown"), T - 1)
    other_app = event(xid(13, "Graphics SM Warp Exception", bus="0000:c1:00", pid=777), T - 1)  # on our GPU
    long_ago = event(FAMILY_LINES[95], T - WINDOW - 1)
    verdict = decide(CRASH, [other_pid, other_gpu, other_app, long_ago])
    assert verdict == type(verdict)()  # no cause, nothing said
    assert hardware_diagnosis(software(), verdict) == software()


def test_a_non_fatal_xid_beside_a_config_error_keeps_the_config_diagnosis() -> None:
    config = dataclasses.replace(CRASH, kind="config", exception="ValueError: DeepSeek V4 HiCache ...")
    verdict = decide(config, [event(FAMILY_LINES[63], T - 1)])
    assert verdict.cause is None and "not fatal (NVIDIA's immediate action: IGNORE)" in verdict.evidence[0]
    d = hardware_diagnosis(software(kind="config", changes=True), verdict)
    assert d.kind == "config" and d.fix.changes and d.evidence[-1] == verdict.evidence[0]


def test_even_a_fatal_xid_leaves_a_flag_checks_crash_to_the_flag() -> None:
    config = dataclasses.replace(CRASH, kind="config")
    verdict = decide(config, [event(FAMILY_LINES[79], T - 1)])
    assert (
        verdict.cause is None and "SGLang's own argument check: fix the flag, and drain the node" in verdict.evidence[0]
    )


def test_a_gpu_that_is_gone_keeps_the_loop_going_drain() -> None:
    """The second crash of the loop, minutes after the GPU fell off the bus: restarts cannot heal it."""
    later = dataclasses.replace(
        CRASH,
        first_error_at=T + 600,
        exception="torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
    )
    verdict = decide(later, [event(FAMILY_LINES[79], T - 1)])
    assert verdict.cause is not None and verdict.cause.gone and verdict.cause.action == "drain"
    assert hardware_diagnosis(software(), verdict).title.endswith("the GPU is gone, restarts cannot heal the unit")
    # the same old fault beside an unrelated error is long before: nothing
    unrelated = dataclasses.replace(later, exception="KeyError: 'model.layers.0.mlp'")
    assert decide(unrelated, [event(FAMILY_LINES[79], T - 1)]).cause is None
    # a driver loaded again since (a reboot): the old fault is history
    reloaded = event(
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.163.01  Tue Apr  8 12:41:17 UTC 2025", T + 300
    )
    assert decide(later, [event(FAMILY_LINES[79], T - 1), reloaded]).cause is None


def test_an_nvswitch_sxid_is_evidence_for_the_node() -> None:
    verdict = decide(CRASH, [event(SXID_FATAL, T - 2)])
    assert (
        verdict.cause is None and "Xid 74" in verdict.evidence[0] and "NVSwitch SXid 20034 fatal" in verdict.evidence[0]
    )


def test_events_without_a_clock_cannot_be_ordered() -> None:
    undated = dataclasses.replace(event(FAMILY_LINES[79], T - 1), timestamp=0.0, uptime=1234.5)
    verdict = decide(CRASH, [undated])
    assert verdict.cause is None and "cannot be ordered against the crash" in verdict.evidence[0]


def test_same_second_clocks_count_the_kernel_line_as_first() -> None:
    same_second = event(FAMILY_LINES[79], T + 0.4)  # a paste's whole seconds put both in one second
    assert decide(CRASH, [same_second]).cause is None
    assert decide(CRASH, [same_second], tolerance=0.999).cause is not None


def test_a_paste_without_pids_or_gpus_assumes_its_own_kernel_lines_belong_to_its_crash() -> None:
    pasted = CrashFacts("", T, "TP3", CRASH.exception, "bug")
    verdict = decide(pasted, [event(FAMILY_LINES[79], T - 1)], assume_joined=True)
    assert verdict.cause is not None and verdict.cause.joined == "assumed: the paste does not say which GPU TP3 used"
    assert decide(pasted, [event(FAMILY_LINES[79], T - 1)]).cause is None  # never in the daemon
    d = hardware_diagnosis(dataclasses.replace(software(), unit=""), verdict)
    assert "the unit cannot recover" in d.fix.summary and "systemctl stop UNIT" in d.fix.apply
