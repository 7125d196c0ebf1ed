"""Every signature's fix, as a user reads it: no template text, no empty value, no pin for an unknown release.

Swept over each signature's own example logs (the values the message gives, read through the whole pipeline) and
over its fix with nothing known (no capture, no flag, no release), in text and in JSON.
"""

from __future__ import annotations

import json
import re

import pytest

from crashdoc.commands.pipeline import accepted_fixes, diagnosis_builder, explain_text, load_library_or_fail
from crashdoc.diagnosis.report import UnitContext
from crashdoc.events import Diagnosis, RootCause
from crashdoc.matching.library import Library
from crashdoc.outputs.render import diagnoses_json, diagnosis_text

LIBRARY: Library = load_library_or_fail(None)
EMPTY = re.compile(r"\bfrom\s+to\b|\bto\s+(?:so|and|for)\b|``|(?<![\w)>])\(\s*\)|<>")


def problems(d: Diagnosis, release_known: bool) -> list[str]:
    found = []
    text = diagnosis_text(d)
    doc = json.loads(diagnoses_json([d]))["diagnoses"][0]
    for where, shown in (("text", text), ("json", json.dumps(doc, ensure_ascii=False))):
        if "${" in shown:
            found.append(f"{where}: template text: {shown[shown.index('${') - 40 : shown.index('${') + 40]!r}")
    fix = doc["fix"]
    for change in fix["changes"]:
        if change["action"] in ("set", "replace") and change["value"] in (None, "") and not change["new_flag"]:
            found.append(f"json: empty value for {change['flag']}")
    for line in [fix["summary"], *fix["warnings"], *fix["why"]]:
        if EMPTY.search(line):
            found.append(f"a gap where a value should be: {line!r}")
        pinned_install = re.search(r"pip install[^`]*==", line)
        if not release_known and pinned_install and "if the unit runs sglang" not in line.lower():
            found.append(f"a pinned install for an unknown release: {line!r}")
    return found


RELEASE_LINE = "[2026-01-01 00:00:00] sglang version: 0.5.22\n"
EXAMPLES = [(sig.id, n, ex.text) for sig in LIBRARY.signatures for n, ex in enumerate(sig.examples)]


@pytest.mark.parametrize(("signature", "n", "log"), EXAMPLES, ids=[f"{s}-{n}" for s, n, _ in EXAMPLES])
def test_each_example_log_reads_cleanly(signature: str, n: int, log: str) -> None:
    """Through the engine and the remedy stage after it, as `explain` shows it."""
    for text, known in ((log, False), (RELEASE_LINE + log, True)):
        [(_, found, _)] = accepted_fixes([("x", text)], [("x", explain_text(text, LIBRARY), [])], None, None, None)
        for d in found:
            assert problems(d, known) == [], d.signature


@pytest.mark.parametrize("signature", [s.id for s in LIBRARY.signatures if s.changes or "${" in s.fix_summary])
def test_each_fix_reads_cleanly_with_nothing_known(signature: str) -> None:
    """No capture, no flag, no release: what a bare one-line paste gives the templates."""
    sig = LIBRARY.get(signature)
    assert sig is not None
    fix = diagnosis_builder()._fix_from_signature(sig, {}, UnitContext(unit=""), None)
    d = Diagnosis("", sig.id, sig.title, sig.category, sig.severity, RootCause("ValueError", "x", "x"), [], fix, "f")
    assert problems(d, release_known=False) == []
