"""What each SGLang release's launcher accepts: every option's dest, flags, type, choices, default, nargs.

A fix must be a command the release accepts: `--attention-backend` takes one of the release's backends, `tp_size`
in a message is the option `--tp-size`, `--enable-x` takes no value. These facts are read from each release's
own source (`authoring.argfacts`, `scripts/derive-argfacts.py`) and shipped in `data/argfacts.json.gz`,
deduplicated across releases: one record per distinct option declaration, with the releases it holds for.
The data is read on first use only (a log whose failure needs no candidate never pays for it).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = 1


class _Unknown:
    """A value the source does not state as a literal (a registry filled at run time, a computed default)."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __bool__(self) -> bool:
        return False


UNKNOWN: Any = _Unknown()


@dataclass(frozen=True, slots=True)
class Option:
    """One option as the release's argparse declares it."""

    dest: str  # the ServerArgs field: tp_size
    flags: tuple[str, ...]  # ("--tp-size", "--tensor-parallel-size")
    type: str  # int | float | str | bool | json | json_list_type | human_readable_int | ...
    choices: tuple[Any, ...] | None  # None: any value; UNKNOWN: a list known only at run time
    default: Any  # UNKNOWN when not a literal in the source
    nargs: str | int | None = None
    action: str = "store"  # store | store_true | store_false | boolean-optional | append | a custom action
    required: bool = False

    @property
    def flag(self) -> str:
        return self.flags[0]

    @property
    def switch(self) -> bool:
        """Takes no value on the command line."""
        return self.action in ("store_true", "store_false", "boolean-optional", "store_const")

    @property
    def many(self) -> bool:
        """Takes several values (`nargs='+'`)."""
        return self.nargs in ("+", "*") or (isinstance(self.nargs, int) and self.nargs > 1)

    def default_text(self) -> str | None:
        """The default as a command line would write it; None when unknown or unset."""
        value = self.default
        if value is UNKNOWN or value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list | tuple):
            return " ".join(str(v) for v in value) if value else None
        if isinstance(value, dict):
            return json.dumps(value)
        return str(value)

    def accepts(self, value: str) -> bool | None:
        """Would argparse take this value? True, False, or None when the facts cannot say."""
        if self.switch:
            return None
        words = value.split() if self.many else [value]
        for word in words:
            ok = _parses(self.type, word)
            if ok is False:
                return False
            if isinstance(self.choices, tuple) and self.choices:
                typed = _typed(self.type, word)
                if typed is not None and typed not in self.choices and word not in {str(c) for c in self.choices}:
                    return False
        if isinstance(self.choices, tuple) and self.choices:
            return True
        return True if self.type in ("int", "float", "str") else None

    def as_row(self) -> list[Any]:
        return [
            self.dest,
            list(self.flags),
            self.type,
            "?" if self.choices is UNKNOWN else (None if self.choices is None else list(self.choices)),
            [] if self.default is UNKNOWN else [self.default],
            self.nargs,
            self.action,
            self.required,
        ]

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Option:
        dest, flags, type_, choices, default, nargs, action, required = row[:8]
        return cls(
            dest=dest,
            flags=tuple(flags),
            type=type_,
            choices=UNKNOWN if choices == "?" else (None if choices is None else tuple(choices)),
            default=default[0] if default else UNKNOWN,
            nargs=nargs,
            action=action,
            required=bool(required),
        )


def _parses(type_: str, word: str) -> bool | None:
    if type_ == "int":
        try:
            int(word)
        except ValueError:
            return False
        return True
    if type_ == "float":
        try:
            float(word)
        except ValueError:
            return False
        return True
    if type_ == "json":
        try:
            json.loads(word)
        except ValueError:
            return False
        return True
    if type_ == "str":
        return True
    return None


def _typed(type_: str, word: str) -> Any:
    try:
        if type_ == "int":
            return int(word)
        if type_ == "float":
            return float(word)
    except ValueError:
        return None
    return word


class ArgFacts:
    """The options of one release, by flag and by dest."""

    def __init__(self, release: str, options: Iterable[Option]) -> None:
        self.release = release
        self.options = tuple(options)
        self._by_flag = {f: o for o in self.options for f in o.flags}
        self._by_dest: dict[str, Option] = {}
        for o in self.options:
            self._by_dest.setdefault(o.dest, o)

    @classmethod
    def of_release(cls, release: str, options: Iterable[Option]) -> ArgFacts:
        return cls(release, options)

    def __len__(self) -> int:
        return len(self.options)

    def option(self, flag: str) -> Option | None:
        """The option a flag (or an unambiguous prefix of one, as argparse allows) names."""
        found = self._by_flag.get(flag)
        if found is not None or not flag.startswith("--"):
            return found
        hits = {o.dest: o for f, o in self._by_flag.items() if f.startswith(flag)}
        return next(iter(hits.values())) if len(hits) == 1 else None

    def by_dest(self, dest: str) -> Option | None:
        return self._by_dest.get(dest)

    def dests(self) -> frozenset[str]:
        return frozenset(self._by_dest)


