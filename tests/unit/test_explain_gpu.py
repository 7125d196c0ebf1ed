"""`crashdoc explain` on pastes that hold the kernel's GPU lines next to SGLang's log, through the real entry
point: hardware when the order says so, the software diagnosis (with the GPU lines as evidence) otherwise."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from support.explaining import explain as explain_text
from support.gpu_faults import (
    CUDA_GRAPH_TRACEBACK,
    DEVICE_GONE,
    DSV4,
    FAMILY_LINES,
    FELL_OFF,
    FELL_OFF_MULTILINE,
    ILLEGAL_ACCESS,
    dmesg,
    dmesg_t,
    journalctl_k,
    sglang,
    sglang_traceback,
    xid,
)

T = datetime(2026, 5, 5, 10, 14, 59).timestamp()  # TP3's first error line
CRASH = [*sglang_traceback(T, "TP3", CUDA_GRAPH_TRACEBACK[7]), *CUDA_GRAPH_TRACEBACK[8:]]
TEARDOWN = [sglang(T + 1, "", "Received sigquit from a child process. It usually means the child failed.")]
XID79 = [
    dmesg_t(T - 1, "NVRM: GPU at PCI:0000:c1:00: GPU-6f3a8e2c-1d44-4b8e-9c1a-0e6b7d2f9a36"),
    dmesg_t(T - 1, FAMILY_LINES[79]),
    dmesg_t(T - 1, FELL_OFF),
]


def explain(tmp_path: Path, lines: list[str], *, as_json: bool = True) -> Any:
    return explain_text(tmp_path, "\n".join(lines) + "\n", as_json=as_json)


def only(tmp_path: Path, lines: list[str]) -> dict[str, Any]:
    [d] = explain(tmp_path, lines)["diagnoses"]
    return d


def test_dmesg_t_with_an_xid_79_before_the_tp3_crash_is_hardware(tmp_path: Path) -> None:
    d = only(tmp_path, [*XID79, *CRASH, *TEARDOWN])
    assert (d["kind"], d["signature"], d["severity"], d["flags"]) == ("hardware", "gpu-fault-bus", "critical", [])
    assert d["title"] == (
        "Xid 79 (GPU has fallen off the bus) on GPU 0000:c1:00.0 (device 3 of the unit) under TP3: the GPU is gone, "
        "restarts cannot heal the unit"
    )
    assert {k: d["captures"][k] for k in ("xid", "bus_id", "rank", "action", "device")} == {
        "xid": "79",
        "bus_id": "0000:c1:00.0",
        "rank": "TP3",
        "action": "drain",
        "device": "3",
    }
    assert d["fix"]["changes"] == [] and d["fix"]["command"] is None
    assert d["fix"]["summary"].startswith("Drain this node")
    assert d["root_cause"]["line"] == FAMILY_LINES[79]
    assert d["evidence"][0] == "the crash: TP3 RuntimeError: CUDA error: unspecified launch failure, 1.0 s after Xid 79"
    text = explain(tmp_path, [*XID79, *CRASH, *TEARDOWN], as_json=False)
    assert "kind: hardware" in text and "to check and recover (crashdoc changes nothing itself):" in text
    assert "$ nvidia-smi -L" in text and "tied to the crash: assumed: the paste does not say which GPU TP3 used" in text


def test_the_same_crash_without_the_kernel_lines_keeps_todays_diagnosis(tmp_path: Path) -> None:
    d = only(tmp_path, [*CRASH, *TEARDOWN])
    assert (d["kind"], d["signature"], d["category"]) == ("resource", None, "cuda-graph")
    assert not any(e.startswith("GPU:") for e in d["evidence"])


def test_quoted_in_a_ticket_the_same(tmp_path: Path) -> None:
    d = only(tmp_path, ["> " + line for line in [*XID79, *CRASH, *TEARDOWN]])
    assert (d["kind"], d["captures"]["bus_id"]) == ("hardware", "0000:c1:00.0")


def test_the_multi_line_fallen_off_the_bus_message_in_journalctl_k(tmp_path: Path) -> None:
    head, *rest = FELL_OFF_MULTILINE.split("\n")
    kernel = [journalctl_k(T - 2, head), *(" " * 32 + r for r in rest)]
    d = only(tmp_path, [*kernel, *CRASH])
    assert (d["kind"], d["signature"], d["captures"]["gpu_event"]) == ("hardware", "gpu-fault-bus", "fallen-off-bus")


def test_illegal_access_with_application_xids_before_and_at_teardown_stays_software(tmp_path: Path) -> None:
    crash = sglang_traceback(T, "TP3", ILLEGAL_ACCESS)
    kernel_before = [dmesg_t(T - 1, FAMILY_LINES[31])]
    kernel_after = [dmesg_t(T + 60, FAMILY_LINES[13])]  # logged while the crashed process was torn down
    d = only(tmp_path, [*kernel_before, *crash, *TEARDOWN, *kernel_after])
    assert (d["signature"], d["kind"]) == ("cuda-illegal-memory-access", "bug")
    gpu = [e for e in d["evidence"] if e.startswith("GPU:")]
    assert len(gpu) == 2
    assert "Xid 31 (GPU memory page fault)" in gpu[0] and "the application's own fault" in gpu[0]
    assert "Xid 13" in gpu[1] and "60.0 s after the crash's first error line: after the crash (teardown)" in gpu[1]


def test_a_hardware_xid_after_the_crash_is_teardown_not_the_cause(tmp_path: Path) -> None:
    d = only(tmp_path, [*CRASH, *TEARDOWN, dmesg_t(T + 61, FAMILY_LINES[79])])
    assert d["kind"] == "resource" and any("after the crash (teardown)" in e for e in d["evidence"])


def test_an_old_xid_and_one_on_another_process_change_nothing(tmp_path: Path) -> None:
    old = dmesg_t(T - 3600, FAMILY_LINES[95])
    baseline = only(tmp_path, [*CRASH, *TEARDOWN])
    assert only(tmp_path, [old, *CRASH, *TEARDOWN]) == baseline
    # journalctl -o short: the paste knows TP3's PID, and the Xid names another process
    unit = [f"May 05 10:14:59 gpu-017 python3[48213]: {line}" for line in CRASH]
    other = journalctl_k(T - 1, xid(79, "GPU has fallen off the bus.", bus="0000:19:00", pid=51000))
    mine = journalctl_k(T - 1, FAMILY_LINES[79])  # pid=48213: TP3
    assert only(tmp_path, [other, *unit])["kind"] != "hardware"
    d = only(tmp_path, [mine, *unit])
    assert d["kind"] == "hardware" and "tied to the crash: pid 48213 is TP3 of the crashed server" in d["fix"]["why"]


def test_nvrm_text_a_program_printed_is_no_kernel_line(tmp_path: Path) -> None:
    baseline = only(tmp_path, [*CRASH, *TEARDOWN])
    printed = sglang(T - 1, "TP3", FAMILY_LINES[79])  # the server's own log line
    assert only(tmp_path, [printed, *CRASH, *TEARDOWN])["kind"] == baseline["kind"]
    stdout = f"May 05 10:14:58 gpu-017 python3[48213]: {FAMILY_LINES[79]}"
    unit = [f"May 05 10:14:59 gpu-017 python3[48213]: {line}" for line in CRASH]
    assert only(tmp_path, [stdout, *unit])["kind"] != "hardware"


def test_a_config_error_beside_a_non_fatal_xid_keeps_the_flag_fix(tmp_path: Path) -> None:
    frames = [
        '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py", '
        "line 661, in _deepseek_v4_num_host_pages",
        "    raise ValueError(",
    ]
    crash = sglang_traceback(T, "TP0", DSV4, frames)
    d = only(tmp_path, [dmesg_t(T - 1, FAMILY_LINES[63]), *crash])
    assert (d["signature"], d["kind"]) == ("dsv4-hicache-size-unsupported", "config")
    assert d["fix"]["changes"] and any("Xid 63" in e and "not fatal" in e for e in d["evidence"])


def test_a_loop_on_a_gpu_that_is_gone_says_drain(tmp_path: Path) -> None:
    later = T + 300
    second = sglang_traceback(later, "TP3", DEVICE_GONE, ['  File "torch/cuda/__init__.py", line 412, in set_device'])
    d = only(tmp_path, [*XID79, *second])  # the paste holds the later run only, and the kernel's old lines
    assert (d["kind"], d["captures"]["action"]) == ("hardware", "drain")
    assert d["title"].endswith("the GPU is gone, restarts cannot heal the unit")


def test_dmesg_without_a_wall_clock_cannot_be_ordered(tmp_path: Path) -> None:
    d = only(tmp_path, [dmesg(88231.5, FAMILY_LINES[79]), *CRASH])
    assert d["kind"] != "hardware"
    assert any("time since boot" in e for e in d["evidence"])


def test_a_paste_of_kernel_lines_alone_finds_no_failure(tmp_path: Path) -> None:
    assert explain(tmp_path, XID79) == {"diagnoses": [], "warnings": []}


def test_a_flood_of_teardown_xids_is_one_evidence_line(tmp_path: Path) -> None:
    flood = [dmesg_t(T + 60 + i / 100, FAMILY_LINES[13]) for i in range(5000)]
    d = only(tmp_path, [*CRASH, *TEARDOWN, *flood])
    [gpu] = [e for e in d["evidence"] if e.startswith("GPU:")]
    assert gpu.endswith("after the crash (teardown), not its cause (x5000, the last 109.0 s after)")
