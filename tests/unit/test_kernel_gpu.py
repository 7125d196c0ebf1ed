"""The kernel's GPU lines: the NVIDIA driver's formats, read from kernel records and from pastes.

Lines are our own, written in the documented format (support.gpu_faults); what a user would see is what
crashdoc read from them: the Xid, the GPU's bus id, the process, the driver's own severity words."""

from __future__ import annotations

from datetime import datetime

import pytest

from crashdoc.sources.kernel_gpu import (
    MAX_TEXT,
    KernelGpuReader,
    may_be_gpu_line,
    normalize_bus_id,
    pasted_kernel_lines,
    wall_seconds,
)
from support.gpu_faults import (
    FAMILY_LINES,
    FELL_OFF,
    FELL_OFF_MULTILINE,
    SXID_FATAL,
    SXID_NONFATAL,
    dmesg,
    dmesg_t,
    journalctl_k,
    syslog,
    xid,
)

WHEN = datetime(2026, 5, 5, 10, 14, 58).timestamp()


def one(text: str, at: float = 5.0):
    [event] = KernelGpuReader().feed(text, at)
    return event


@pytest.mark.parametrize(
    ("text", "code", "bus", "pid", "process"),
    [
        (xid(79, "GPU has fallen off the bus.", pid=48213), 79, "0000:c1:00.0", 48213, "python3"),
        (xid(79, "GPU has fallen off the bus.", bus="0000:05:00", pid="unknown"), 79, "0000:05:00.0", None, ""),
        (xid(79, "GPU has fallen off the bus.", bus="0000:65:00"), 79, "0000:65:00.0", None, ""),  # no pid at all
        ("NVRM: Xid (PCI:0000:10:00): 79, pid=0, GPU has fallen off the bus.", 79, "0000:10:00.0", None, ""),
        ("NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d 00000104 00000000 00000100", 13, "0000:01:00.0", None, ""),
        (
            "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to "
            "activate.",
            63,
            "0000:10:1c.0",
            1896,
            "",
        ),
        (
            xid(31, "Ch 00000008, intr 10000000.", bus="0000:CB:00", pid=7, name="sglang::schedul"),
            31,
            "0000:cb:00.0",
            7,
            "sglang::schedul",
        ),
    ],
)
def test_an_xid_line_gives_the_xid_the_gpu_and_the_process(text: str, code: int, bus: str, pid, process: str) -> None:
    event = one(text)
    assert (event.kind, event.code, event.bus_id, event.pid, event.process) == ("xid", code, bus, pid, process)
    assert event.text == text and event.timestamp == 5.0


def test_every_family_line_of_the_issue_is_read() -> None:
    reader = KernelGpuReader()
    for code, text in FAMILY_LINES.items():
        [event] = reader.feed(text, 1.0)
        assert (event.kind, event.code, event.bus_id) == ("xid", code, "0000:c1:00.0"), text


def test_nvlink5_lines_say_themselves_how_bad_they_are() -> None:
    assert one(FAMILY_LINES[144]).severity == "fatal"
    assert one(FAMILY_LINES[145]).severity == "non-fatal"
    assert one(FAMILY_LINES[13]).severity == ""  # other Xids carry no such word