class FactsLibrary:
    """Every shipped release's facts, deduplicated; one release's `ArgFacts` built on demand.

    With a `loader` (the shipped file), the rows of every release (2.5 MB) are let go once a release's facts are
    built from them (0.1 MB: what a search keeps), and read again if another release or `releases_with` asks."""

    def __init__(
        self,
        rows: list[list[Any]],
        releases: tuple[str, ...],
        loader: Callable[[], tuple[list[list[Any]], tuple[str, ...]]] | None = None,
    ) -> None:
        self._rows, self._releases, self._loader = rows, releases, loader
        self._held = loader is None  # whether `_rows` holds the rows
        self._built: dict[str, ArgFacts] = {}

    def _load(self) -> None:
        if not self._held and self._loader is not None:
            self._rows, self._releases = self._loader()
            self._held = True

    @property
    def releases(self) -> tuple[str, ...]:
        if not self._releases:
            self._load()
        return self._releases

    @property
    def rows(self) -> list[list[Any]]:
        self._load()
        return self._rows

    def get(self, release: str) -> ArgFacts | None:
        """The facts of `release`, or None when it is not shipped."""
        if release in self._built:
            return self._built[release]
        if release not in self.releases:
            return None
        index = self.releases.index(release)
        options = [Option.from_row(r) for r in self.rows if index in _indexes(r[8])]
        facts = self._built[release] = ArgFacts(release, options)
        if self._loader is not None:  # read again when asked: a search wants one release's facts
            self._rows, self._held = [], False
        return facts

    def releases_with(self, flag: str) -> tuple[str, ...]:
        """The shipped releases whose launcher accepts `flag` (exactly that spelling)."""
        found: set[int] = set()
        for r in self.rows:
            if flag in r[1]:
                found |= _indexes(r[8])
        return tuple(self.releases[i] for i in sorted(found))


def _indexes(runs: str) -> set[int]:
    out: set[int] = set()
    for part in runs.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def _runs(indexes: Iterable[int]) -> str:
    spans: list[list[int]] = []
    for i in sorted(set(indexes)):
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def merge(per_release: Iterable[ArgFacts], order: Callable[[str], Any]) -> FactsLibrary:
    """One library from several releases' facts: identical declarations stored once."""
    facts = sorted(per_release, key=lambda f: order(f.release))
    releases = tuple(f.release for f in facts)
    by_row: dict[str, tuple[list[Any], set[int]]] = {}
    for index, one in enumerate(facts):
        for option in one.options:
            row = option.as_row()
            key = json.dumps(row, sort_keys=True)
            by_row.setdefault(key, (row, set()))[1].add(index)
    rows = [[*row, _runs(indexes)] for row, indexes in by_row.values()]
    rows.sort(key=lambda r: (r[0], r[8]))
    return FactsLibrary(rows, releases)


def dumps(library: FactsLibrary) -> bytes:
    """The stored form: gzip'd JSON, byte-identical for the same input."""
    body = {"format": FORMAT, "releases": list(library.releases), "options": library.rows}
    text = json.dumps(body, separators=(",", ":"), sort_keys=True)
    import gzip  # the stored form is written by the script that builds it; crashdoc only reads it (zlib)

    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def loads(raw: bytes) -> FactsLibrary:
    try:
        body = json.loads(zlib.decompress(raw, 31) if raw[:2] == b"\x1f\x8b" else raw)
    except (ValueError, zlib.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not argument-facts data: {exc}") from exc
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ValueError(f"argument-facts data of an unknown format (expected format {FORMAT})")
    return FactsLibrary(list(body["options"]), tuple(body["releases"]))


def _read_shipped() -> tuple[list[list[Any]], tuple[str, ...]]:
    try:  # beside this module, as the package installs it (importlib.resources: ~7 ms of imports)
        raw = (Path(__file__).with_name("data") / "argfacts.json.gz").read_bytes()
    except OSError:
        return [], ()
    library = loads(raw)
    return library.rows, library.releases


def load_shipped() -> FactsLibrary:
    """The package's facts for every shipped release, read on first use (a new object each call: no global)."""
    return FactsLibrary([], (), loader=_read_shipped)
