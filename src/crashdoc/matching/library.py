"""Loading the signature library: YAML files validated against the shipped JSON Schema.

Every problem names the file and line so that a broken edit can be fixed from the error
alone; a library with problems is rejected as a whole, which lets the caller keep the last
good one (hot reload relies on that).
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import re2

from crashdoc.errors import ProblemsError
from crashdoc.events import FlagChange
from crashdoc.lean import blake2b
from crashdoc.matching import validate
from crashdoc.matching.cache import CompiledCache, Digest, file_stamp
from crashdoc.matching.validate import SCHEMA_PATH as _SCHEMA_PATH
from crashdoc.matching.validate import Found, schema_errors

MAX_FILE_BYTES = 4 * 1024 * 1024
# RE2 runs in time linear in the line, times the size of the pattern's program: `(\w+\s*){1000}` (10,004)
# took 0.85 s to find its captures in one 48K line. The shipped library's largest is ~220.
MAX_PROGRAM_SIZE = 1000


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong in a signature file, with where it is (the file:line the user fixes)."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


class LibraryError(ProblemsError):
    """The library could not be loaded; `problems` lists every reason (each a `Problem`)."""


@dataclass(frozen=True, slots=True)
class Example:
    """A log text a signature must match (or, as a near miss, must not), with what it captures."""

    text: str
    captures: dict[str, str] = field(default_factory=dict)
    context: dict[str, str] = field(default_factory=dict)
    exit: dict[str, str] = field(default_factory=dict)
    note: str = ""
    line: int = 0  # where it is written, for error messages


@dataclass(frozen=True, slots=True)
class Signature:
    """One reviewed signature of the library: what it matches and the diagnosis and fix it gives."""

    id: str
    title: str
    category: str
    severity: str
    runbook: str
    fix_summary: str
    roles: tuple[str, ...] = ("any",)
    flags: tuple[str, ...] = ()
    changes: tuple[FlagChange, ...] = ()  # values and flags may hold ${...} templates
    safety: str | None = None
    exception_types: tuple[str, ...] = ()
    message: str | None = None  # RE2 pattern searched in the exception message
    frame: str | None = None  # RE2 pattern searched in "file:function" of each frame
    line: str | None = None  # RE2 pattern for line-level signatures
    context: dict[str, str] = field(default_factory=dict)
    exit: dict[str, tuple[str, ...]] = field(default_factory=dict)
    priority: int = 0
    sglang: str = ""
    source: str = ""
    examples: tuple[Example, ...] = ()
    near_misses: tuple[Example, ...] = ()
    origin: str = ""  # file:line where the signature is defined
    failure_kind: str = ""  # the YAML's optional `kind:` (config, resource, ...); "" lets diagnosis derive it

    @property
    def kind(self) -> str:
        if self.line is not None:
            return "line"
        if self.exception_types or self.message is not None:
            return "traceback"
        return "exit"


@dataclass(frozen=True, slots=True)
class Library:
    """The signatures loaded from the library's folders, by id."""

    signatures: tuple[Signature, ...]
    folders: tuple[str, ...] = ()
    by_id: dict[str, Signature] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.by_id.update((s.id, s) for s in self.signatures)

    def get(self, signature_id: str) -> Signature | None:
        return self.by_id.get(signature_id)

    def __len__(self) -> int:
        return len(self.signatures)


def builtin_signature_dirs() -> list[Path]:
    """The shipped library: inside the installed package, or the repository's folder when run from source."""
    packaged = Path(__file__).resolve().parents[1] / "signatures"  # crashdoc/signatures (importlib.resources: 4 ms)
    if packaged.is_dir():
        return [packaged]
    source_tree = Path(__file__).resolve().parents[3] / "signatures"
    return [source_tree] if source_tree.is_dir() else []


