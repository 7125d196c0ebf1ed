"""The `crashdoc` command line: argument parsing and a dispatch table, nothing else.

Defaults named in help texts are the configuration's (crashdoc.config), written out here so that `explain`
does not import it to start; tests/unit/test_exit_status.py keeps the two the same.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from crashdoc import __version__
from crashdoc.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, UserError

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

DEFAULT_LISTEN = "127.0.0.1:10247"  # crashdoc.config.DEFAULT_LISTEN
DEFAULT_STATE_DIRECTORY = "/var/lib/crashdoc"  # crashdoc.config.DEFAULT_STATE_DIRECTORY
DEFAULT_UNITS = "sglang*.service"  # crashdoc.config.Config().units

EXIT_STATUS = """exit status (diagnose, explain; several inputs: the highest applies):
  0  read something, no failure found (warnings of tracebacks SGLang survived allowed)
  1  a failure found
  2  usage: an unknown option or a malformed value
  3  nothing read: an empty, binary, missing or unreadable input, a journal without entries of the units
     asked for (the reason on stderr and in the JSON's "problems")
  4  could not run: invalid configuration or signature library, broken installation
  130  interrupted (Ctrl-C)"""


def _library_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--signatures",
        metavar="DIR",
        action="append",
        default=None,
        help="signature folder to use instead of the built-in library (repeatable; default: the built-in library)",
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
        help="derive signatures from this SGLang tree or wheel (read as files) and diagnose as its release "
        "(default: the shipped derived signatures)",
    )


def _columns() -> int:
    """The terminal's width as `shutil.get_terminal_size` says it ($COLUMNS, else the terminal's, else 80), read
    without importing `shutil` (with `bz2`, `lzma` and `fnmatch`: ~2 ms of every start), which argparse's help
    formatter imports for every argument added."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        size = os.get_terminal_size(sys.__stdout__.fileno())  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80
    return size.columns or 80


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help formatter with the width it would compute itself (the terminal's less 2), `shutil` left out."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


class RawDescriptionHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The same for descriptions and epilogs kept as written (the exit status table)."""


def _run_args(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--config",
        metavar="FILE",
        help=f"YAML configuration (default: built-in defaults: watch {DEFAULT_UNITS}, listen on {DEFAULT_LISTEN})",
    )
    run.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"address for /metrics and the HTTP view (default: the configuration's listen, {DEFAULT_LISTEN})",
    )
    run.add_argument(
        "--alertmanager-url", metavar="URL", help="push alerts to this Alertmanager (API v2) (default: no push)"
    )
    run.add_argument(
        "--runbook-base-url",
        metavar="URL",
        help="the address at which on-call engineers reach this crashdoc, e.g. https://oncall.example.net/crashdoc: "
        "alert links are URL/runbook/<signature> and URL/units/<unit> (a URL ending in /runbook is taken too) "
        "(default: http(s)://<listen>)",
    )
    run.add_argument(
        "--web-config-file",
        metavar="FILE",
        help="TLS, client certificates and basic auth for every endpoint (exporter-toolkit's web config format); "
        "a relative path is looked up in $CREDENTIALS_DIRECTORY when systemd's LoadCredential= sets it "
        "(default: plain HTTP, no authentication)",
    )
    run.add_argument(
        "--state-directory",
        metavar="DIR",
        help=f"where the journal cursor and state are kept (default: $STATE_DIRECTORY under systemd, "
        f"else {DEFAULT_STATE_DIRECTORY})",
    )
    run.add_argument(
        "--directory",
        metavar="DIR",
        help="follow journal files in DIR instead of the system journal (default: the system journal)",
    )


def _diagnose_args(diagnose: argparse.ArgumentParser) -> None:
    diagnose.add_argument(
        "--unit",
        action="append",
        metavar="UNIT",
        help=f"unit name or glob (repeatable; default: the configuration's units, {DEFAULT_UNITS})",
    )
    diagnose.add_argument(
        "--since",
        metavar="TIME",
        help="start here: a timestamp, an epoch number, today, yesterday, or -1h / -30m / -2d "
        "(default: 24 hours ago on the host journal, the first entry of journal files)",
    )
    src = diagnose.add_mutually_exclusive_group()
    src.add_argument("--directory", "-D", metavar="DIR", help="read journal files from DIR (default: the host journal)")
    src.add_argument(
        "--file",
        action="append",
        metavar="FILE",
        help="read this journal file (repeatable; text logs alone are read as pasted logs) (default: the host journal)",
    )
    diagnose.add_argument("--json", action="store_true", help="print JSON (default: text)")
    diagnose.add_argument(
        "--config",
        metavar="FILE",
        help=f"YAML configuration: units, roles, thresholds (default: built-in defaults, {DEFAULT_UNITS})",
    )
    diagnose.add_argument(
        "--no-verify",
        action="store_true",
        help="do not run the unit's SGLang on the corrected command to check its arguments (default: run it)",
    )
    _library_args(diagnose)
    _release_args(diagnose)


def _explain_args(explain: argparse.ArgumentParser) -> None:
    explain.add_argument(
        "files", nargs="*", metavar="FILE", help="log files; `-` reads standard input (default: standard input)"
    )
    explain.add_argument(
        "--json", action="store_true", help="print JSON, one object per line for several files (default: text)"
    )
    explain.add_argument(
        "--command",
        dest="launch_command",
        metavar="'CMD'",
        help="the launch command that failed (default: the one the paste shows above its log)",
    )
    explain.add_argument(
        "--sglang-python",
        metavar="PATH",
        help="an interpreter with the failing SGLang release: crashdoc runs its argument checks on each candidate "
        "fix (default: none; candidates are ranked with the release's argument facts, not checked)",
    )
    _library_args(explain)
    _release_args(explain)


def _demo_args(demo: argparse.ArgumentParser) -> None:
    demo.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=DEFAULT_LISTEN,
        help="address of the demo daemon's /metrics and HTTP view (default: %(default)s)",
    )
    demo.add_argument(
        "--keep-running",
        action="store_true",
        help="keep the sandbox and daemon running until Ctrl-C or SIGTERM (default: stop after the diagnosis)",
    )


def _check_config_args(check: argparse.ArgumentParser) -> None:
    check.add_argument("file", metavar="FILE", help="the YAML configuration to check")


def _signatures_args(sigs: argparse.ArgumentParser) -> None:
    sigs_sub = sigs.add_subparsers(dest="action", metavar="ACTION")
    lst = sigs_sub.add_parser("list", help="id, category, severity, flags, source", formatter_class=HelpFormatter)
    lst.add_argument("dirs", nargs="*", metavar="DIR", help="signature folders (default: the built-in library)")
    lst.add_argument("--json", action="store_true", help="print JSON (default: a table)")
    for name, text in (("test", "run every example of every signature"), ("lint", "schema, regexes, ids, overlaps")):
        p = sigs_sub.add_parser(name, help=text, formatter_class=HelpFormatter)
        p.add_argument("dirs", nargs="*", metavar="DIR", help="signature folders (default: the built-in library)")
    mine = sigs_sub.add_parser(
        "mine", help="candidate signatures from an SGLang source tree or package", formatter_class=HelpFormatter
    )
    mine.add_argument("path", metavar="PATH", help="an SGLang source tree, wheel or installed package")
    mine.add_argument("--out", metavar="DIR", help="write candidate YAML files here (default: write nothing)")
    mine.add_argument("--json", action="store_true", help="print the coverage report as JSON (default: text)")
    _library_args(mine)

    derive = sigs_sub.add_parser(
        "derive",
        help="derived signatures from an SGLang source tree, wheel or site-packages",
        formatter_class=HelpFormatter,
    )
    derive.add_argument("--source", required=True, metavar="DIR|WHEEL", help="the SGLang tree, wheel or site-packages")
    derive.add_argument(
        "--out", metavar="FILE", help="write the derived data (gzip'd JSON, as shipped) here (default: write nothing)"
    )
    derive.add_argument(
        "--json", action="store_true", help="print every derived signature as JSON (default: a summary)"
    )


def _runbooks_args(runbooks: argparse.ArgumentParser) -> None:
    rb_sub = runbooks.add_subparsers(dest="action", metavar="ACTION")
    render = rb_sub.add_parser(
        "render", help="write every signature's runbook as Markdown into DIR", formatter_class=HelpFormatter
    )
    render.add_argument(
        "dir", metavar="DIR", help="the folder to write into (pages of signatures that are gone are removed)"
    )
    _library_args(render)


# subcommand -> (its add_parser keywords, what adds its arguments), in the order `crashdoc --help` lists them
SUBCOMMANDS: dict[str, tuple[dict[str, Any], Callable[[argparse.ArgumentParser], None]]] = {
    "run": ({"help": "run the daemon (journal + D-Bus -> metrics, alerts, HTTP view)"}, _run_args),
    "diagnose": (
        {
            "help": "one-shot diagnosis from the host journal or journal files",
            "description": "One-shot diagnosis of the SGLang units in the host journal (or copied journal files).",
            "epilog": EXIT_STATUS,
            "formatter_class": RawDescriptionHelpFormatter,
        },
        _diagnose_args,
    ),
    "explain": (
        {
            "help": "diagnose pasted logs (plain, journalctl -o cat or -o short*)",
            "description": "Diagnose pasted logs: plain SGLang logs, journalctl -o cat or -o short*, and their shapes "
            "in tickets and chats.",
            "epilog": EXIT_STATUS,
            "formatter_class": RawDescriptionHelpFormatter,
        },
        _explain_args,
    ),
    "demo": ({"help": "boot a private systemd with crash-looping demo units and diagnose them"}, _demo_args),
    "check-config": ({"help": "validate a configuration file"}, _check_config_args),
    "signatures": ({"help": "the signature library: list, test, lint, mine, derive"}, _signatures_args),
    "runbooks": ({"help": "runbooks as Markdown"}, _runbooks_args),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (`only`: the subcommand chosen) that subcommand's arguments alone: the others
    are listed by name and help, as `crashdoc --help` shows them, without their arguments (~2 ms of a start)."""
    parser = argparse.ArgumentParser(
        prog="crashdoc",
        description="Why is this SGLang unit crash-looping, and which flag fixes it?",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"crashdoc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (keywords, add_arguments) in SUBCOMMANDS.items():
        if only is None or name == only:
            add_arguments(sub.add_parser(name, **{"formatter_class": HelpFormatter, **keywords}))
        else:
            sub.add_parser(name, help=keywords["help"], add_help=False)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names (crashdoc's own options take no value: its first other word), or None."""
    word = next((w for w in argv if not w.startswith("-")), None)
    return word if word in SUBCOMMANDS else None


ONE_SHOT = ("diagnose", "explain")  # commands whose process ends with them (`end_now`)


def main(argv: Sequence[str] | None = None) -> int:
    own_process = argv is None  # not a caller's (e.g. a test's)
    if own_process:
        gc.disable()  # parsing and imports make no garbage: collections meanwhile would walk what they build (~3 ms;
        # a usage error or help ends the process with it off)
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(chosen_command(words))
    args = parser.parse_args(with_dash_values(parser, words))
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if args.command in ("signatures", "runbooks") and args.action is None:
        (_subparser(parser, args.command) or parser).print_help()  # like `crashdoc` alone: help, usage status
        return EXIT_USAGE
    try:
        module = importlib.import_module(f"crashdoc.commands.{COMMANDS[args.command]}")
    finally:
        if own_process:
            # what the imports built lives as long as the process: out of the collector's sight, neither the
            # collections while the command runs nor the last one at exit walk it again (~10 ms of `explain`)
            gc.freeze()
            gc.enable()
    status = _run(module, args)
    if own_process and args.command in ONE_SHOT:
        end_now(status)
    return status


def _run(module: Any, args: argparse.Namespace) -> int:
    try:
        return int(module.main(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except UserError as exc:
        print(f"crashdoc: {exc}", file=sys.stderr)
        return exc.code if exc.code is not None else int(getattr(module, "PROBLEM_EXIT", EXIT_PROBLEM))


def end_now(status: int) -> None:
    """A one-shot command (`ONE_SHOT`) has printed all it says and closed what it opened (its checks' children and
    scratch folders are closed by their `with`): its process ends here, without the interpreter's teardown of what
    the command built (the library, the engine's records, the modules: the collector's last pass and every object
    freed one by one, ~15 ms of `diagnose`), which the kernel frees at once. Output that cannot be flushed (a closed
    pipe) is left to the interpreter's exit, which reports it as it always did."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe or stream
        return
    os._exit(status)


def with_dash_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`--since -1h` as `--since=-1h`: argparse reads a word that starts with `-` (and is no negative number) as
    an option, so an option whose documented value starts with `-` would say "expected one argument". A value
    that is itself an option of that command (`--unit --json`) is left for argparse to reject."""
    out: list[str] = []
    current = parser
    words = iter(argv)
    for word in words:
        if word == "--":
            out += [word, *words]
            break
        sub = _subparser(current, word) if not word.startswith("-") else None
        if sub is not None:
            current = sub
            out.append(word)
            continue
        action = current._option_string_actions.get(word)
        if action is not None and action.nargs is None and not isinstance(action, argparse._VersionAction):
            value = next(words, None)
            if value is None:
                out.append(word)
            elif value.startswith("-") and value not in ("-", "--") and not _is_option(current, value):
                out.append(f"{word}={value}")
            else:
                out += [word, value]
            continue
        out.append(word)
    return out


def _is_option(parser: argparse.ArgumentParser, word: str) -> bool:
    return word.split("=", 1)[0] in parser._option_string_actions


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    """The parser of subcommand `name` of `parser`, or None."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found = action.choices.get(name)
            return found if isinstance(found, argparse.ArgumentParser) else None
    return None
