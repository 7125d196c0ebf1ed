"""The compiled library cache: validated once, read back while the files are the same, rebuilt when
they change, ignored with a warning when damaged, skipped when it cannot be written; and whatever
comes out of it answers exactly as a library loaded from the YAML does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from crashdoc.commands.pipeline import explain_text
from crashdoc.matching import cache as cache_module
from crashdoc.matching.cache import CompiledCache
from crashdoc.matching.library import LibraryError, builtin_signature_dirs, load_library, matching_part
from crashdoc.matching.matcher import Matcher
from crashdoc.matching.reload import LibraryHolder
from crashdoc.outputs.render import diagnoses_json
from support.e2e import CRASHDOC
from support.journal_files import TRACEBACK

FIXTURE = Path(__file__).parent.parent / "fixtures" / "signatures" / "basic.yaml"


@pytest.fixture
def library_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "signatures"
    folder.mkdir()
    shutil.copy(FIXTURE, folder / "basic.yaml")
    return folder


class Warnings(list[str]):
    def __call__(self, message: str) -> None:
        self.append(message)


def cached(folder: Path, cache_dir: Path, warnings: Warnings | None = None) -> tuple[object, CompiledCache]:
    compiled = CompiledCache(cache_dir, warnings if warnings is not None else Warnings())
    return load_library([folder], compiled=compiled), compiled


def cache_file(cache_dir: Path) -> Path:
    (found,) = cache_dir.glob("library-*.json")
    return found


def test_second_load_comes_from_the_cache_and_equals_an_uncached_load(library_dir: Path, tmp_path: Path) -> None:
    first, c1 = cached(library_dir, tmp_path / "cache")
    second, c2 = cached(library_dir, tmp_path / "cache")
    assert (c1.builds, c1.hits, c2.builds, c2.hits) == (1, 0, 0, 1)
    assert first == second == load_library([library_dir])


def test_the_shipped_library_answers_the_same_from_the_cache(tmp_path: Path) -> None:
    folders = builtin_signature_dirs()
    plain = load_library(folders)
    load_library(folders, compiled=CompiledCache(tmp_path))
    compiled = CompiledCache(tmp_path)
    from_cache = load_library(folders, compiled=compiled)
    assert compiled.hits == 1
    assert from_cache == plain
    # every example, through the matcher of each: the same matches, captures and lines
    m_plain, m_cached = Matcher(plain), Matcher(from_cache)
    for sig in plain.signatures[::7]:
        for example in sig.examples:
            a = explain_text(example.text, plain, m_plain)
            b = explain_text(example.text, from_cache, m_cached)
            assert diagnoses_json(a) == diagnoses_json(b), sig.id


def test_the_matching_part_is_cached_apart_and_diagnoses_every_example_as_the_full_library(tmp_path: Path) -> None:
    """`explain` and `diagnose` read only what matching needs (no examples, near misses or runbook text), from
    an entry of its own: every example diagnosed with it gives the same JSON as with the whole library."""
    folders = builtin_signature_dirs()
    plain = load_library(folders)
    load_library(folders, compiled=CompiledCache(tmp_path), matching_only=True)
    compiled = CompiledCache(tmp_path)
    part = load_library(folders, compiled=compiled, matching_only=True)
    assert (compiled.hits, compiled.builds) == (1, 0)
    assert part == matching_part(plain) != plain
    assert [s.id for s in part.signatures] == [s.id for s in plain.signatures]
    assert not any(s.examples or s.near_misses or s.runbook for s in part.signatures)
    # the whole library is another entry: the runbook pages and the library's tools still get every field
    whole = CompiledCache(tmp_path)
    assert load_library(folders, compiled=whole) == plain and whole.builds == 1
    m_plain, m_part = Matcher(plain), Matcher(part)
    for sig in plain.signatures[::3]:
        for example in (*sig.examples, *sig.near_misses):
            a = explain_text(example.text, plain, m_plain)
            b = explain_text(example.text, part, m_part)
            assert diagnoses_json(a) == diagnoses_json(b), sig.id


def test_an_edited_file_is_validated_again(library_dir: Path, tmp_path: Path) -> None:
    cached(library_dir, tmp_path / "cache")
    path = library_dir / "basic.yaml"
    path.write_text(path.read_text().replace("title: DeepSeek V4 HiCache rejects", "title: Edited HiCache rejects"))
    library, compiled = cached(library_dir, tmp_path / "cache")
    assert compiled.builds == 1
    assert library.signatures[0].title.startswith("Edited HiCache rejects")
    # and the cache now holds the edited library
    again, compiled = cached(library_dir, tmp_path / "cache")
    assert compiled.hits == 1 and again == library


def test_a_file_broken_after_caching_is_reported_not_served_from_the_cache(library_dir: Path, tmp_path: Path) -> None:
    cached(library_dir, tmp_path / "cache")
    path = library_dir / "basic.yaml"
    path.write_text(path.read_text().replace("severity: critical", "severity: apocalyptic", 1))
    with pytest.raises(LibraryError) as err:
        cached(library_dir, tmp_path / "cache")
    assert "apocalyptic" in str(err.value) and "basic.yaml" in str(err.value)


def test_a_new_file_is_picked_up(library_dir: Path, tmp_path: Path) -> None:
    before, _ = cached(library_dir, tmp_path / "cache")
    text = FIXTURE.read_text().replace("id: ", "id: copy-")
    (library_dir / "more.yaml").write_text(text)
    after, compiled = cached(library_dir, tmp_path / "cache")
    assert compiled.builds == 1
    assert len(after) == 2 * len(before)


def test_touched_but_unchanged_files_keep_the_cache(library_dir: Path, tmp_path: Path) -> None:
    first, _ = cached(library_dir, tmp_path / "cache")
    path = library_dir / "basic.yaml"
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 5_000_000_000))
    library, compiled = cached(library_dir, tmp_path / "cache")
    assert (compiled.builds, compiled.hits) == (0, 1)  # same content: the digest says so
    assert library == first


def test_another_crashdoc_version_rebuilds(library_dir: Path, tmp_path: Path, monkeypatch) -> None:
    cached(library_dir, tmp_path / "cache")
    monkeypatch.setattr(cache_module, "__version__", "99.0")
    _, compiled = cached(library_dir, tmp_path / "cache")
    assert compiled.builds == 1
    assert json.loads(cache_file(tmp_path / "cache").read_text())["crashdoc"] == "99.0"


@pytest.mark.parametrize(
    "damage",
    [
        b"\x00\x01 not json at all",
        b'{"format": 1, "key": "x"',  # cut short (a full disk)
        b"[1, 2, 3]",
        None,  # valid JSON with the right key, but the data is not a library
    ],
)
def test_a_damaged_cache_is_ignored_with_a_warning_and_rebuilt(
    library_dir: Path, tmp_path: Path, damage: bytes | None
) -> None:
    cached(library_dir, tmp_path / "cache")
    target = cache_file(tmp_path / "cache")
    if damage is None:
        doc = json.loads(target.read_text())
        doc["data"]["signatures"][0] = doc["data"]["signatures"][0][:3]
        target.write_text(json.dumps(doc))
    else:
        target.write_bytes(damage)
    warnings = Warnings()
    library, compiled = cached(library_dir, tmp_path / "cache", warnings)
    assert library == load_library([library_dir])
    assert compiled.builds == 1
    assert len(warnings) == 1 and "damaged cache" in warnings[0] and str(target) in warnings[0]
    # repaired: the next load is a quiet hit
    warnings.clear()
    _, compiled = cached(library_dir, tmp_path / "cache", warnings)
    assert compiled.hits == 1 and not warnings


def test_an_unwritable_cache_folder_means_no_cache_and_no_noise(library_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    warnings = Warnings()
    for _ in range(2):
        library, compiled = cached(library_dir, blocker / "cache", warnings)
        assert library == load_library([library_dir]) and compiled.builds == 1
    assert not warnings


def test_no_cache_folder_at_all(library_dir: Path) -> None:
    compiled = CompiledCache(None)
    assert load_library([library_dir], compiled=compiled) == load_library([library_dir])
    assert compiled.builds == 1


def test_a_daemon_started_from_the_cache_still_validates_an_edited_file(library_dir: Path, tmp_path: Path) -> None:
    expected, _ = cached(library_dir, tmp_path / "cache")
    compiled = CompiledCache(tmp_path / "cache")
    holder = LibraryHolder([library_dir], log=lambda m: None, compiled=compiled)
    assert compiled.hits == 1 and holder.library == expected
    path = library_dir / "basic.yaml"
    text = path.read_text()
    path.write_text(text.replace("severity: critical", "severity: nonsense", 1))
    assert not holder.reload()  # the edited file is validated, and rejected; the cached library stays
    assert holder.library == expected
    path.write_text(text.replace("title: DeepSeek V4 HiCache rejects", "title: Edited HiCache rejects"))
    assert holder.reload()
    assert holder.library.signatures[0].title.startswith("Edited HiCache rejects")


def test_a_holder_of_the_matching_part_reads_each_runbook_back_from_its_file(library_dir: Path, tmp_path: Path) -> None:
    """The daemon's holder keeps no runbook text, examples or near misses; a page gets them as a full load has
    them, the hot-reloaded text after an edit, and the matching part again where the file lost the signature."""
    full = load_library([library_dir])
    compiled = CompiledCache(tmp_path / "cache")
    load_library([library_dir], compiled=compiled, matching_only=True)  # a daemon that ran before
    holder = LibraryHolder([library_dir], log=lambda m: None, compiled=compiled, matching_only=True)
    assert compiled.hits == 1 and holder.library == matching_part(full)
    assert all(not s.runbook and not s.examples for s in holder.library.signatures)
    assert [holder.shown(s) for s in holder.library.signatures] == list(full.signatures)
    path = library_dir / "basic.yaml"
    text = path.read_text()
    edited = text.replace("Why it happens: host memory ran out.", "Why it happens: the host ran out of memory.")
    assert edited != text
    path.write_text(edited)
    assert holder.reload()
    assert holder.library == matching_part(load_library([library_dir]))  # the edited file, stripped again
    shown = [holder.shown(s).runbook for s in holder.library.signatures]
    assert shown == [s.runbook for s in load_library([library_dir]).signatures]
    assert any(r.startswith("Why it happens: the host ran out of memory.") for r in shown)
    path.write_text("signatures: []\n")  # before the reload that will reject it: the page keeps what it had
    first = holder.library.signatures[0]
    assert holder.shown(first) == first


def test_explain_uses_the_cache_folder_and_prints_the_same(tmp_path: Path) -> None:
    log = tmp_path / "crash.log"
    log.write_text("\n".join(TRACEBACK) + "\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}

    def explain() -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CRASHDOC, "explain", "--json", str(log)], capture_output=True, text=True, env=env)

    first = explain()
    assert first.returncode == 1, first.stderr  # a failure found
    assert list((tmp_path / "xdg" / "crashdoc").glob("library-*.json"))
    second = explain()
    assert second.stdout == first.stdout and not second.stderr
    assert json.loads(second.stdout)["diagnoses"][0]["signature"]
    cache_file(tmp_path / "xdg" / "crashdoc").write_text("{broken")
    third = explain()
    assert third.stdout == first.stdout
    assert "ignoring the damaged cache" in third.stderr


def test_a_library_the_cache_cannot_store_faithfully_is_not_cached(
    library_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """A field the encoder does not know (a new one in Signature, say) must cost the cache, not answers."""
    from crashdoc.matching import library as library_module

    real = library_module.encode_library

    def lossy(library):
        data = real(library)
        for row in data["signatures"]:
            row[0] = "renamed"  # what decoding would get back differs from the library
        return data

    monkeypatch.setattr(library_module, "encode_library", lossy)
    for _ in range(2):
        library, compiled = cached(library_dir, tmp_path / "cache")
        assert compiled.builds == 1 and library == load_library([library_dir])
    assert not list((tmp_path / "cache").glob("library-*.json"))
