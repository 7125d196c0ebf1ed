"""Journal entries to lines, a batch at a time: the one definition of a journal line (`line_of`,
`message_text`), the templates of the processes already seen, systemd-python's batch reader, and what reading
counts (`ReadStats`).

The C batch reader (sources/fastread.c) follows the same contract as `python_batch` and calls `line_of`
and `message_text` for every line, so a change to the line type reaches both readers.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crashdoc.events import LogLine
from crashdoc.text import terminal_safe

MAX_MESSAGE_CHARS = 16 * 1024  # longer lines are cut: a 1 MB line must not cost 1 MB of matching
MAX_PROCESSES = 50_000  # templates kept before they are all forgotten (a journal from elsewhere may hold anything)
LIMIT, AT_END, STOPPED = 0, 1, 2  # a batch reader's status (or -errno), as fastread.c returns it


def message_text(raw: bytes) -> str:
    """A MESSAGE as crashdoc keeps it: cut to MAX_MESSAGE_CHARS bytes, decoded (bytes that are not
    UTF-8 replaced), made terminal-safe when it holds anything a terminal would obey. fastread.c
    keeps plain printable ASCII as it is (what this returns for it) and calls this for the rest."""
    text = raw[:MAX_MESSAGE_CHARS].decode("utf-8", "replace")
    return text if text.isprintable() else terminal_safe(text)


def line_of(template: LogLine, text: str, timestamp: float) -> LogLine:
    """A line of a known process: what is fixed per process comes from its template (unit, PID, run;
    `Processes.template`), the text and time from the entry. The one definition of a journal
    line: both batch readers call it for every line, fastread.c included."""
    return LogLine(template.unit, template.pid, text, timestamp, template.invocation)


@dataclass(slots=True)
class ReadStats:
    entries: int = 0  # entries read (the reader's matches let only what crashdoc reads through)
    lines: int = 0  # lines of watched units returned
    lifecycle: int = 0
    errors: int = 0  # entries that could not be read (corruption, I/O)
    gone: int = 0  # entries gone before they could be read (rotated away and vacuumed)
    last_error: str = ""
    last_timestamp: float = 0.0  # realtime of the newest entry read, or passed once caught up


class Processes(dict[tuple[bytes, bytes], LogLine]):
    """(raw unit, raw PID) -> the template of the process's lines, made on its first line; the batch
    readers look their lines' processes up in it (fastread.c reads it as a dict)."""

    def template(self, get: Any, unit_raw: bytes, pid_raw: bytes) -> LogLine:
        """What every line of a process seen for the first time shares (unit, PID, run); remembered."""
        try:
            invocation = get("_SYSTEMD_INVOCATION_ID").decode("ascii", "replace")
        except KeyError:
            invocation = ""
        pid = int(pid_raw) if pid_raw.isdigit() else 0  # a journal file from elsewhere may hold anything
        template = LogLine(unit_raw.decode("utf-8", "replace"), pid, "", 0.0, invocation)
        if len(self) > MAX_PROCESSES:
            self.clear()
        self[(unit_raw, pid_raw)] = template
        return template

    def forget(self, unit: str) -> None:
        """A unit started or stopped: its PIDs may be reused by the next run."""
        raw = unit.encode()
        for key in [k for k in self if k[0] == raw]:
            del self[key]


def process_line(
    processes: Processes,
    get: Any,
    realtime: Callable[[], int],
    unit_raw: bytes,
    make_line: Callable[[LogLine, str, float], LogLine] = line_of,
) -> LogLine | None:
    """A line a batch reader left to Python (its process may be new: then its template is made and kept, and the
    line carries its command line); `get` reads the entry's fields (KeyError: absent), `realtime` its time."""
    try:
        message = get("MESSAGE")
        pid_raw = get("_PID")
    except KeyError:
        return None
    template = processes.get((unit_raw, pid_raw))
    cmdline = ""
    if template is None:
        template = processes.template(get, unit_raw, pid_raw)
        try:
            cmdline = get("_CMDLINE").decode("utf-8", "replace")
        except KeyError:
            cmdline = ""
    line = make_line(template, message_text(message[:MAX_MESSAGE_CHARS]), realtime() / 1e6)
    line.cmdline = cmdline
    return line


Batch = tuple[list[LogLine], int, int, int]  # lines, status, entries stepped, damaged entries


def python_batch(
    reader: Any,
    limit: int,
    stop: tuple[bytes, ...],
    processes: dict[tuple[bytes, bytes], LogLine],
    max_bytes: int,
    make_line: Callable[[LogLine, str, float], LogLine],
    text_of: Callable[[bytes], str],
) -> Batch:
    """fastread.c's `crashdoc_read_batch` with systemd-python, step for step (the reference; a test
    reads one journal with both): up to `limit` entries; the lines of the processes in `processes`;
    stops (STOPPED) on an entry without _SYSTEMD_UNIT, of a unit that starts with one of `stop`, or
    of a process not seen yet, with the reader on it; an entry without MESSAGE or _PID is stepped
    over, a damaged one counted."""
    nxt, get, realtime = reader._next, reader._get, reader._get_realtime
    lines: list[LogLine] = []
    append = lines.append
    stepped = errors = 0
    while stepped < limit:
        try:
            if not nxt():
                return lines, AT_END, stepped, errors
        except OSError as exc:
            return lines, -(exc.errno or errno.EIO), stepped, errors
        stepped += 1
        try:
            unit = get("_SYSTEMD_UNIT")
        except KeyError:
            return lines, STOPPED, stepped, errors
        except OSError:
            errors += 1
            continue
        if unit.startswith(stop):
            return lines, STOPPED, stepped, errors
        try:
            pid = get("_PID")
            message = get("MESSAGE")
        except KeyError:
            continue
        except OSError:
            errors += 1
            continue
        template = processes.get((unit, pid))
        if template is None:
            return lines, STOPPED, stepped, errors
        try:
            usec = realtime()
        except OSError:
            errors += 1
            continue
        append(make_line(template, text_of(message[:max_bytes]), usec / 1e6))
    return lines, LIMIT, stepped, errors
