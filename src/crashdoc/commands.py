"""What each subcommand does, wired from the parts; `cli.py` only parses arguments."""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from crashdoc.diagnosis.engine import Engine
from crashdoc.events import Diagnosis, LifecycleRecord, LogLine
from crashdoc.matching.library import Library
from crashdoc.matching.matcher import Matcher
from crashdoc.sources.textlog import parse_text


def explain_text(text: str, library: Library, matcher: Matcher | None = None) -> list[Diagnosis]:
    """Diagnose one pasted log."""
    engine = Engine(matcher or Matcher(library), builder=default_builder())
    feed(engine, parse_text(text).events)
    engine.finish()
    return engine.diagnoses()


def explain_texts(sources: Iterable[tuple[str, str]], library: Library) -> list[tuple[str, list[Diagnosis]]]:
    matcher = Matcher(library)
    return [(name, explain_text(text, library, matcher)) for name, text in sources]


def feed(engine: Engine, events: Iterable[LogLine | LifecycleRecord]) -> None:
    for event in events:
        if isinstance(event, LogLine):
            engine.on_line(event)
        else:
            engine.on_lifecycle(event)


def default_builder():
    from crashdoc.diagnosis.report import DiagnosisBuilder

    return DiagnosisBuilder()


def diagnose(args: argparse.Namespace) -> int:
    raise NotImplementedError


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError


def demo(args: argparse.Namespace) -> int:
    raise NotImplementedError


def check_config(args: argparse.Namespace) -> int:
    raise NotImplementedError


def mine(args: argparse.Namespace) -> int:
    raise NotImplementedError


def render_runbooks(args: argparse.Namespace) -> int:
    raise NotImplementedError
