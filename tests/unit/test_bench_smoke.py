"""The benchmarks run end to end on a tiny journal, so they cannot rot.

No timing is asserted here (speed lives in bench/ as ratios); only that every piece runs and
that the numbers it reports come from real work: the generated journal has the entries and
crashes it claims, and `crashdoc diagnose` on it finds the crashes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import JOURNAL_REMOTE, Results  # noqa: E402

pytestmark = pytest.mark.skipif(JOURNAL_REMOTE is None, reason="systemd-journal-remote is not installed")


@pytest.fixture(scope="module")
def tiny_journal(tmp_path_factory):
    from bench.journal_gen import build

    return build(12_000, seed=3, folder=tmp_path_factory.mktemp("journal"), crash_every=(2_000, 4_000))


def test_generated_journal_is_what_it_claims(tiny_journal) -> None:
    from systemd import journal

    r = journal.Reader(files=[str(f) for f in tiny_journal.files])
    units: dict[str, int] = {}
    pid1_restarts = 0
    n = 0
    for entry in r:
        n += 1
        unit = entry.get("_SYSTEMD_UNIT", "")
        units[unit] = units.get(unit, 0) + 1
        if entry.get("MESSAGE_ID") is not None and entry["MESSAGE_ID"].hex == "5eb03494b6584870a536b337290809b3":
            assert entry["_PID"] == 1 and entry["UNIT"].startswith("sglang-") and int(entry["N_RESTARTS"]) >= 1
            pid1_restarts += 1
    assert n == tiny_journal.meta["entries"] == 12_000
    assert units == tiny_journal.meta["by_unit"]
    assert pid1_restarts == len(tiny_journal.meta["crashes"]) >= 2


def test_throughput_section_runs_and_diagnoses_the_crashes(tiny_journal) -> None:
    from bench import throughput

    results = Results()
    rates = throughput.run(tiny_journal, results, rounds=1, warm=False)
    assert set(rates) == set(throughput.CASES) and all(v > 0 for v in rates.values())
    diagnoses = results.raw["throughput"]["diagnoses"]
    injected = {c["unit"] for c in tiny_journal.meta["crashes"]}
    assert {d["unit"] for d in diagnoses} == injected
    signatures = {c["signature"] for c in tiny_journal.meta["crashes"]}
    assert {d["signature"] for d in diagnoses} <= signatures


def test_scale_section_runs_with_synthetic_signatures(tiny_journal) -> None:
    from bench import scale
    from bench.common import load_bench_library

    real, _, _ = load_bench_library()
    results = Results()
    rates = scale.run(tiny_journal, results, rounds=1, lines=5_000, sizes=(5, len(real) + 20))
    assert len(rates) == 2 and all(v > 0 for v in rates.values())
    assert [r.case for r in results.rows] == ["engine path, 5 signatures", f"engine path, {len(real) + 20} signatures"]


def test_table_renders(tiny_journal) -> None:
    from bench.__main__ import table

    results = Results()
    results.add("s", "a | b", "1", ok=True)
    text = table(results)
    assert "a \\| b" in text and "| yes |" in text


def test_paste_section_measures_explain_and_diagnose_on_a_text_log(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import paste

    monkeypatch.setattr(paste, "SIZES_MB", (2,))
    results = Results()
    got = paste.run(results, rounds=1)
    assert set(got) == {
        "bare Python (`python -c pass`)",
        "explain, one line",
        "explain, 2 MB paste",
        "diagnose --file, 2 MB text log",
    }
    peaks = {case: runs[0][0] for case, runs in got.items()}
    assert 0 < peaks["bare Python (`python -c pass`)"] < peaks["explain, one line"]
    judged = [r for r in results.rows if r.ok is not None]
    assert [r.case for r in judged] == ["explain, 2 MB paste: peak RSS", "diagnose --file, 2 MB text log: peak RSS"]


def test_latency_load_children_spin_and_are_stopped() -> None:
    """bench/latency.py's stand-in for the fix checks: N processes that use CPU until they are stopped."""
    import time

    from bench.latency import busy_children, stop_children

    children = busy_children(2)
    try:
        time.sleep(0.5)
        assert all(child.poll() is None for child in children)
        stats = [Path(f"/proc/{child.pid}/stat").read_text() for child in children]
        ticks = [int(stat.rsplit(")", 1)[1].split()[11]) for stat in stats]
        assert all(t > 0 for t in ticks)  # user time: they spin
    finally:
        stop_children(children)
    assert all(child.returncode is not None for child in children)
