"""The README's set-up and command sections say what the command line does: the command is where the README
says after set-up, and every subcommand and option a user would reach for is in its command table."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from crashdoc.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    return README[start : README.index("\n## ", start + 1)]


def test_after_set_up_the_command_is_where_the_readme_says() -> None:
    setup = section("Set-up: two commands")
    assert "the command is `.venv/bin/crashdoc`" in setup and ". .venv/bin/activate" in setup
    if not (ROOT / ".venv" / ".installed-run").exists():
        pytest.skip(f"{ROOT}/.venv was not set up by make (tests run from another venv)")
    r = subprocess.run([str(ROOT / ".venv" / "bin" / "crashdoc"), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("usage: crashdoc"), r.stderr


def test_the_command_table_lists_every_subcommand_and_option() -> None:
    table = section("Commands")
    parser = build_parser()
    todo: list[tuple[str, argparse.ArgumentParser]] = [("crashdoc", parser)]
    missing = []
    while todo:
        name, current = todo.pop()
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {sub}", child) for sub, child in action.choices.items()]
                continue
            options = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
            if options and not any(f"{o} " in table or f"{o}]" in table or f"{o}`" in table for o in options):
                missing.append(f"{name} {options[0]}")
        if name != "crashdoc" and f"`{name}" not in table:
            missing.append(name)
    assert not missing, missing
