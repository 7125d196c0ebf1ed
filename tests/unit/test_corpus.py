"""Real SGLang logs, as their authors published them, through `crashdoc explain --json`.

The corpus lives next to the repository (`../shared/corpus/real`, or `$CRASHDOC_CORPUS`) and is
never copied into it; these tests skip when it is absent. Each labelled failure must come out as
the first diagnosis with the labelled category and root-cause line, explained by a signature of
the shipped library; the healthy logs must give no diagnosis at all.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from crashdoc.matching.library import builtin_signature_dirs, load_library
from support.corpus import corpus_dir
from support.explaining import explain_each

CORPUS = corpus_dir()
LABELS = CORPUS / "labels.jsonl"

if not LABELS.is_file():
    pytest.skip(f"real-log corpus not found at {CORPUS} (set CRASHDOC_CORPUS)", allow_module_level=True)


def _labels() -> list[dict[str, Any]]:
    return [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines() if line.strip()]


ROWS = _labels()
FAILURES = [r for r in ROWS if not r.get("healthy")]
HEALTHY = [r for r in ROWS if r.get("healthy")]


@pytest.fixture(scope="module")
def explained() -> dict[str, list[dict[str, Any]]]:
    """Run the real CLI entry point once over every labelled log: {file name: diagnoses}.

    `crashdoc explain --json A B ...` prints one JSON object per file, so the library is loaded
    once for the whole corpus instead of once per log.
    """
    status, docs = explain_each([CORPUS / r["file"] for r in ROWS])
    results = {name: doc["diagnoses"] for name, doc in docs.items()}
    # the worst over the files: 1 when any failure was found (the corpus holds failures), never 3 (all read)
    assert status == (1 if any(results.values()) else 0), f"crashdoc explain exited {status}"
    assert set(results) == {r["file"] for r in ROWS}, "explain did not report every file"
    return results


@pytest.fixture(scope="module")
def signature_ids() -> set[str]:
    return {s.id for s in load_library(builtin_signature_dirs()).signatures}


def test_every_log_is_labelled() -> None:
    logs = {p.name for p in CORPUS.glob("*.log")}
    labelled = {r["file"] for r in ROWS}
    assert logs <= labelled, f"logs without a label: {sorted(logs - labelled)}"
    assert FAILURES, "the corpus has no failure logs"


@pytest.mark.parametrize("label", FAILURES, ids=[r["file"] for r in FAILURES])
def test_failure_log_is_diagnosed(
    label: dict[str, Any], explained: dict[str, list[dict[str, Any]]], signature_ids: set[str]
) -> None:
    diagnoses = explained[label["file"]]
    assert diagnoses, "no diagnosis at all"
    first = diagnoses[0]
    assert first["signature"] is not None, (
        f"unknown failure (fingerprint {first['fingerprint']}): {first['root_cause']['line'][:200]}"
    )
    assert first["signature"] in signature_ids
    assert first["category"] == label["category"], f"diagnosed by {first['signature']}"
    assert first["root_cause"]["line"] == label["key_message"], f"diagnosed by {first['signature']}"
    assert first["severity"] == "critical"


@pytest.mark.parametrize("label", HEALTHY, ids=[r["file"] for r in HEALTHY])
def test_healthy_log_gives_no_diagnosis(label: dict[str, Any], explained: dict[str, list[dict[str, Any]]]) -> None:
    diagnoses = explained[label["file"]]
    assert diagnoses == [], [(d["signature"], d["root_cause"]["line"][:120]) for d in diagnoses]
