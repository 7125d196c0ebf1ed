"""Pasted logs: plain lines, `journalctl -o cat`, or `journalctl -o short*` text.

The short formats carry the writer's PID, so the lines of interleaved processes can be
grouped like journal entries; PID 1's lines among them become lifecycle records. Plain
text has no PIDs: it is read as one stream, which is how SGLang's own log files look.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from crashdoc.events import LifecycleRecord, LogLine
from crashdoc.sources.lifecycle import parse_pid1_text
from crashdoc.text import clean

_HOST_IDENT = r" (?P<host>\S+) (?P<ident>[^\s\[\]:]+)(?:\[(?P<pid>\d+)\])?: ?(?P<msg>.*)$"
_SHORT_FORMATS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("iso", re.compile(r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:?\d\d|Z)?)" + _HOST_IDENT)),
    ("full", re.compile(r"^(?P<ts>[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+)" + _HOST_IDENT)),
    ("short", re.compile(r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?)" + _HOST_IDENT)),
    ("unix", re.compile(r"^(?P<ts>\d{9,11}\.\d+)" + _HOST_IDENT)),
    ("monotonic", re.compile(r"^\[(?P<ts>\s*\d+\.\d+)\]" + _HOST_IDENT)),
)
_JOURNAL_NOTE = re.compile(r"^-- (?:Boot [0-9a-f]+|No entries|Journal begins|Logs begin|Reboot)")
PASTED_UNIT = ""  # the unit of lines whose unit the text does not say
# Lines are cut as the journal source cuts messages (a 1 MB line must not cost 1 MB of matching, nor print
# 1 MB), and cleaned of escapes and control characters, which would reach the terminal in a diagnosis.
MAX_LINE_CHARS = 16 * 1024


@dataclass(slots=True)
class ParsedText:
    events: list[LogLine | LifecycleRecord]  # in the order they were written
    format: str  # plain or one of the short formats

    @property
    def lines(self) -> list[LogLine]:
        return [e for e in self.events if isinstance(e, LogLine)]

    @property
    def lifecycle(self) -> list[LifecycleRecord]:
        return [e for e in self.events if isinstance(e, LifecycleRecord)]


def detect_format(lines: list[str]) -> str:
    sample = [line for line in lines[:200] if line.strip() and not _JOURNAL_NOTE.match(line)][:60]
    if not sample:
        return "plain"
    for name, pattern in _SHORT_FORMATS:
        hits = sum(1 for line in sample if pattern.match(line))
        if hits >= max(1, int(len(sample) * 0.6)):
            return name
    return "plain"


def parse_text(text: str) -> ParsedText:
    raw = [clean(line[:MAX_LINE_CHARS]) for line in text.splitlines()]
    fmt = detect_format(raw)
    if fmt == "plain":
        return ParsedText([LogLine(PASTED_UNIT, 0, line) for line in raw], fmt)
    pattern = dict(_SHORT_FORMATS)[fmt]
    events: list[LogLine | LifecycleRecord] = []
    lines: list[LogLine] = []
    units: set[str] = set()
    last_pid = 0
    for line in raw:
        if _JOURNAL_NOTE.match(line):
            continue
        m = pattern.match(line)
        if m is None:  # a continuation of a multi-line message, indented by journalctl
            entry = LogLine(PASTED_UNIT, last_pid, line.removeprefix(" " * 4))
            lines.append(entry)
            events.append(entry)
            continue
        pid = int(m.group("pid") or 0)
        ts = _timestamp(fmt, m.group("ts"))
        message = m.group("msg")
        if pid == 1 and m.group("ident") in ("systemd", "init"):
            record = parse_pid1_text(message, ts)
            if record is not None:
                events.append(record)
                units.add(record.unit)
            continue
        last_pid = pid
        entry = LogLine(PASTED_UNIT, pid, message, ts)
        lines.append(entry)
        events.append(entry)
    if len(units) == 1:  # `journalctl -u one.service`: every line belongs to it
        unit = next(iter(units))
        for entry in lines:
            entry.unit = unit
    return ParsedText(events, fmt)


def _timestamp(fmt: str, raw: str) -> float:
    try:
        if fmt == "unix":
            return float(raw)
        if fmt == "iso":
            return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
    return 0.0


def read_sources(paths: Iterable[str], stdin_text: str | None = None) -> Iterator[tuple[str, str]]:
    """Yield (name, text) for each path, `-` meaning standard input; undecodable bytes are replaced.

    A file that is no text log (a journal file, a compressed log, binary data, nothing at all) raises
    OSError saying what it is and what to run instead, rather than giving "No failure found."
    """
    for path in paths:
        if path == "-":
            yield "-", stdin_text or ""
            continue
        with open(path, "rb") as handle:
            data = handle.read()
        problem = not_text(data, path)
        if problem is not None:
            raise OSError(errno.EINVAL, problem, path)
        yield path, data.decode("utf-8", "replace")


_COMPRESSED = (
    (b"\x1f\x8b", "gzip", "zcat"),
    (b"\xfd7zXZ\x00", "xz", "xzcat"),
    (b"(\xb5/\xfd", "zstd", "zstdcat"),
    (b"BZh", "bzip2", "bzcat"),
)


def not_text(data: bytes, path: str) -> str | None:
    """What `data` is when it is no text log; None for text (stray NUL or invalid bytes in a log are fine)."""
    if not data:
        return "empty file, nothing to diagnose"
    if data.startswith(b"LPKSHHRH"):  # journal-def.h's signature
        return f"a journal file, not a text log: use `crashdoc diagnose --file {path}`"
    for magic, kind, tool in _COMPRESSED:
        if data.startswith(magic):
            return f"{kind}-compressed: `{tool} {path} | crashdoc explain -`"
    text = data[:65536].decode("utf-8", "replace")
    odd = text.count("\ufffd") + sum(1 for ch in text if ch < "\x20" and ch not in "\t\n\r\x1b")
    if odd > len(text) // 10:
        return "binary data, not a text log"
    return None
