"""GPU faults in the kernel log: the NVIDIA driver's Xid and NVSwitch SXid lines, a GPU that fell off the bus,
reset and initialisation failures, ECC and row-remapping notices.

The driver writes them through printk, so they reach journald with `_TRANSPORT=kernel`; the journal source
hands only such entries here, and a paste only its dmesg-shaped or `kernel:` lines (`pasted_kernel_lines`).
Formats (NVIDIA's "Xid Errors" documentation and the driver's own wording):

    NVRM: Xid (PCI:0000:c1:00): 79, pid=48213, name=python3, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on ...
    NVRM: Xid (0000:01:00): 31, Ch 00000008, engmask 00000101, intr 10000000      (older drivers)
    NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 ...)
    NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)
    nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)
    NVRM: GPU 0000:c1:00.0: GPU has fallen off the bus.
    NVRM: The NVIDIA GPU 0000:b3:00.0                         (one record of three lines, or three records)
    NVRM: (PCI ID: 10de:2330) installed in this system has
    NVRM: fallen off the bus and is not responding to commands.

Reading is stateful only for that last shape (and for the UUID the driver names before an Xid), so one
reader follows one stream of kernel lines in order.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from crashdoc.events import GpuEvent
from crashdoc.sources.lifecycle import may_be_gpu_line as may_be_gpu_line  # the test before this reader (journal.py)

MAX_TEXT = 600  # a kernel line kept in an event (the driver's lines are short; a forged one is cut)
_PENDING_LINES = 4  # "The NVIDIA GPU X" waits this many NVRM lines for "fallen off the bus"

# a PCI address as the driver prints it: [PCI:]domain:bus:device[.function], domain of 4 or 8 hex digits or none
_BUS = r"(?:PCI:)?(?P<bus>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
_XID = re.compile(
    r"NVRM: Xid \(" + _BUS + r"\): (?P<code>\d{1,5})(?=,|$)"
    r"(?:, pid=(?P<pid>'?<unknown>'?|\d+))?(?:, name=(?P<name>[^,]*))?(?:, ?(?P<detail>.*))?$"
)
_SXID = re.compile(
    r"(?P<device>nvidia-nvswitch\d+): SXid \(" + _BUS + r"\): (?P<code>\d{1,6})(?=,|$)(?:, ?(?P<detail>.*))?$"
)
_OFF_BUS = re.compile(r"NVRM: GPU (?:at )?" + _BUS + r":? (?:GPU )?has fallen off the bus")
_LOST = re.compile(r"NVRM: .*\bGPU lost from the bus\b|NV_ERR_GPU_IS_LOST")
_THE_GPU = re.compile(r"NVRM: The NVIDIA GPU " + _BUS + r"\b")
_NOT_RESPONDING = "fallen off the bus and is not responding to commands"
_IDENTITY = re.compile(r"NVRM: GPU at " + _BUS + r": (?P<uuid>GPU-[0-9a-fA-F-]{8,})")
_INIT_FAILED = re.compile(r"NVRM: (?:GPU " + _BUS + r": )?RmInitAdapter failed")
_RESET_REQUIRED = re.compile(r"NVRM: .*(?:\[NV_ERR_RESET_REQUIRED\]|\bGPU reset required\b)")
_ECC = re.compile(r"NVRM: .*(?:\buncorrectable\b.*\bECC\b|\bECC\b.*\buncorrectable\b|\bRow Remapp)", re.IGNORECASE)
_LOADING = re.compile(r"NVRM: loading NVIDIA UNIX .*Kernel Module\s+(?P<version>\S+)")
_ANY_BUS = re.compile(r"\b" + _BUS + r"\b")
_SEVERITY = re.compile(r"\b(?P<word>Non-?fatal|Nonfatal|Fatal)\b", re.IGNORECASE)
_RECOVERY = re.compile(r"recovery action changed from 0x[0-9a-fA-F]+ \([^)]*\) to 0x[0-9a-fA-F]+ \((?P<action>[^)]*)\)")


@functools.lru_cache(maxsize=1024)  # a host has a few GPUs; a storm of Xids names them again and again
def normalize_bus_id(raw: str) -> str:
    """The one spelling crashdoc compares: "0000:c1:00.0" (4-digit domain, lower case, with the function).

    The driver writes "PCI:0000:C1:00" in Xid lines, nvidia-smi "00000000:C1:00.0", /proc "0000:c1:00.0"."""
    text = raw.strip().lower().removeprefix("pci:")
    head, dot, function = text.partition(".")
    parts = head.split(":")
    if len(parts) == 2:
        parts.insert(0, "0000")
    if len(parts) != 3 or not all(parts) or not all(c in "0123456789abcdef" for c in "".join(parts)):
        return ""
    domain, bus, device = parts
    domain = domain[-4:].rjust(4, "0")
    return f"{domain}:{bus.rjust(2, '0')}:{device.rjust(2, '0')}.{function if dot and function else '0'}"


@dataclass(slots=True)
class KernelGpuReader:
    """Reads one stream of kernel lines, in order, into GpuEvents."""

    _uuids: dict[str, str] = field(default_factory=dict)  # bus id -> GPU UUID the driver named
    _pending: tuple[str, float, float | None, int, list[str]] | None = None  # "The NVIDIA GPU X" awaiting its end

    def feed(self, message: str, timestamp: float = 0.0, uptime: float | None = None) -> list[GpuEvent]:
        """Events in one kernel record (a record may hold several lines, as the driver printed them)."""
        out: list[GpuEvent] = []
        for piece in message.split("\n"):
            piece = piece.strip()
            if piece:
                event = self._line(piece, timestamp, uptime)
                if event is not None:
                    out.append(event)
        return out

    def _line(self, text: str, timestamp: float, uptime: float | None) -> GpuEvent | None:
        kept = text[:MAX_TEXT]
        pending = self._pending
        if pending is not None and "NVRM:" in text:
            bus, at, up, left, lines = pending
            lines.append(kept)
            if _NOT_RESPONDING in text:
                self._pending = None
                return GpuEvent(
                    "fallen-off-bus",
                    at,
                    bus,
                    detail="fallen off the bus and is not responding to commands",
                    uuid=self._uuids.get(bus, ""),
                    uptime=up,
                    text="\n".join(lines)[:MAX_TEXT],
                )
            self._pending = (bus, at, up, left - 1, lines) if left > 1 else None
        if "Xid" in text:
            m = _XID.search(text)
            if m is not None:
                return self._xid(m, kept, timestamp, uptime)
            m = _SXID.search(text)
            if m is not None:
                detail = (m.group("detail") or "").strip()
                sev = _SEVERITY.match(detail)
                return GpuEvent(
                    "sxid",
                    timestamp,
                    normalize_bus_id(m.group("bus")),
                    code=int(m.group("code")),
                    process=m.group("device"),
                    detail=detail[:MAX_TEXT],
                    severity=_severity_word(sev.group("word")) if sev else "",
                    uptime=uptime,
                    text=kept,
                )
        if "NVRM:" not in text:
            return None
        m = _IDENTITY.search(text)
        if m is not None:
            bus = normalize_bus_id(m.group("bus"))
            if bus:
                if len(self._uuids) > 256:
                    self._uuids.clear()
                self._uuids[bus] = m.group("uuid")
            return None
        m = _THE_GPU.search(text)
        if m is not None:
            bus = normalize_bus_id(m.group("bus"))
            if _NOT_RESPONDING in text:  # the whole message on one line
                return GpuEvent("fallen-off-bus", timestamp, bus, detail=_NOT_RESPONDING, uptime=uptime, text=kept)
            self._pending = (bus, timestamp, uptime, _PENDING_LINES, [kept])
            return None
        m = _OFF_BUS.search(text)
        if m is not None:
            bus = normalize_bus_id(m.group("bus"))
            detail = "GPU has fallen off the bus"
            return GpuEvent(
                "fallen-off-bus", timestamp, bus, detail=detail, uuid=self._uuids.get(bus, ""), uptime=uptime, text=kept
            )
        if _LOST.search(text):
            return GpuEvent(
                "fallen-off-bus", timestamp, _bus_in(text), detail="GPU lost from the bus", uptime=uptime, text=kept
            )
        m = _INIT_FAILED.search(text)
        if m is not None:
            bus = normalize_bus_id(m.group("bus")) if m.group("bus") else ""
            return GpuEvent("init-failed", timestamp, bus, detail="RmInitAdapter failed", uptime=uptime, text=kept)
        if _RESET_REQUIRED.search(text):
            return GpuEvent(
                "reset-required", timestamp, _bus_in(text), detail="reset required", uptime=uptime, text=kept
            )
        m = _LOADING.search(text)
        if m is not None:
            self._uuids.clear()
            self._pending = None
            return GpuEvent("driver-loaded", timestamp, detail=m.group("version"), uptime=uptime, text=kept)
        if _ECC.search(text):
            detail = text.partition("NVRM:")[2].strip()[:MAX_TEXT]
            return GpuEvent("ecc", timestamp, _bus_in(text), detail=detail, uptime=uptime, text=kept)
        return None

    def _xid(self, m: re.Match[str], text: str, timestamp: float, uptime: float | None) -> GpuEvent:
        bus = normalize_bus_id(m.group("bus"))
        code = int(m.group("code"))
        pid_text = m.group("pid") or ""
        pid = int(pid_text) if pid_text.isdigit() and int(pid_text) > 0 else None
        name = (m.group("name") or "").strip()
        detail = (m.group("detail") or "").strip()
        severity = ""
        if 144 <= code <= 150:  # NVLink5: "<UNIT> Fatal|Nonfatal XC0 ..." says how bad it is
            sev = _SEVERITY.search(detail)
            severity = _severity_word(sev.group("word")) if sev else ""
        recovery = ""
        if code == 154:
            rec = _RECOVERY.search(detail)
            recovery = rec.group("action").strip() if rec else ""
        return GpuEvent(
            "xid",
            timestamp,
            bus,
            code=code,
            pid=pid,
            process="" if name.strip("'") == "<unknown>" else name,
            detail=detail[:MAX_TEXT],
            severity=severity,
            recovery=recovery,
            uuid=self._uuids.get(bus, ""),
            uptime=uptime,
            text=text,
        )


def _severity_word(word: str) -> str:
    return "fatal" if word.lower() == "fatal" else "non-fatal"


def _bus_in(text: str) -> str:
    m = _ANY_BUS.search(text)
    return normalize_bus_id(m.group("bus")) if m else ""


# --- pastes -------------------------------------------------------------------------------------------------------

_MONTHS = {datetime(2000, i, 1).strftime("%b"): i for i in range(1, 13)}
_UPTIME = r"\[\s*(?P<up>\d+\.\d+)\]"
# `dmesg -T` (the human clock dmesg computes from the uptime), `dmesg`, and syslog/journal lines of the kernel
_DMESG_T = re.compile(r"^\[(?P<ts>[A-Z][a-z]{2} (?P<mon>[A-Z][a-z]{2}) +\d{1,2} \d\d:\d\d:\d\d \d{4})\] ?(?P<msg>.*)$")
_DMESG = re.compile(r"^" + _UPTIME + r" ?(?P<msg>.*)$")
_KERNEL_IDENT = r" (?P<host>\S+) kernel: (?:" + _UPTIME + r" ?)?(?P<msg>.*)$"
_SYSLOG_SHORT = re.compile(r"^(?P<ts>(?P<mon>[A-Z][a-z]{2}) +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?)" + _KERNEL_IDENT)
_SYSLOG_ISO = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?)(?:Z|[+-]\d\d:?\d\d)?" + _KERNEL_IDENT)
_SYSLOG_FULL = re.compile(r"^[A-Z][a-z]{2} (?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) \S+" + _KERNEL_IDENT)
_CONTINUATION = re.compile(r"^\s*NVRM: ")
_EPOCH = datetime(1970, 1, 1)


@dataclass(slots=True)
class PastedKernel:
    """The kernel's GPU lines of a paste, read apart from the rest."""

    events: list[GpuEvent]
    lines: frozenset[int]  # indices of the paste's lines that were kernel GPU lines (the rest is the program's log)
    whole_seconds: bool  # every event's clock had whole seconds only (dmesg -T, syslog)
    uptime_only: int  # GPU lines that said only the time since boot (`dmesg` without -T): never ordered


