"""`crashdoc signatures lint` and `test` catch what would make a signature useless at 3 a.m."""

from __future__ import annotations

from pathlib import Path

from crashdoc.cli import main

GOOD = """
  - id: {id}
    title: A signature for lint tests
    category: other
    severity: critical
    match: {{exception: [ValueError], message: '{message}'}}
    fix: {{summary: '{summary}'}}
    runbook: "{runbook}"
    examples:
      match:
        - text: "Traceback (most recent call last):\\n  File \\"/x/y.py\\", line 1, in f\\nValueError: {example}"
      no_match:
        - text: "Traceback (most recent call last):\\nValueError: something else entirely"
"""
RUNBOOK = "Why it happens: a. How to confirm: b. Safe fix: c. Roll back: d."


def write(tmp: Path, *signatures: str) -> Path:
    folder = tmp / "sigs"
    folder.mkdir()
    (folder / "lib.yaml").write_text("signatures:" + "".join(signatures))
    return folder


def sig(**kw: str) -> str:
    values = {
        "id": "lint-a",
        "message": "disk (?P<disk>\\w+) is full",
        "summary": "free ${disk}",
        "runbook": RUNBOOK,
        "example": "disk sda is full",
    }
    values.update(kw)
    return GOOD.format(**values)


def run(capsys, *args: str) -> tuple[int, str]:
    code = main(["signatures", *args])
    return code, capsys.readouterr().out


def test_a_clean_library_passes(tmp_path: Path, capsys) -> None:
    assert run(capsys, "lint", str(write(tmp_path, sig())))[0] == 0


def test_runbook_sections_near_misses_and_templates_are_checked(tmp_path: Path, capsys) -> None:
    text = sig(
        runbook="Why it happens: a long explanation of the failure without the other parts.", summary="free ${dsk}"
    )
    text = text[: text.index("      no_match:")]
    code, out = run(capsys, "lint", str(write(tmp_path, text)))
    assert code == 1
    assert "runbook lacks: how to confirm, the safe fix, how to roll back" in out
    assert "needs at least one no_match example" in out
    assert "template ${dsk} names no capture of the pattern" in out


def test_two_signatures_claiming_the_same_example_are_reported(tmp_path: Path, capsys) -> None:
    folder = write(tmp_path, sig(), sig(id="lint-b", message="is full", summary="free space"))
    code, out = run(capsys, "lint", str(folder))
    assert code == 1 and "lint-b: lint-a matches this example with an equal or higher score" in out


def test_a_wrong_capture_fails_the_examples(tmp_path: Path, capsys) -> None:
    folder = write(tmp_path, sig().replace('disk sda is full"', 'disk sda is full"\n          captures: {disk: sdb}'))
    code, out = run(capsys, "test", str(folder))
    assert code == 1 and "capture 'disk' is 'sda', expected 'sdb'" in out
