"""Signatures derived from SGLang's own raise and assert statements, one per message template.

The reviewed library cannot keep up with every release's hundreds of flag-naming checks, but
each check already says what it wants: its message names the flags, its condition says what
SGLang tests. `crashdoc signatures derive` turns each one into a `DerivedSignature`; the
package ships them for every release (`data/derived/`, `derived_store`), deduplicated across
releases (one record per exception type and template, with the releases and lines it is in).

They answer only what no reviewed signature matches, with a lower confidence. Loading is
lazy and cheap: the shipped index (what matching reads: id, type, pattern, releases) is read
on the first unmatched traceback, plain JSON (no schema check: the build script wrote it);
a record's rest (template, condition, fix, sites) is decompressed from its release range's chunk
(read with the index, kept compressed) when its signature is built or its release's checks are
searched; a literal-prefix index
(`derived_index`) finds the candidates for a message, each compiled on first use.
"""

from __future__ import annotations

import heapq
import json
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crashdoc.events import FlagChange
from crashdoc.matching.library import Signature
from crashdoc.matching.programs import KeptPrograms, LazyRegex
from crashdoc.text import LazyPattern

if TYPE_CHECKING:  # imported where the derived records are first read: `explain` of a healthy log never does
    from crashdoc.matching.derived_index import PrefixIndex
    from crashdoc.matching.derived_store import ShippedStore

DATA_FORMAT = 2
MAX_MESSAGE_CHARS = 4000  # what a message is matched on: patterns are anchored at its start
MAX_CAPTURE_CHARS = 200  # a hole's captured value, as kept in a diagnosis
CONFIDENCE = 0.6  # a derived answer: below any reviewed signature's
_RELEASE_PART = LazyPattern(r"(\d+)|\.?(post|rc|dev|a|b)(\d*)")


@dataclass(frozen=True, slots=True)
class DerivedSignature:
    """A check in SGLang's source that raises, as a signature: its message, flags, generic fix and releases."""

    id: str  # "derived-<12 hex>": hash of (exception type, template), stable across releases
    exception_type: str  # the short type: ValueError
    template: str  # SGLang's message with {} for its holes
    pattern: str  # RE2, anchored at the message start, holes as named captures within one line
    flags: tuple[str, ...]  # canonical --flags the message names
    env: tuple[str, ...]  # SGLANG_ variables it names
    condition: str  # the guarding `if`/`assert` source text (newest release)
    fix: tuple[FlagChange, ...]  # the generic change; empty when nothing can be justified
    summary: str  # one line: what to change and why
    sites: tuple[tuple[str, str, int, str], ...]  # (release, file, line, function) per release
    releases: tuple[str, ...]  # every release whose source holds this check, oldest first
    kind: str = "raise"  # raise | assert

    @property
    def title(self) -> str:
        first = self.template.split("\n", 1)[0].strip()
        text = f"{self.exception_type}: {first}"
        return text if len(text) <= 120 else text[:117] + "..."

    def checks(self) -> str:
        """What SGLang checks, in words: `raises X when <cond>` / `asserts <cond>`."""
        if self.kind == "assert":
            return f"asserts `{self.condition}`" if self.condition else "asserts a condition"
        if self.condition:
            return f"raises {self.exception_type} when `{self.condition}`"
        return f"raises {self.exception_type} unconditionally at this point"

    def evidence(self, known: Sequence[str] = ()) -> str:
        _, path, line, function = self.site()
        where = release_range(self.releases, known or self.releases)
        return f"derived from SGLang {where} {path}:{line} ({function}): {self.condition or self.checks()}"

    def runbook(self, known: Sequence[str] = ()) -> str:
        """The runbook of a derived signature: plainly derived, from which release and line, what SGLang checks."""
        release, path, line, function = self.site()
        where = release_range(self.releases, known or self.releases)
        flags = ", ".join(f"`{f}`" for f in (*self.flags, *self.env)) or "no flag"
        changes = "".join(f"\n- `{_describe(c)}`" for c in self.fix)
        fragment = max((p.strip() for p in self.template.split("{}")), key=len, default="")[:60].replace("'", ".")
        return (
            "## Why it happens\n"
            "This signature was **derived automatically from SGLang's source**; no one has reviewed it. "
            f"SGLang {where} {self.checks()} at `{path}:{line}` (in `{function}`, release {release}); "
            f"the message names {flags}.\n\n"
            f"Message template: `{self.template[:400]}`\n\n"
            "## Safe fix\n"
            f"{self.summary}{changes}\n\n"
            "Read the message and the condition before applying: the change is generic (read from their words), "
            "not a reviewed remedy.\n\n"
            "## How to confirm\n"
            f"`journalctl -u UNIT -g '{fragment}'`\n\n"
            "## Roll back\n"
            "Restore the previous launch script (or remove the drop-in) and restart the unit.\n"
        )

    def as_signature(self, category: str = "other", known: Sequence[str] = ()) -> Signature:
        """A library `Signature` view, so pages and runbook rendering treat it like any other."""
        _, path, line, _ = self.site()
        changes, summary = self.fix, self.summary
        if not changes and len(self.env) == 1 and not self.flags:
            changes, said = variable_fix(self.env[0], self.template)
            summary = f"{summary} ({said})" if summary else said
        return Signature(
            id=self.id,
            title=self.title,
            category=category,
            severity="critical",
            runbook=self.runbook(known),
            fix_summary=summary,
            flags=(*self.flags, *self.env),
            changes=changes,
            exception_types=(self.exception_type,),
            message=self.pattern,
            sglang=release_range(self.releases, known or self.releases),
            source=f"{path}:{line}",
            origin="derived",
        )

    def site(self, release: str | None = None) -> tuple[str, str, int, str]:
        """Where the check is in `release` (the newest release holding it when absent or None)."""
        for site in self.sites:
            if site[0] == release:
                return site
        return self.sites[-1]


