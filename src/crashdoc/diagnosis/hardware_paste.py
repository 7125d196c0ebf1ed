"""`crashdoc explain` on a paste that holds kernel GPU lines next to SGLang's log.

The kernel's lines (`dmesg -T`, `dmesg`, `journalctl -k`, `kernel:` syslog lines) are read apart: the engine
gets the rest of the paste, as it would without them, and each of its diagnoses is then put before
`hardware.decide` with what the paste tells about the crash: the time and rank of its first error line (SGLang's
`[2026-05-05 10:14:59 TP3]` prefix), the PIDs of `journalctl -o short` lines, the flags of SGLang's
server_args line. A paste does not say which GPU a rank used (CUDA_VISIBLE_DEVICES, the host's PCI map), so a
kernel fault with nothing to join it on is taken as the crash's own, and the evidence says so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from crashdoc.assembly.logline import split_prefix
from crashdoc.assembly.markers import parse_server_args
from crashdoc.diagnosis.gpus import CrashFacts, GpuRef, device_of_rank
from crashdoc.diagnosis.hardware import decide, hardware_diagnosis
from crashdoc.events import Diagnosis, LogLine
from crashdoc.sources.kernel_gpu import PastedKernel, pasted_kernel_lines, wall_seconds
from crashdoc.text import clean

_QUOTE = re.compile(r"^ {0,3}(?:> ?)+")
_SGLANG_TIME = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)[\] ]")
_SGLANG_YEAR = re.compile(r"\[(\d{4})-\d\d-\d\d[ T]\d\d:\d\d:\d\d")  # anywhere: after a journal's own columns too
_LOOK_BACK = 2000  # lines between an exception line and the record that began its traceback


@dataclass(slots=True)
class PastedGpu:
    """A paste's kernel GPU lines and the rest of it."""

    kernel: PastedKernel
    rest: str  # the paste without its kernel GPU lines: what the engine reads


def read_paste(text: str) -> PastedGpu | None:
    """The kernel GPU lines of a paste; None when it has none (explain then runs exactly as before)."""
    if "NVRM" not in text and "SXid" not in text:
        return None
    raw = text.splitlines()
    unquoted = [_QUOTE.sub("", clean(line), count=1) for line in raw]
    kernel = pasted_kernel_lines(unquoted, _year(unquoted))
    if not kernel.lines:
        return None
    return PastedGpu(kernel, "\n".join(line for i, line in enumerate(raw) if i not in kernel.lines) + "\n")


def apply_to_paste(pasted: PastedGpu, diagnoses: Sequence[Diagnosis], lines: Sequence[LogLine]) -> list[Diagnosis]:
    """The engine's diagnoses of the paste, with the verdict on its kernel GPU lines; `lines` are the engine's
    LogLines of the paste (the program's text, and the PIDs of `journalctl -o short` pastes)."""
    texts = [line.text for line in lines]
    flags = next((parse_server_args(t) for t in texts if "server_args=" in t or "ServerArgs(" in t), {})
    pids = {line.pid: split_prefix(line.text)[1] for line in lines if line.pid > 1 and split_prefix(line.text)[0]}
    out = []
    for d in diagnoses:
        at, rank, whole = _first_error(texts, d.root_cause.line)
        gpus: dict[str, GpuRef] = {}
        device = device_of_rank(rank, flags) if rank else None
        if device is not None:
            how = f"{rank} -> device {device} (the paste does not say CUDA_VISIBLE_DEVICES or the host's GPUs)"
            gpus[rank] = GpuRef(device=device, how=how)
        crash = CrashFacts(d.unit, at, rank, d.root_cause.line, d.kind, pids, gpus)
        tolerance = 0.999 if whole or pasted.kernel.whole_seconds else 0.0
        verdict = decide(crash, pasted.kernel.events, tolerance=tolerance, assume_joined=True)
        result = hardware_diagnosis(d, verdict)
        if pasted.kernel.uptime_only:
            result.evidence.append(
                f"GPU: {pasted.kernel.uptime_only} kernel GPU line(s) carry only the time since boot (dmesg without "
                "-T): they cannot be ordered against the crash; paste `dmesg -T` or `journalctl -k`"
            )
        out.append(result)
    return out


def _first_error(lines: Sequence[str], exception_line: str) -> tuple[float, str, bool]:
    """(time, rank, whole seconds) of the SGLang record whose traceback holds `exception_line`: the record
    line at or before the first line that says it. (0.0, "", True) when the paste does not tell."""
    wanted = exception_line.strip()
    if not wanted:
        return 0.0, "", True
    at = next((i for i, line in enumerate(lines) if wanted in line), None)
    if at is None:
        return 0.0, "", True
    for i in range(at, max(at - _LOOK_BACK, -1), -1):
        m = _SGLANG_TIME.match(lines[i].lstrip())
        if m is None:
            continue
        raw = m.group("ts").replace(",", ".")
        try:
            when = datetime.fromisoformat(raw.replace(" ", "T"))
        except ValueError:
            return 0.0, "", True
        return wall_seconds(when), split_prefix(lines[i].lstrip())[1], "." not in raw
    return 0.0, "", True


def _year(lines: Sequence[str]) -> int | None:
    """The year of the paste's SGLang lines: syslog times ("May  5 10:14:58") have none."""
    for line in lines:
        m = _SGLANG_YEAR.search(line)
        if m is not None:
            return int(m.group(1))
    return None
