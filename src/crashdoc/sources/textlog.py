"""Pasted logs: plain lines, `journalctl -o cat`, or `journalctl -o short*` text.

The short formats carry the writer's PID, so the lines of interleaved processes can be
grouped like journal entries; PID 1's lines among them become lifecycle records. Plain
text has no PIDs: it is read as one stream, which is how SGLang's own log files look.

Logs reach a ticket or a chat in other shapes too, and each is undone before parsing
(`normalize`): `> ` quote markers, an outer column that a CI runner, `kubectl logs
--timestamps`, `docker logs -t`, docker compose, a container runtime's log file or a Python
wrapper's `logging` put in front of SGLang's own line, docker's JSON log records, code
fences, and tracebacks whose indentation the chat stripped. A paste holding only the
exception line is read as a traceback without frames, so the diagnosis can say it matched
on the message alone. None of this applies to the journal: the daemon trusts only what
journald recorded.
"""

from __future__ import annotations

import errno
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from crashdoc.events import LifecycleRecord, LogLine
from crashdoc.sources.lifecycle import parse_pid1_text
from crashdoc.sources.routerlog import is_router_log, parse_router_line
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
    notes: list[str] = field(default_factory=list)  # what was undone to read the paste

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
    raw, pids, notes = normalize(raw)
    fmt = detect_format(raw)
    if fmt == "plain" and is_router_log(raw):
        return ParsedText(list(_router_lines(raw, pids)), "router", [*notes, "parsing the SGLang router's log format"])
    if fmt == "plain":
        plain = [LogLine(PASTED_UNIT, pid, line) for line, pid in zip(raw, pids, strict=True)]
        at = lone_exception(plain)
        if at is not None:  # read it as a traceback without frames: the matcher needs nothing else
            pid = plain[at].pid
            plain[at : at + 1] = [
                LogLine(PASTED_UNIT, pid, TRACEBACK_HEAD),
                LogLine(PASTED_UNIT, pid, plain[at].text.strip()),
            ]
            notes.append("no traceback given, matched on the message alone")
        return ParsedText(list(plain), fmt, notes)
    reader = ShortLines(fmt)
    events = list(reader.read(raw))
    if len(reader.units) == 1:  # `journalctl -u one.service`: every line belongs to it
        unit = next(iter(reader.units))
        for entry in events:
            if isinstance(entry, LogLine):
                entry.unit = unit
    return ParsedText(events, fmt, notes)


class ShortLines:
    """The lines of a `journalctl -o short*` paste as events, read in as many pieces as the caller likes
    (a streamed paste): a continuation line keeps the PID of the entry before it, across pieces too."""

    def __init__(self, fmt: str, unit: str = PASTED_UNIT) -> None:
        self.pattern = dict(_SHORT_FORMATS)[fmt]
        self.fmt = fmt
        self.unit = unit  # of every line: PASTED_UNIT until the paste says which unit it is
        self.units: set[str] = set()  # the units PID 1's records named
        self.last_pid = 0

    def read(self, raw: Iterable[str]) -> Iterator[LogLine | LifecycleRecord]:
        pattern, fmt, unit = self.pattern, self.fmt, self.unit
        for line in raw:
            if _JOURNAL_NOTE.match(line):
                continue
            m = pattern.match(line)
            if m is None:  # a continuation of a multi-line message, indented by journalctl
                yield LogLine(unit, self.last_pid, line.removeprefix(" " * 4))
                continue
            pid = int(m.group("pid") or 0)
            ts = _timestamp(fmt, m.group("ts"))
            message = m.group("msg")
            if pid == 1 and m.group("ident") in ("systemd", "init"):
                record = parse_pid1_text(message, ts)
                if record is not None:
                    self.units.add(record.unit)
                    yield record
                continue
            self.last_pid = pid
            yield LogLine(unit, pid, message, ts)


# --- the shapes of a paste -------------------------------------------------------------

