"""Errors every layer may raise for the command line to print without a traceback."""

from __future__ import annotations

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


class UserError(Exception):
    """A problem the user can fix (bad file, missing unit); printed without a traceback."""
