"""`crashdoc runbooks render`: every runbook as Markdown, for a wiki."""

from __future__ import annotations

import argparse

from crashdoc.commands.pipeline import load_library_or_fail
from crashdoc.errors import UserError


def main(args: argparse.Namespace) -> int:
    """Every signature's runbook as Markdown in DIR, plus index.md, for a wiki."""
    from pathlib import Path

    from crashdoc.outputs.runbooks import INDEX, write_runbooks

    library = load_library_or_fail(args.signatures)
    try:
        rendered = write_runbooks(library, Path(args.dir))
    except OSError as exc:
        raise UserError(f"cannot write the runbooks to {args.dir}: {exc.strerror or exc}") from exc
    stale = f"; removed {len(rendered.removed)} page(s) of signatures that are gone" if rendered.removed else ""
    print(f"wrote {len(rendered.written) - 1} runbooks and {INDEX} to {args.dir}{stale}")
    return 0
