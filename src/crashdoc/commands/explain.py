"""`crashdoc explain`: diagnose pasted logs (plain, `journalctl -o cat` or `-o short*`).

Each input is read on its own: a file that cannot be read, or holds nothing to diagnose (empty, binary,
only journalctl's `-- No entries --`), is named with the reason and the others are still diagnosed. The
exit status is the worst over the inputs (`crashdoc.errors`): 3 nothing read, 1 a failure, 0 none.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from crashdoc.commands.pipeline import (
    accepted_fixes,
    derived_setup,
    explain_texts,
    interpreter_release,
    load_library_or_fail,
    release_option,
    sglang_python_option,
)
from crashdoc.errors import EXIT_CANNOT_RUN, EXIT_FAILURE_FOUND, EXIT_OK, EXIT_READ_NOTHING

if TYPE_CHECKING:
    from crashdoc.events import Diagnosis
    from crashdoc.sources.textinput import TextInput

PROBLEM_EXIT = EXIT_CANNOT_RUN  # a UserError here (library, --sglang-source) is no verdict on the log

# (name, diagnoses, warnings, what could not be read: "" when the input was read)
Explained = tuple[str, list["Diagnosis"], list["Diagnosis"], str]


def main(args: argparse.Namespace) -> int:
    release_option(args.sglang_version)  # a bad option is said before anything is read
    # the inputs first: an empty, missing or unreadable file is said at once, before the library's
    # second of loading (which is skipped when nothing is left to diagnose)
    inputs = read_inputs(args.files or ["-"])
    readable = [(name, source) for name, source, problem in inputs if not problem]
    interpreter = sglang_python_option(args.sglang_python)
    diagnosed: list[tuple[str, list[Diagnosis], list[Diagnosis]]] = []
    if readable:
        library = load_library_or_fail(args.signatures, matching_only=True)
        # without --sglang-source: the shipped derived signatures, read at the first traceback no reviewed
        # signature answers (`matcher.shipped_derived`): a healthy log never imports them
        release, derived = (
            derived_setup(args.sglang_version, args.sglang_source)
            if args.sglang_source is not None
            else (release_option(args.sglang_version), None)
        )
        release = release or interpreter_release(interpreter)  # --sglang-version / --sglang-source say first
        diagnosed = explain_texts(readable, library, release, derived)
        diagnosed = accepted_fixes(readable, diagnosed, args.launch_command, interpreter, derived)
    answers = iter(diagnosed)
    results: list[Explained] = []
    for name, _, problem in inputs:
        diagnoses, warnings = ([], []) if problem else next(answers)[1:]
        results.append((name, diagnoses, warnings, problem))
    return print_explained(results, as_json=args.json)


def read_inputs(paths: list[str]) -> list[tuple[str, TextInput, str]]:
    """(name, input, problem) per input, `-` meaning standard input; `problem` says why there is nothing to
    diagnose in it ("" when there is). A large input is not read into memory here (`TextInput`)."""
    from crashdoc.sources.textinput import TextInput, open_input

    out: list[tuple[str, TextInput, str]] = []
    for path in paths:
        try:
            source, problem = open_input(path, sys.stdin.buffer if path == "-" else None)
        except OSError as exc:
            source, problem = TextInput(path, ""), f"cannot read {path}: {exc.strerror or exc}"
        else:
            if path == "-" and problem.startswith("empty"):
                problem = "standard input is empty, nothing to diagnose"
            elif path == "-" and problem.startswith("binary"):
                problem = f"standard input holds {problem}"
            elif problem and path != "-":
                problem = f"cannot read {path}: {problem}"
        if not problem and source.only_notes():
            what = "standard input" if path == "-" else path
            problem = f"{what} holds no log line (only blank lines or journalctl's notes such as `-- No entries --`)"
        out.append((path, source, problem))
    return out


def print_explained(results: list[Explained], *, as_json: bool) -> int:
    """Each input's diagnoses and warnings, or why it was not read (also on stderr); with several inputs, JSON
    is one object per line. Returns the exit status: the worst over the inputs."""
    from crashdoc.outputs.render import diagnoses_json, diagnoses_text

    several = len(results) > 1
    status = EXIT_OK
    for name, diagnoses, warnings, problem in results:
        if problem:
            print(f"crashdoc: {problem}", file=sys.stderr)
            status = max(status, EXIT_READ_NOTHING)
        elif diagnoses:
            status = max(status, EXIT_FAILURE_FOUND)
        extra: dict[str, object] = {"file": name} if several else {}
        if as_json:
            if problem:
                extra["problems"] = [problem]
            print(diagnoses_json(diagnoses, warnings=warnings, **extra))
        else:
            if several:
                print(f"== {name}")
            if problem:
                if several:  # the reason is on stderr; here it says why this header has no diagnosis
                    print(f"Nothing read: {problem}.")
            else:
                sys.stdout.write(diagnoses_text(diagnoses, warnings=warnings, color=sys.stdout.isatty()))
    return status
