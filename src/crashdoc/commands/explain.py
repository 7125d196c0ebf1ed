"""`crashdoc explain`: diagnose pasted logs (plain, `journalctl -o cat` or `-o short*`)."""

from __future__ import annotations

import argparse
import sys

from crashdoc.commands.pipeline import (
    accepted_fixes,
    derived_setup,
    explain_texts,
    load_library_or_fail,
    release_option,
    sglang_python_option,
)
from crashdoc.errors import EXIT_OK, UserError
from crashdoc.events import Diagnosis


def main(args: argparse.Namespace) -> int:
    from crashdoc.sources.textlog import read_sources

    release_option(args.sglang_version)  # a bad option is said before anything is read
    # the input first: an empty, missing or unreadable file is said at once, before the library's
    # second of loading
    paths = args.files or ["-"]
    stdin_text = sys.stdin.buffer.read().decode("utf-8", "replace") if "-" in paths else None
    try:
        sources = list(read_sources(paths, stdin_text))
    except OSError as exc:
        raise UserError(f"cannot read {exc.filename}: {exc.strerror}") from exc
    interpreter = sglang_python_option(getattr(args, "sglang_python", None))
    library = load_library_or_fail(args.signatures)
    release, derived = derived_setup(args.sglang_version, args.sglang_source)
    results = explain_texts(sources, library, release, derived)
    results = accepted_fixes(sources, results, getattr(args, "launch_command", None), interpreter, derived)
    print_explained(results, as_json=args.json)
    return EXIT_OK


def print_explained(results: list[tuple[str, list[Diagnosis], list[Diagnosis]]], *, as_json: bool) -> None:
    """Each pasted log's diagnoses and warnings; with several logs, JSON is one object per line."""
    from crashdoc.outputs.render import diagnoses_json, diagnoses_text

    several = len(results) > 1
    for name, diagnoses, warnings in results:
        if as_json:
            print(diagnoses_json(diagnoses, warnings=warnings, **({"file": name} if several else {})))
        else:
            if several:
                print(f"== {name}")
            sys.stdout.write(diagnoses_text(diagnoses, warnings=warnings, color=sys.stdout.isatty()))
