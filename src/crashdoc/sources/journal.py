"""Reading the journal: the watched units' lines and PID 1's records about them.

Fields are read raw with `_get` (bytes) rather than through systemd-python's default
converters, which cost 4-5x (see the journal read limits). Per entry only `_SYSTEMD_UNIT`
is read until the entry is known to matter. Lifecycle records count only when journald
says PID 1 wrote them (`_PID=1` is a trusted field: no process can forge it), so a line
"Scheduled restart job" on a service's stdout, or a forged MESSAGE_ID sent through the
native protocol, moves nothing.
"""

from __future__ import annotations

import ctypes
import fnmatch
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from systemd import journal

from crashdoc.events import GpuEvent, Lifecycle, LifecycleRecord, LogLine, WatchRule
from crashdoc.sources.lifecycle import (
    COREDUMP_MESSAGE_ID,
    MESSAGE_IDS,
    START_LIMIT_TEXT,
    kernel_oom_unit,
    normalise_exit_status,
)
from crashdoc.text import terminal_safe

if TYPE_CHECKING:
    from crashdoc.sources.fastread import BatchReader
    from crashdoc.sources.kernel_gpu import KernelGpuReader

MAX_MESSAGE_CHARS = 16 * 1024  # longer lines are cut: a 1 MB line must not cost 1 MB of matching
MAX_GPU_EVENTS = 10_000  # kernel GPU events kept until drained (a storm of Xid 13 must not grow without bound)
TRIM_CHECK_EVERY = 2_000  # entries stepped between two looks at how many file pages are mapped
# release the journal pages once this many bytes of file pages were mapped since (8 MB: catch-up peak ~72 MB)
TRIM_ABOVE = 4 << 20
# `diagnose` (read once, then exit): 16x looser (64 MB), since each release costs the page faults of
# touching the current windows again, and clean shared file pages are cheap in a short-lived process
TRIM_ONCE_FACTOR = 16
_MADV_DONTNEED = 4
_PAGE = os.sysconf("SC_PAGE_SIZE")
_INIT_SCOPE = b"init.scope"
_STOP_BATCH = (_INIT_SCOPE, b"systemd-coredump@")  # the batch reader leaves these entries to read()


@dataclass(slots=True)
class UnitFilter:
    """Which units are watched, with their role; names are matched once and remembered."""

    rules: Sequence[WatchRule]
    ignore: frozenset[str] = frozenset()  # e.g. crashdoc's own unit
    _cache: dict[str, str | None] = field(default_factory=dict)

    def role_of(self, unit: str) -> str | None:
        try:
            return self._cache[unit]
        except KeyError:
            pass
        role = None
        if unit and unit not in self.ignore and unit != "init.scope":
            for rule in self.rules:
                if fnmatch.fnmatchcase(unit, rule.pattern):
                    role = rule.role
                    break
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[unit] = role
        return role


@dataclass(slots=True)
class ReadStats:
    entries: int = 0  # entries stepped over
    lines: int = 0  # lines of watched units returned
    lifecycle: int = 0
    errors: int = 0  # entries that could not be read (corruption, I/O)
    last_error: str = ""
    last_timestamp: float = 0.0  # realtime of the newest entry read


Event = LogLine | LifecycleRecord


