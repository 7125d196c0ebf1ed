"""Errors every layer may raise for the command line to print without a traceback, and the exit codes.

`diagnose` and `explain` are run by scripts, so their codes say what was found (the worst over all inputs
wins: the highest code): 0 read something and found no failure (warnings allowed), 1 found a failure,
3 read nothing (or could not read an input), 4 could not run (configuration, signature library, install).
argparse's 2 is usage for every command, 130 an interrupt. The other commands use 1 for any problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2
EXIT_FAILURE_FOUND = 1  # diagnose, explain: at least one failure diagnosed
EXIT_READ_NOTHING = 3  # diagnose, explain: nothing to diagnose was read, or an input could not be read
EXIT_CANNOT_RUN = 4  # diagnose, explain: configuration, signature library or installation problem
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """A problem the user can fix (bad file, missing unit); printed without a traceback.

    `code` is the exit status; None leaves it to the command (1, or 4 for diagnose and explain)."""

    code: int | None = None


class UsageError(UserError):
    """An option's value is malformed (`--since yesterday-ish`): a usage error, like argparse's own."""

    code = EXIT_USAGE


class NothingRead(UserError):
    """The input holds nothing to diagnose or cannot be read (empty, binary, missing, no entries)."""

    code = EXIT_READ_NOTHING


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
