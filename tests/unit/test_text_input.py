"""A pasted log read in blocks (`sources/textinput.py`): the same lines and the same diagnoses as the whole text,
without reading a large input into memory."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from crashdoc.commands.pipeline import explain_text_with_warnings
from crashdoc.events import Diagnosis, LogLine
from crashdoc.matching.derived import load_shipped
from crashdoc.matching.library import builtin_signature_dirs, load_library
from crashdoc.matching.matcher import Matcher
from crashdoc.outputs.render import diagnoses_json
from crashdoc.sources.textinput import TextInput, open_input
from support.corpus import corpus_dir

AUTHORED = Path(__file__).parents[1] / "fixtures" / "authored"
HEAD = 2048  # small, so that the test logs are read block by block
BLOCK = 4096


@pytest.fixture(scope="module")
def matcher() -> Matcher:
    return Matcher(load_library(builtin_signature_dirs()), load_shipped())


def streamed(path: Path, head: int = HEAD) -> TextInput:
    source, problem = open_input(str(path), head_bytes=head)
    assert problem == ""
    source.block_bytes = BLOCK
    return source


def summary(diagnoses: list[Diagnosis]) -> str:
    """What `explain --json` prints of them."""
    return diagnoses_json(diagnoses)


def logs() -> list[Path]:
    found = sorted(AUTHORED.glob("*.log")) + sorted(AUTHORED.with_name("authored2").glob("*.log"))
    corpus = corpus_dir()
    if corpus.is_dir():
        found += sorted(corpus.glob("*.log"))
    return [p for p in found if p.stat().st_size > HEAD]  # the others are read whole, as before


@pytest.mark.parametrize("path", logs(), ids=lambda p: p.name)
def test_a_log_read_in_blocks_gets_the_diagnoses_of_its_whole_text(path: Path, matcher: Matcher) -> None:
    source = streamed(path)
    assert source.text is None and source.streamed()
    library = matcher.library
    whole = explain_text_with_warnings(path.read_text(encoding="utf-8", errors="replace"), library, matcher)
    blocks = explain_text_with_warnings(source, library, matcher)
    assert summary(blocks[0]) == summary(whole[0])
    assert summary(blocks[1]) == summary(whole[1])


@pytest.mark.parametrize(
    "data",
    [
        b"a\r\nb\rc\nd\x0be\x0cf\x1cg\x85h\xe2\x80\xa8i\n\n\nlast without end",
        "é€😀 line\r\n".encode() * 700 + b"\xff\xfe broken bytes\r\n" * 300,
        b"x" * 9000 + b"\r" + b"\n" * 3 + b"y" * 5000 + b"\r",
    ],
    ids=["line-ends", "multibyte-across-blocks", "long-lines"],
)
def test_blocks_cut_lines_as_splitlines_does(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "paste.log"
    path.write_bytes(data)
    for block in (1, 2, 3, 7, 4096):
        source = TextInput(str(path), handle=path.open("rb"), block_bytes=block)
        lines = [line for piece in source.blocks() for line in piece]
        assert lines == data.decode("utf-8", "replace").splitlines(), block
        source.close()


def test_a_large_input_is_parsed_as_it_is_read(tmp_path: Path) -> None:
    """The events come before the file has been read to its end: nothing holds the whole input."""
    path = tmp_path / "big.log"
    line = "[2026-01-01 00:00:00 TP0] Decode batch. #running-req: 1, #token: 9, gen throughput (token/s): 1.0\n"
    path.write_text(line * 20000, encoding="utf-8")  # ~2 MB
    source = streamed(path)
    parsed = source.parse()
    first = next(iter(parsed.events))
    assert isinstance(first, LogLine) and first.text == line.rstrip("\n")
    assert source.handle is not None and source.handle.tell() <= 2 * BLOCK
    assert sum(1 for _ in parsed.events) == 20000 - 1
    source.close()


def test_large_standard_input_is_spooled_and_read_like_a_file(tmp_path: Path, matcher: Matcher) -> None:
    path = max(logs(), key=lambda p: p.stat().st_size)
    data = path.read_bytes()
    source, problem = open_input("-", io.BytesIO(data), head_bytes=HEAD)
    assert problem == "" and source.text is None
    source.block_bytes = BLOCK
    whole = explain_text_with_warnings(data.decode("utf-8", "replace"), matcher.library, matcher)
    assert summary(explain_text_with_warnings(source, matcher.library, matcher)[0]) == summary(whole[0])


def test_a_large_input_with_kernel_gpu_lines_is_read_whole(tmp_path: Path) -> None:
    """Joining the kernel's GPU lines to a crash needs every line: such an input is not streamed."""
    path = tmp_path / "gpu.log"
    filler = "INFO: nothing to see here\n" * 200
    path.write_text(filler + "[Tue May  5 10:14:58 2026] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    source = streamed(path)
    assert source.text is None and not source.streamed()
    assert "NVRM: Xid" in source.whole()


def test_the_problem_of_a_large_input_is_said_from_its_head(tmp_path: Path) -> None:
    path = tmp_path / "binary.log"
    path.write_bytes(bytes(range(32)) * 1000)
    source, problem = open_input(str(path), head_bytes=HEAD)
    assert problem == "binary data, not a text log" and source.text == "" and source.handle is None
    notes = tmp_path / "notes.log"
    notes.write_text("-- No entries --\n\n" * 500)
    assert streamed(notes).only_notes()
    notes.write_text("-- No entries --\n\n" * 500 + "ValueError: x\n")
    assert not streamed(notes).only_notes()
