"""The shipped derived signatures' layout: an index of what matching reads, the rest in chunks by release range.

A library read from the layout answers exactly as the same records held in memory (matches, signatures, a
release's records), and reads only the chunks it needs: none to find a match, the winner's one to show it,
the release's ones for its checks.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from crashdoc.matching.derived import (
    DerivedLibrary,
    DerivedSignature,
    dumps,
    library_of,
    load_shipped,
    loads,
    stored_rows,
)
from crashdoc.matching.derived_store import INDEX, chunk_ranges, read_shipped, write_shipped
from crashdoc.remedy.accepted import release_checks
from support.derived_records import page_size_check

RELEASES = ("0.5.8", "0.5.9", "0.5.10", "0.5.11", "0.5.12")
TEXTS = ("--page-size must be positive, got 0.", "--page-size must be positive, got 0", "--tp-size must divide 3")


def _sig(template: str, releases: tuple[str, ...], condition: str = "cfg.x < 1") -> DerivedSignature:
    return page_size_check(template, releases, condition=condition, step=1)


def _memory() -> DerivedLibrary:
    """Records over every release range: one per release alone, some spanning, one with a gap, one with no
    condition; two with the same message start (the release decides)."""
    sigs = [_sig(f"--flag-{r} must be set, got {{}}.", (r,)) for r in RELEASES]
    sigs += [
        _sig("--page-size must be positive, got {}", RELEASES[:3]),
        _sig("--page-size must be positive, got {}.", RELEASES[3:]),
        _sig("--tp-size must divide {}", (RELEASES[0], RELEASES[4])),
        _sig("--dp-size is unsupported", RELEASES[1:4], condition=""),
    ]
    return loads(dumps(library_of(sigs)))  # as stored in one file (format 2): rows sorted by id


def _from_folder(folder: Path) -> tuple[DerivedLibrary, list[str]]:
    """The library of a written layout, and the chunks it decompresses (in order)."""
    heads, releases, store = read_shipped(lambda name: (folder / name).read_bytes())
    read: list[str] = []
    rests = store.rests

    def counted(chunk: int, wanted: set[str]) -> Iterator[tuple[str, str]]:
        read.append(store.chunks[chunk])
        return rests(chunk, wanted)

    store.rests = counted  # type: ignore[method-assign]
    return DerivedLibrary(list(heads), releases, store=store), read


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("crashdoc.matching.derived_store.CHUNK_RECORDS", 2)


def test_chunks_are_consecutive_release_ranges_and_a_big_release_is_one_alone(small_chunks: None) -> None:
    # records counted by their newest release: one in 0, one in 1, four in 2, none in 3, one in 4
    assert chunk_ranges([0, 1, 2, 2, 2, 2, 4], 5) == [(0, 1), (2, 2), (3, 4)]
    assert chunk_ranges([], 3) == [(0, 2)]


def test_the_layout_answers_as_the_records_in_memory(tmp_path: Path, small_chunks: None) -> None:
    memory = _memory()
    written = write_shipped(stored_rows(memory), memory.releases, tmp_path)
    assert len(written) > 3  # the index and several chunks
    shipped, _ = _from_folder(tmp_path)
    assert shipped.records == memory.records
    assert list(shipped.signatures()) == list(memory.signatures())
    for release in (*RELEASES, "0.4.0", "9.9"):
        assert list(shipped.records_in(release)) == list(memory.records_in(release)), release
        assert release_checks(shipped, release) == release_checks(memory, release), release
        for text in TEXTS:
            assert shipped.match(text, "ValueError", release) == memory.match(text, "ValueError", release)
    lone = "--dp-size is unsupported"
    assert shipped.match(lone, "ValueError") == memory.match(lone, "ValueError") is not None


def test_matching_reads_no_chunk_but_the_winners_and_a_releases_checks_only_its_chunks(
    tmp_path: Path, small_chunks: None
) -> None:
    memory = _memory()
    write_shipped(stored_rows(memory), memory.releases, tmp_path)
    shipped, opened = _from_folder(tmp_path)
    assert shipped.match("--nothing-like-it", "ValueError", "0.5.12") is None
    assert opened == []
    found = shipped.match("--page-size must be positive, got 0.", "ValueError", "0.5.12")
    assert found is not None and found.in_release is True and found.signature.releases == RELEASES[3:]
    assert opened == ["0.5.12--0.5.12.jsonl.gz"]  # the winner's rest: its newest release's chunk
    opened.clear()
    checks = release_checks(shipped, "0.5.8")
    assert {c.message for c in checks} == {
        "--flag-0.5.8 must be set, got {}.",
        "--page-size must be positive, got {}",
        "--tp-size must divide {}",
    }
    index = json.loads(gzip.decompress((tmp_path / INDEX).read_bytes()))
    assert set(opened) < set(index["chunks"]) and len(opened) == len(set(opened))


def test_writing_again_gives_the_same_bytes_and_drops_chunks_it_no_longer_writes(
    tmp_path: Path, small_chunks: None
) -> None:
    memory = _memory()
    first = {p.name: p.read_bytes() for p in write_shipped(stored_rows(memory), memory.releases, tmp_path)}
    again = {p.name: p.read_bytes() for p in write_shipped(stored_rows(memory), memory.releases, tmp_path)}
    assert first == again
    one = library_of([_sig("--tp-size must divide {}", ("0.5.9",))])
    write_shipped(stored_rows(one), one.releases, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.5.9--0.5.9.jsonl.gz", INDEX]


def test_the_shipped_layout_is_what_writing_its_records_gives(tmp_path: Path) -> None:
    shipped = load_shipped()
    written = write_shipped(stored_rows(shipped), shipped.releases, tmp_path)
    folder = Path(__file__).resolve().parents[2] / "src" / "crashdoc" / "matching" / "data" / "derived"
    assert {p.name: p.read_bytes() for p in written} == {p.name: p.read_bytes() for p in folder.iterdir()}


def test_the_chunks_are_read_with_the_index_and_a_damaged_one_is_said(tmp_path: Path, small_chunks: None) -> None:
    memory = _memory()
    write_shipped(stored_rows(memory), memory.releases, tmp_path)
    shipped, _ = _from_folder(tmp_path)
    for path in tmp_path.iterdir():  # an upgrade replaced the files: what was read still answers
        path.unlink()
    assert list(shipped.signatures()) == list(memory.signatures())
    written = write_shipped(stored_rows(memory), memory.releases, tmp_path)
    chunk = next(p for p in written if p.name.startswith("0.5.12"))
    chunk.write_bytes(chunk.read_bytes()[:30])  # cut short
    damaged, _ = _from_folder(tmp_path)
    with pytest.raises(ValueError, match=r"derived-signature chunk 0\.5\.12--0\.5\.12\.jsonl\.gz"):
        _ = damaged.records