def test_xid_154_names_the_recovery_the_driver_asks_for() -> None:
    text = xid(154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", bus="0000:01:00")
    assert one(text).recovery == "Node Reboot Required"


def test_sxid_lines_keep_the_nvswitch_and_its_severity() -> None:
    fatal, nonfatal = one(SXID_FATAL), one(SXID_NONFATAL)
    assert (fatal.kind, fatal.code, fatal.bus_id, fatal.process, fatal.severity) == (
        "sxid",
        20034,
        "0000:86:00.0",
        "nvidia-nvswitch2",
        "fatal",
    )
    assert (nonfatal.code, nonfatal.severity) == (12028, "non-fatal")


@pytest.mark.parametrize(
    "text",
    [
        FELL_OFF,
        "NVRM: GPU at 0000:c1:00.0 has fallen off the bus.",
        "NVRM: GPU at PCI:0000:c1:00.0 has fallen off the bus.",
    ],
)
def test_a_gpu_that_fell_off_the_bus_without_an_xid(text: str) -> None:
    event = one(text)
    assert (event.kind, event.bus_id, event.code) == ("fallen-off-bus", "0000:c1:00.0", None)


def test_the_multi_line_fallen_off_the_bus_message_in_one_record_or_three() -> None:
    event = one(FELL_OFF_MULTILINE, at=7.0)
    assert (event.kind, event.bus_id, event.timestamp) == ("fallen-off-bus", "0000:c1:00.0", 7.0)
    reader = KernelGpuReader()
    found = [e for i, part in enumerate(FELL_OFF_MULTILINE.split("\n")) for e in reader.feed(part, 7.0 + i)]
    assert [(e.kind, e.bus_id, e.timestamp) for e in found] == [("fallen-off-bus", "0000:c1:00.0", 7.0)]
    assert "not responding to commands" in found[0].text


def test_the_start_of_another_multi_line_message_is_no_fault() -> None:
    reader = KernelGpuReader()
    lines = [
        "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1b80)",
        "NVRM: installed in this system is not supported",
        "NVRM: by the NVIDIA 550.163.01 driver release.",
        "NVRM: Please see 'Appendix A'",
        "NVRM: in this release's",
        "NVRM: README.",
        "NVRM: fallen off the bus and is not responding to commands.",
    ]
    assert [e for text in lines for e in reader.feed(text)] == []  # the header waited a few lines, then was dropped


def test_the_uuid_the_driver_names_before_an_xid_is_kept() -> None:
    reader = KernelGpuReader()
    assert reader.feed("NVRM: GPU at PCI:0000:c1:00: GPU-6f3a8e2c-1d44-4b8e-9c1a-0e6b7d2f9a36") == []
    [event] = reader.feed(FAMILY_LINES[79])
    assert event.uuid == "GPU-6f3a8e2c-1d44-4b8e-9c1a-0e6b7d2f9a36"


@pytest.mark.parametrize(
    ("text", "kind", "bus"),
    [
        ("NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0xffffffff:1089)", "init-failed", "0000:01:00.0"),
        (
            "NVRM: GPU0 nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) "
            "returned from status @ kernel_channel.c:2827",
            "reset-required",
            "",
        ),
        (
            "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.163.01  Tue Apr  8 12:41:17 UTC 2025",
            "driver-loaded",
            "",
        ),
        ("NVRM: GPU 0000:3b:00.0: uncorrectable ECC error detected in the framebuffer", "ecc", "0000:3b:00.0"),
    ],
)
def test_resets_initialisation_failures_and_ecc_notices(text: str, kind: str, bus: str) -> None:
    event = one(text)
    assert (event.kind, event.bus_id) == (kind, bus)


@pytest.mark.parametrize(
    "text",
    [
        "NVRM: GPU Board Serial Number: 1653723052734",
        "nvidia-uvm: Loaded the UVM driver, major device number 510.",
        "NVRM: Xid (PCI:0000:66:00): abc, pid=2280636",  # no number: not the driver's format
        "oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/system.slice/sglang-prefill.service",
        "",
    ],
)
def test_other_kernel_lines_are_no_gpu_fault(text: str) -> None:
    assert KernelGpuReader().feed(text) == []


def test_a_hostile_kernel_line_is_cut_and_read_safely() -> None:
    text = xid(79, "GPU has fallen off the bus." + "A" * 100_000, pid=1)
    event = one(text)
    assert event.code == 79 and len(event.text) == MAX_TEXT and len(event.detail) <= MAX_TEXT
    assert KernelGpuReader().feed("NVRM: Xid (PCI:\ufffd\x00): 79, \udcff") == []


def test_the_cheap_test_lets_only_nvidia_lines_through() -> None:
    assert may_be_gpu_line(FAMILY_LINES[79].encode()) and may_be_gpu_line(SXID_FATAL.encode())
    assert not may_be_gpu_line(b"oom-kill:constraint=CONSTRAINT_NONE")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("PCI:0000:C1:00", "0000:c1:00.0"),
        ("00000000:C1:00.0", "0000:c1:00.0"),
        ("0000:c1:00.0", "0000:c1:00.0"),
        ("18:00.0", "0000:18:00.0"),
        ("0018:01:00", "0018:01:00.0"),
        ("not a bus", ""),
    ],
)
def test_bus_ids_are_compared_in_one_spelling(raw: str, expected: str) -> None:
    assert normalize_bus_id(raw) == expected


