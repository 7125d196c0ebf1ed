"""The `crashdoc` command line: argument parsing and dispatch, nothing else."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from crashdoc import __version__

if TYPE_CHECKING:
    from crashdoc.matching.library import Library

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2


def _library_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--signatures",
        metavar="DIR",
        action="append",
        default=None,
        help="signature folder to use instead of the built-in library (repeatable)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crashdoc",
        description="Why is this SGLang unit crash-looping, and which flag fixes it?",
    )
    parser.add_argument("--version", action="version", version=f"crashdoc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run the daemon (journal + D-Bus -> metrics, alerts, HTTP view)")
    run.add_argument("--config", metavar="FILE", help="YAML configuration (defaults watch sglang*.service)")
    run.add_argument("--listen", metavar="HOST:PORT", help="address for /metrics and the HTTP view")
    run.add_argument("--alertmanager-url", metavar="URL", help="push alerts to this Alertmanager (API v2)")
    run.add_argument("--runbook-base-url", metavar="URL", help="external base URL of the runbook pages")
    run.add_argument("--state-directory", metavar="DIR", help="where the journal cursor is kept")
    run.add_argument("--directory", metavar="DIR", help="follow journal files in DIR instead of the system journal")

    diagnose = sub.add_parser("diagnose", help="one-shot diagnosis from the host journal or journal files")
    diagnose.add_argument("--unit", action="append", metavar="UNIT", help="unit name or glob (repeatable)")
    diagnose.add_argument("--since", metavar="TIME", help="start here: a timestamp, or -1h / -30m / -2d")
    src = diagnose.add_mutually_exclusive_group()
    src.add_argument("--directory", "-D", metavar="DIR", help="read journal files from DIR")
    src.add_argument("--file", action="append", metavar="FILE", help="read this journal file (repeatable)")
    diagnose.add_argument("--json", action="store_true", help="print JSON")
    diagnose.add_argument("--config", metavar="FILE", help="YAML configuration (units, roles, thresholds)")
    _library_args(diagnose)

    explain = sub.add_parser("explain", help="diagnose pasted logs (plain, journalctl -o cat or -o short*)")
    explain.add_argument("files", nargs="*", metavar="FILE", help="log files; `-` or nothing reads stdin")
    explain.add_argument("--json", action="store_true", help="print JSON (one object per line for several files)")
    _library_args(explain)

    demo = sub.add_parser("demo", help="boot a private systemd with crash-looping demo units and diagnose them")
    demo.add_argument("--listen", metavar="HOST:PORT", default="127.0.0.1:10247")
    demo.add_argument("--keep-running", action="store_true", help="keep the sandbox and daemon running")

    check = sub.add_parser("check-config", help="validate a configuration file")
    check.add_argument("file", metavar="FILE")

    sigs = sub.add_parser("signatures", help="the signature library: list, test, lint, mine")
    sigs_sub = sigs.add_subparsers(dest="action", metavar="ACTION")
    lst = sigs_sub.add_parser("list", help="id, category, severity, flags, source")
    lst.add_argument("dirs", nargs="*", metavar="DIR")
    lst.add_argument("--json", action="store_true")
    for name, text in (("test", "run every example of every signature"), ("lint", "schema, regexes, ids, overlaps")):
        p = sigs_sub.add_parser(name, help=text)
        p.add_argument("dirs", nargs="*", metavar="DIR")
    mine = sigs_sub.add_parser("mine", help="candidate signatures from an SGLang source tree or package")
    mine.add_argument("path", metavar="PATH")
    mine.add_argument("--out", metavar="DIR", help="write candidate YAML files here")
    mine.add_argument("--json", action="store_true", help="print the coverage report as JSON")
    _library_args(mine)

    runbooks = sub.add_parser("runbooks", help="runbooks as Markdown")
    rb_sub = runbooks.add_subparsers(dest="action", metavar="ACTION")
    render = rb_sub.add_parser("render", help="write every signature's runbook as Markdown into DIR")
    render.add_argument("dir", metavar="DIR")
    _library_args(render)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        if args.command == "explain":
            return _explain(args)
        if args.command == "signatures":
            return _signatures(args, parser)
        if args.command == "diagnose":
            from crashdoc.commands import diagnose

            return diagnose(args)
        if args.command == "run":
            from crashdoc.commands import run

            return run(args)
        if args.command == "demo":
            from crashdoc.commands import demo

            return demo(args)
        if args.command == "check-config":
            from crashdoc.commands import check_config

            return check_config(args)
        if args.command == "runbooks":
            from crashdoc.commands import render_runbooks

            return render_runbooks(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except UserError as exc:
        print(f"crashdoc: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    parser.print_help()
    return EXIT_USAGE


class UserError(Exception):
    """A problem the user can fix (bad file, missing unit); printed without a traceback."""


def load_library_or_fail(dirs: Sequence[str] | None) -> Library:
    from crashdoc.matching.library import LibraryError, builtin_signature_dirs, load_library

    folders = [Path(d) for d in dirs] if dirs else builtin_signature_dirs()
    if not folders:
        raise UserError("no signature library found (the package is incomplete); pass --signatures DIR")
    try:
        return load_library(folders)
    except LibraryError as exc:
        raise UserError("the signature library has problems:\n" + "\n".join(f"  {p}" for p in exc.problems)) from exc


def _explain(args: argparse.Namespace) -> int:
    from crashdoc.commands import explain_texts
    from crashdoc.outputs.render import diagnoses_json, diagnoses_text
    from crashdoc.sources.textlog import read_sources

    library = load_library_or_fail(args.signatures)
    paths = args.files or ["-"]
    stdin_text = sys.stdin.buffer.read().decode("utf-8", "replace") if "-" in paths else None
    try:
        sources = list(read_sources(paths, stdin_text))
    except OSError as exc:
        raise UserError(f"cannot read {exc.filename}: {exc.strerror}") from exc
    results = explain_texts(sources, library)
    several = len(sources) > 1
    for name, diagnoses in results:
        if args.json:
            print(diagnoses_json(diagnoses, **({"file": name} if several else {})))
        else:
            if several:
                print(f"== {name}")
            sys.stdout.write(diagnoses_text(diagnoses, color=sys.stdout.isatty()))
    return EXIT_OK


def _signatures(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from crashdoc.matching.matcher import Matcher
    from crashdoc.matching.selftest import lint_library, test_library

    if args.action is None:
        parser.parse_args(["signatures", "--help"])
        return EXIT_USAGE
    if args.action == "mine":
        from crashdoc.commands import mine

        return mine(args)
    library = load_library_or_fail(args.dirs or None)
    if args.action == "list":
        rows = [
            {
                "id": s.id,
                "category": s.category,
                "severity": s.severity,
                "flags": list(s.flags),
                "source": s.origin,
                "kind": s.kind,
            }
            for s in library.signatures
        ]
        if args.json:
            print(json.dumps(rows, indent=1))
        else:
            width = max(len(r["id"]) for r in rows)
            for r in rows:
                print(f"{r['id']:<{width}}  {r['category']:<17} {r['severity']:<8} {' '.join(r['flags'])}")
            print(f"{len(rows)} signatures")
        return EXIT_OK
    matcher = Matcher(library)
    if args.action == "test":
        count, failures = test_library(library, matcher)
        for failure in failures:
            print(failure)
        print(f"{count} examples in {len(library)} signatures: {len(failures)} failed")
        return EXIT_PROBLEM if failures else EXIT_OK
    if args.action == "lint":
        count, failures = test_library(library, matcher)
        problems = [*failures, *lint_library(library, matcher)]
        for problem in problems:
            print(problem)
        print(f"{len(library)} signatures: {len(problems)} problem(s)")
        return EXIT_PROBLEM if problems else EXIT_OK
    return EXIT_USAGE
