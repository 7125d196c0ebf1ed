"""Saved state across crashdoc upgrades: the state file is versioned JSON, and the one crashdoc 0.1.0
wrote (its engine as a pickle) is read once into today's records, so an upgrade keeps counters, loops
and the journal cursor."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from crashdoc.commands.pipeline import build_engine, pasted_log_builder
from crashdoc.diagnosis.engine import Engine
from crashdoc.events import Thresholds
from crashdoc.matching.library import load_library
from crashdoc.matching.matcher import Matcher
from crashdoc.runtime.saving import restore
from crashdoc.sources.cursor import FORMAT_VERSION, CursorStore

FIXTURES = Path(__file__).parent.parent / "fixtures"
# written by crashdoc 0.1.0 (commit 133325e): three crashes of sglang-prefill.service with the DeepSeek V4
# HiCache traceback (a loop), and sglang-decode.service ready; four loop events not yet handed out
V1_STATE = FIXTURES / "state" / "state-v1-crashdoc-0.1.0.json"
V1_CURSOR = "s=0123456789abcdef0123456789abcdef;i=2a;b=fedcba9876543210fedcba9876543210;m=1;t=5f0000;x=1"
UNIT = "sglang-prefill.service"


def engine() -> Engine:
    library = load_library([FIXTURES / "signatures"])
    return build_engine(Matcher(library), builder=pasted_log_builder(), thresholds=Thresholds(recovery=10))


def test_state_written_by_crashdoc_0_1_0_loads_with_its_counters_loops_and_cursor(tmp_path: Path) -> None:
    shutil.copy(V1_STATE, tmp_path / "state.json")
    saved = CursorStore(tmp_path).load()
    assert saved.warning == "" and saved.cursor == V1_CURSOR and saved.engine is None and saved.legacy_engine
    e = engine()
    assert restore(e, saved, journal_gone=False)
    rec = e.units()[UNIT]
    assert rec.crashloop and rec.crashes_total == 3 and rec.restarts_total == 3
    assert dict(rec.crashes_by_signature) == {"dsv4-hicache-size-unsupported": 3}
    [d] = e.diagnoses([UNIT])
    assert d.signature == "dsv4-hicache-size-unsupported" and d.crashes == 3
    assert "sglang-decode.service" in e.units() and not e.units()["sglang-decode.service"].crashloop
    assert [ev.kind for ev in e.pending()].count("loop-started") == 1, "the outbox survives the upgrade"


def test_the_upgraded_state_is_saved_in_todays_format_and_reads_back(tmp_path: Path) -> None:
    shutil.copy(V1_STATE, tmp_path / "state.json")
    store = CursorStore(tmp_path)
    e = engine()
    restore(e, store.load(), journal_gone=False)
    assert store.save(V1_CURSOR, engine=e.snapshot())
    doc = json.loads((tmp_path / "state.json").read_text())
    assert doc["version"] == FORMAT_VERSION and doc["engine"]["schema"] == "crashdoc-engine"
    again = engine()
    assert restore(again, CursorStore(tmp_path).load(), journal_gone=False)
    assert again.units()[UNIT].crashloop and again.units()[UNIT].crashes_total == 3


def test_a_state_whose_journal_is_gone_starts_with_no_looping_units_and_keeps_its_totals(tmp_path: Path) -> None:
    """After a re-image (a fresh journal), the saved cursor no longer exists: the loops it showed are not
    happening now, so the first scrape must not show them; counters keep their monotonic totals."""
    shutil.copy(V1_STATE, tmp_path / "state.json")
    e = engine()
    assert restore(e, CursorStore(tmp_path).load(), journal_gone=True)
    rec = e.units()[UNIT]
    assert not rec.crashloop and rec.diagnosis is None
    assert rec.crashes_total == 3 and rec.restarts_total == 3
    assert not [ev for ev in e.pending() if ev.kind in ("loop-started", "loop-updated", "failed")]
    assert e.diagnoses([UNIT]), "the crashes it saw are still there to read"
