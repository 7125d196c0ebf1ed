"""Errors every layer may raise for the command line to print without a traceback."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


class UserError(Exception):
    """A problem the user can fix (bad file, missing unit); printed without a traceback."""


class ProblemsError(Exception):
    """Something the user wrote (the configuration, the signature library, the web configuration) and every
    problem found in it, each as FILE:LINE: WHAT. `config.ConfigError`, `matching.library.LibraryError` and
    `outputs.webconfig.WebConfigError` are its kinds; `said` is how any of them is printed."""

    def __init__(self, problems: Sequence[object]) -> None:
        self.problems: list[Any] = list(problems)  # str, or matching.library.Problem
        super().__init__("\n".join(str(p) for p in self.problems))

    def said(self, heading: str, limit: int | None = None) -> str:
        """`heading:` and the problems under it, one a line (the first `limit` of them)."""
        return heading + ":\n" + "\n".join(f"  {p}" for p in self.problems[:limit])
