"""Reading the journal: the watched units' lines and PID 1's records about them.

libsystemd does the filtering: the reader matches the watched units' names (`_SYSTEMD_UNIT=`),
PID 1's records (its records about them, and its start records of every unit: how a unit that
matches a glob is found when it first starts), kernel lines and core dumps, so a noisy
neighbour's entries never reach Python. Entries are read in batches by the C batch reader
(sources/fastread.c) or, where it cannot be built, by `python_batch` (systemd-python's raw `_get`,
without its converters, which cost 4-5x: see the journal read limits); both follow one contract
and one definition of a line (`line_of`, `message_text`). Lifecycle records count only when
journald says PID 1 wrote them (`_PID=1` is a trusted field: no process can forge it), so a line
"Scheduled restart job" on a service's stdout, or a forged MESSAGE_ID sent through the native
protocol, moves nothing.

The parts, by job: journal_batch.py (the line definition, the processes' templates, systemd-python's
batch reader), journal_records.py (PID 1's and systemd-coredump's records), journal_files.py (which journal,
second readers, entries gone, damaged files), journal_pages.py (the mapped file pages and their release).
This module follows the journal: matches, positions, `read()`, the kernel's lines (OOM kills, GPU faults).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from systemd._reader import INVALIDATE, _Reader

from crashdoc.events import Lifecycle, LifecycleRecord, LogLine, WatchRule
from crashdoc.sources.journal_batch import (
    AT_END,
    MAX_MESSAGE_CHARS,
    STOPPED,
    Processes,
    ReadStats,
    line_of,
    message_text,
    process_line,
    python_batch,
)
from crashdoc.sources.journal_files import JournalFiles, realtime_usec, unreadable_journal_files
from crashdoc.sources.journal_pages import MappedPages, release_journal_pages
from crashdoc.sources.journal_records import coredump_record, optional_raw, pid1_record
from crashdoc.sources.lifecycle import COREDUMP_MESSAGE_ID, kernel_oom_unit, may_be_gpu_line
from crashdoc.text import terminal_safe

if TYPE_CHECKING:
    from crashdoc.gpu_events import GpuEvent
    from crashdoc.sources.fastread import BatchReader, ReadAhead
    from crashdoc.sources.kernel_gpu import KernelGpuReader

TRIM_CHECK_EVERY = 500  # entries read between two looks at how many file pages are mapped (a batch of the C reader)
# (500, not 2000: where the watched units are a tenth of the journal, 2000 entries read span ten times as many
# pages, and the peak while catching up went from 8 to 15 MB above the rest)
# release the journal pages once this many bytes of file pages were mapped since (checked once a batch while the next
# is walked: a 2M-entry catch-up's VmHWM 50.1 MB at 2 MB, 48.9-49.1 at 1 MB and 4% slower; 4 MB held 8 MB of them)
TRIM_ABOVE = 1 << 20
# `diagnose` (read once, then exit): 64x looser (64 MB), since each release costs the page faults of touching the
# current windows again, and clean shared file pages are cheap in a short-lived process; none at the end (~7 ms)
TRIM_ONCE_FACTOR = 64
BACKFILL_LIMIT = 5_000  # entries of a newly found unit read back from before it was found (see _found)
_INIT_SCOPE = b"init.scope"
_STOP_BATCH = (_INIT_SCOPE, b"systemd-coredump@")  # the batch readers leave these entries to read()

__all__ = [  # what others import from here, wherever it is defined
    "MAX_MESSAGE_CHARS",
    "JournalSource",
    "UnitFilter",
    "line_of",
    "message_text",
    "python_batch",
    "release_journal_pages",
    "unreadable_journal_files",
]


@dataclass(slots=True)
class UnitFilter:
    """Which units are watched, with their role; names are matched once and remembered."""

    rules: Sequence[WatchRule]
    ignore: frozenset[str] = frozenset()  # e.g. crashdoc's own unit
    _cache: dict[str, str | None] = field(default_factory=dict)
    _raw: dict[bytes, str | None] = field(default_factory=dict)  # the journal's raw _SYSTEMD_UNIT values

    def role_of_raw(self, unit_raw: bytes) -> str | None:
        """`role_of` of a journal field's bytes."""
        try:
            return self._raw[unit_raw]
        except KeyError:
            if len(self._raw) > 10_000:
                self._raw.clear()
            role = self._raw[unit_raw] = self.role_of(unit_raw.decode("utf-8", "replace"))
            return role

    def forget(self) -> None:
        """The rules changed: decide every unit again."""
        self._cache.clear()
        self._raw.clear()

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