class JournalSource:
    """Follows the system journal, a journal folder, or a set of journal files."""

    def __init__(
        self,
        units: UnitFilter,
        *,
        directory: str | None = None,
        files: Sequence[str] | None = None,
        once: bool = False,
        build_dir: Path | None = None,
    ) -> None:
        """`once`: read to the end one time (`diagnose`), not followed: unwatched units are skipped
        by libsystemd, as they always are for journal files given by name. `build_dir`: with `once`,
        read with the C batch reader (sources/fastread.c) built there, when it can be."""
        self.units = units
        self._directory = directory if not files else None
        self._files = list(files or ())
        if files:
            self.reader = journal.Reader(files=list(files))
        elif directory:
            if not os.path.isdir(directory):
                raise FileNotFoundError(f"journal folder {directory} does not exist")
            self.reader = journal.Reader(path=directory)
        else:
            self.reader = journal.Reader()
        self.reader.data_threshold = 64 * 1024
        self.stats = ReadStats()
        self._trim_factor = TRIM_ONCE_FACTOR if once else 1
        self._mapped_after_release = _mapped_bytes()  # file-backed resident bytes after the last release
        self.at_end = False  # the last read() reached the newest entry
        self.cursor_gone = False  # seek_cursor(): the saved entry is gone, reading resumed after it
        self._cursor: str | None = None
        self._roles: dict[bytes, str | None] = {}  # raw _SYSTEMD_UNIT -> role (None: not watched)
        # (unit, pid) -> (unit, pid, invocation id, command line), decoded on the process's first line
        self._invocations: dict[tuple[bytes, bytes], tuple[str, int, str, str]] = {}
        if files or once:
            self._restrict_to_watched()
        # the NVIDIA driver's kernel lines (Xid, SXid, fallen off the bus), read when asked (`read_gpu_events`)
        self._gpu_lines: KernelGpuReader | None = None
        self.gpu_events: list[GpuEvent] = []
        self._batch: BatchReader | None = None
        if once and build_dir is not None:
            from crashdoc.sources.fastread import batch_reader

            self._batch = batch_reader(self.reader, build_dir)

    def _restrict_to_watched(self) -> None:
        """Journal files given by name (copies) or read once: let libsystemd skip unwatched units.

        A match walks only the matching entries, so an unwatched entry (half of a busy GPU
        host's journal) costs nothing instead of a `_next()` and a `_get("_SYSTEMD_UNIT")`. The
        terms cover everything `read()` can return: the watched units' lines, PID 1's records
        (init.scope), kernel lines (OOM kills) and core dump records; `read()` checks each entry
        as before. Not for a followed journal (the daemon): its units may not exist yet.
        """
        r = self.reader
        try:
            names = journal._Reader.query_unique(r, "_SYSTEMD_UNIT")
        except OSError:
            return
        watched = sorted(n for n in names if self.units.role_of(n.decode("utf-8", "replace")) is not None)
        for name in (*watched, _INIT_SCOPE):
            journal._Reader.add_match(r, b"_SYSTEMD_UNIT=" + name)
        r.add_disjunction()
        r.add_match("_TRANSPORT=kernel")
        r.add_disjunction()
        r.add_match("MESSAGE_ID=" + COREDUMP_MESSAGE_ID)

    def read_gpu_events(self) -> None:
        """Also collect the kernel's GPU fault lines into `gpu_events` (the caller drains it; at most
        MAX_GPU_EVENTS are kept). Kernel lines only: a unit printing "NVRM: Xid" is no kernel."""
        if self._gpu_lines is None:
            from crashdoc.sources.kernel_gpu import KernelGpuReader  # its patterns are compiled only when asked

            self._gpu_lines = KernelGpuReader()

    # --- positioning ---------------------------------------------------------------------

    def seek_head(self) -> None:
        self.reader.seek_head()

    def seek_tail(self) -> None:
        """Start after the newest entry: only what happens from now on."""
        self.reader.seek_tail()
        self.reader._previous()  # libsystemd needs a step to settle on the tail

    def seek_since(self, when: datetime | float) -> None:
        if isinstance(when, int | float):
            when = datetime.fromtimestamp(when)
        self.reader.seek_realtime(when)

    def seek_cursor(self, cursor: str) -> bool:
        """Resume after `cursor`; False when it is no cursor libsystemd can place.

        When its entry is gone (rotated away and vacuumed while crashdoc was down, or a volatile
        journal after a reboot), libsystemd places the reader by the cursor's sequence number or
        time, and reading goes on with the oldest entry after it: `cursor_gone` says so. Jumping
        to the end instead would lose every entry written since, and the saved state with them.
        """
        self.cursor_gone = False
        try:
            self.reader.seek_cursor(cursor)
            landed = self.reader._next()
        except (OSError, ValueError):
            return False
        self._cursor = cursor
        if not landed:  # nothing at or after it: its entry is gone, read() waits for the next one
            self.cursor_gone = True
            return True
        try:
            found = bool(self.reader.test_cursor(cursor))
            if not found:
                # we sit on the oldest entry after the gone one: place the reader so that read() returns
                # it (a step back is not enough when that entry is the journal's first: nothing before)
                self.reader.seek_cursor(self.reader._get_cursor())
        except OSError:
            found = False
        self.cursor_gone = not found
        return True

    @property
    def cursor(self) -> str | None:
        """The cursor of the last entry `read()` returned past."""
        return self._cursor

    # --- reading -------------------------------------------------------------------------

    def read(self, limit: int = 5000) -> list[Event]:
        """Up to `limit` entries' worth of events; an empty list when caught up.

        The hot path of the daemon and of `diagnose`: a watched unit's line is read inline (two
        `_get`s, the realtime clock, one decode), and what is fixed per process (unit name,
        PID, invocation) is decoded once, on its first line, and remembered.
        """
        if self._batch is not None:
            return self._read_batches(limit)
        r = self.reader
        get = r._get
        nxt = r._next
        realtime = r._get_realtime
        roles = self._roles
        processes = self._invocations
        events: list[Event] = []
        append = events.append
        stepped = 0
        lines = 0
        stats = self.stats
        self.at_end = False
        check = TRIM_CHECK_EVERY
        while stepped < limit:
            if stepped >= check:
                check += TRIM_CHECK_EVERY
                self._bound_mapped_pages()
            try:
                if not nxt():
                    self.at_end = True
                    break
            except OSError as exc:
                stats.errors += 1
                stats.last_error = f"journal read failed: {exc}"
                self.at_end = True  # do not spin on a broken file: try again on the next wake-up
                break
            stepped += 1
            try:
                unit_raw = get("_SYSTEMD_UNIT")
            except KeyError:
                # kernel lines have no unit; the OOM killer's names the victim's cgroup
                try:
                    event = self._kernel_record(get, realtime)
                except OSError:
                    event = None
                if event is not None:
                    append(event)
                continue
            except OSError as exc:
                stats.errors += 1
                stats.last_error = f"unreadable entry: {exc}"
                continue
            try:
                role = roles[unit_raw]
            except KeyError:
                role = roles[unit_raw] = self.units.role_of(unit_raw.decode("utf-8", "replace"))
                if len(roles) > 10_000:
                    roles.clear()
            try:
                if role is not None:
                    try:
                        message = get("MESSAGE")
                        pid_raw = get("_PID")
                    except KeyError:
                        continue
                    process = processes.get((unit_raw, pid_raw))
                    if process is None:  # a process's first line: who is it, which run is it part of
                        process = self._first_line(get, unit_raw, pid_raw)
                        cmdline = process[3]
                    else:
                        cmdline = ""
                    text = (
                        message.decode("utf-8", "replace")
                        if len(message) <= MAX_MESSAGE_CHARS
                        else message[:MAX_MESSAGE_CHARS].decode("utf-8", "replace")
                    )
                    if not text.isprintable():
                        text = terminal_safe(text)
                    lines += 1
                    append(LogLine(process[0], process[1], text, realtime() / 1e6, process[2], cmdline))
                    continue
                if unit_raw == _INIT_SCOPE:
                    event = self._pid1_record(get, realtime)
                elif unit_raw.startswith(b"systemd-coredump@"):
                    event = self._coredump_record(get, realtime)
                else:
                    continue
            except OSError as exc:
                stats.errors += 1
                stats.last_error = f"unreadable entry: {exc}"
                continue
            if event is not None:
                append(event)
        stats.lines += lines
        if stepped:
            stats.entries += stepped
            self._bound_mapped_pages()
            try:
                self._cursor = r._get_cursor()
                stats.last_timestamp = realtime() / 1e6
            except OSError:
                pass
        return events

    def _read_batches(self, limit: int) -> list[Event]:
        """`read()` through the C batch reader: the same events, from what fastread.c returns.

        It returns the lines of processes already seen (their unit, PID and run are in
        `_invocations`) and stops on every other entry (a process's first line, PID 1's records,
        core dumps, kernel lines): those are read here, with `read()`'s rules, and the batch goes
        on after them."""
        from crashdoc.sources.fastread import AT_END, STOPPED

        assert self._batch is not None
        batch = self._batch
        r = self.reader
        processes = self._invocations
        stats = self.stats
        events: list[Event] = []
        append = events.append
        stepped = lines = 0
        self.at_end = False
        while stepped < limit:
            entries, status, errors = batch(
                r, min(TRIM_CHECK_EVERY, limit - stepped), _STOP_BATCH, processes, MAX_MESSAGE_CHARS
            )
            stepped += len(entries) + errors + (status == STOPPED)
            if errors:
                stats.errors += errors
                stats.last_error = "unreadable entry"
            events += entries  # LogLines, built and made terminal-safe in C
            lines += len(entries)
            if status == STOPPED:  # the reader sits on an entry to read the slow way
                try:
                    event = self._other_entry(r._get, r._get_realtime)
                except OSError as exc:
                    stats.errors += 1
                    stats.last_error = f"unreadable entry: {exc}"
                    event = None
                if event is not None:
                    append(event)
            elif status == AT_END:
                self.at_end = True
                break
            elif status < 0:
                stats.errors += 1
                stats.last_error = f"journal read failed: {os.strerror(-status)}"
                self.at_end = True  # do not spin on a broken file: try again on the next wake-up
                break
            self._bound_mapped_pages()
        stats.lines += lines
        if stepped:
            stats.entries += stepped
            self._bound_mapped_pages()
            try:
                self._cursor = r._get_cursor()
                stats.last_timestamp = r._get_realtime() / 1e6
            except OSError:
                pass
        return events

    def _other_entry(self, get, realtime) -> Event | None:
        """An entry the batch reader left alone (no unit, PID 1, a core dump), as `read()` handles it."""
        try:
            unit_raw = get("_SYSTEMD_UNIT")
        except KeyError:
            return self._kernel_record(get, realtime)
        try:
            role = self._roles[unit_raw]
        except KeyError:
            role = self._roles[unit_raw] = self.units.role_of(unit_raw.decode("utf-8", "replace"))
        if role is not None:
            return self._line(get, realtime, unit_raw)
        if unit_raw == _INIT_SCOPE:
            return self._pid1_record(get, realtime)
        if unit_raw.startswith(b"systemd-coredump@"):
            return self._coredump_record(get, realtime)
        return None

    def _line(self, get, realtime, unit_raw: bytes) -> LogLine | None:
        """One line of a watched unit, read outside `read()`'s loop (which inlines the same steps)."""
        try:
            message = get("MESSAGE")
            pid_raw = get("_PID")
        except KeyError:
            return None
        process = self._invocations.get((unit_raw, pid_raw))
        cmdline = ""
        if process is None:
            process = self._first_line(get, unit_raw, pid_raw)
            cmdline = process[3]
        text = (
            message.decode("utf-8", "replace")
            if len(message) <= MAX_MESSAGE_CHARS
            else message[:MAX_MESSAGE_CHARS].decode("utf-8", "replace")
        )
        if not text.isprintable():
            text = terminal_safe(text)
        self.stats.lines += 1
        return LogLine(process[0], process[1], text, realtime() / 1e6, process[2], cmdline)

    def _bound_mapped_pages(self) -> None:
        """Keep the journal pages mapped into this process under TRIM_ABOVE more than after the last
        release, however large the entries (a flood of 48K lines maps far more per entry); once
        caught up, release whatever was mapped."""
        grown = _mapped_bytes() - self._mapped_after_release
        if grown > TRIM_ABOVE * self._trim_factor or (self.at_end and grown > TRIM_ABOVE // 8):
            release_journal_pages()
            self._mapped_after_release = _mapped_bytes()

    def _first_line(self, get, unit_raw: bytes, pid_raw: bytes) -> tuple[str, int, str, str]:
        """(unit, pid, invocation, command line) of a process seen for the first time; remembered."""
        try:
            invocation = get("_SYSTEMD_INVOCATION_ID").decode("ascii", "replace")
        except KeyError:
            invocation = ""
        cmdline = _optional(get, "_CMDLINE") or ""
        pid = int(pid_raw) if pid_raw.isdigit() else 0  # a journal file from elsewhere may hold anything
        process = (unit_raw.decode("utf-8", "replace"), pid, invocation, cmdline)
        if len(self._invocations) > 50_000:
            self._invocations.clear()
        self._invocations[(unit_raw, pid_raw)] = process
        return process

    def _pid1_record(self, get, realtime) -> LifecycleRecord | None:
        if get("_PID") != b"1":
            return None
        try:
            unit = get("UNIT").decode("utf-8", "replace")
        except KeyError:
            return None
        if self.units.role_of(unit) is None:
            return None
        message_id = _optional(get, "MESSAGE_ID")
        kind = MESSAGE_IDS.get(message_id or "")
        message = _optional(get, "MESSAGE") or ""
        if kind is None:
            if START_LIMIT_TEXT not in message:
                return None
            kind = Lifecycle.START_LIMIT_HIT
        if kind is Lifecycle.STARTED and _optional(get, "JOB_TYPE") not in (None, "start", "restart"):
            return None
        code = _optional(get, "EXIT_CODE")
        n_restarts = _optional(get, "N_RESTARTS")
        result = _optional(get, "UNIT_RESULT") or _optional(get, "JOB_RESULT")
        if kind is Lifecycle.START_LIMIT_HIT:
            result = "start-limit-hit"
        if kind is Lifecycle.JOB_FAILED and result == "done":
            return None
        self._forget_pids(unit)
        self.stats.lifecycle += 1
        return LifecycleRecord(
            unit=unit,
            kind=kind,
            timestamp=realtime() / 1e6,
            invocation=_optional(get, "INVOCATION_ID") or "",
            n_restarts=int(n_restarts) if n_restarts and n_restarts.isdigit() else None,
            exit_code=code,
            exit_status=normalise_exit_status(code, _optional(get, "EXIT_STATUS")),
            result=result,
            message=message[:500],
        )

    def _kernel_record(self, get, realtime) -> LifecycleRecord | None:
        try:
            if get("_TRANSPORT") != b"kernel":
                return None
            message = get("MESSAGE")
        except KeyError:
            return None
        if self._gpu_lines is not None and self._gpu_lines.wants(message):
            text = terminal_safe(message[:MAX_MESSAGE_CHARS].decode("utf-8", "replace"))
            self.gpu_events += self._gpu_lines.feed(text, realtime() / 1e6)
            del self.gpu_events[:-MAX_GPU_EVENTS]
            return None
        if b"oom-kill:" not in message:
            return None
        text = message.decode("utf-8", "replace")
        unit = kernel_oom_unit(text)
        if unit is None or self.units.role_of(unit) is None:
            return None
        self.stats.lifecycle += 1
        return LifecycleRecord(unit, Lifecycle.OOM_KILL, realtime() / 1e6, message=text[:500])

    def _coredump_record(self, get, realtime) -> LifecycleRecord | None:
        if _optional(get, "MESSAGE_ID") != COREDUMP_MESSAGE_ID or _optional(get, "_UID") != "0":
            return None
        unit = _optional(get, "COREDUMP_UNIT")
        if not unit or self.units.role_of(unit) is None:
            return None
        signal = _optional(get, "COREDUMP_SIGNAL_NAME") or _optional(get, "COREDUMP_SIGNAL")
        return LifecycleRecord(
            unit=unit,
            kind=Lifecycle.COREDUMP,
            timestamp=realtime() / 1e6,
            exit_code="dumped",
            exit_status=(signal or "").removeprefix("SIG") or None,
            message=(_optional(get, "MESSAGE") or "")[:500],
        )

    def _forget_pids(self, unit: str) -> None:
        """A unit started or stopped: its PIDs may be reused by the next run."""
        raw = unit.encode()
        for key in [k for k in self._invocations if k[0] == raw]:
            del self._invocations[key]

    def run_so_far(self, unit: str, invocation: str, limit: int = 20_000) -> list[LogLine]:
        """The lines a run in progress wrote before crashdoc started (its "ready" line, its
        server_args), read with a separate reader so the main position does not move."""
        lines: list[LogLine] = []
        try:
            reader = journal.Reader(path=self._directory) if self._directory else journal.Reader()
        except OSError:
            return lines
        try:
            reader.add_match(_SYSTEMD_INVOCATION_ID=invocation)
            reader.seek_head()
            get = reader._get
            unit_raw = unit.encode()
            while len(lines) < limit and reader._next():
                try:
                    if get("_SYSTEMD_UNIT") != unit_raw:
                        continue
                    line = self._line(get, reader._get_realtime, unit_raw)
                except (KeyError, OSError):
                    continue
                if line is not None:
                    lines.append(line)
        except OSError:
            pass
        finally:
            reader.close()
        return lines

    def newest_timestamp(self, oldest: bool = False) -> float | None:
        """Realtime of the newest entry in the journal (`oldest`: of the oldest), from a separate reader
        (the position stays): how far reading is behind what was written (crashdoc_journal_lag_seconds),
        and where a long read is between the two ends (diagnose's progress)."""
        try:
            if self._files:
                reader = journal.Reader(files=self._files)
            else:
                reader = journal.Reader(path=self._directory) if self._directory else journal.Reader()
        except OSError:
            return None
        try:
            if oldest:
                reader.seek_head()
                return reader._get_realtime() / 1e6 if reader._next() else None
            reader.seek_tail()
            return reader._get_realtime() / 1e6 if reader._previous() else None
        except OSError:
            return None
        finally:
            reader.close()

    # --- waiting -------------------------------------------------------------------------

    def fileno(self) -> int:
        return self.reader.fileno()

    def process(self) -> int:
        """Acknowledge an inotify wake-up (rotation, new files, appends)."""
        return self.reader.process()

    def close(self) -> None:
        self.reader.close()

    def rewatch(self, rules: Sequence[WatchRule]) -> None:
        """The configuration changed which units are watched (SIGHUP): decide every unit again. The filter
        is shared with the engine and the D-Bus watcher, so it changes in place."""
        self.units.rules = tuple(rules)
        self.units._cache.clear()
        self._roles.clear()


def unreadable_journal_files(directory: str | None = None, files: Sequence[str] = ()) -> list[tuple[str, int | None]]:
    """Journal files libsystemd skips whole (truncated, a bad header), with the entries their header
    counts (None: unknown).

    libsystemd says so only in its debug log: without this check, a copied folder holding one
    damaged file gives fewer diagnoses and no word why. Each file is opened on its own and
    asked for one entry; a file whose header counts none (a fresh, empty one) is fine.
    """
    if not files and directory:
        root = os.path.abspath(directory)
        files = sorted(
            os.path.join(folder, name)
            for folder in (root, *(e.path for e in os.scandir(root) if e.is_dir()))
            if os.path.isdir(folder)
            for name in os.listdir(folder)
            if name.endswith((".journal", ".journal~"))
        )
    out: list[tuple[str, int | None]] = []
    for path in files:
        count = _header_entries(path)
        try:
            reader = journal.Reader(files=[path])
        except OSError:
            out.append((path, count))
            continue
        try:
            readable = bool(reader._next())
        except OSError:
            readable = False
        finally:
            reader.close()
        if not readable and count != 0:
            out.append((path, count))
    return out


def _header_entries(path: str) -> int | None:
    """n_entries from a journal file's header (systemd's JOURNAL_FILE_FORMAT: le64 at offset 152)."""
    try:
        with open(path, "rb") as f:
            header = f.read(160)
    except OSError:
        return None
    if len(header) < 160 or header[:8] != b"LPKSHHRH":
        return None
    return int.from_bytes(header[152:160], "little")


def _optional(get, name: str) -> str | None:
    try:
        return get(name).decode("utf-8", "replace")
    except KeyError:
        return None


def release_journal_pages() -> int:
    """Unmap the journal pages this process has read (they stay in the page cache).

    Returns the size of the journal mappings advised, in bytes.

    libsystemd maps journal files in 8 MiB windows and keeps at least 64 of them, so a reader
    that walks a large journal carries up to 512 MiB of file pages in its RSS (the daemon had
    288 MB after following 2M entries, against 36 MB of heap). MADV_DONTNEED on those read-only shared mappings drops
    the page-table entries only: the next access is a minor fault on the same page-cache page,
    so libsystemd's pointers stay valid and nothing is read again from disk.
    """
    libc = _libc()
    if libc is None:
        return 0
    released = 0
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) < 6 or parts[1] != "r--s" or not parts[5].rstrip().endswith((".journal", ".journal~")):
                    continue
                start, _, end = parts[0].partition("-")
                begin, length = int(start, 16), int(end, 16) - int(start, 16)
                if libc.madvise(ctypes.c_void_p(begin), ctypes.c_size_t(length), _MADV_DONTNEED) == 0:
                    released += length
    except (OSError, ValueError):
        return released
    return released


def _mapped_bytes() -> int:
    """Resident file-backed and shared pages of this process (/proc/self/statm), in bytes."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[2]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


@functools.cache
def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        return libc
    except (OSError, AttributeError):
        return None
