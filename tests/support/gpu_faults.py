"""GPU faults as the kernel logs them, for tests: our own lines in the NVIDIA driver's documented format
(`NVRM: Xid (PCI:<bus>): <code>, pid=<pid>, name=<comm>, <detail>`), kernel journal entries with the fields
journald gives kernel messages (written with systemd-journal-remote by support.journal_files), pasted
`dmesg -T` / `dmesg` / `journalctl -k` lines, and an SGLang crash loop on a GPU that fell off the bus."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from crashdoc.diagnosis.gpus import CrashFacts, GpuRef
from crashdoc.diagnosis.hardware import decide, hardware_diagnosis
from crashdoc.events import Diagnosis, Fix, RootCause
from crashdoc.sources.kernel_gpu import KernelGpuReader
from support.journal_files import AT, EXITED, FAILED, RESTART, UNIT, line, pid1

FIXTURE_ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs" / "nvidia-8gpu"
# the fixture host's GPUs, in PCI bus order (= nvidia-smi's index)
BUSES = (
    "0000:19:00.0",
    "0000:3b:00.0",
    "0000:4c:00.0",
    "0000:5d:00.0",
    "0000:9b:00.0",
    "0000:bb:00.0",
    "0000:c1:00.0",
    "0000:dc:00.0",
)
VISIBLE = "3,4,5,6"  # the unit's CUDA_VISIBLE_DEVICES: TP3 -> device 3 -> GPU 6 -> 0000:c1:00.0
T0 = 1_800_000_000.0  # the crash loop's clock (seconds since the epoch)
# crashdoc_gpu_fault_info's labels for an Xid 79 on TP3's GPU of the fixture host (GPU 6, 0000:c1:00.0)
FAULT_LABELS = {"unit": UNIT, "signature": "gpu-fault-bus", "xid": "79", "gpu": "6", "bus_id": "0000:c1:00.0",
                "rank": "TP3", "action": "drain"}  # fmt: skip
# the routing labels of crashdoc's pushed alert for that fault (with alertname, unit, instance, severity, subsystem)
HARDWARE_ALERT_LABELS = {"signature": "gpu-fault-bus", "kind": "hardware", "oncall": "hardware", "gpu": "6",
                         "bus_id": "0000:c1:00.0", "xid": "79", "rank": "TP3", "action": "drain"}  # fmt: skip


def xid(code: int, detail: str, bus: str = "0000:c1:00", pid: int | str | None = None, name: str = "python3") -> str:
    """An Xid line in the driver's format; `pid`: a number, "unknown" ('<unknown>'), or None (older drivers)."""
    who = ""
    if pid == "unknown":
        who = "pid='<unknown>', name=<unknown>, "
    elif pid is not None:
        who = f"pid={pid}, name={name}, "
    return f"NVRM: Xid (PCI:{bus}): {code}, {who}{detail}"


