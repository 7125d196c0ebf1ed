"""The journal position, kept across restarts of crashdoc.

Written atomically (write a temporary file, fsync it, rename it over the old one, fsync the
folder) and only after the entries up to that cursor had their effects, so a crash of
crashdoc at any moment re-reads at most what it had not finished, and never skips. A
folder that is read-only or full is reported, and crashdoc keeps working in memory.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_FILE = "state.json"
FORMAT_VERSION = 2  # 2: the engine's state as JSON (`diagnosis.snapshot`); 1 (crashdoc 0.1.0): a base64 pickle
# The state file's text in pieces, in order (`CursorStore.encode`): a str, or bytes holding the zlib-compressed UTF-8
# of a text (the engine keeps its units' texts so: `diagnosis.snapshot.SavedText`). Written piece by piece, never
# joined, so a save holds no copy of a state of megabytes.
Payload = tuple[str | bytes, ...]
_WRITE_SIZE = 1 << 16  # characters of a piece encoded, or bytes decompressed, and written at a time


@dataclass(slots=True)
class SavedState:
    cursor: str | None = None
    data: dict[str, Any] = field(default_factory=dict)  # small facts (e.g. when it was saved)
    engine: dict[str, Any] | None = None  # the engine's snapshot at that cursor (versioned JSON)
    legacy_engine: bytes = b""  # format 1: crashdoc 0.1.0's pickled engine, converted once on load
    saved_at: float = 0.0
    warning: str = ""  # why the saved state could not be used, if it could not


class CursorStore:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / STATE_FILE
        self.writable = True
        self.write_errors = 0
        self.last_error = ""
        self.last_saved: str | None = None

    def load(self) -> SavedState:
        """The saved position, or an empty state with a warning saying why it is unusable."""
        # a kill -9 during a save leaves its temporary file behind (one per killed process): sweep them
        for stale in self.directory.glob(f".{STATE_FILE}.*.tmp"):
            try:
                stale.unlink()
            except OSError:
                pass
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return SavedState()
        except OSError as exc:
            return SavedState(warning=f"cannot read {self.path}: {exc.strerror or exc}; starting at the journal's end")
        try:
            doc = json.loads(raw.decode("utf-8"))
            if not isinstance(doc, dict) or doc.get("version") not in (1, FORMAT_VERSION):
                raise ValueError("unknown format")
            cursor = doc.get("cursor")
            if cursor is not None and (not isinstance(cursor, str) or "=" not in cursor):
                raise ValueError("bad cursor")
            data = doc.get("data") or {}
            if not isinstance(data, dict):
                raise ValueError("bad data")
            engine, legacy = doc.get("engine"), b""
            if doc["version"] == 1:
                engine, legacy = None, base64.b64decode(engine or "", validate=True)
            elif engine is not None and not isinstance(engine, dict):
                raise ValueError("bad engine state")
            saved_at = float(doc.get("saved_at") or 0.0)
            if not math.isfinite(saved_at):
                raise ValueError("bad saved_at")
        except (ValueError, TypeError, RecursionError, UnicodeDecodeError, binascii.Error) as exc:  # any damage
            kept = self.keep_aside()
            return SavedState(warning=f"{self.path} is unreadable ({exc}){kept}; starting at the journal's end")
        self.last_saved = cursor
        return SavedState(cursor=cursor, data=data, engine=engine, legacy_engine=legacy, saved_at=saved_at)

    def keep_aside(self) -> str:
        """Move a state file this crashdoc cannot use (damaged, or written by a newer crashdoc) to
        `state.json.unusable`, so that the next save does not destroy what another release could still read;
        the words to add to the log line ("" when there was nothing to move)."""
        aside = self.path.with_name(f"{STATE_FILE}.unusable")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            return f" (it could not be kept aside: {exc.strerror or exc})"
        return f" (kept as {aside})"

    def save(
        self,
        cursor: str | None,
        data: dict[str, Any] | None = None,
        engine: dict[str, Any] | Sequence[str | bytes] | str | None = None,
    ) -> bool:
        """Persist atomically; False (and `last_error`) when the folder cannot take it."""
        return self.write(cursor, self.encode(cursor, data, engine))

    @staticmethod
    def encode(
        cursor: str | None,
        data: dict[str, Any] | None = None,
        engine: dict[str, Any] | Sequence[str | bytes] | str | None = None,
    ) -> Payload:
        """The state file's text in pieces: taken where the state is current, written (`write`) where it costs
        nothing. `engine`: the engine's snapshot, or its JSON text already made, whole or in pieces
        (`diagnosis.engine.snapshot_parts`)."""
        doc = {
            "version": FORMAT_VERSION,
            "cursor": cursor,
            "saved_at": time.time(),
            "data": data or {},
            "engine": engine if isinstance(engine, dict) else None,
        }
        text = json.dumps(doc, separators=(",", ":"))
        if engine is None or isinstance(engine, dict):
            return (text,)
        # "engine" is the last key: its null becomes the text
        return (text[: -len("null}")], *((engine,) if isinstance(engine, str) else engine), "}")

    def write(self, cursor: str | None, payload: Payload) -> bool:
        """`encode`'s pieces for `cursor`, persisted atomically; False (and `last_error`) when the folder cannot
        take them. One writer at a time (one temporary file per process)."""
        tmp = self.path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
            try:
                for piece in payload:
                    for block in _blocks(piece):
                        view = memoryview(block)
                        while view:
                            view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            self.writable = False
            self.write_errors += 1
            self.last_error = f"cannot save state in {self.directory}: {exc.strerror or exc}"
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            return False
        self.writable = True
        self.last_saved = cursor
        return True


def _blocks(piece: str | bytes) -> Iterator[bytes]:
    """A `Payload` piece's UTF-8 bytes, at most `_WRITE_SIZE` of them at a time."""
    if isinstance(piece, str):
        for at in range(0, len(piece), _WRITE_SIZE):
            yield piece[at : at + _WRITE_SIZE].encode()
        return
    inflate = zlib.decompressobj()
    while piece:
        yield inflate.decompress(piece, _WRITE_SIZE)
        piece = inflate.unconsumed_tail
    yield inflate.flush()


def entries_between(older: str | None, newer: str | None) -> int | None:
    """How many entries journald wrote after the one at `older`, up to the one at `newer`.

    From the cursors' sequence numbers (`s=` numbers journald's entries, one counter for all its
    files): more than the entries actually read means some were gone before they could be read
    (rotated away and vacuumed, a journal file dropped). None when the two cannot be compared.
    """
    a, b = _cursor_fields(older), _cursor_fields(newer)
    if a.get("s") is None or a.get("s") != b.get("s"):
        return None
    try:
        return int(b["i"], 16) - int(a["i"], 16)
    except (KeyError, ValueError):
        return None


def _cursor_fields(cursor: str | None) -> dict[str, str]:
    if not cursor:
        return {}
    return dict(part.split("=", 1) for part in cursor.split(";") if "=" in part)
