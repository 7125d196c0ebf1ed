"""`crashdoc explain` run through the real entry point, as a user runs it: the one driver of the tests that read
what explain says about a pasted log (its text, its `--json` document, the exit status scripts read)."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def run_explain(paths: Sequence[Path], *, as_json: bool = True) -> tuple[int, str]:
    """`crashdoc explain [--json] PATH...`: (exit status, what it printed)."""
    from crashdoc.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["explain", *(["--json"] if as_json else []), *map(str, paths)])
    return status, out.getvalue()


def explain_file(path: Path, *, as_json: bool = True) -> Any:
    """One log's `--json` document (or its text), the exit status checked: 1 a failure found, 0 none."""
    status, out = run_explain([path], as_json=as_json)
    result = json.loads(out) if as_json else out
    failed = bool(result["diagnoses"]) if as_json else not result.startswith("No failure found.")
    assert status == (1 if failed else 0), f"crashdoc explain exited {status}"
    return result


def explain(tmp_path: Path, text: str, *, as_json: bool = True) -> Any:
    """`explain_file` of a pasted text (written to tmp_path/pasted.log)."""
    path = tmp_path / "pasted.log"
    path.write_text(text, encoding="utf-8")
    return explain_file(path, as_json=as_json)


def first(tmp_path: Path, text: str) -> dict[str, Any]:
    """The first diagnosis of a pasted text; there must be one."""
    diagnoses = explain(tmp_path, text)["diagnoses"]
    assert diagnoses, "no diagnosis"
    return dict(diagnoses[0])


def explain_each(paths: Sequence[Path]) -> tuple[int, dict[str, dict[str, Any]]]:
    """`explain --json` over several logs at once: (the worst exit status, {file name: its document})."""
    status, out = run_explain(paths)
    docs: dict[str, dict[str, Any]] = {}
    for line in out.splitlines():
        if line.strip():
            doc = json.loads(line)
            docs[Path(doc.get("file", paths[0].name)).name] = doc
    return status, docs
