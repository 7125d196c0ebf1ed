"""A cache of compiled, validated data (the signature library, derived signatures) on disk.

Loading the YAML library and validating it against the JSON Schema costs ~0.3 s per process,
which an on-call engineer pasting one traceback pays every time. Validation is done once;
the result is kept as plain JSON (never a pickle: nothing in a cache file can run code, and a
file written by another crashdoc version is merely stale) under a key made of the content
digest of every input and crashdoc's version. A missing or stale entry is rebuilt and
written; a damaged one is ignored with a warning and rebuilt; a folder that cannot be
written means no cache, silently (a read-only home, a sandboxed unit).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from crashdoc import __version__
from crashdoc.lean import blake2b

CACHE_FORMAT = 1  # bump when the layout of cache files changes
T = TypeVar("T")


def default_cache_directory() -> Path | None:
    """`$XDG_CACHE_HOME/crashdoc`, else `~/.cache/crashdoc` (None when there is no home)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if base and os.path.isabs(base):
        return Path(base) / "crashdoc"
    home = os.environ.get("HOME", "")
    return Path(home) / ".cache" / "crashdoc" if home and os.path.isabs(home) else None


class Digest:
    """The key of a cache entry: crashdoc's version, the cache format and every input, in order."""

    def __init__(self, *parts: str) -> None:
        self._hash = blake2b(digest_size=20)  # computed only when the files' stamps changed
        self.add(__version__, str(CACHE_FORMAT), *parts)

    def add(self, *parts: str) -> Digest:
        for part in parts:
            self.add_bytes(part.encode("utf-8", "surrogateescape"))
        return self

    def add_bytes(self, data: bytes) -> Digest:
        self._hash.update(len(data).to_bytes(8, "little"))
        self._hash.update(data)
        return self

    def add_files(self, paths: Iterable[Path]) -> Digest:
        """Each file's path and content; a file that cannot be read counts as its error."""
        for path in paths:
            self.add(str(path))
            try:
                self.add_bytes(path.read_bytes())
            except OSError as exc:
                self.add(f"unreadable: {exc.errno}")
        return self

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


class CompiledCache:
    """Entries `<name>.json` in `folder`, each holding the key it was built for and plain data."""

    def __init__(self, folder: Path | str | None, warn: Callable[[str], None] | None = None) -> None:
        self.folder = Path(folder) if folder is not None else None
        self._warn = warn if warn is not None else _stderr
        self.hits = 0  # for tests and the bench: where the last loads came from
        self.builds = 0

    def path(self, name: str) -> Path | None:
        return self.folder / f"{name}.json" if self.folder is not None else None

    def get(self, name: str, key: str | Callable[[], str], stamp: Any = None) -> Any | None:
        """The data stored under `name` for `key`; None when missing, stale or damaged (with a warning).

        `stamp` (e.g. the inputs' sizes and modification times) spares computing `key` (reading and
        hashing every input) when it equals the stamp stored with the entry."""
        doc = self._read(name)
        if doc is None:
            return None
        if (
            stamp is not None
            and doc.get("stamp") == stamp
            and doc.get("format") == CACHE_FORMAT
            and doc.get("crashdoc") == __version__
        ):
            return doc["data"]
        wanted = key() if callable(key) else key
        if doc["key"] != wanted or doc.get("format") != CACHE_FORMAT:
            return None  # stale: other inputs, another crashdoc
        if stamp is not None:  # same content, touched files: remember their new stamp
            self.put(name, wanted, doc["data"], stamp)
        return doc["data"]

    def _read(self, name: str) -> dict[str, Any] | None:
        path = self.path(name)
        if path is None:
            return None
        try:
            raw = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return None  # no cache yet, or none possible here
        except OSError as exc:
            self._warn(f"cannot read the cache {path} ({exc.strerror or exc}); loading without it")
            return None
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or not isinstance(doc.get("key"), str) or "data" not in doc:
                raise ValueError("not a crashdoc cache file")
        except ValueError as exc:
            self._warn(f"ignoring the damaged cache {path} ({str(exc)[:120]}); rebuilding it")
            return None
        return doc

    def put(self, name: str, key: str, data: Any, stamp: Any = None) -> bool:
        """Store `data` (JSON-able) atomically; False when the folder cannot be written (no cache)."""
        path = self.path(name)
        if path is None:
            return False
        import tempfile  # writing is the rare case: 3 ms of imports that a cache hit never needs

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=path.parent)
        except OSError:
            return False
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(
                    {"format": CACHE_FORMAT, "crashdoc": __version__, "key": key, "stamp": stamp, "data": data},
                    handle,
                    separators=(",", ":"),
                    ensure_ascii=False,
                )
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except (OSError, TypeError, ValueError):
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        return True

    def load(
        self,
        name: str,
        key: str | Callable[[], str],
        build: Callable[[], T],
        encode: Callable[[T], Any | None],
        decode: Callable[[Any], T],
        stamp: Any = None,
    ) -> T:
        """`decode(cached data)` when the cache holds `key`, else `build()`, stored as `encode(result)`
        (unless that is None).

        `build` may raise (a library with problems): nothing is stored then. A `decode` that
        fails on what was read means a damaged file: warned about, rebuilt and overwritten."""
        digest: list[str] = []

        def wanted() -> str:  # computed at most once, and before `build` reads the inputs
            if not digest:
                digest.append(key() if callable(key) else key)
            return digest[0]

        data = self.get(name, wanted, stamp)
        if data is not None:
            try:
                value = decode(data)
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                self._warn(
                    f"ignoring the damaged cache {self.path(name)} "
                    f"({type(exc).__name__}: {str(exc)[:120]}); rebuilding it"
                )
            else:
                self.hits += 1
                return value
        built_for = wanted()
        value = build()
        self.builds += 1
        encoded = encode(value)
        if encoded is not None:  # None: this value cannot be cached faithfully
            self.put(name, built_for, encoded, stamp)
        return value


def file_stamp(paths: Iterable[Path]) -> list[list[Any]]:
    """Path, size, modification time (ns) and inode of each file: when all are unchanged the content
    digest is not computed again (as git's index does); a file that cannot be stat'ed gets [path]."""
    stamp: list[list[Any]] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamp.append([str(path)])
            continue
        stamp.append([str(path), st.st_size, st.st_mtime_ns, st.st_ino])
    return stamp


def _stderr(message: str) -> None:
    print(f"crashdoc: {message}", file=sys.stderr)
