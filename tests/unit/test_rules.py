"""One rule, one place: where a rule has a second implementation (the C batch reader), a test proves they
agree; where several parts read the same SGLang lines, they read them with the same patterns."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from crashdoc.assembly import markers
from crashdoc.assembly import memory_lines as memory
from crashdoc.events import LogLine, WatchRule
from crashdoc.sources.journal import JournalSource, UnitFilter
from crashdoc.text import terminal_safe
from support.journal_files import TERMINAL_HOSTILE, TRACEBACK, line, needs_journal_remote, write_journal

# what a unit may print: escapes (CSI colours, an OSC title, C1's CSI), BEL, NUL, backspace, tabs, invalid
# UTF-8, printable non-ASCII and a direction override
HOSTILE: list[str | bytes] = [
    "\x1b[31mValueError: red\x1b[0m",
    "\x1b]0;owned\x07title",
    "\x9b2Jc1 csi",
    "bell\x07 and nul\x00 and back\x08space",
    "tab\there",
    b"bad \xff\xfe utf-8",
    "caf\u00e9 \u202eevil",
    "[2026-05-01 12:00:03 TP0] plain",
]


def _read(folder: Path, build_dir: Path) -> tuple[list[LogLine], JournalSource]:
    source = JournalSource(
        UnitFilter((WatchRule("sglang*.service"),)), directory=str(folder), once=True, build_dir=build_dir
    )
    source.seek_head()
    out: list[LogLine] = []
    while True:
        out.extend(e for e in source.read(100) if isinstance(e, LogLine))
        if source.at_end:
            return out, source


@needs_journal_remote
def test_the_c_reader_keeps_a_line_as_the_python_reader_does(tmp_path: Path, monkeypatch) -> None:
    """fastread.c keeps printable text as it is and hands the rest to text.terminal_safe: the same rule."""
    write_journal(tmp_path, [line(text) for text in (*TRACEBACK, *HOSTILE)])
    fast, source = _read(tmp_path, tmp_path / "build")
    if source._batch is None:
        pytest.skip("the C batch reader cannot be built here (no compiler or no libsystemd headers)")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    slow, python_source = _read(tmp_path, tmp_path / "no-compiler")
    assert python_source._batch is None
    assert fast == slow
    raw = [t if isinstance(t, str) else t.decode("utf-8", "replace") for t in (*TRACEBACK, *HOSTILE)]
    assert [x.text for x in fast] == [terminal_safe(t) for t in raw]
    assert not any(ch in x.text for x in fast for ch in TERMINAL_HOSTILE if ch != "\x00")


def test_the_markers_and_the_memory_readers_share_the_memory_lines() -> None:
    """The literals the markers keep SGLang's memory lines by are the memory patterns' own."""
    literals = {kind: literal for kind, literal in markers.MARKERS}
    assert literals["kv-cache"] == memory.KV_CACHE and literals["loading"] == memory.LOAD_BEGIN
    assert literals["weights-loaded"] == memory.LOAD_END and literals["pool-end"] == memory.POOL_END
    line_ = "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1048576, K size: 20.00 GB, V size: 20.00 GB"
    assert memory.kv_allocated(line_) == (1048576, 40.0)
    assert memory.kv_allocated("SWA KV Cache is allocated. #tokens: 8, KV size: 1.50 GB") == (8, 1.5)
    assert memory.avail_mem("Load weight end. type=X, dtype=torch.bfloat16, avail mem=39.15 GB, mem usage=4") == 39.15