def signature_files(folders: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for folder in folders:
        folder = Path(folder)
        if folder.is_file():
            files.append(folder)
        elif folder.is_dir():
            # os.walk, not Path.rglob (3 ms per start for the shipped library); same files, same order:
            # symlinked folders are not entered, symlinked files count, each suffix sorted by path parts
            found: dict[str, list[Path]] = {".yaml": [], ".yml": []}
            for root, _dirs, names in os.walk(folder):
                for name in names:
                    suffix = name[name.rfind(".") :] if "." in name else ""
                    if suffix in found and os.path.isfile(os.path.join(root, name)):
                        found[suffix].append(Path(root, name))
            files.extend(sorted(found[".yaml"], key=lambda p: p.parts))
            files.extend(sorted(found[".yml"], key=lambda p: p.parts))
    return files


class FileCache:
    """The signatures of files that loaded cleanly, by path and content digest: a hot reload after one
    edit re-validates that file only (schema validation is most of a load's cost). `matching_only`: it keeps,
    and a load through it gives, each signature's matching part (`matching_signature`). `validate_apart` (the
    daemon's): the files to validate are checked against the schema in a throw-away child (`validate.apart`),
    so that jsonschema is never imported into the process that keeps running."""

    def __init__(self, matching_only: bool = False, *, validate_apart: bool = False) -> None:
        self.matching_only = matching_only
        self.validate_apart = validate_apart
        self._files: dict[str, tuple[bytes, list[Signature]]] = {}
        self._found: dict[str, tuple[bytes, Found]] = {}  # the child's answers, by path and content digest

    def __len__(self) -> int:
        return len(self._files)

    def seed(self, files: Iterable[Path], library: Library) -> None:
        """Remember `library` (loaded cleanly from `files`, e.g. read from the compiled cache) per file."""
        by_file: dict[str, list[Signature]] = {}
        for sig in library.signatures:
            by_file.setdefault(sig.origin.rsplit(":", 1)[0], []).append(sig)
        for path in files:
            try:
                raw = path.read_bytes()
            except OSError:
                continue
            self._files[str(path)] = (blake2b(raw, digest_size=16).digest(), by_file.get(str(path), []))

    def check_apart(self, files: Iterable[Path]) -> None:
        """With `validate_apart`: the files this cache does not know as they are now, checked against the schema
        in one child (`load` uses its answer for the same bytes; without one it validates in process)."""
        if not self.validate_apart:
            return
        texts: dict[str, str] = {}
        digests: dict[str, bytes] = {}
        for path in files:
            try:
                raw = path.read_bytes()
                digest = blake2b(raw, digest_size=16).digest()
                known = self._files.get(str(path))
                if (known is None or known[0] != digest) and len(raw) <= MAX_FILE_BYTES:
                    texts[str(path)], digests[str(path)] = raw.decode("utf-8"), digest
            except (OSError, UnicodeDecodeError):
                continue  # `load` says why
        found = validate.apart(texts) or {}
        self._found = {name: (digests[name], errors) for name, errors in found.items() if name in digests}

    def load(self, path: Path) -> tuple[list[Signature], list[Problem]]:
        try:
            raw = path.read_bytes()
        except OSError:
            return load_file(path)  # says why, with the file's name
        digest = blake2b(raw, digest_size=16).digest()
        known = self._files.get(str(path))
        if known is not None and known[0] == digest:
            return known[1], []
        checked = self._found.pop(str(path), None)
        signatures, problems = load_bytes(str(path), raw, checked[1] if checked and checked[0] == digest else None)
        if self.matching_only:
            signatures = [matching_signature(s) for s in signatures]
        if problems:
            self._files.pop(str(path), None)
        else:
            self._files[str(path)] = (digest, signatures)
        return signatures, problems


def load_library(
    folders: Sequence[Path | str],
    cache: FileCache | None = None,
    compiled: CompiledCache | None = None,
    *,
    matching_only: bool = False,
) -> Library:
    """Load every `*.yaml` under `folders`; raise LibraryError listing all problems.

    With `compiled`, a library that loaded cleanly once is read back from that cache while
    no file under `folders` changed (same paths, same bytes, same crashdoc). `matching_only`: what
    matching and diagnosing read, without the signatures' examples and runbook pages (`matching_part`),
    kept in a cache entry of its own: a third of the full one to parse at each `explain`."""
    if compiled is not None:
        paths = [Path(f) for f in folders]
        files = signature_files(paths)
        code = [Path(__file__), Path(validate.__file__), _SCHEMA_PATH]  # how files are validated and made signatures
        # the file's name only tells folder sets apart (the key inside decides): zlib's CRC spares importing
        # a digest on every warm start
        name = f"library-{zlib.crc32(chr(0).join(map(str, paths)).encode()):08x}"
        library = compiled.load(
            f"{name}-matching" if matching_only else name,
            lambda: Digest(*map(str, paths)).add_files([*code, *files]).hexdigest(),
            lambda: matching_part(load_library(paths, cache)) if matching_only else load_library(paths, cache),
            _encode_checked,
            decode_library,
            stamp=[list(map(str, paths)), file_stamp([*code, *files])],
        )
        # read from the cache: a later reload re-validates only edited files
        if cache is not None and not cache and cache.matching_only == matching_only:
            cache.seed(files, library)
        return library
    paths = [Path(f) for f in folders]
    problems: list[Problem] = []
    for folder in paths:
        if not folder.exists():
            problems.append(Problem(str(folder), 0, "no such file or folder"))
    signatures: list[Signature] = []
    seen: dict[str, str] = {}
    files = signature_files(paths)
    if cache is not None:
        cache.check_apart(files)
    for path in files:
        loaded, file_problems = cache.load(path) if cache is not None else load_file(path)
        problems.extend(file_problems)
        for sig in loaded:
            if sig.id in seen:
                file, line = sig.origin.rsplit(":", 1)
                problems.append(Problem(file, int(line), f"duplicate id {sig.id!r} (first defined at {seen[sig.id]})"))
                continue
            seen[sig.id] = sig.origin
            signatures.append(sig)
    if not signatures and not problems:
        problems.append(Problem(", ".join(str(p) for p in paths) or "(none)", 0, "no signatures found"))
    if problems:
        raise LibraryError(problems)
    return Library(tuple(signatures), tuple(str(p) for p in paths))


def matching_part(library: Library) -> Library:
    """`library` without what only the library's tools and runbook pages read (examples, near misses, runbook
    text: two thirds of its cached JSON); every field matching and diagnosing read is kept."""
    return Library(tuple(map(matching_signature, library.signatures)), library.folders)


def matching_signature(sig: Signature) -> Signature:
    """`sig` without its examples, near misses and runbook text (`with_text` reads them back)."""
    return replace(sig, examples=(), near_misses=(), runbook="")


def with_text(sig: Signature) -> Signature:
    """`sig` with its runbook text, examples and near misses read again from the file it came from: the daemon
    keeps the matching part of its library (2 MB less) and a page that shows a runbook reads it here.

    The file is parsed, not validated (no JSON Schema at run time); the signature's matching fields stay the
    ones loaded. A file that no longer holds the signature, or cannot be read, gives `sig` as it is."""
    from crashdoc.yamlfile import YamlError, parse_located

    name = sig.origin.rsplit(":", 1)[0]
    try:
        located = parse_located(Path(name).read_bytes().decode("utf-8"))
        entries = located.data["signatures"]
        index = next(i for i, e in enumerate(entries) if isinstance(e, dict) and e.get("id") == sig.id)
        read = _build(entries[index], ("signatures", index), located.lines, name)
    except (OSError, ValueError, YamlError, TypeError, KeyError, AttributeError, StopIteration):
        return sig
    return replace(sig, runbook=read.runbook, examples=read.examples, near_misses=read.near_misses)


def load_file(path: Path) -> tuple[list[Signature], list[Problem]]:
    """Parse and validate one file; never raises for bad content."""
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return [], [Problem(name, 0, f"cannot read: {exc.strerror or exc}")]
    return load_bytes(name, raw)


def load_bytes(name: str, raw: bytes, found: Found | None = None) -> tuple[list[Signature], list[Problem]]:
    """Parse and validate the content of one file named `name`; never raises for bad content. `found`: its
    schema errors, found elsewhere (`validate.apart`)."""
    if len(raw) > MAX_FILE_BYTES:
        return [], [Problem(name, 0, f"file is larger than {MAX_FILE_BYTES} bytes")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return [], [Problem(name, line, "not UTF-8 text")]
    from crashdoc.yamlfile import YamlError, parse_located

    try:
        located = parse_located(text)
    except YamlError as exc:
        return [], [Problem(name, exc.line, exc.message)]
    if located.data is None:
        return [], [Problem(name, 1, "empty file")]
    data, lines = located.data, located.lines
    found = schema_errors(data) if found is None else found
    problems = [Problem(name, _line_for(lines, path), message) for path, message in found]
    if problems:
        return [], problems
    signatures: list[Signature] = []
    for index, entry in enumerate(data["signatures"]):
        base = ("signatures", index)
        sig_problems = _check_semantics(entry, base, lines, name)
        if sig_problems:
            problems.extend(sig_problems)
            continue
        signatures.append(_build(entry, base, lines, name))
    return signatures, problems


def _line_for(lines: dict[tuple[Any, ...], int], path: tuple[Any, ...]) -> int:
    from crashdoc.yamlfile import LocatedYaml

    return LocatedYaml(None, lines).line_of(path)


def _compile_problem(pattern: str) -> str | None:
    try:
        compiled = re2.compile(pattern)
    except re2.error as exc:
        hint = ""
        if "(?=" in pattern or "(?!" in pattern or "(?<" in pattern.replace("(?P<", ""):
            hint = " (RE2 has no look-around)"
        elif "\\1" in pattern:
            hint = " (RE2 has no back-references)"
        return f"{exc}{hint}"
    if compiled.programsize > MAX_PROGRAM_SIZE:
        return (
            f"too complex to run on every log line (RE2 program size {compiled.programsize}, at most "
            f"{MAX_PROGRAM_SIZE}): use fewer or smaller counted repetitions"
        )
    return None


def _check_semantics(
    entry: dict[str, Any], base: tuple[Any, ...], lines: dict[tuple[Any, ...], int], name: str
) -> list[Problem]:
    problems: list[Problem] = []
    match = entry["match"]

    def at(*rest: Any) -> int:
        return _line_for(lines, (*base, *rest))

    has_line = "line" in match
    has_tb = "exception" in match or "message" in match
    if has_line and has_tb:
        problems.append(
            Problem(
                name,
                at("match"),
                "match: use `line` (a line-level signature) or `exception`/`message` (a traceback signature), not both",
            )
        )
    if not has_line and not has_tb and "exit" not in match:
        problems.append(Problem(name, at("match"), "match: needs `exception`, `message`, `line` or `exit`"))
    if "frame" in match and not has_tb:
        problems.append(Problem(name, at("match", "frame"), "match.frame needs `exception` or `message`"))
    for key in ("message", "frame", "line"):
        if key in match:
            problem = _compile_problem(match[key])
            if problem:
                problems.append(Problem(name, at("match", key), f"match.{key}: bad RE2 pattern: {problem}"))
    if "model" in match.get("context", {}):
        problem = _compile_problem(match["context"]["model"])
        if problem:
            problems.append(Problem(name, at("match", "context", "model"), f"bad RE2 pattern: {problem}"))
    for i, change in enumerate(entry["fix"].get("changes", [])):
        if change["action"] in ("replace", "set", "add") and "${" in (change.get("value") or ""):
            from crashdoc.matching.templates import template_problem

            problem = template_problem(change["value"])
            if problem:
                problems.append(Problem(name, at("fix", "changes", i, "value"), problem))
    return problems


def _examples(
    entries: list[dict[str, Any]], path: tuple[Any, ...], lines: dict[tuple[Any, ...], int]
) -> tuple[Example, ...]:
    return tuple(
        Example(
            text=e["text"],
            captures={k: str(v) for k, v in e.get("captures", {}).items()},
            context=dict(e.get("context", {})),
            exit=dict(e.get("exit", {})),
            note=e.get("note", ""),
            line=_line_for(lines, (*path, i)),
        )
        for i, e in enumerate(entries)
    )


def _build(entry: dict[str, Any], base: tuple[Any, ...], lines: dict[tuple[Any, ...], int], name: str) -> Signature:
    match = entry["match"]
    fix = entry["fix"]
    examples = entry["examples"]
    return Signature(
        id=entry["id"],
        title=entry["title"],
        category=entry["category"],
        severity=entry["severity"],
        runbook=entry["runbook"],
        fix_summary=fix["summary"],
        roles=tuple(entry.get("roles", ["any"])),
        flags=tuple(entry.get("flags", [])),
        changes=tuple(
            FlagChange(c["action"], c["flag"], c.get("value"), c.get("new_flag"), bool(c.get("placeholder")))
            for c in fix.get("changes", [])
        ),
        safety=fix.get("safety"),
        exception_types=tuple(match.get("exception", [])),
        message=match.get("message"),
        frame=match.get("frame"),
        line=match.get("line"),
        context=dict(match.get("context", {})),
        exit={k: tuple(str(x) for x in v) for k, v in match.get("exit", {}).items()},
        priority=entry.get("priority", 0),
        sglang=entry.get("sglang", ""),
        source=entry.get("source", ""),
        examples=_examples(examples["match"], (*base, "examples", "match"), lines),
        near_misses=_examples(examples.get("no_match", []), (*base, "examples", "no_match"), lines),
        origin=f"{name}:{_line_for(lines, base)}",
        failure_kind=entry.get("kind", ""),
    )


# --- the compiled cache: a Library as plain JSON data and back ------------------------------

_SIGNATURE_FIELDS = tuple(f.name for f in fields(Signature))
_EXAMPLE_FIELDS = tuple(f.name for f in fields(Example))
_CHANGE_FIELDS = tuple(f.name for f in fields(FlagChange))


def encode_library(library: Library) -> dict[str, Any]:
    """Plain data (lists, dicts, strings, numbers) that `decode_library` turns back into `library`."""

    def example(e: Example) -> list[Any]:
        return [getattr(e, name) for name in _EXAMPLE_FIELDS]

    def signature(s: Signature) -> list[Any]:
        plain: dict[str, Any] = {name: getattr(s, name) for name in _SIGNATURE_FIELDS}
        plain["changes"] = [[getattr(c, name) for name in _CHANGE_FIELDS] for c in s.changes]
        plain["examples"] = [example(e) for e in s.examples]
        plain["near_misses"] = [example(e) for e in s.near_misses]
        return [plain[name] for name in _SIGNATURE_FIELDS]

    return {
        "signature_fields": list(_SIGNATURE_FIELDS),
        "example_fields": list(_EXAMPLE_FIELDS),
        "change_fields": list(_CHANGE_FIELDS),
        "folders": list(library.folders),
        "signatures": [signature(s) for s in library.signatures],
    }


def _encode_checked(library: Library) -> dict[str, Any] | None:
    """`encode_library`, or None (nothing cached) when its JSON would not decode to an equal library:
    a field added to Signature that this code does not know how to store must not change answers."""
    data = encode_library(library)
    try:
        same = decode_library(json.loads(json.dumps(data))) == library
    except (TypeError, ValueError, KeyError):
        same = False
    return data if same else None


def decode_library(data: dict[str, Any]) -> Library:
    """The Library `encode_library` stored; raises (KeyError, TypeError, ValueError) on anything else."""
    if (
        data["signature_fields"] != list(_SIGNATURE_FIELDS)
        or data["example_fields"] != list(_EXAMPLE_FIELDS)
        or data["change_fields"] != list(_CHANGE_FIELDS)
    ):
        raise ValueError("written for other signature fields")
    at = {name: i for i, name in enumerate(_SIGNATURE_FIELDS)}
    tuples = [at[n] for n in ("roles", "flags", "exception_types")]
    changes, examples, misses, exits = at["changes"], at["examples"], at["near_misses"], at["exit"]
    signatures = []
    for row in data["signatures"]:
        if len(row) != len(_SIGNATURE_FIELDS):
            raise ValueError("a signature with the wrong number of fields")
        row = list(row)
        for i in tuples:
            row[i] = tuple(row[i])
        row[changes] = tuple(FlagChange(*c) for c in row[changes])
        row[examples] = tuple(Example(*e) for e in row[examples])
        row[misses] = tuple(Example(*e) for e in row[misses])
        row[exits] = {k: tuple(v) for k, v in row[exits].items()}
        signature = Signature(*row)
        if not isinstance(signature.id, str) or not isinstance(signature.origin, str):
            raise TypeError("a signature without an id or origin")
        signatures.append(signature)
    return Library(tuple(signatures), tuple(str(f) for f in data["folders"]))