_QUOTE = re.compile(r"^ {0,3}(?:> ?)+")
_FENCE = re.compile(r"^\s*(?:```|~~~)[\w+-]*\s*$")
# Outer columns in front of the program's own line, each with the note that names it. The column is only
# removed when most lines carry it (a log line may well start with a date of its own).
_COLUMNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # a container runtime's own log file (CRI, /var/log/containers/*.log): `<RFC 3339> stderr F ` before the line
    (
        "container runtime's log column",
        re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) (?:stdout|stderr) [FP] "),
    ),
    # GitHub Actions, GitLab, `kubectl logs --timestamps`, `docker logs -t`: RFC 3339 with a zone, then a space
    ("CI/kubectl timestamps", re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)(?: |$)")),
    # a log viewer's export (Grafana/Loki, stern, a collector's file): `2026-04-11 14:20:01.337 | ` before the line
    (
        "log viewer's timestamp column",
        re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)? +\| ?"),
    ),
    # a job runner's bracketed timestamp, often with the host and `>>` (RL frameworks' log aggregation):
    # `[2026-01-09T10:42:17+08:00] worker-3 >> `; SGLang's own prefix has a space where this has the `T`
    (
        "bracketed timestamp column",
        re.compile(r"^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\] (?:(?P<who>[\w.:-]+) >> )?"),
    ),
    # a Python wrapper that logs each line of its child through `logging` (`%(asctime)s - %(name)s - %(levelname)s -
    # %(message)s`): `2025-03-08 02:04:48,693 - __main__ - INFO - `
    (
        "Python logging column",
        re.compile(
            r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - (?:[\w.<>-]+ - )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - "
        ),
    ),
    # docker compose: `service-1  | `
    ("docker compose service column", re.compile(r"^(?P<who>[A-Za-z0-9][\w.-]*)\s+\| ?")),
    # a launcher that prefixes each process's lines with its PID or local rank (torchrun's `--tee`, `[default0]:`;
    # a wrapper's `[80746] `): each is a process of its own
    ("per-process prefix", re.compile(r"^\[(?P<who>\d{2,7}|default\d{1,3})\](?:: ?| )")),
    # `kubectl logs --prefix`: `[pod/name/container] `
    ("kubectl --prefix column", re.compile(r"^\[(?P<who>pod/[^\]\s]+)\] ")),
)
_FRAME_UNINDENTED = re.compile(r'^File "[^"]*", line \d+')
_TYPE_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*)?(?:Error|Exception|Exit|Interrupt|Failure|Warning)(?::|$)"
    r"|^(?:[a-z_]\w*\.)+[A-Z]\w*:|^Traceback \(most recent|^During handling|^The above exception"
)
# A paste that is one exception line: `ValueError: ...`, `torch.OutOfMemoryError: ...` (a warning is no failure)
_LONE_EXCEPTION = re.compile(r"^(?:[a-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Failure)|Exception|SystemExit): \S")
TRACEBACK_HEAD = "Traceback (most recent call last):"


@dataclass(slots=True)
class Groups:
    """The PID-like number given to each docker compose service and Ray actor: kept from one piece of a
    streamed paste to the next, so that a service keeps its number."""

    columns: dict[str, int] = field(default_factory=dict)
    actors: dict[str, int] = field(default_factory=dict)


def is_fence(line: str) -> bool:
    """A Markdown code fence (```` ``` ````, `~~~`, with a language or not): `normalize` drops it."""
    return _FENCE.match(line) is not None


def normalize(lines: list[str], groups: Groups | None = None) -> tuple[list[str], list[int], list[str]]:
    """Undo what quoting, outer prefix columns and stripped indentation did to a paste.

    The shapes combine in any order (a CI column inside `> ` quotes, or quotes behind a CI column), so
    quote markers and columns are taken off in turns until neither is left. Returns the lines, a PID-like
    group per line (docker compose services and Ray actors interleave like processes: each one's traceback
    must be assembled apart) and notes saying what was done.
    """
    groups = groups if groups is not None else Groups()
    notes: list[str] = []
    lines = [line for line in lines if not _FENCE.match(line)]
    lines, note = _unwrap_log_records(lines)
    if note is not None:
        notes.append(note)
    pids = [0] * len(lines)
    plain = detect_format(lines) == "plain"  # a journalctl paste has no outer column, and no quotes to undo
    for _ in range(4):
        changed = False
        body = [line for line in lines if line.strip()]
        if body and sum(1 for line in body if _QUOTE.match(line)) >= max(1, int(len(body) * 0.6)):
            lines = [_QUOTE.sub("", line, count=1) for line in lines]
            if "removed `> ` quote markers" not in notes:
                notes.append("removed `> ` quote markers")
            changed = True
        # a compose column may hold a `docker logs -t` timestamp, or the other way round
        if plain or detect_format(lines) == "plain":
            lines, pids, note = _strip_column(lines, pids, groups.columns)
            if note is not None:
                notes.append(f"removed the {note}")
                changed = True
        if not changed:
            break
    lines, pids, note = _strip_actor_prefixes(lines, pids, groups.actors)
    if note is not None:
        notes.append(note)
    lines, note = _dedent(lines)
    if note is not None:
        notes.append(note)
    lines, note = _strip_inner_prefixes(lines)
    if note is not None:
        notes.append(note)
    if any(_FRAME_UNINDENTED.match(line) for line in lines):
        lines = _reindent(lines)
        notes.append("restored the indentation of traceback frames")
    return lines, pids, notes


