"""A journal replaced while crashdoc was down (a re-imaged host, a fresh journal): the saved cursor names an
entry that no longer exists. The daemon's first scrape must not show the loops of the old journal, and its
counters keep their totals (Prometheus' counters never go down). Real journal files, the daemon's own
start-up (`prepare`), no systemd."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from crashdoc.runtime.daemon import Daemon
from support.file_daemon import file_daemon
from support.journal_files import (
    UNIT,
    crash_loop_entries,
    line,
    needs_journal_remote,
    write_journal,
)


def scrape(d: Daemon) -> dict[tuple[str, str], float]:
    """{(sample, unit): value} of the unit's samples on /metrics."""
    out = {}
    for family in text_string_to_metric_families(d.view.metrics().decode()):
        for s in family.samples:
            if s.labels.get("unit") == UNIT:
                out[(s.name, s.labels.get("signature", ""))] = s.value
    return out


@needs_journal_remote
def test_a_replaced_journal_starts_with_no_looping_units_and_counters_keep_their_totals(tmp_path: Path, capfd) -> None:
    old, new, state = tmp_path / "old-journal", tmp_path / "new-journal", tmp_path / "state"
    old.mkdir()
    new.mkdir()
    write_journal(old, crash_loop_entries())
    first = file_daemon(old, state)
    first.prepare()
    first.source.seek_head()  # read the old journal from its start, as a crashdoc that followed it did
    first._drain()
    first.saver.dirty = True
    first._save(force=True)
    before = scrape(first)
    assert before[("crashdoc_unit_crashloop", "")] == 1.0, "the old journal holds a crash loop"
    assert before[("crashdoc_crashes_total", "dsv4-hicache-size-unsupported")] == 2.0

    write_journal(new, [line("[2026-05-02 09:00:00] INFO: a new journal after a re-image")])
    second = file_daemon(new, state)
    second.prepare()
    second._drain()
    after = scrape(second)
    assert after[("crashdoc_unit_crashloop", "")] == 0.0, "the old journal's loop is not happening now"
    assert not [k for k in after if k[0] == "crashdoc_diagnosis_info"], after
    assert after[("crashdoc_crashes_total", "dsv4-hicache-size-unsupported")] == 2.0, "counters keep their totals"
    assert after[("crashdoc_unit_restarts_total", "")] == before[("crashdoc_unit_restarts_total", "")] == 2.0
    err = capfd.readouterr().err
    assert "the saved journal position is gone" in err and f"not assuming {UNIT} still loop" in err