_ALLOWED = LazyPattern(r"(?:one of|expected|must be|valid(?: values)?(?: are)?:?)\s*:?\s*'(?P<value>[\w.-]+)'")


def variable_fix(variable: str, template: str) -> tuple[tuple[FlagChange, ...], str]:
    """The generic change for a check that names one SGLANG_ variable and no flag: the first value the message
    allows (`must be one of 'bf16', 'mxfp8'`), else unset the variable (SGLang's default)."""
    m = _ALLOWED.search(template)
    if m is not None:
        value = m.group("value")
        return (FlagChange("set", variable, value),), f"generic: set {variable} to '{value}', the first value it allows"
    return (FlagChange("remove", variable),), f"generic: unset {variable}, back to SGLang's default"


@dataclass(frozen=True, slots=True)
class DerivedMatch:
    """A derived signature that matched an exception, with its captures and whether the release has it."""

    signature: DerivedSignature
    captures: dict[str, str]
    in_release: bool | None  # None when no release was asked for
    known: tuple[str, ...] = ()  # the releases the library knows: ranges are runs among them


def _describe(change: FlagChange) -> str:
    if change.flag.startswith("SGLANG_"):
        return f"unset {change.flag}" if change.action == "remove" else f"{change.flag}={change.value or ''}"
    if change.action == "replace":
        return f"{change.flag} -> {change.new_flag}"
    value = f" {change.value}" if change.value is not None else ""
    mine = " (a placeholder: your value)" if change.placeholder else ""
    return f"{change.action} {change.flag}{value}{mine}"


def release_key(version: str) -> tuple[Any, ...]:
    """Sort key for SGLang versions: 0.5.9 < 0.5.10 < 0.5.10.post1; rc/dev before the release."""
    numbers: list[int] = []
    tail: tuple[int, int] = (2, 0)  # a final release sorts after its rc/dev and before its posts
    for m in _RELEASE_PART.finditer(version.lower()):
        if m.group(1) is not None:
            numbers.append(int(m.group(1)))
        else:
            rank = {"dev": 0, "a": 1, "b": 1, "rc": 1, "post": 3}[m.group(2)]
            tail = (rank, int(m.group(3) or 0))
            break
    return (tuple(numbers), tail)