def wall_seconds(when: datetime) -> float:
    """A wall-clock time as written in a log (no zone) as seconds, with no zone applied: the kernel's
    and SGLang's lines of one host are compared on the same clock, whatever zone reads them."""
    return (when.replace(tzinfo=None) - _EPOCH).total_seconds()


def pasted_kernel_lines(lines: Sequence[str], year: int | None = None) -> PastedKernel:
    """Kernel GPU lines of a paste, by their shape: `dmesg -T`'s `[Tue May  5 10:14:58 2026]`, `dmesg`'s
    `[ 1234.567890]`, or a syslog/journal line whose writer is `kernel:`. A line "NVRM: Xid ..." in any other
    shape (a program's own output, `python3[123]: NVRM: ...`) is no kernel line. `year` completes syslog
    times that have none (the year of the program's log next to them; the current year otherwise)."""
    reader = KernelGpuReader()
    events: list[GpuEvent] = []
    taken: set[int] = set()
    whole = True
    wall_minus_up: list[float] = []  # lines with both clocks: the boot time, for lines with the uptime only
    raw_uptime: list[tuple[int, GpuEvent]] = []
    previous_kernel = -2
    last_clock: tuple[float, float | None] = (0.0, None)
    for i, line in enumerate(lines):
        parsed = _kernel_shape(line, year)
        if parsed is None:
            if previous_kernel == i - 1 and _CONTINUATION.match(line):  # the next line of a multi-line record
                at, up = last_clock
                found = reader.feed(line.strip(), at, up)
                previous_kernel = i
                if found or "NVRM:" in line:
                    taken.add(i)
                _collect(found, events, raw_uptime)
            continue
        at, up, message, precise = parsed
        previous_kernel = i
        last_clock = (at, up)
        if at and up is not None:
            wall_minus_up.append(at - up)
        if "NVRM" not in message and "SXid" not in message:
            continue
        found = reader.feed(message, at, up)
        taken.add(i)
        if found and at and precise:
            whole = False
        _collect(found, events, raw_uptime)
    uptime_only = 0
    if raw_uptime:
        boot = sorted(wall_minus_up)[len(wall_minus_up) // 2] if wall_minus_up else None
        for index, event in raw_uptime:
            if boot is None or event.uptime is None:
                uptime_only += 1
                continue
            events[index] = _with_time(event, boot + event.uptime)
    return PastedKernel(events, frozenset(taken), whole, uptime_only)


def _collect(found: Iterable[GpuEvent], events: list[GpuEvent], raw_uptime: list[tuple[int, GpuEvent]]) -> None:
    for event in found:
        if not event.timestamp:
            raw_uptime.append((len(events), event))
        events.append(event)


def _with_time(event: GpuEvent, at: float) -> GpuEvent:
    return replace(event, timestamp=at)


def _kernel_shape(line: str, year: int | None) -> tuple[float, float | None, str, bool] | None:
    """(wall seconds or 0.0, uptime or None, the kernel's message, whether the clock has fractions)."""
    text = line.strip()
    if not text:
        return None
    if text.startswith("["):
        m = _DMESG_T.match(text)
        if m is not None:
            at = _dmesg_t_seconds(m.group("ts"))
            return None if at is None else (at, None, m.group("msg"), False)
        m = _DMESG.match(text)
        if m is not None:
            return 0.0, float(m.group("up")), m.group("msg"), True
        return None
    for pattern, fmt in ((_SYSLOG_ISO, "iso"), (_SYSLOG_FULL, "full"), (_SYSLOG_SHORT, "short")):
        m = pattern.match(text)
        if m is None:
            continue
        raw = m.group("ts")
        up = float(m.group("up")) if m.group("up") else None
        try:
            if fmt == "short":
                when = _short_time(raw, m.group("mon"), year)
            else:
                when = datetime.fromisoformat(raw.replace(",", ".").replace(" ", "T"))
        except ValueError:
            return None
        return wall_seconds(when), up, m.group("msg"), "." in raw or "," in raw
    return None


@functools.lru_cache(maxsize=4096)  # a burst of lines shares its second
def _dmesg_t_seconds(stamp: str) -> float | None:
    """`dmesg -T`'s "Tue May  5 10:14:58 2026" as wall seconds; None when it is no date."""
    try:
        _, month, day, clock, year = stamp.split()
        return wall_seconds(_clock(int(year), month, day, clock))
    except ValueError:
        return None


def _short_time(raw: str, month: str, year: int | None) -> datetime:
    """ "Mar  4 10:15:02" in `year`; a month far from now belongs to the year before (a log read in January)."""
    if year is None:
        now = datetime.now()
        year = now.year - (1 if _MONTHS.get(month, 1) > now.month + 1 else 0)
    _, day, clock = raw.split()
    return _clock(year, month, day, clock)


def _clock(year: int, month: str, day: str, clock: str) -> datetime:
    """A log's "May", "5", "10:14:58[.250000]" (read by hand: strptime costs 40 us a line in a flood)."""
    number = _MONTHS.get(month)
    if number is None:
        raise ValueError(f"no month {month!r}")
    hms, _, fraction = clock.partition(".")
    hour, minute, second = (int(part) for part in hms.split(":"))
    micro = int(fraction[:6].ljust(6, "0")) if fraction else 0
    return datetime(year, number, int(day), hour, minute, second, micro)
