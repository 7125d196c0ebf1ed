"""Golden files: what a user sees (`explain --json`, `/metrics`) compared with a reviewed copy in
tests/golden/. After a deliberate change of output, `pytest --update-golden` rewrites them; review the
diff (`git diff tests/golden`) before committing."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


class Golden:
    def __init__(self, update: bool) -> None:
        self.update = update

    def check(self, name: str, actual: str) -> None:
        path = GOLDEN / name
        if self.update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual)
            return
        if not path.exists():
            pytest.fail(f"no golden file {path}: run `pytest --update-golden` and review it")
        expected = path.read_text()
        if actual != expected:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(keepends=True), actual.splitlines(keepends=True), str(path), "actual", n=2
                )
            )
            pytest.fail(f"{name} differs from its golden file (`pytest --update-golden` after review):\n{diff}")