def release_range(releases: Sequence[str], known: Sequence[str]) -> str:
    """`0.5.10\u20130.5.14, 0.5.20` (en dash): runs of consecutive releases among the known ones."""
    order = sorted(set(known) | set(releases), key=release_key)
    index = {r: i for i, r in enumerate(order)}
    present = sorted({index[r] for r in releases})
    runs: list[tuple[int, int]] = []
    for i in present:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return ", ".join(order[a] if a == b else f"{order[a]}\u2013{order[b]}" for a, b in runs)


def signature_id(exception_type: str, template: str) -> str:
    import hashlib  # deriving alone names signatures: `explain` of a healthy log never imports OpenSSL's

    digest = hashlib.sha1(f"{exception_type}\0{template}".encode()).hexdigest()[:12]
    return f"derived-{digest}"


# A record: a dict (built in this process), a stored row [id, type, pattern, template length, the other fields
# as a JSON string] that matching reads without parsing the rest, or (the shipped layout, `derived_store`) a
# head (id, type, pattern, template length, release spans, chunk) whose rest is in its chunk, read when needed.
Row = dict[str, Any] | list[Any] | tuple[Any, ...]
_HEAD_FIELDS = ("id", "type", "pattern")
Loaded = tuple[list[Row], tuple[str, ...], "ShippedStore | None"]


def _head(row: Row) -> tuple[str, str, str, int]:
    if isinstance(row, dict):
        return row["id"], row["type"], row["pattern"], len(row["template"])
    return row[0], row[1], row[2], row[3]


def _positioned(rests: Iterator[tuple[str, str]], ids: dict[str, int]) -> Iterator[tuple[int, str]]:
    return ((ids[name], rest) for name, rest in rests)


def _shipped(row: Row) -> tuple[str, int]:
    """A head's release spans and chunk (the shipped layout's rows only)."""
    assert not isinstance(row, dict)
    return row[4], row[5]


def _full(row: Row, rest: str | None = None) -> dict[str, Any]:
    if isinstance(row, dict):
        return row
    return {**json.loads(row[4] if rest is None else rest), "id": row[0], "type": row[1], "pattern": row[2]}


def _stored_row(record: dict[str, Any]) -> list[Any]:
    rest = {k: v for k, v in record.items() if k not in _HEAD_FIELDS}
    rest["sites"] = _stored_sites(_runs(record))
    body = json.dumps(rest, separators=(",", ":"), sort_keys=True)
    return [record["id"], record["type"], record["pattern"], len(record["template"]), body]


