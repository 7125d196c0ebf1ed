"""Which journal is read (the host's, a folder, a set of files), second readers of it, and its damage: the
entries gone from under a saved position, the files libsystemd skips whole."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# systemd-python's C reader itself: its Python subclass `systemd.journal.Reader` adds converters crashdoc never
# uses, and its module imports logging, uuid, traceback and platform (~8 ms before `diagnose`'s first walk)
from systemd._reader import LOCAL_ONLY, _Reader

from crashdoc.sources.cursor import entries_between

DATA_THRESHOLD = 64 * 1024  # field bytes libsystemd hands over (MESSAGE is cut later, to MAX_MESSAGE_CHARS)


def open_reader(directory: str | None = None, files: Sequence[str] = ()) -> _Reader:
    """systemd-python's C reader of `files`, else the folder `directory`, else the local machine's journal (the
    flags `systemd.journal.Reader` picks: LOCAL_ONLY for the host's, none for files or a folder); OSError when
    it cannot be opened."""
    if files:
        return _Reader(0, None, list(files))
    return _Reader(0, directory) if directory else _Reader(LOCAL_ONLY)


def realtime_usec(when: datetime | float) -> int:
    """A time (epoch seconds, or a local datetime) as the C reader's `seek_realtime` takes it: microseconds, as
    `systemd.journal.Reader.seek_realtime` computes them from the datetime (the same entry found)."""
    if isinstance(when, int | float):
        when = datetime.fromtimestamp(when)
    return int(float(when.astimezone().strftime("%s.%f")) * 1000000)


@dataclass(frozen=True, slots=True)
class JournalFiles:
    """The journal a source reads: `files`, else the folder `directory`, else the host's journal."""

    directory: str | None = None
    files: tuple[str, ...] = ()

    def reader(self) -> Any:
        """A systemd-python reader of it, without matches (OSError when it cannot be opened)."""
        reader = open_reader(self.directory, self.files)
        reader.data_threshold = DATA_THRESHOLD
        return reader

    def side_reader(self) -> Any:
        """A second reader of the same journal, without matches (the position of the first stays); None
        when it cannot be opened."""
        try:
            return self.reader()
        except OSError:
            return None

    def gone_after(self, cursor: str) -> int | None:
        """None when the entry at `cursor` exists; else how many entries after it are gone (0: unknown),
        from the sequence number of the oldest entry after it, read without matches."""
        side = self.side_reader()
        if side is None:
            return None
        try:
            side.seek_cursor(cursor)
            if not side._next():
                return 0  # nothing at or after it: gone, and nothing to count against
            if side.test_cursor(cursor):
                return None
            between = entries_between(cursor, side._get_cursor())
            return max(0, between - 1) if between is not None else 0
        except (OSError, ValueError):
            return None
        finally:
            side.close()


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
            reader = open_reader(files=[path])
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
