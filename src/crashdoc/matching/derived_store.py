"""The shipped derived signatures on disk: what matching reads, apart from the rest, by release range.

Matching a message needs a record's id, exception type, pattern, template length and the releases that hold
it; the rest (template, condition, fix, summary, sites: four fifths of the data) only when a signature is shown
or a release's checks are searched. So the package ships `data/derived/index.json.gz`, every record's matching
part (its "head") and which chunk holds its rest, and `data/derived/<first>--<last>.jsonl.gz`, the rest of the
records whose newest release is in that range: one line per record (`id<TAB>json`, sorted by id). The index
holds the heads' literal-prefix index too (`derived_index`: computing it costs a process 14 ms). A chunk is
read as a stream and only the wanted lines parsed, then let go: a process keeps the heads alone (the matcher's
and the search's), and reads the one chunk a release's records are in (all of them for the newest release).
`scripts/derive-releases.py` writes the layout (`write_shipped`).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from crashdoc.matching.derived_index import PrefixIndex

INDEX_FORMAT = 3
INDEX = "index.json.gz"
CHUNK_RECORDS = 100  # records a chunk holds at most (one release's are never split)
_READ = 1 << 13  # compressed bytes read at a time (about 50 KB of lines)

# A head: (id, exception type, pattern, template length, spans "0-12 40-91" (release positions), chunk number)
Head = tuple[Any, ...]


def spans_text(runs: Iterable[Sequence[Any]]) -> str:
    """The releases of a record's site runs [first, last, ...] as merged spans: `0-12 40-91`."""
    merged: list[list[int]] = []
    for first, last, *_ in sorted((int(r[0]), int(r[1])) for r in runs):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return " ".join(f"{a}-{b}" for a, b in merged)


def in_spans(spans: str, at: int) -> bool:
    """Whether the release at position `at` is in `spans` (as written by `spans_text`)."""
    for span in spans.split():
        first, _, last = span.partition("-")
        if int(first) <= at <= int(last):
            return True
    return False


def chunk_ranges(newest: Sequence[int], releases: int) -> list[tuple[int, int]]:
    """Consecutive release ranges [first, last] covering every release, each holding at most CHUNK_RECORDS
    records (counted by their newest release), unless one release alone has more."""
    count = [0] * releases
    for at in newest:
        count[at] += 1
    ranges: list[tuple[int, int]] = []
    start, held = 0, 0
    for at in range(releases):
        if held and held + count[at] > CHUNK_RECORDS:
            ranges.append((start, at - 1))
            start, held = at, 0
        held += count[at]
    if releases:
        ranges.append((start, releases - 1))
    return ranges


def chunk_name(releases: Sequence[str], first: int, last: int) -> str:
    return f"{releases[first]}--{releases[last]}.jsonl.gz"


def _gzip(text: str) -> bytes:
    import gzip  # writing the shipped files is the deriving script's job

    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def write_shipped(stored: Sequence[list[Any]], releases: Sequence[str], folder: Path) -> list[Path]:
    """Write the layout from stored rows ([id, type, pattern, template length, rest as JSON with "sites" as
    runs], sorted by id); chunk files of an earlier layout that are not rewritten are removed. Byte-identical
    for the same input."""
    if any(str(a[0]) >= str(b[0]) for a, b in pairwise(stored)):
        raise ValueError("stored rows must be sorted by id, each id once")  # readers merge the chunks in id order
    rests = [json.loads(row[4]) for row in stored]
    newest = [max(int(item.split(" ", 1)[0].split("-")[-1]) for item in rest["sites"].split(";")) for rest in rests]
    ranges = chunk_ranges(newest, len(releases)) if releases else []
    chunk_of = [next(i for i, (a, b) in enumerate(ranges) if a <= n <= b) for n in newest]
    names = [chunk_name(releases, a, b) for a, b in ranges]
    heads = [
        [row[0], row[1], row[2], row[3], spans_text(_site_spans(rest["sites"])), chunk]
        for row, rest, chunk in zip(stored, rests, chunk_of, strict=True)
    ]
    prefixes = PrefixIndex(row[2] for row in stored).as_data()
    index = {"format": INDEX_FORMAT, "releases": list(releases), "chunks": names, "heads": heads, "prefixes": prefixes}
    folder.mkdir(parents=True, exist_ok=True)
    written = {folder / INDEX: _gzip(json.dumps(index, separators=(",", ":"), sort_keys=True))}
    for number, name in enumerate(names):
        lines = "".join(f"{row[0]}\t{row[4]}\n" for row, chunk in zip(stored, chunk_of, strict=True) if chunk == number)
        written[folder / name] = _gzip(lines)
    for old in folder.glob("*.jsonl.gz"):
        if old not in written:
            old.unlink()
    for path, data in written.items():
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return list(written)