# one line per Xid family of the issue, each in the documented format (details in the driver's wording style)
FAMILY_LINES: dict[int, str] = {
    13: xid(13, "Graphics SM Warp Exception on (GPC 2, TPC 1, SM 0): Out Of Range Address", pid=48213),
    31: xid(
        31,
        "Ch 0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC3 GPCCLIENT_T1_4 faulted @ 0x7f1c_8a200000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
        pid=48213,
    ),
    43: xid(43, "Ch 00000010", pid=48213),
    48: xid(
        48,
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 5, "
        "subpartition 1.",
        pid="unknown",
    ),
    63: xid(63, "Row Remapper: New row (0x00000000002e41f0) Marked for Remapping, reset gpu to activate.", pid=48213),
    64: xid(64, "Row Remapper: Failed to remap row (0x00000000002e41f0).", pid="unknown"),
    74: xid(74, "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", pid="unknown"),
    79: xid(79, "GPU has fallen off the bus.", pid=48213),
    94: xid(94, "Contained: SM (0x1). RST: No, D-RST: No", pid=48213),
    95: xid(95, "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No", pid="unknown"),
    119: xid(
        119,
        "Timeout after 6s of waiting for RPC response from GPU3 GSP! Expected function 76 (GSP_RM_CONTROL) "
        "(0x20800a4c 0x4).",
        pid="unknown",
    ),
    120: xid(120, "GSP task timeout @ pc:0x4bd36a4, task: 1", pid="unknown"),
    144: xid(144, "SAW_MVB Fatal XC0 i0 Link 05 (0x00000001 0x00000002 0x00000000 0x00000000)"),
    145: xid(145, "RLW_REMAP Nonfatal XC0 i0 Link 05 (0x00000004 0x00000001 0x00000000 0x00000000)"),
    146: xid(146, "TLW_TX/TLW_TX_PIPE0 Fatal XC0 i0 Link 05 (0x0000000c 0x00000004 0x00000000 0x00000000)"),
    147: xid(147, "TREX Nonfatal XC0 i0 Link 05 (0x0000000e 0x00000001 0x00000000 0x00000000)"),
    148: xid(148, "NVLPW_CTRL/NVLPW Nonfatal XC0 i0 Link 05 (0x0000000f 0x80000000 0x00000000 0x00000000)"),
    149: xid(149, "NETIR_LINK_EVT Fatal XC0 i0 Link 05 (0x004505c6 0x00000000 0x00000000 0x00000000)"),
    150: xid(150, "MSE_WATCHDOG Fatal XC0 i0 Link -1 (0x00000000 0x00000000 0x00000000 0x00000000)"),
    154: xid(154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"),
}
SXID_FATAL = "nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 28 LTSSM Fault Up"
SXID_NONFATAL = (
    "nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 30 egress non-posted PRIV error (First)"
)
FELL_OFF = "NVRM: GPU 0000:c1:00.0: GPU has fallen off the bus."
FELL_OFF_MULTILINE = (
    "NVRM: The NVIDIA GPU 0000:c1:00.0\n"
    "NVRM: (PCI ID: 10de:2330) installed in this system has\n"
    "NVRM: fallen off the bus and is not responding to commands."
)


# --- the kernel in the journal ----------------------------------------------------------------------------------


def kernel(message: str, at: float, priority: str = "3") -> dict[str, str | bytes]:
    """A kernel message as journald stores it: no _PID, _COMM or unit; _TRANSPORT=kernel."""
    return {
        "_TRANSPORT": "kernel",
        "SYSLOG_FACILITY": "0",
        "SYSLOG_IDENTIFIER": "kernel",
        "PRIORITY": priority,
        "_HOSTNAME": "gpu-017",
        "_SOURCE_MONOTONIC_TIMESTAMP": str(int((at % 86_400 + 3_600) * 1e6)),  # since boot (any positive value)
        "MESSAGE": message,
        AT: str(int(at * 1e6)),
    }


def at(entry: dict[str, str | bytes], when: float) -> dict[str, str | bytes]:
    return {**entry, AT: str(int(when * 1e6))}


RANK_PIDS = {"": 48200, "TP0": 48210, "TP1": 48211, "TP2": 48212, "TP3": 48213}  # the first run's processes
SITE = "/opt/venv/lib/python3.11/site-packages"
CUDA_GRAPH_TRACEBACK = [
    "Scheduler hit an exception: Traceback (most recent call last):",
    f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 6361, in run_scheduler_process',
    "    scheduler.event_loop_overlap()",
    f'  File "{SITE}/sglang/srt/model_executor/cuda_graph_runner.py", line 912, in replay',
    "    self.graphs[self.bs].replay()",
    f'  File "{SITE}/torch/cuda/graphs.py", line 88, in replay',
    "    super().replay()",
    "RuntimeError: CUDA error: unspecified launch failure",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
]
ILLEGAL_ACCESS = "RuntimeError: CUDA error: an illegal memory access was encountered"
DEVICE_GONE = "torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"
DSV4 = "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."


def sglang(stamp: float, rank: str, text: str) -> str:
    when = datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")
    return f"[{when}{' ' + rank if rank else ''}] {text}"


def run_entries(
    invocation: str,
    start: float,
    pids: dict[str, int],
    error_rank: str,
    error: list[str],
    error_at: float,
    unit: str = UNIT,
    exit_after: float = 2,
) -> list[dict[str, str | bytes]]:
    """One run of UNIT: every rank loads, `error_rank` raises `error` at `error_at`, PID 1 records the end
    `exit_after` seconds later."""
    cmdline = "/opt/venv/bin/python -m sglang.launch_server --model-path /models/m --tp-size 4"
    out: list[dict[str, str | bytes]] = [
        at(
            line(
                sglang(start, "", "server_args=ServerArgs(model_path='/models/m', tp_size=4, base_gpu_id=0)"),
                pid=str(pids[""]),
                invocation=invocation,
                unit=unit,
                _CMDLINE=cmdline,
            ),
            start,
        ),
    ]
    for rank, pid in pids.items():
        if rank:
            text = sglang(start + 1, rank, "Load weight begin. avail mem=78.52 GB")
            out.append(at(line(text, pid=str(pid), invocation=invocation, unit=unit), start + 1))
    first, *rest = error
    where = {"pid": str(pids[error_rank]), "invocation": invocation, "unit": unit}
    out.append(at(line(sglang(error_at, error_rank, first), **where), error_at))
    out += [at(line(text, **where), error_at) for text in rest]
    end = error_at + exit_after
    out += [
        at(
            {
                **pid1(
                    f"{unit}: Main process exited, code=killed, status=9/KILL",
                    unit=unit,
                    MESSAGE_ID=EXITED,
                    EXIT_CODE="killed",
                    EXIT_STATUS="9",
                ),
                "INVOCATION_ID": invocation,
            },
            end,
        ),
        at(
            {
                **pid1(f"{unit}: Failed with result 'signal'.", unit=unit, MESSAGE_ID=FAILED, UNIT_RESULT="signal"),
                "INVOCATION_ID": invocation,
            },
            end,
        ),
    ]
    return out


GONE_TRACEBACK = [
    "Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", line 412, in set_device',
    "    torch._C._cuda_setDevice(device)",
    DEVICE_GONE,
]


def xid79_loop_entries(
    with_xid: bool = True, forged: bool = False, t0: float = T0, unit: str = UNIT
) -> list[dict[str, str | bytes]]:
    """Xid 79 on TP3's GPU one second before TP3's error, then a second run that cannot use the GPU: a crash
    loop on a GPU that is gone. `with_xid=False`: the same crashes, no kernel line. `forged`: the "Xid" is
    printed by the unit on its own stdout instead of logged by the kernel. `t0`: when the first run starts."""
    return sorted([*xid79_first_run(with_xid, forged, t0, unit), *xid79_second_run(t0, unit)], key=lambda e: int(e[AT]))


def xid79_first_run(
    with_xid: bool = True, forged: bool = False, t0: float = T0, unit: str = UNIT
) -> list[dict[str, str | bytes]]:
    """The first run of `xid79_loop_entries` (its Xid, crash and restart), in time order."""
    run1 = run_entries("1" * 32, t0, RANK_PIDS, "TP3", CUDA_GRAPH_TRACEBACK, t0 + 30, unit)
    restart = at(
        pid1(f"{unit}: Scheduled restart job, restart counter is at 1.", unit, MESSAGE_ID=RESTART, N_RESTARTS="1"),
        t0 + 35,
    )
    xid_text = xid(79, "GPU has fallen off the bus.", pid=RANK_PIDS["TP3"])
    entries = [*run1, restart]
    if with_xid and forged:
        entries.append(at(line(xid_text, pid=str(RANK_PIDS["TP3"]), invocation="1" * 32, unit=unit), t0 + 29))
    elif with_xid:
        entries += [
            kernel("NVRM: GPU at PCI:0000:c1:00: GPU-6f3a8e2c-1d44-4b8e-9c1a-0e6b7d2f9a36", t0 + 29),
            kernel(xid_text, t0 + 29),
            kernel(FELL_OFF, t0 + 29),
        ]
    return sorted(entries, key=lambda e: int(e[AT]))


def xid79_second_run(t0: float = T0, unit: str = UNIT) -> list[dict[str, str | bytes]]:
    """The second run of `xid79_loop_entries`: TP3 cannot set its device (the GPU is gone), and dies."""
    pids2 = {rank: pid + 100 for rank, pid in RANK_PIDS.items()}
    return run_entries("2" * 32, t0 + 40, pids2, "TP3", GONE_TRACEBACK, t0 + 45, unit)


APPLICATION_XID13 = "Graphics Exception: ESR 0x50df30"  # TP3's own fault, logged as it happens
TEARDOWN_XID13 = "Graphics SM Warp Exception on (GPC 2, TPC 1, SM 0): Out Of Range Address"
ILLEGAL_TRACEBACK = [*CUDA_GRAPH_TRACEBACK[:7], ILLEGAL_ACCESS]
ILLEGAL_RUN = 80.0  # seconds from one run's start to the next's: SGLang's watchdog waits ~60 s before the exit


def illegal_access_run(
    second: bool, t0: float = T0, unit: str = UNIT, xids: bool = True, forged: bool = False
) -> list[dict[str, str | bytes]]:
    """One run of a loop in which TP3 hits an illegal memory access 5 s in and exits 62 s later (SGLang waits for
    CUDA core dumps), in time order. `xids`: the kernel logs TP3's application Xid 13 one second before its error
    and a teardown Xid 13 sixty seconds after it; the first run also has Xids that are not the unit's (another
    process's Xid 79 on GPU 0, an uncorrectable ECC error on GPU 7, which the unit does not use) and a hardware
    Xid 48 on TP3's GPU ten minutes before. `forged`: TP3 prints an Xid 79 of its own GPU on its stdout one second
    before its error. `xids=False, forged=False`: the same crashes, nothing else."""
    start = t0 + (ILLEGAL_RUN if second else 0)
    pids = {rank: pid + (100 if second else 0) for rank, pid in RANK_PIDS.items()}
    invocation = ("2" if second else "1") * 32
    error_at = start + 5
    entries = run_entries(invocation, start, pids, "TP3", ILLEGAL_TRACEBACK, error_at, unit, exit_after=62)
    tp3 = pids["TP3"]
    if xids:
        entries += [
            kernel(xid(13, APPLICATION_XID13, pid=tp3), error_at - 1),
            kernel(xid(13, TEARDOWN_XID13, pid=tp3), error_at + 60),
        ]
    if xids and not second:
        entries += [
            kernel(xid(79, "GPU has fallen off the bus.", bus="0000:19:00", pid=51000), error_at - 1),
            kernel(xid(48, "An uncorrectable double bit error (DBE)", bus="0000:dc:00", pid="unknown"), error_at - 1),
            kernel(xid(48, "An uncorrectable double bit error (DBE)", pid="unknown"), start - 600),
        ]
    if forged:
        text = xid(79, "GPU has fallen off the bus.", pid=tp3)
        entries.append(at(line(text, pid=str(tp3), invocation=invocation, unit=unit), error_at - 1))
    if not second:
        entries.append(
            at(
                pid1(
                    f"{unit}: Scheduled restart job, restart counter is at 1.", unit, MESSAGE_ID=RESTART, N_RESTARTS="1"
                ),
                error_at + 67,
            )
        )
    return sorted(entries, key=lambda e: int(e[AT]))


# --- pastes ----------------------------------------------------------------------------------------------------------


def dmesg_t(when: float, text: str) -> str:
    """`dmesg -T`: "[Tue May  5 10:14:58 2026] NVRM: ..." (day of month padded to two places, as dmesg does)."""
    stamp = datetime.fromtimestamp(when)
    return f"[{stamp.strftime('%a %b')} {stamp.day:2d} {stamp.strftime('%H:%M:%S %Y')}] {text}"


def dmesg(uptime: float, text: str) -> str:
    return f"[{uptime:12.6f}] {text}"


def journalctl_k(when: float, text: str, host: str = "gpu-017") -> str:
    """`journalctl -k` (short format): "May 05 10:14:58 gpu-017 kernel: NVRM: ..."."""
    return f"{datetime.fromtimestamp(when).strftime('%b %d %H:%M:%S')} {host} kernel: {text}"


def syslog(when: float, uptime: float, text: str, host: str = "gpu-017") -> str:
    """/var/log/syslog: "May  5 10:14:58 gpu-017 kernel: [ 4909.922970] NVRM: ..."."""
    stamp = datetime.fromtimestamp(when)
    return f"{stamp.strftime('%b')} {stamp.day:2d} {stamp.strftime('%H:%M:%S')} {host} kernel: [{uptime:12.6f}] {text}"


def sglang_traceback(when: float, rank: str, exception: str, frames: list[str] | None = None) -> list[str]:
    """A scheduler's fatal traceback as SGLang logs it, ending in `exception`."""
    frames = frames or CUDA_GRAPH_TRACEBACK[1:7]
    return [sglang(when, rank, "Scheduler hit an exception: Traceback (most recent call last):"), *frames, exception]


# --- the decision's inputs and outputs, for the outputs' tests ------------------------------------------------------


def cuda_graph_diagnosis(unit: str = UNIT) -> Diagnosis:
    """TP3's CUDA-graph crash as crashdoc diagnoses it without the kernel's lines (no signature knows it)."""
    line_ = "RuntimeError: CUDA error: unspecified launch failure"
    return Diagnosis(
        unit, None, line_, "cuda-graph", "critical", RootCause("RuntimeError", "x", line_), [], Fix("none"), "fp1-0",
        kind="resource",
    )  # fmt: skip


def xid79_hardware_diagnosis(unit: str = UNIT) -> Diagnosis:
    """The same crash after an Xid 79 of TP3 (pid 48213, GPU 6, 0000:c1:00.0) one second before: drain."""
    crash = CrashFacts(
        unit, 100.0, "TP3", "RuntimeError: CUDA error", "resource", {48213: "TP3"},
        {"TP3": GpuRef(6, "0000:c1:00.0", device=3)},
    )  # fmt: skip
    [event] = KernelGpuReader().feed(FAMILY_LINES[79], 99.0)
    return hardware_diagnosis(cuda_graph_diagnosis(unit), decide(crash, [event]))