class DerivedLibrary:
    """Derived records (plain dicts as stored) and the objects and RE2 programs built from them on use.

    `loader`, when given, reads the records on first use instead: a process whose every crash a reviewed signature
    explains (or that sees none) never reads the shipped data (`unread_copy`: one more reader of it, or None).
    With a `store` (the shipped layout) the rows are heads: what matching reads; a record's rest is decompressed
    from its release range's chunk when a signature is built or a release's records are asked for, and not kept."""

    def __init__(
        self,
        records: list[Row],
        releases: tuple[str, ...],
        loader: Callable[[], Loaded] | None = None,
        store: ShippedStore | None = None,
    ) -> None:
        self._records, self._releases, self._loader, self._store = records, releases, loader, store
        self._built: dict[int, DerivedSignature] = {}
        self._index: dict[str, int] | None = None
        self._prefixes: PrefixIndex | None = None
        # a candidate's program, compiled on first use; the last few used are kept (every message a host ever sent
        # left its program and DFA states here: 0.75 MB after a 2M-entry journal, growing with each new message)
        self._programs: dict[int, LazyRegex] = {}
        self._kept = KeptPrograms()

    def _load(self) -> None:
        if self._loader is not None:
            loader, self._loader = self._loader, None
            self._records, self._releases, self._store = loader()

    def unread_copy(self) -> DerivedLibrary | None:
        return DerivedLibrary([], (), loader=self._loader) if self._loader is not None else None

    def _records_at(self, indices: Iterable[int]) -> Iterator[dict[str, Any]]:
        """The records at `indices` (ascending) as dicts. A shipped record's rest is streamed from its chunk: the
        chunks wanted are read side by side in id order (the rows' order), a line of each held at a time."""
        rows, store = self._records, self._store
        if store is None:
            yield from (_full(rows[i]) for i in indices)
            return
        by_chunk: dict[int, dict[str, int]] = {}
        for i in indices:
            by_chunk.setdefault(_shipped(rows[i])[1], {})[_head(rows[i])[0]] = i
        last = -1
        for i, rest in heapq.merge(*(_positioned(store.rests(c, set(ids)), ids) for c, ids in by_chunk.items())):
            if i < last:
                raise ValueError("derived-signature chunks out of order")
            last = i
            yield _full(rows[i], rest)

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every record as a dict (parses stored rows: for building and merging, not for matching)."""
        return list(self._records_at(range(len(self._rows))))

    @property
    def _rows(self) -> list[Row]:
        self._load()
        return self._records

    @property
    def releases(self) -> tuple[str, ...]:
        self._load()
        return self._releases

    def __len__(self) -> int:
        return len(self._rows)

    def signature(self, index: int) -> DerivedSignature:
        sig = self._built.get(index)
        if sig is None:
            [record] = self._records_at([index])
            sig = self._built[index] = from_record(record, self.releases)
        return sig

    def signatures(self) -> Iterable[DerivedSignature]:
        """Every signature, built and kept (a release's checks use `records_in`, which keeps none)."""
        if self._store is not None:  # every chunk read once, not once per signature
            for i, record in enumerate(self._records_at(range(len(self._rows)))):
                if i not in self._built:
                    self._built[i] = from_record(record, self.releases)
        return (self.signature(i) for i in range(len(self._rows)))

    def _holds(self, index: int, release: str) -> bool:
        """Whether the release's source holds record `index` (read from a head's spans without its rest)."""
        if self._store is None:
            return release in self.signature(index).releases
        from crashdoc.matching.derived_store import in_spans

        return release in self.releases and in_spans(_shipped(self._rows[index])[0], self.releases.index(release))

    def records_in(self, release: str) -> Iterator[dict[str, Any]]:
        """The records (as stored) whose sites include `release`: no site spelled out, no signature built; of
        the shipped layout, only the chunks holding the release's records are read."""
        rows = self._rows
        at = self.releases.index(release) if release in self.releases else -1
        if self._store is not None:
            from crashdoc.matching.derived_store import in_spans

            return self._records_at([i for i, row in enumerate(rows) if in_spans(_shipped(row)[0], at)])
        return (r for r in map(_full, rows) if any(a <= at <= b for a, b, *_ in _runs(r)))

    def get(self, id: str) -> DerivedSignature | None:
        if self._index is None:
            self._index = {_head(r)[0]: i for i, r in enumerate(self._rows)}
        index = self._index.get(id)
        return self.signature(index) if index is not None else None

    def _candidates(self, text: str) -> list[int]:
        """Records whose anchored pattern can match `text` (`derived_index`: nothing compiled until then)."""
        if self._prefixes is None:
            from crashdoc.matching.derived_index import PrefixIndex

            rows = self._rows
            shipped = self._store.prefixes if self._store is not None else None
            self._prefixes = shipped or PrefixIndex(_head(row)[2] for row in rows)
        return self._prefixes.candidates(text)

    def match(self, message_line: str, exception_type: str, release: str | None = None) -> DerivedMatch | None:
        """The derived signature for an exception message, preferring one present in `release`.

        One found only in other releases is still returned (`in_release` False): a check that moved or a launch
        script left from another release is worth naming. Among several, the one with the most literal text wins."""
        rows = self._rows
        if not rows:
            return None
        text = message_line[:MAX_MESSAGE_CHARS]
        short = exception_type.rsplit(".", 1)[-1]
        best: tuple[tuple[int, int, int], int, dict[str, str], bool | None] | None = None
        for index in self._candidates(text):
            _, type_, pattern, length = _head(rows[index])
            if short and type_ != short:  # no type: a lone line, matched on its message alone
                continue
            regex = self._programs.get(index)
            if regex is None:
                regex = self._programs[index] = LazyRegex(pattern, self._kept)
            m = regex.search(text)
            if m is None:
                continue
            in_release = None if release is None else self._holds(index, release)
            captures = {k: v[:MAX_CAPTURE_CHARS] for k, v in m.groupdict().items() if v is not None}
            rank = (int(in_release is not False), length - 8 * len(captures), -index)
            if best is None or rank > best[0]:
                best = (rank, index, captures, in_release)
        if best is None:
            return None
        _, index, captures, in_release = best  # the winner's signature alone is built (its rest read)
        return DerivedMatch(self.signature(index), captures, in_release, self.releases)

    def merged(self, other: DerivedLibrary) -> DerivedLibrary:
        """This library with `other`'s records added (shipped + a host tree's own); shared records keep both's sites."""
        releases = tuple(sorted(set(self.releases) | set(other.releases), key=release_key))
        by_id: dict[str, dict[str, Any]] = {}
        for library in (self, other):
            for record in library.records:
                full = _expanded(record, library.releases)
                known = by_id.get(record["id"])
                if known is None:
                    by_id[record["id"]] = full
                else:  # the later library's text, condition and fix win (the newer tree); sites add up
                    have = {s[0] for s in full["sites"]}
                    full["sites"] = sorted(
                        [*full["sites"], *(s for s in known["sites"] if s[0] not in have)],
                        key=lambda s: release_key(s[0]),
                    )
                    by_id[record["id"]] = full
        return DerivedLibrary([_compacted(r, releases) for r in by_id.values()], releases)


def _runs(record: dict[str, Any]) -> list[list[Any]]:
    """A record's sites as runs [first, last, file, line, function]; stored as one string
    ("0-12 sglang/srt/x.py 123 f;13-13 ...") to keep thousands of small lists out of memory."""
    sites = record["sites"]
    if not isinstance(sites, str):
        return list(sites)
    runs: list[list[Any]] = []
    for item in sites.split(";"):
        span, path, line, function = item.split(" ")
        first, _, last = span.partition("-")
        runs.append([int(first), int(last or first), path, int(line), function])
    return runs


def _stored_sites(runs: list[list[Any]]) -> str:
    def safe(text: str) -> str:
        return text.replace(" ", "_").replace(";", "_")

    return ";".join(f"{a}-{b} {safe(path)} {line} {safe(function)}" for a, b, path, line, function in runs)


def _expanded(record: dict[str, Any], known: Sequence[str]) -> dict[str, Any]:
    """A record with its sites spelled out per release: [release, file, line, function]."""
    sites = [[known[i], run[2], run[3], run[4]] for run in _runs(record) for i in range(run[0], run[1] + 1)]
    return {**record, "sites": sites}


def _compacted(record: dict[str, Any], known: Sequence[str]) -> dict[str, Any]:
    """Sites as runs over consecutive known releases: [first, last, file, line, function]."""
    index = {r: i for i, r in enumerate(known)}
    runs: list[list[Any]] = []
    for release, path, line, function in sorted(record["sites"], key=lambda s: index[s[0]]):
        i = index[release]
        if runs and runs[-1][1] == i - 1 and runs[-1][2:] == [path, line, function]:
            runs[-1][1] = i
        else:
            runs.append([i, i, path, line, function])
    return {**record, "sites": runs}


def fix_of(record: dict[str, Any]) -> tuple[FlagChange, ...]:
    return tuple(FlagChange(c[0], c[1], c[2], c[3], len(c) > 4 and bool(c[4])) for c in record.get("fix", ()))


def from_record(record: dict[str, Any], known: Sequence[str]) -> DerivedSignature:
    sites = tuple(
        (known[i], str(run[2]), int(run[3]), str(run[4])) for run in _runs(record) for i in range(run[0], run[1] + 1)
    )
    return DerivedSignature(
        id=record["id"],
        exception_type=record["type"],
        template=record["template"],
        pattern=record["pattern"],
        flags=tuple(record.get("flags", ())),
        env=tuple(record.get("env", ())),
        condition=record.get("condition", ""),
        fix=fix_of(record),
        summary=record.get("summary", ""),
        sites=sites,
        releases=tuple(s[0] for s in sites),
        kind=record.get("kind", "raise"),
    )


def to_record(sig: DerivedSignature, known: Sequence[str]) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": sig.id,
        "type": sig.exception_type,
        "kind": sig.kind,
        "template": sig.template,
        "pattern": sig.pattern,
        "flags": list(sig.flags),
        "env": list(sig.env),
        "condition": sig.condition,
        "fix": [[c.action, c.flag, c.value, c.new_flag, *([True] if c.placeholder else [])] for c in sig.fix],
        "summary": sig.summary,
        "sites": [list(s) for s in sig.sites],
    }
    return _compacted(record, known)