def _site_spans(sites: str) -> list[tuple[int, int]]:
    spans = []
    for item in sites.split(";"):
        first, _, last = item.split(" ", 1)[0].partition("-")
        spans.append((int(first), int(last or first)))
    return spans


class ShippedStore:
    """The chunks of one layout, kept compressed (0.25 MB: read with the index, so nothing is read from disk
    later, when an upgrade may have replaced the files); the rest of wanted records decompressed as a stream."""

    def __init__(self, chunks: Sequence[tuple[str, bytes]], prefixes: PrefixIndex | None = None) -> None:
        self.chunks = tuple(name for name, _ in chunks)
        self._data = tuple(data for _, data in chunks)
        self.prefixes = prefixes  # the heads' literal-prefix index, as written beside them

    def rests(self, chunk: int, wanted: set[str]) -> Iterator[tuple[str, str]]:
        """(id, the rest as JSON) of the wanted records held in `chunk`; the other lines are not parsed."""
        if not wanted:
            return
        left = set(wanted)
        inflate = zlib.decompressobj(31)
        tail = b""
        data = memoryview(self._data[chunk])
        for start in range(0, len(data) + _READ, _READ):
            block = data[start : start + _READ]
            try:
                text = tail + (inflate.decompress(block) if block else inflate.flush())
            except zlib.error as exc:
                raise ValueError(f"derived-signature chunk {self.chunks[chunk]} is damaged: {exc}") from exc
            lines = text.split(b"\n")
            tail = lines.pop() if block else b""
            for line in lines:
                key, _, rest = line.partition(b"\t")
                name = key.decode("ascii", "replace")
                if name in left:
                    left.discard(name)
                    yield name, rest.decode("utf-8")
            if not left or not block:
                break
        if left:
            raise ValueError(f"derived-signature chunk {self.chunks[chunk]} lacks {len(left)} records")


def read_index(raw: bytes) -> tuple[list[Head], tuple[str, ...], list[str], PrefixIndex]:
    """(heads, releases, chunk file names, prefix index) of a layout's index; a malformed one raises ValueError."""
    try:
        body = json.loads(zlib.decompress(raw, 31))
    except (UnicodeDecodeError, json.JSONDecodeError, zlib.error) as exc:
        raise ValueError(f"not a derived-signature index: {exc}") from exc
    if not isinstance(body, dict) or body.get("format") != INDEX_FORMAT:
        raise ValueError(f"a derived-signature index of an unknown format (expected format {INDEX_FORMAT})")
    # tuples, one string per distinct type and spans (18 and 163): 0.55 MB instead of 0.75 for 1,458 heads (a
    # local table, not sys.intern: growing the interpreter's would cost more than it saves)
    one: dict[str, str] = {}
    heads = [(h[0], one.setdefault(h[1], h[1]), h[2], h[3], one.setdefault(h[4], h[4]), h[5]) for h in body["heads"]]
    return heads, tuple(body["releases"]), list(body["chunks"]), PrefixIndex.of(body["prefixes"])


def read_shipped(read: Callable[[str], bytes]) -> tuple[list[Head], tuple[str, ...], ShippedStore]:
    """(heads, releases, store) of the layout whose files `read` returns by name (OSError when one is missing;
    ValueError when the index is malformed)."""
    heads, releases, names, prefixes = read_index(read(INDEX))
    return heads, releases, ShippedStore([(name, read(name)) for name in names], prefixes)
