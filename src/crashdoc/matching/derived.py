"""Signatures derived from SGLang's own raise and assert statements, one per message template.

The reviewed library cannot keep up with every release's hundreds of flag-naming checks, but
each check already says what it wants: its message names the flags, its condition says what
SGLang tests. `crashdoc signatures derive` turns each one into a `DerivedSignature`; the
package ships them for every release (`data/derived.json.gz`), deduplicated across releases
(one record per exception type and template, with the releases and lines it is in).

They answer only what no reviewed signature matches, with a lower confidence. Loading is
lazy and cheap: the data is read on the first unmatched traceback, plain JSON (no schema
check: the build script wrote it), each signature object is built on first use, and one RE2
Set over every pattern (compiled on first use) finds the candidates for a message.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import re2

from crashdoc.events import FlagChange
from crashdoc.matching.library import Signature

DATA_FORMAT = 1
MAX_MESSAGE_CHARS = 4000  # what a message is matched on: patterns are anchored at its start
MAX_CAPTURE_CHARS = 200  # a hole's captured value, as kept in a diagnosis
CONFIDENCE = 0.6  # a derived answer: below any reviewed signature's
_RELEASE_PART = re.compile(r"(\d+)|\.?(post|rc|dev|a|b)(\d*)")


@dataclass(frozen=True, slots=True)
class DerivedSignature:
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
        return Signature(
            id=self.id,
            title=self.title,
            category=category,
            severity="critical",
            runbook=self.runbook(known),
            fix_summary=self.summary,
            flags=(*self.flags, *self.env),
            changes=self.fix,
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


@dataclass(frozen=True, slots=True)
class DerivedMatch:
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
    return f"{change.action} {change.flag}{value}"


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
    digest = hashlib.sha1(f"{exception_type}\0{template}".encode()).hexdigest()[:12]
    return f"derived-{digest}"


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 256 << 20  # one set over thousands of anchored patterns
    return options


@dataclass(slots=True)
class DerivedLibrary:
    """Derived records (plain dicts as stored) and the objects and RE2 programs built from them on use."""

    records: list[dict[str, Any]]
    releases: tuple[str, ...]
    _built: dict[int, DerivedSignature] = field(default_factory=dict)
    _index: dict[str, int] | None = None
    _set: Any = None
    _compiled: dict[int, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.records)

    def signature(self, index: int) -> DerivedSignature:
        sig = self._built.get(index)
        if sig is None:
            sig = self._built[index] = from_record(self.records[index], self.releases)
        return sig

    def signatures(self) -> Iterable[DerivedSignature]:
        return (self.signature(i) for i in range(len(self.records)))

    def get(self, id: str) -> DerivedSignature | None:
        if self._index is None:
            self._index = {r["id"]: i for i, r in enumerate(self.records)}
        index = self._index.get(id)
        return self.signature(index) if index is not None else None

    def _candidates(self, text: str) -> list[int]:
        if self._set is None:
            built = re2.Set.SearchSet(_options())
            for record in self.records:
                built.Add(record["pattern"])
            built.Compile()
            self._set = built
        return sorted(self._set.Match(text) or [])

    def match(self, message_line: str, exception_type: str, release: str | None = None) -> DerivedMatch | None:
        """The derived signature for an exception message, preferring one present in `release`.

        One found only in other releases is still returned (`in_release` False): a check that
        moved or a launch script left from another release is worth naming. Among several, the
        one with the most literal text wins (the most specific message).
        """
        if not self.records:
            return None
        text = message_line[:MAX_MESSAGE_CHARS]
        short = exception_type.rsplit(".", 1)[-1]
        best: tuple[tuple[int, int, int], DerivedMatch] | None = None
        for index in self._candidates(text):
            record = self.records[index]
            if record["type"] != short:
                continue
            regex = self._compiled.get(index)
            if regex is None:
                regex = self._compiled[index] = re2.compile(record["pattern"], _options())
            m = regex.search(text)
            if m is None:
                continue
            in_release = None if release is None else release in _record_releases(record, self.releases)
            captures = {k: v[:MAX_CAPTURE_CHARS] for k, v in m.groupdict().items() if v is not None}
            rank = (int(in_release is not False), len(record["template"]) - 8 * len(captures), -index)
            if best is None or rank > best[0]:
                best = (rank, DerivedMatch(self.signature(index), captures, in_release, self.releases))
        return best[1] if best is not None else None

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


def _record_releases(record: dict[str, Any], known: Sequence[str]) -> list[str]:
    return [known[i] for run in record["sites"] for i in range(run[0], run[1] + 1)]


def _expanded(record: dict[str, Any], known: Sequence[str]) -> dict[str, Any]:
    """A record with its sites spelled out per release: [release, file, line, function]."""
    sites = [[known[i], run[2], run[3], run[4]] for run in record["sites"] for i in range(run[0], run[1] + 1)]
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


def from_record(record: dict[str, Any], known: Sequence[str]) -> DerivedSignature:
    sites = tuple(
        (known[i], str(run[2]), int(run[3]), str(run[4])) for run in record["sites"] for i in range(run[0], run[1] + 1)
    )
    return DerivedSignature(
        id=record["id"],
        exception_type=record["type"],
        template=record["template"],
        pattern=record["pattern"],
        flags=tuple(record.get("flags", ())),
        env=tuple(record.get("env", ())),
        condition=record.get("condition", ""),
        fix=tuple(FlagChange(c[0], c[1], c[2], c[3]) for c in record.get("fix", ())),
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
        "fix": [[c.action, c.flag, c.value, c.new_flag] for c in sig.fix],
        "summary": sig.summary,
        "sites": [list(s) for s in sig.sites],
    }
    return _compacted(record, known)


def library_of(signatures: Iterable[DerivedSignature]) -> DerivedLibrary:
    sigs = list(signatures)
    releases = tuple(sorted({r for s in sigs for r in s.releases}, key=release_key))
    return DerivedLibrary([to_record(s, releases) for s in sigs], releases)


def dumps(library: DerivedLibrary) -> bytes:
    """The stored form: gzip'd JSON, records sorted by id, byte-identical for the same input."""
    body = {
        "format": DATA_FORMAT,
        "releases": list(library.releases),
        "signatures": sorted(library.records, key=lambda r: r["id"]),
    }
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def loads(raw: bytes) -> DerivedLibrary:
    """Read stored data; a malformed file raises ValueError (the caller says which file)."""
    try:
        body = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not derived-signature data: {exc}") from exc
    if not isinstance(body, dict) or body.get("format") != DATA_FORMAT:
        raise ValueError(f"derived-signature data of an unknown format (expected format {DATA_FORMAT})")
    return DerivedLibrary(list(body["signatures"]), tuple(body["releases"]))


_SHIPPED: DerivedLibrary | None = None


def load_shipped() -> DerivedLibrary:
    """The package's derived signatures for every shipped release (read once per process)."""
    global _SHIPPED
    if _SHIPPED is None:
        try:
            raw = resources.files("crashdoc.matching").joinpath("data/derived.json.gz").read_bytes()
        except (FileNotFoundError, OSError):
            raw = b""
        _SHIPPED = loads(raw) if raw else DerivedLibrary([], ())
    return _SHIPPED