def _unwrap_log_records(lines: list[str]) -> tuple[list[str], str | None]:
    """docker's json-file driver keeps each line as `{"log": "...\\n", "stream": "stderr", "time": "..."}` (a
    node's /var/lib/docker/containers/*/*-json.log, a log shipper's export): the program's line is the `log` field."""
    body = [line for line in lines if line.strip()]
    if not body or sum(1 for line in body if line.lstrip().startswith('{"log"')) < max(1, int(len(body) * 0.6)):
        return lines, None
    out: list[str] = []
    for line in lines:
        try:
            record = json.loads(line) if line.lstrip().startswith("{") else None
        except ValueError:
            record = None
        text = record.get("log") if isinstance(record, dict) else None
        if not isinstance(text, str):
            out.append(line)
            continue
        out.extend(clean(part[:MAX_LINE_CHARS]) for part in (text.rstrip("\n").split("\n")))
    return out, "read the `log` field of docker's JSON log records"


# Ray prints each worker's output behind the actor and its PID: `(SGLangEngine pid=4711) File ...`,
# `(Worker pid=88, ip=10.0.0.5) ValueError: ...`, `(raylet) ...`. The prefix is Ray's, never SGLang's: each
# actor is a process of its own, and the prefix must not become part of the root-cause line.
_ACTOR = re.compile(
    r"^ {0,4}\((?:(?P<name>[A-Za-z_][\w.:-]*) )?pid=(?P<pid>\d+)(?:, ip=[0-9a-fA-F.:]+)?\) ?|^ {0,4}\(raylet\) "
)


def _strip_actor_prefixes(
    lines: list[str], pids: list[int], groups: dict[str, int]
) -> tuple[list[str], list[int], str | None]:
    if not any("(" in line[:5] and _ACTOR.match(line) for line in lines):
        return lines, pids, None
    out: list[str] = []
    out_pids: list[int] = []
    for line, pid in zip(lines, pids, strict=True):
        m = _ACTOR.match(line) if "(" in line[:5] else None
        if m is None:
            out.append(line)
            out_pids.append(pid)
            continue
        who = m.group("pid") or "raylet"
        out.append(line[m.end() :])
        out_pids.append(groups.setdefault(who, 1000 + len(groups)))  # apart from the compose groups
    return out, out_pids, "removed the Ray actor prefixes (`(Name pid=N)`)"


# The lines that stand at column 0 in a log: a traceback's head and exception line, SGLang's records. When
# every one of them sits k spaces in (a paste indented under a header line of its own), the paste is k spaces in.
_ANCHOR = re.compile(
    r"^(?P<indent> +)(?:Traceback \(most recent call last\):|During handling of the above|The above exception"
    r"|\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Failure):)"
)


def _dedent(lines: list[str]) -> tuple[list[str], str | None]:
    indents = set()
    for line in lines:
        if line[:1] == " ":
            m = _ANCHOR.match(line)
            if m is not None:
                indents.add(len(m.group("indent")))
        elif line.strip() and _ANCHOR.match(" " + line) is not None:
            return lines, None  # an anchor at column 0: the paste kept its indentation
    if len(indents) != 1:
        return lines, None
    k = indents.pop()
    if k > 8:
        return lines, None
    pad = " " * k
    return [line[k:] if line.startswith(pad) else line.lstrip(" ") for line in lines], f"removed a {k}-space indent"


# SGLang prefixes only the first line of a record; a paste (or a log shipper) that prefixes every line of a
# traceback with `[2026-01-01 00:00:00 TP0] ` would end the traceback at its first frame. Inside a traceback,
# the prefix goes: a frame, a source line, a blank, a chain marker or the exception line after a frame.
_SGLANG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?: [^\]\s]+)*\] ?")
_INNER = re.compile(
    r"^(?:\s|$|Traceback \(most recent call last\):|During handling of the above|The above exception"
    r"|\[Previous line repeated)"
)


