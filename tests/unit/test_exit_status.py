"""The exit status scripts read from `diagnose` and `explain` (crashdoc.errors): 0 read something and no
failure, 1 a failure found, 2 usage, 3 nothing read (the reason on stderr and in the JSON's "problems"),
4 could not run. Every "nothing read" input of issue 22 gets 3 and a reason, never "No failure found.";
several inputs: each readable one is diagnosed, each other named, the worst wins."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from crashdoc.cli import SUBCOMMANDS, _subparser, build_parser, chosen_command, with_dash_values
from crashdoc.config import DEFAULT_LISTEN, DEFAULT_STATE_DIRECTORY, Config
from support.e2e import CRASHDOC
from support.journal_files import DSV4, TRACEBACK, UNIT, crash_loop_entries, needs_journal_remote, write_journal

HEALTHY = "[2026-05-01 12:00:09] The server is fired up and ready to roll!\n"


def crashdoc(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [*CRASHDOC, *args], input=stdin, capture_output=True, timeout=120, env={**os.environ, **(env or {})}
    )
    out = subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(), r.stderr.decode())
    assert "Traceback" not in out.stderr, out.stderr
    return out


# --- nothing read: 3 and the reason ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stdin", "reason"),
    [
        (b"", "standard input is empty, nothing to diagnose"),
        (os.urandom(4096) + b"\x00" * 512, "standard input holds binary data, not a text log"),
        (b"-- No entries --\n", "standard input holds no log line (only blank lines or journalctl's notes"),
        (b"\n\n   \n", "standard input holds no log line"),
    ],
    ids=["empty", "binary", "no-entries", "blank"],
)
def test_explain_of_nothing_says_so(stdin: bytes, reason: str) -> None:
    r = crashdoc("explain", stdin=stdin)
    assert (r.returncode, r.stdout) == (3, ""), r
    assert r.stderr.startswith(f"crashdoc: {reason}"), r.stderr
    doc = json.loads(crashdoc("explain", "--json", stdin=stdin).stdout)
    assert doc["diagnoses"] == [] and doc["problems"][0].startswith(reason), doc


def test_diagnose_of_a_folder_without_journal_files_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "notes.txt").write_text("hello\n")
    for folder in (empty, texts):
        r = crashdoc("diagnose", "--directory", str(folder))
        assert (r.returncode, r.stdout, r.stderr) == (3, "", f"crashdoc: no journal files in {folder}\n")
        doc = json.loads(crashdoc("diagnose", "--json", "--directory", str(folder)).stdout)
        assert doc == {"problems": [f"no journal files in {folder}"], "diagnoses": [], "warnings": []}


def test_diagnose_of_the_host_journal_when_there_is_none_or_none_readable(tmp_path: Path) -> None:
    """On this machine the host journal is whatever journald keeps (none where PID 1 is not systemd); either way
    an empty read is 3 with the reason: no journal files, no permission, or no entries of the units."""
    r = crashdoc("diagnose", "--no-verify")
    if r.returncode != 3:
        pytest.skip(f"this host's journal holds SGLang units (exit {r.returncode}): nothing to show here")
    assert r.stdout == "" and r.stderr.startswith("crashdoc: "), r
    reasons = ("no journal files in /var/log/journal or /run/log/journal", "cannot read the system journal")
    assert r.stderr.removeprefix("crashdoc: ").startswith(reasons) or "the journal holds no entries of" in r.stderr


def test_healthy_and_crash_logs_have_their_own_codes(tmp_path: Path) -> None:
    healthy = tmp_path / "healthy.log"
    healthy.write_text(HEALTHY)
    crash = tmp_path / "crash.log"
    crash.write_text("\n".join(TRACEBACK) + "\n")
    assert (crashdoc("explain", str(healthy)).returncode, crashdoc("explain", str(healthy)).stdout) == (
        0,
        "No failure found.\n",
    )
    r = crashdoc("explain", str(crash))
    assert r.returncode == 1 and DSV4 in r.stdout


def test_a_one_shot_command_ends_with_all_it_printed_written(tmp_path: Path) -> None:
    """`explain` and `diagnose` end their process without the interpreter's teardown (`cli.end_now`): everything
    they print reaches a pipe, more than its buffer holds, with their exit status."""
    crash = "\n".join(TRACEBACK) + "\n"
    files = []
    for i in range(60):
        path = tmp_path / f"crash-{i}.log"
        path.write_text(crash)
        files.append(str(path))
    r = crashdoc("explain", "--json", *files, env={"PYTHONUNBUFFERED": ""})  # standard output buffered, as usual
    lines = r.stdout.splitlines()
    assert r.returncode == 1 and len(r.stdout) > 65536, (r.returncode, len(r.stdout))
    assert [json.loads(line)["file"] for line in lines] == files
    assert all(DSV4 in json.dumps(json.loads(line)["diagnoses"]) for line in lines)


def test_several_files_each_diagnosed_each_unreadable_one_named_the_worst_wins(tmp_path: Path) -> None:
    good = tmp_path / "good.log"
    good.write_text(HEALTHY)
    crash = tmp_path / "crash.log"
    crash.write_text("\n".join(TRACEBACK) + "\n")
    missing = tmp_path / "missing.log"
    r = crashdoc("explain", str(good), str(missing))
    assert r.returncode == 3, r
    assert r.stdout.splitlines() == [
        f"== {good}",
        "No failure found.",
        f"== {missing}",
        f"Nothing read: cannot read {missing}: No such file or directory.",
    ]
    assert r.stderr == f"crashdoc: cannot read {missing}: No such file or directory\n"
    r = crashdoc("explain", "--json", str(crash), str(missing), str(good))
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 3 and [d["file"] for d in docs] == [str(crash), str(missing), str(good)]
    assert [len(d["diagnoses"]) for d in docs] == [1, 0, 0] and "problems" in docs[1] and "problems" not in docs[0]
    assert crashdoc("explain", str(crash), str(good)).returncode == 1  # a failure, all read
    assert crashdoc("explain", str(good), str(good)).returncode == 0


def test_configuration_and_library_problems_are_4(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("thresholds: {recovery: x}\n")
    r = crashdoc("diagnose", "--config", str(bad), "--directory", str(tmp_path))
    assert r.returncode == 4 and "invalid configuration" in r.stderr
    library = tmp_path / "library"
    library.mkdir()
    (library / "broken.yaml").write_text("signatures: [\n")
    log = tmp_path / "crash.log"
    log.write_text("\n".join(TRACEBACK) + "\n")
    r = crashdoc("explain", str(log), "--signatures", str(library))
    assert r.returncode == 4 and "the signature library has problems" in r.stderr


# --- options whose documented value starts with `-` --------------------------------------------------


@needs_journal_remote
def test_since_minus_one_hour_is_a_value_not_an_option(tmp_path: Path) -> None:
    """`--help` and the error message recommend `--since -1h`; argparse alone says "expected one argument"."""
    journal = write_journal(tmp_path, crash_loop_entries())  # entries stamped 2027-01-15: within the last hour's
    for since in (["--since", "-1h"], ["--since=-1h"], ["--since", "-30m"], ["--since", "-2d"]):
        r = crashdoc("diagnose", "--no-verify", "--json", *since, "--file", str(journal))
        assert r.returncode == 1, (since, r.stderr)
        [d] = json.loads(r.stdout)["diagnoses"]
        assert d["unit"] == UNIT
    r = crashdoc("diagnose", "--since", "-1x", "--file", str(journal))
    assert r.returncode == 2 and "--since '-1x': use -1h, -30m, -2d" in r.stderr
    r = crashdoc("diagnose", "--unit", "--json", "--file", str(journal))  # a value that is an option: usage
    assert r.returncode == 2 and "argument --unit: expected one argument" in r.stderr


def test_dash_values_are_joined_only_where_they_are_values() -> None:
    parser = build_parser()
    assert with_dash_values(parser, ["diagnose", "--since", "-1h", "--json"]) == ["diagnose", "--since=-1h", "--json"]
    assert with_dash_values(parser, ["diagnose", "--unit", "--json"]) == ["diagnose", "--unit", "--json"]
    assert with_dash_values(parser, ["explain", "-", "--json"]) == ["explain", "-", "--json"]
    assert with_dash_values(parser, ["diagnose", "--since", "-2d", "--", "-x"]) == [
        "diagnose",
        "--since=-2d",
        "--",
        "-x",
    ]
    assert with_dash_values(parser, ["run", "--listen", "-x"]) == ["run", "--listen=-x"]
    assert parser.parse_args(with_dash_values(parser, ["diagnose", "--since", "-1h"])).since == "-1h"


# --- help: defaults, every option, the exit codes ----------------------------------------------------


def _parsers() -> dict[str, object]:
    import argparse

    parser = build_parser()
    out: dict[str, argparse.ArgumentParser] = {"crashdoc": parser}
    todo = [("crashdoc", parser)]
    while todo:
        name, p = todo.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    out[f"{name} {sub}"] = child
                    todo.append((f"{name} {sub}", child))
    return out  # type: ignore[return-value]


def test_every_subcommand_and_option_has_help_and_defaults_are_shown() -> None:
    import argparse

    for name, parser in _parsers().items():
        assert isinstance(parser, argparse.ArgumentParser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(a.help for a in action._choices_actions), name
                continue
            assert action.help, (name, action.option_strings or action.dest)
            takes_value = action.nargs != 0 and action.option_strings and not action.required
            if takes_value and action.dest not in ("help", "version"):
                assert "default" in action.help, (name, action.option_strings)
    helps = {name: p.format_help() for name, p in _parsers().items()}  # type: ignore[attr-defined]
    assert DEFAULT_LISTEN in helps["crashdoc run"] and DEFAULT_STATE_DIRECTORY in helps["crashdoc run"]
    assert Config().units[0].pattern in helps["crashdoc diagnose"]
    for name in ("crashdoc diagnose", "crashdoc explain"):
        assert "exit status" in helps[name] and "3  nothing read" in helps[name] and "1  a failure found" in helps[name]


def test_a_command_group_without_an_action_behaves_like_crashdoc_alone() -> None:
    alone, signatures, runbooks = crashdoc(), crashdoc("signatures"), crashdoc("runbooks")
    assert alone.returncode == signatures.returncode == runbooks.returncode == 2
    assert alone.stdout.startswith("usage: crashdoc ") and signatures.stdout.startswith("usage: crashdoc signatures")


def test_the_chosen_subcommand_alone_gives_the_same_help_and_parse() -> None:
    """`crashdoc CMD` builds CMD's arguments only: every help text and parse is the whole parser's."""
    import argparse

    whole = {name: p.format_help() for name, p in _parsers().items()}  # type: ignore[attr-defined]
    for command in SUBCOMMANDS:
        parser = build_parser(command)
        assert parser.format_help() == whole["crashdoc"], command
        assert parser.format_usage() == build_parser().format_usage(), command
        todo = [(f"crashdoc {command}", _subparser(parser, command))]
        while todo:
            name, p = todo.pop()
            assert isinstance(p, argparse.ArgumentParser) and p.format_help() == whole[name], name
            todo += [
                (f"{name} {k}", c)
                for a in p._actions
                if isinstance(a, argparse._SubParsersAction)
                for k, c in a.choices.items()
            ]
    argv = ["explain", "--json", "--sglang-version", "0.5.23", "a.log", "-"]
    assert chosen_command(argv) == "explain" and chosen_command(["--version"]) is None
    assert chosen_command(["bogus"]) is None
    assert vars(build_parser("explain").parse_args(argv)) == vars(build_parser().parse_args(argv))


def test_the_help_width_is_argparse_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The formatter that leaves `shutil` unimported wraps help at the width argparse's own would."""
    import argparse

    from crashdoc.cli import HelpFormatter

    for columns in ("", "57", "203", "-3", "wide"):
        if columns:
            monkeypatch.setenv("COLUMNS", columns)
        else:
            monkeypatch.delenv("COLUMNS", raising=False)
        assert HelpFormatter("crashdoc")._width == argparse.HelpFormatter("crashdoc")._width, columns