Event: TypeAlias = "LogLine | LifecycleRecord | GpuEvent"  # a GPU fault's record is imported with the kernel's reader


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
        """`once`: read to the end one time (`diagnose`), not followed. `build_dir`: where the C batch
        reader (sources/fastread.c) is built and kept; None, or where it cannot be built, reads with
        systemd-python (`fast_reader` says why)."""
        self.units = units
        if directory and not files and not os.path.isdir(directory):
            raise FileNotFoundError(f"journal folder {directory} does not exist")
        self._journal = JournalFiles(directory if not files else None, tuple(files or ()))
        self.reader = self._journal.reader()
        self.stats = ReadStats()
        self._pages = MappedPages(TRIM_ABOVE * (TRIM_ONCE_FACTOR if once else 1), None if once else TRIM_ABOVE // 2)
        self.at_end = False  # the last read() reached the newest entry
        self.cursor_gone = False  # seek_cursor(): the saved entry is gone, reading resumed after it
        self._cursor: str | None = None
        self._role = units.role_of_raw  # raw _SYSTEMD_UNIT -> role (None: not watched)
        # (unit, pid) -> the template of the process's lines (unit, PID, run), made on its first line
        self._processes = Processes()
        self._names: set[bytes] = set()  # the watched units' names the reader matches
        self._invalidated = False  # journal files were added or removed since the last read
        self._gone_taken = 0
        self._gpu_asked = False  # the NVIDIA driver's kernel lines (Xid, SXid, fallen off the bus): `read_gpu_events`
        self._gpu_lines: KernelGpuReader | None = None  # their reader, made at the first one
        self.driver_loaded = False  # a GPU event said the NVIDIA driver loaded: the host's GPUs may have changed
        self._batch: BatchReader | None = None
        # the C reader: read() walks the next batch while the caller works, to the journal's end (`diagnose`), or
        # while the daemon catches up; once caught up (`_following`) the daemon reads with the plain batch reader
        self._ahead: ReadAhead | None = None
        self._once, self._following = once, False
        self.fast_reader = "not asked for (no folder to build it in)"  # "" when the C reader reads
        if build_dir is not None:
            from crashdoc.sources.fastread import batch_reader, read_ahead

            self._batch, self.fast_reader = batch_reader(self.reader, build_dir)
            self._ahead = read_ahead(build_dir) if self._batch is not None else None
        # how the reader was placed, while it stands on no entry (a walk from there is dropped by placing it again)
        self._place: Callable[[], None] | None = self.reader.seek_head
        self._walked = WalkedEntries(self, self._ahead)
        self.walking = self._walked.walking  # a walk reads ahead now: the caller's work meanwhile is not waited for
        self._names |= self._journal_names()
        self._match()
        self._pages.release()  # looking the names up mapped a window of every file

    # --- what the reader lets through ------------------------------------------------------

    def _journal_names(self) -> set[bytes]:
        """The watched units' names the journal holds: the values of _SYSTEMD_UNIT (units that wrote)
        and UNIT (units PID 1 wrote about: one that failed before printing anything)."""
        names: set[bytes] = set()
        for name in ("_SYSTEMD_UNIT", "UNIT"):
            try:
                values = _Reader.query_unique(self.reader, name)
            except OSError:
                continue
            names.update(v for v in values if self._role(v) is not None)
        return names

    def _match(self) -> None:
        """Let libsystemd skip everything crashdoc does not read: a match walks only the matching
        entries (through each value's entry arrays), so an unwatched entry (half of a busy GPU host's
        journal, or nine tenths) costs nothing instead of a `_next()` and a look at its unit.

        The terms: the watched units' entries; PID 1's (`init.scope`: its records about the watched
        units, and the start records that name a unit new to the journal, see `_found`); kernel lines
        (OOM kills, GPU faults); core dumps. Each value costs every step of the walk (~0.1 us per
        entry read): `_PID=1` with `UNIT=` of each unit and two MESSAGE_IDs for the start records
        walked at 1.8 us per entry where these terms walk at 1.0 (bench/README.md), and PID 1 writes
        little beside its records about units. `read()` checks each entry as before."""
        r = self.reader
        add = _Reader.add_match
        if self._ahead is not None:  # a walk reading ahead keeps PID 1's records about these units for Python
            self._ahead.names = tuple(self._names)
        r.flush_matches()
        for name in (*sorted(self._names), _INIT_SCOPE):
            add(r, b"_SYSTEMD_UNIT=" + name)
        r.add_disjunction()
        add(r, b"_TRANSPORT=kernel")
        r.add_disjunction()
        add(r, b"MESSAGE_ID=" + COREDUMP_MESSAGE_ID.encode())

    def _rematch(self) -> None:
        """New matches, the reader staying where it is: the entry it is on (if any) stays the current
        one, so the next read goes on after it (changing the matches forgets the current entry)."""
        self._walked.settle()
        r = self.reader
        try:
            here = r._get_cursor()
        except OSError:
            here = None
        self._match()
        if here is None:
            return
        try:
            r.seek_cursor(here)
            if r._next() and not r.test_cursor(here):  # it does not match any more: read the next one
                r.seek_cursor(r._get_cursor())
        except OSError:
            pass

    def watch_units(self, names: Iterable[str]) -> None:
        """Units D-Bus names (loaded, or new): matched from now on, before they write anything."""
        raw = {n.encode() for n in names} - self._names
        raw = {n for n in raw if self._role(n) is not None}
        if raw:
            self._names |= raw
            self._rematch()

    def _found(self, unit_raw: bytes) -> list[Event]:
        """PID 1 named a watched unit the reader does not match yet (a unit new to the journal that
        matches a glob): match it from here on, and read back its entries written before this one
        (a process may print before PID 1's start record reaches the journal)."""
        self._names.add(unit_raw)
        self._rematch()
        try:
            here = self.reader._get_cursor()
        except OSError:
            return []
        side = self._journal.side_reader()
        if side is None:
            return []
        out: list[Event] = []
        try:
            side.add_match(b"_SYSTEMD_UNIT=" + unit_raw)
            side.seek_cursor(here)
            back = 0
            while back < BACKFILL_LIMIT and side._previous():
                back += 1
            for i in range(back):  # forward again from the oldest, which is the current entry
                if i and not side._next():
                    break
                event = self._other_entry(side._get, side._get_realtime)
                if event is not None:
                    out.append(event)
        except OSError:
            pass
        finally:
            side.close()
        return out

    def read_gpu_events(self) -> None:
        """Also hand out the kernel's GPU fault lines as `GpuEvent`s, in order among the other events (`read`).
        Kernel lines only: a unit printing "NVRM: Xid" is no kernel. Their reader (~7 ms of imports) comes with one."""
        self._gpu_asked = True

    # --- positioning ---------------------------------------------------------------------

    def seek_head(self) -> None:
        self._walked.settle()
        self.reader.seek_head()
        self._place = self.reader.seek_head

    def seek_tail(self) -> None:
        """Start after the newest entry: only what happens from now on."""
        self._walked.settle()
        self._place = None
        self.reader.seek_tail()
        self.reader._previous()  # libsystemd needs a step to settle on the tail

    def seek_since(self, when: datetime | float) -> None:
        usec = realtime_usec(when)
        self._walked.settle()
        self.reader.seek_realtime(usec)
        self._place = partial(self.reader.seek_realtime, usec)

    def seek_cursor(self, cursor: str) -> bool:
        """Resume after `cursor`; False when it is no cursor libsystemd can place.

        When its entry is gone (rotated away and vacuumed while crashdoc was down, or a volatile
        journal after a reboot), libsystemd places the reader by the cursor's sequence number or
        time, and reading goes on with the oldest entry after it: `cursor_gone` says so, and the
        entries lost in between count in `stats.gone`. Jumping to the end instead would lose every
        entry written since, and the saved state with them.
        """
        self.cursor_gone = False
        self._walked.settle()
        self._place = None
        r = self.reader
        try:
            r.seek_cursor(cursor)
            landed = r._next()
        except (OSError, ValueError):
            return False
        self._cursor = cursor
        self._pages.release()  # placing the reader touched a window of every file
        gone = self._journal.gone_after(cursor)  # asked without matches: the entry may exist and not match
        self.cursor_gone = gone is not None
        self.stats.gone += gone or 0
        try:
            if landed and not r.test_cursor(cursor):
                # on the first matching entry after it: place the reader so that read() returns it (a step
                # back is not enough when that entry is the journal's first: nothing before)
                r.seek_cursor(r._get_cursor())
        except OSError:
            pass
        return True

    def take_gone(self) -> int:
        """Entries found gone (`stats.gone`) since the last call: what to report."""
        new, self._gone_taken = self.stats.gone - self._gone_taken, self.stats.gone
        return new

    @property
    def cursor(self) -> str | None:
        """The cursor of the last entry `read()` returned past."""
        return self._cursor

    # --- reading -------------------------------------------------------------------------

    def read(self, limit: int = 5000) -> list[Event]:
        """Up to `limit` entries' worth of events; an empty list when caught up.

        The hot path of the daemon and of `diagnose`. A batch reader returns the lines of processes
        already seen (their template is in `_processes`) and stops on every other entry (a process's
        first line, PID 1's records, core dumps, kernel lines): those are read here, with their own
        rules, and the batch goes on after them. Until the journal's end (`diagnose`: always; the daemon: while it
        catches up, then it follows with the plain batch reader) the C reader walks the next batch while the caller
        works (`ReadAhead`, which keeps those entries for `WalkedEntries`): one batch a call, walked while the
        caller handled the last call's events (with that call's `limit`), ended early only where the reader must
        be read here (PID 1 naming a unit not matched yet). A walk never goes on past the end: once there, the
        reader is the caller's (cursor saves, rotation, vacuum) as without one."""
        if self._invalidated:
            self._invalidated = False
            self._count_vacuumed()
        self._place = None  # from here on the reader stands on the entries it read
        ahead = None if self._following else self._ahead
        batch = ahead or self._batch or python_batch
        r = self.reader
        processes = self._processes
        stats = self.stats
        events: list[Event] = []
        stepped = lines = 0
        self.at_end = False
        # reading ahead, a batch is what the caller handles next (the walk goes on while the caller works)
        chunk = limit if ahead is not None else TRIM_CHECK_EVERY
        while stepped < limit:
            entries, status, n, errors = batch(
                r,
                min(chunk, limit - stepped),
                _STOP_BATCH,
                processes,
                MAX_MESSAGE_CHARS,
                line_of,
                message_text,
            )
            stepped += n
            if errors:
                stats.errors += errors
                stats.last_error = "unreadable entry"
            events += entries
            lines += len(entries)
            if status == STOPPED:  # the reader sits on an entry to read with its own rules
                try:
                    event = self._other_entry(r._get, r._get_realtime, events)
                except OSError as exc:
                    stats.errors += 1
                    stats.last_error = f"unreadable entry: {exc}"
                    event = None
                if event is not None:
                    events.append(event)
                if ahead is not None:  # the caller handles these while the next batch is walked
                    ahead.start(r, limit, _STOP_BATCH, processes, MAX_MESSAGE_CHARS)
                    break
            elif status == AT_END:
                self.at_end = True
                self._following = not self._once  # the daemon caught up: no walk from here on
                break
            elif status < 0:
                stats.errors += 1
                stats.last_error = f"journal read failed: {os.strerror(-status)}"
                self.at_end = True  # do not spin on a broken file: try again on the next wake-up
                break
            self._pages.bound(self.at_end)
            if ahead is not None:  # one walked batch a call (walked with the last call's limit, which may be less)
                break
        stats.lines += lines
        if stepped:
            stats.entries += stepped
            walked = ahead.position() if ahead is not None else None
            try:  # a walk reading ahead owns the reader: it said where the events handed out end
                self._cursor, stats.last_timestamp = walked or (r._get_cursor(), r._get_realtime() / 1e6)
            except OSError:
                pass
        if self.at_end:  # everything written was passed, what the matches skipped included
            stats.last_timestamp = max(stats.last_timestamp, self.newest_timestamp() or 0.0)
        self._pages.bound(self.at_end)  # after the newest time: it touched every file's header (~64 KB of pages each)
        return events

    def start_reading(self, limit: int) -> None:
        """Reading ahead (`once`, the C reader): walk the next `limit` entries now, in a thread, while the caller
        prepares its first read() (`diagnose` loads its library), from where the reader was placed (seek_head,
        seek_since) or the entry it is on; without it, nothing."""
        if self._ahead is not None:
            placed = self._place is not None  # on no entry yet: a walk dropped before any read places it again
            self._ahead.start(self.reader, limit, _STOP_BATCH, self._processes, MAX_MESSAGE_CHARS, placed)

    def _count_vacuumed(self) -> None:
        """Journal files went away (a vacuum) while reading was behind: count the entries after the
        position that went with them. Caught up, the reader had passed everything the files held
        (give or take the last milliseconds' entries, which a vacuum of archived files cannot hold)."""
        if self.at_end or self._cursor is None:
            return
        self.stats.gone += self._journal.gone_after(self._cursor) or 0

    def _other_entry(self, get, realtime, events: list[Event] | None = None) -> Event | None:
        """An entry the batch readers leave alone (no unit, PID 1, a core dump, a process's first line),
        read with its own rules. `events`: where a newly found unit's earlier entries go (`_found`)."""
        try:
            unit_raw = get("_SYSTEMD_UNIT")
        except KeyError:
            # kernel lines have no unit; the OOM killer's names the victim's cgroup
            return self._kernel_record(get, realtime, events)
        if self._role(unit_raw) is not None:
            return self._first_line(get, realtime, unit_raw)
        if unit_raw == _INIT_SCOPE:
            record = pid1_record(get, realtime, self.units.role_of)
            if record is not None:
                self._processes.forget(record.unit)  # its PIDs may be reused by the next run
                self.stats.lifecycle += 1
            if events is not None and get("_PID") == b"1":
                named = optional_raw(get, "UNIT")
                if named is not None and named not in self._names and self._role(named) is not None:
                    events += self._found(named)
            return record
        if unit_raw.startswith(b"systemd-coredump@"):
            return coredump_record(get, realtime, self.units.role_of)
        return None

    def _first_line(self, get, realtime, unit_raw: bytes) -> LogLine | None:
        """A line the batch readers stopped on: its process is new (its template is made and kept, and
        this line carries its command line), or it is read outside `read()` (`run_so_far`)."""
        line = process_line(self._processes, get, realtime, unit_raw, line_of)
        self.stats.lines += line is not None
        return line

    def _kernel_record(self, get, realtime, events: list[Event] | None = None) -> LifecycleRecord | None:
        try:
            if get("_TRANSPORT") != b"kernel":
                return None
            message = get("MESSAGE")
        except KeyError:
            return None
        if self._gpu_asked and may_be_gpu_line(message):
            if self._gpu_lines is None:
                from crashdoc.sources.kernel_gpu import KernelGpuReader

                self._gpu_lines = KernelGpuReader()
            text = terminal_safe(message[:MAX_MESSAGE_CHARS].decode("utf-8", "replace"))
            found = self._gpu_lines.feed(text, realtime() / 1e6)  # a record may hold none, one or several
            if events is not None:
                events += found
            self.driver_loaded = self.driver_loaded or any(e.kind == "driver-loaded" for e in found)
            return None
        if b"oom-kill:" not in message:
            return None
        text = message.decode("utf-8", "replace")
        unit = kernel_oom_unit(text)
        if unit is None or self.units.role_of(unit) is None:
            return None
        self.stats.lifecycle += 1
        return LifecycleRecord(unit, Lifecycle.OOM_KILL, realtime() / 1e6, message=text[:500])

    def run_so_far(self, unit: str, invocation: str, limit: int = 20_000) -> list[LogLine]:
        """The lines a run in progress wrote before crashdoc started (its "ready" line, its
        server_args), read with a separate reader so the main position does not move."""
        lines: list[LogLine] = []
        reader = self._journal.side_reader()
        if reader is None:
            return lines
        unit_raw = unit.encode()
        try:
            reader.add_match(f"_SYSTEMD_INVOCATION_ID={invocation}")
            reader.add_match(b"_SYSTEMD_UNIT=" + unit_raw)
            reader.seek_head()
            batch = self._batch or python_batch
            while len(lines) < limit:
                found, status, _, _ = batch(
                    reader, limit - len(lines), (), self._processes, MAX_MESSAGE_CHARS, line_of, message_text
                )
                lines += found
                if status != STOPPED:
                    break
                line = self._first_line(reader._get, reader._get_realtime, unit_raw)
                if line is not None:
                    lines.append(line)
        except OSError:
            pass
        finally:
            reader.close()
        return lines

    def newest_timestamp(self, oldest: bool = False) -> float | None:
        """Realtime of the newest entry (`oldest`: the oldest), whatever the matches, from the files' headers: the
        lag (crashdoc_journal_lag_seconds, asked every second while behind), diagnose's progress. A walk reading
        ahead is waited for, not dropped: placing the reader again made libsystemd look the position up in every
        file (~90 MB of a 2M-entry journal's pages mapped each second while the daemon caught up)."""
        self._walked.wait()
        try:
            usec = self.reader._get_start() if oldest else self.reader._get_end()
        except OSError:
            return None
        return usec / 1e6 if usec else None

    # --- waiting -------------------------------------------------------------------------

    def fileno(self) -> int:
        self._walked.settle()
        return self.reader.fileno()

    def process(self) -> int:
        """Acknowledge an inotify wake-up (rotation, new files, appends)."""
        self._walked.settle()
        change = self.reader.process()
        if change == INVALIDATE:  # files added or removed: a vacuum may have taken unread entries
            self._invalidated = True
        return change

    def close(self) -> None:
        self._walked.settle()
        self.reader.close()

    def rewatch(self, rules: Sequence[WatchRule]) -> None:
        """The configuration changed which units are watched (SIGHUP): decide every unit again, and match
        the units the journal holds that the rules now watch (their lines count from here on). The filter
        is shared with the engine and the D-Bus watcher, so it changes in place."""
        self.units.rules = tuple(rules)
        self.units.forget()
        self._walked.settle()
        self._processes.clear()  # a process of a unit no longer watched must not be read on
        self._names = self._journal_names()
        self._rematch()


class WalkedEntries:
    """The entries a read-ahead walk (`ReadAhead`, `diagnose`) kept for Python, read with the source's rules
    (`_other_entry`'s), and the walk's hold on the reader: `settle()` before the reader is used outside read()."""

    def __init__(self, source: JournalSource, ahead: ReadAhead | None) -> None:
        self.source, self.ahead = source, ahead
        if ahead is not None:
            ahead.first_line, ahead.other_entry = self.first_line, self.other_entry

    def walking(self) -> bool:
        """A walk reads ahead now (`diagnose`): what the caller does meanwhile, the next read() does not wait for."""
        return self.ahead is not None and not self.source._following and self.ahead.walking()

    def settle(self) -> None:
        if self.ahead is not None:
            self.ahead.settle(self.source.reader, self.source._place or (lambda: None))

    def wait(self) -> None:
        """Before the reader is asked what does not move it: the walk done, its batch kept for the next read."""
        if self.ahead is not None:
            self.ahead.wait()

    def first_line(self, fields: dict[str, bytes], usec: int, unit_raw: bytes) -> LogLine | None:
        """A process's first line (counted with its batch)."""
        source = self.source
        if source._role(unit_raw) is None:
            return None
        return process_line(source._processes, fields.__getitem__, lambda: usec, unit_raw, line_of)

    def other_entry(self, fields: dict[str, bytes], usec: int) -> list[Event]:
        """PID 1's record, a core dump or a kernel line: the events it makes, in order."""
        found: list[Event] = []
        event = self.source._other_entry(fields.__getitem__, lambda: usec, found)
        return [*found, event] if event is not None else found