# --- pastes --------------------------------------------------------------------------------------------------------


def test_dmesg_t_lines_are_kernel_lines_with_a_wall_clock() -> None:
    lines = [dmesg_t(WHEN, FAMILY_LINES[79]), dmesg_t(WHEN + 1, FELL_OFF), "[2026-05-05 10:14:59 TP3] some SGLang line"]
    found = pasted_kernel_lines(lines)
    assert [(e.kind, e.code) for e in found.events] == [("xid", 79), ("fallen-off-bus", None)]
    assert found.events[0].timestamp == wall_seconds(datetime(2026, 5, 5, 10, 14, 58))
    assert found.lines == frozenset({0, 1}) and found.whole_seconds


def test_journalctl_k_and_syslog_lines_take_the_year_they_are_given() -> None:
    found = pasted_kernel_lines(
        [journalctl_k(WHEN, FAMILY_LINES[48]), syslog(WHEN + 2, 4909.9, FAMILY_LINES[95])], 2026
    )
    assert [e.code for e in found.events] == [48, 95]
    assert found.events[0].timestamp == wall_seconds(datetime(2026, 5, 5, 10, 14, 58))
    assert found.events[1].uptime == pytest.approx(4909.9)


def test_iso_and_precise_journal_lines() -> None:
    lines = [f"2026-05-05T10:14:58.250000+0000 gpu-017 kernel: {FAMILY_LINES[74]}"]
    [event] = pasted_kernel_lines(lines).events
    assert event.code == 74 and event.timestamp == wall_seconds(datetime(2026, 5, 5, 10, 14, 58, 250000))
    assert not pasted_kernel_lines(lines).whole_seconds


def test_dmesg_uptime_is_put_on_the_wall_clock_when_another_line_has_both() -> None:
    lines = [
        syslog(WHEN, 1000.0, "NVRM: GPU at PCI:0000:c1:00: GPU-6f3a8e2c-1d44-4b8e-9c1a-0e6b7d2f9a36"),
        dmesg(1003.5, FAMILY_LINES[79]),
    ]
    found = pasted_kernel_lines(lines, 2026)
    assert found.events[0].timestamp == pytest.approx(wall_seconds(datetime(2026, 5, 5, 10, 14, 58)) + 3.5)
    assert found.uptime_only == 0
    alone = pasted_kernel_lines([dmesg(1003.5, FAMILY_LINES[79])])
    assert alone.events[0].timestamp == 0.0 and alone.uptime_only == 1  # never ordered against a crash


def test_continuation_lines_of_a_multi_line_record_follow_their_kernel_line() -> None:
    head, *rest = FELL_OFF_MULTILINE.split("\n")
    found = pasted_kernel_lines([journalctl_k(WHEN, head), *("                              " + r for r in rest)], 2026)
    assert [(e.kind, e.bus_id) for e in found.events] == [("fallen-off-bus", "0000:c1:00.0")]
    assert found.lines == frozenset({0, 1, 2})


@pytest.mark.parametrize(
    "forged",
    [
        FAMILY_LINES[79],  # a bare line: no kernel shape
        f"May 05 10:14:58 gpu-017 python3[48213]: {FAMILY_LINES[79]}",  # a program's stdout in the journal
        f"[2026-05-05 10:14:58 TP3] {FAMILY_LINES[79]}",  # SGLang's own log printing it
        f"May 05 10:14:58 gpu-017 sglang-kernel: {FAMILY_LINES[79]}",
    ],
)
def test_nvrm_text_outside_a_kernel_line_is_never_taken_for_one(forged: str) -> None:
    found = pasted_kernel_lines([forged, dmesg_t(WHEN, "usb 1-1: new high-speed USB device")], 2026)
    assert found.events == [] and found.lines == frozenset()
