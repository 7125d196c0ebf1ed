"""The `crashdoc` command line: argument parsing and a dispatch table, nothing else."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from crashdoc import __version__
from crashdoc.errors import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, UserError

# subcommand -> module in crashdoc.commands with a `main(args)`; imported only when chosen, so that
# `explain` does not pay for the daemon's imports
COMMANDS: dict[str, str] = {
    "run": "run",
    "diagnose": "diagnose",
    "explain": "explain",
    "demo": "demo",
    "check-config": "check_config",
    "signatures": "signatures",
    "runbooks": "runbooks",
}


def _library_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--signatures",
        metavar="DIR",
        action="append",
        default=None,
        help="signature folder to use instead of the built-in library (repeatable)",
    )


def _release_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sglang-version",
        metavar="X",
        help="the SGLang release that wrote the log (default: read from the unit's interpreter, or the log)",
    )
    parser.add_argument(
        "--sglang-source",
        metavar="DIR|WHEEL",
        help="derive signatures from this SGLang tree or wheel (read as files) and diagnose as its release",
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
    run.add_argument(
        "--runbook-base-url",
        metavar="URL",
        help="the address at which on-call engineers reach this crashdoc, e.g. https://oncall.example.net/crashdoc: "
        "alert links are URL/runbook/<signature> and URL/units/<unit> (a URL ending in /runbook is taken too)",
    )
    run.add_argument(
        "--web-config-file",
        metavar="FILE",
        help="TLS, client certificates and basic auth for every endpoint (exporter-toolkit's web config format); "
        "a relative path is looked up in $CREDENTIALS_DIRECTORY when systemd's LoadCredential= sets it",
    )
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
    diagnose.add_argument(
        "--no-verify",
        action="store_true",
        help="do not run the unit's SGLang on the corrected command to check its arguments",
    )
    _library_args(diagnose)
    _release_args(diagnose)

    explain = sub.add_parser("explain", help="diagnose pasted logs (plain, journalctl -o cat or -o short*)")
    explain.add_argument("files", nargs="*", metavar="FILE", help="log files; `-` or nothing reads stdin")
    explain.add_argument("--json", action="store_true", help="print JSON (one object per line for several files)")
    explain.add_argument(
        "--command",
        dest="launch_command",
        metavar="'CMD'",
        help="the launch command that failed (default: the one the paste shows above its log)",
    )
    explain.add_argument(
        "--sglang-python",
        metavar="PATH",
        help="an interpreter with the failing SGLang release: crashdoc runs its argument checks on each candidate fix",
    )
    _library_args(explain)
    _release_args(explain)

    demo = sub.add_parser("demo", help="boot a private systemd with crash-looping demo units and diagnose them")
    demo.add_argument("--listen", metavar="HOST:PORT", default="127.0.0.1:10247")
    demo.add_argument("--keep-running", action="store_true", help="keep the sandbox and daemon running")

    check = sub.add_parser("check-config", help="validate a configuration file")
    check.add_argument("file", metavar="FILE")

    sigs = sub.add_parser("signatures", help="the signature library: list, test, lint, mine, derive")
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

    derive = sigs_sub.add_parser("derive", help="derived signatures from an SGLang source tree, wheel or site-packages")
    derive.add_argument("--source", required=True, metavar="DIR|WHEEL")
    derive.add_argument("--out", metavar="FILE", help="write the derived data (gzip'd JSON, as shipped) here")
    derive.add_argument("--json", action="store_true", help="print every derived signature as JSON")

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
    if args.command in ("signatures", "runbooks") and args.action is None:
        parser.parse_args([args.command, "--help"])
        return EXIT_USAGE
    module = importlib.import_module(f"crashdoc.commands.{COMMANDS[args.command]}")
    try:
        return int(module.main(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except UserError as exc:
        print(f"crashdoc: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