def to_dict(sig: DerivedSignature) -> dict[str, Any]:
    """One signature as readable JSON (the interface's field names)."""
    return {
        "id": sig.id,
        "exception_type": sig.exception_type,
        "kind": sig.kind,
        "template": sig.template,
        "pattern": sig.pattern,
        "flags": list(sig.flags),
        "env": list(sig.env),
        "condition": sig.condition,
        "fix": [
            {"action": c.action, "flag": c.flag, "value": c.value, "new_flag": c.new_flag, "placeholder": c.placeholder}
            for c in sig.fix
        ],
        "summary": sig.summary,
        "sites": [{"release": r, "file": f, "line": n, "function": fn} for r, f, n, fn in sig.sites],
        "releases": list(sig.releases),
    }


def library_of(signatures: Iterable[DerivedSignature]) -> DerivedLibrary:
    sigs = list(signatures)
    releases = tuple(sorted({r for s in sigs for r in s.releases}, key=release_key))
    return DerivedLibrary([to_record(s, releases) for s in sigs], releases)


def stored_rows(library: DerivedLibrary) -> list[list[Any]]:
    """The records as stored rows, sorted by id (`dumps`, and the shipped layout's `derived_store.write_shipped`)."""
    return sorted((_stored_row(r) for r in library.records), key=lambda r: str(r[0]))