def _strip_inner_prefixes(lines: list[str]) -> tuple[list[str], str | None]:
    if not any(line.startswith("[") and _frame_after_prefix(line) for line in lines):
        return lines, None
    out: list[str] = []
    inside = False  # after a traceback's head, until a prefixed line that is no part of it
    message = ""  # after the exception line: the prefix its message's further lines carry too
    for line in lines:
        if "Traceback (most recent call last):" in line:
            inside = True
        m = _SGLANG_PREFIX.match(line) if line.startswith("[") else None
        if m is None:
            out.append(line)
            message = message if line.strip() else ""
            continue
        body = line[m.end() :]
        if (
            body.startswith("Traceback (most recent call last):")
            or _INNER.match(body)
            or (inside and _TYPE_LINE.match(body))
        ):
            out.append(body if body.strip() else "")
            message = m.group(0) if inside and body.strip() and _TYPE_LINE.match(body) else ""
            continue
        if message and m.group(0) == message and body.strip():
            out.append(body)  # a further line of the exception's message, stamped like its first line
            continue
        message = ""
        if "Traceback (most recent call last):" not in body:
            inside = False
        out.append(line)
    return out, "removed the log prefix repeated on every line of a traceback"


def _frame_after_prefix(line: str) -> bool:
    m = _SGLANG_PREFIX.match(line)
    return m is not None and line[m.end() :].lstrip().startswith('File "')


def _strip_column(lines: list[str], pids: list[int], groups: dict[str, int]) -> tuple[list[str], list[int], str | None]:
    body = [line for line in lines if line.strip()]
    if not body:
        return lines, pids, None
    for note, pattern in _COLUMNS:
        if sum(1 for line in body if pattern.match(line)) < max(1, int(len(body) * 0.6)):
            continue
        out: list[str] = []
        out_pids: list[int] = []
        for line, pid in zip(lines, pids, strict=True):
            m = pattern.match(line)
            if m is None:
                out.append(line)
                out_pids.append(pid)
                continue
            who = m.groupdict().get("who")
            if who is not None:
                pid = groups.setdefault(who, len(groups) + 2)  # never 1: that is PID 1's in a journal paste
            out.append(line[m.end() :])
            out_pids.append(pid)
        return out, out_pids, note
    return lines, pids, None


def _reindent(lines: list[str]) -> list[str]:
    """`File "x", line 3, in f` at column 0 and its source line after it: put back Python's two and four
    spaces, so that the frames, the source lines and the exception line are told apart again."""
    out: list[str] = []
    after_frame = False
    for line in lines:
        if _FRAME_UNINDENTED.match(line):
            out.append("  " + line)
            after_frame = True
            continue
        if after_frame and line.strip() and not _TYPE_LINE.match(line.lstrip()):
            out.append(line if line[0].isspace() else "    " + line)  # the frame's source line, its ^^^ markers
            continue
        after_frame = False
        out.append(line)
    return out


def lone_exception(lines: list[LogLine]) -> int | None:
    """The index of the exception line of a paste that holds no traceback, only that line; else None."""
    found = None
    for i, line in enumerate(lines):
        text = line.text
        if TRACEBACK_HEAD in text or text.lstrip().startswith('File "'):
            return None
        if _LONE_EXCEPTION.match(text.strip()):
            found = i
    return found


def _router_lines(raw: list[str], pids: list[int]) -> Iterator[LogLine]:
    """The router's records, each a line of its text form with its time (JSON records written back as text);
    other lines (a Python traceback of the launcher that started it) as they are."""
    for line, pid in zip(raw, pids, strict=True):
        record = parse_router_line(line)
        if record is None:
            yield LogLine(PASTED_UNIT, pid, line)
        else:
            yield LogLine(PASTED_UNIT, pid, record.text, record.timestamp)


def _timestamp(fmt: str, raw: str) -> float:
    try:
        if fmt == "unix":
            return float(raw)
        if fmt == "iso":
            from datetime import datetime  # journalctl's iso output alone: other pastes never import it

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


def only_notes(text: str) -> bool:
    """True when a paste holds no log line: nothing but blank lines and journalctl's own notes (`-- No entries
    --`, `-- Boot ... --`), which is what `journalctl -u UNIT` prints for a query that matched nothing."""
    return all(not line.strip() or _JOURNAL_NOTE.match(line.strip()) for line in text.splitlines())