def dumps(library: DerivedLibrary) -> bytes:
    """The stored form: gzip'd JSON, records sorted by id, byte-identical for the same input."""
    body = {"format": DATA_FORMAT, "releases": list(library.releases), "signatures": stored_rows(library)}
    text = json.dumps(body, separators=(",", ":"), sort_keys=True)  # ASCII: parsed as 1 byte per char
    import gzip  # writing the shipped file is the deriving script's job

    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def loads(raw: bytes) -> DerivedLibrary:
    """Read stored data; a malformed file raises ValueError (the caller says which file)."""
    try:
        if raw[:2] == b"\x1f\x8b":
            # the trailer says the size: one buffer of it, not gzip's growing ones (4x the peak)
            raw = zlib.decompress(raw, 31, max(int.from_bytes(raw[-4:], "little"), 1))
        body = json.loads(raw)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError, zlib.error) as exc:
        raise ValueError(f"not derived-signature data: {exc}") from exc
    if not isinstance(body, dict) or body.get("format") != DATA_FORMAT:
        raise ValueError(f"derived-signature data of an unknown format (expected format {DATA_FORMAT})")
    return DerivedLibrary(list(body["signatures"]), tuple(body["releases"]))


_SHIPPED: DerivedLibrary | None = None


def _read_shipped() -> Loaded:
    """The shipped index (heads only: each record's rest stays compressed in its chunk until asked for)."""
    try:
        from pathlib import Path

        from crashdoc.matching.derived_store import read_shipped

        folder = Path(__file__).with_name("data") / "derived"  # as installed (importlib.resources: ~7 ms of imports)
        heads, releases, store = read_shipped(lambda name: (folder / name).read_bytes())
    except OSError:
        return [], (), None
    return list[Row](heads), releases, store


def load_shipped() -> DerivedLibrary:
    """The package's derived signatures for every shipped release: one per process, read on first use."""
    global _SHIPPED
    if _SHIPPED is None:
        _SHIPPED = DerivedLibrary([], (), loader=_read_shipped)
    return _SHIPPED
