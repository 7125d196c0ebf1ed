"""`crashdoc diagnose`: one shot over the host journal or copied journal files.

`--file` given only text logs (a log saved from a ticket) reads them as `crashdoc explain` does, with
a note on stderr; a text log among journal files is still an error that names it.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime
from pathlib import Path

from crashdoc.commands.pipeline import build_engine, derived_setup, feed, load_library_or_fail
from crashdoc.errors import UserError
from crashdoc.matching.derived import DerivedLibrary
from crashdoc.matching.library import Library
from crashdoc.matching.matcher import Matcher

DEFAULT_HOST_SINCE = 24 * 3600  # `diagnose` on the host journal looks back this far by default

JOURNAL_MAGIC = b"LPKSHHRH"  # the first bytes of every journal file (systemd's journal-def.h)


def parse_since(text: str, now: float | None = None) -> float:
    """`-1h`, `-30m`, `-2d`, `-45s`, an epoch number, or an ISO date/time -> epoch seconds."""
    now = time.time() if now is None else now
    text = text.strip()
    m = re.fullmatch(r"-(\d+(?:\.\d+)?)\s*([smhd])", text)
    if m:
        return now - float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    if text in ("today", "yesterday"):
        midnight = datetime.now().replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
        return midnight - (86400 if text == "yesterday" else 0)
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError as exc:
        raise UserError(f"--since {text!r}: use -1h, -30m, -2d, an epoch number or 2026-12-02T12:00:00") from exc


def main(args: argparse.Namespace) -> int:
    """One shot over the host journal or copied journal files."""
    from crashdoc.config import ConfigError, load_config
    from crashdoc.events import WatchRule
    from crashdoc.matching.cache import default_cache_directory
    from crashdoc.outputs.progress import Progress
    from crashdoc.outputs.render import diagnoses_json, diagnoses_text
    from crashdoc.sources.journal import JournalSource, UnitFilter, unreadable_journal_files
    from crashdoc.sources.units import UnitWatcher

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UserError(exc.said("invalid configuration")) from exc
    rules = tuple(WatchRule(u if "." in u else f"{u}.service", "any") for u in args.unit) if args.unit else config.units
    units = UnitFilter(rules)
    library = load_library_or_fail(args.signatures)
    cache = Path(config.state_directory) / "cache"
    release, derived = derived_setup(args.sglang_version, args.sglang_source, cache)
    texts = text_logs(args.file) if args.file and not args.directory else None
    if texts is not None:  # a pasted log saved to a file: read it as `explain` does
        return _diagnose_text_logs(args, texts, library, release, derived)
    problems = [p for p in map(journal_file_problem, args.file or ()) if p]
    if problems:  # libsystemd would only say "No data available" or "Bad message", and not for which file
        raise UserError("\ncrashdoc: ".join(problems))
    try:
        # read once, with the C batch reader when it can be built (into the cache folder)
        source = JournalSource(
            units, directory=args.directory, files=args.file, once=True, build_dir=default_cache_directory()
        )
    except (OSError, FileNotFoundError) as exc:
        raise UserError(f"cannot open the journal: {exc}") from exc
    start: float | None = None
    if args.since:
        source.seek_since(start := parse_since(args.since))
    elif not (args.directory or args.file):
        source.seek_since(start := time.time() - DEFAULT_HOST_SINCE)
    else:
        source.seek_head()
    live = not (args.directory or args.file)
    watcher = UnitWatcher(units) if live else None
    if watcher is not None and not watcher.connect():
        watcher = None
    from crashdoc.remedy.launch import LaunchReader, ReleaseResolver
    from crashdoc.remedy.stage import RemedyStage

    matcher = Matcher(library, derived)
    resolver: ReleaseResolver | None = None  # copied journal files: this host's disk says nothing of theirs
    if release is None and live:  # each unit's own release; an unshipped one is derived from its installed source
        from crashdoc.authoring.hostrelease import HostReleases

        def use(library: DerivedLibrary) -> None:
            matcher.derived = library

        def warn(message: str) -> None:
            print(f"crashdoc: {message}", file=sys.stderr)

        resolver = HostReleases(derived, cache, on_change=use, log=warn).sglang_release
    launches = LaunchReader(sglang_release=resolver)  # each command's flags and release, read before the engine
    engine = build_engine(matcher, thresholds=config.thresholds, role_of=units.role_of, release=release)
    if watcher is not None:  # the real command lines first, so that fixes can be shown on them
        for unit in watcher.discover():
            engine.watch(unit)
            state = watcher.state(unit)
            if state is not None:
                feed(engine, launches.prepare([state]))
    progress = Progress(sys.stderr, None, None)  # on a terminal only, once the read takes over a second
    if progress.enabled:
        oldest = source.newest_timestamp(oldest=True)
        progress.start, progress.end = max(start or 0.0, oldest or 0.0) or None, source.newest_timestamp()
    while True:
        feed(engine, launches.prepare(source.read(20_000)))
        progress.update(source.stats.entries, source.stats.last_timestamp or None)
        if source.at_end:
            break
    progress.finish()
    if watcher is not None:
        for name in list(engine.units()):
            state = watcher.state(name)
            if state is not None:
                feed(engine, launches.prepare([state]))
    engine.finish()
    wanted = None
    if args.unit:
        seen = set(engine.units())
        missing = [u for u in args.unit if not any(ch in u for ch in "*?[") and _unit_name(u) not in seen]
        for unit in missing:
            where = "in these journal files" if not live else "in the journal"
            print(
                f"crashdoc: {unit}: no such unit {where}" + (" (since " + args.since + ")" if args.since else ""),
                file=sys.stderr,
            )
        wanted = [u for u in engine.units()]
        if missing and not wanted:
            return 1
    # the fixes applied to the units' commands, and each corrected command checked by the unit's own SGLang
    stage = RemedyStage()
    diagnoses = stage.remedy_all(engine.diagnoses(wanted), check=not getattr(args, "no_verify", False))
    warnings = stage.remedy_all(engine.warnings(wanted), check=False)
    if source.stats.errors:
        print(
            f"crashdoc: skipped {source.stats.errors} unreadable journal entries ({source.stats.last_error})",
            file=sys.stderr,
        )
    if not live:
        for path, count in unreadable_journal_files(args.directory, args.file or ()):
            entries = f"its {count} entries" if count is not None else "all of it"
            print(f"crashdoc: skipped {path}: truncated or corrupt, {entries} could not be read", file=sys.stderr)
    if args.json:
        print(diagnoses_json(diagnoses, warnings=warnings))
    else:
        sys.stdout.write(diagnoses_text(diagnoses, warnings=warnings, color=sys.stdout.isatty()))
    return 0


def text_logs(paths: list[str]) -> list[tuple[str, str]] | None:
    """(path, text) of each file when every one is a text log (no journal file); None otherwise."""
    from crashdoc.sources.textlog import not_text

    out = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            return None
        if data.startswith(JOURNAL_MAGIC) or not_text(data, path) is not None:
            return None
        out.append((path, data.decode("utf-8", "replace")))
    return out


def _diagnose_text_logs(
    args: argparse.Namespace,
    texts: list[tuple[str, str]],
    library: Library,
    release: tuple[str, str] | None,
    derived: DerivedLibrary,
) -> int:
    from crashdoc.commands.explain import print_explained
    from crashdoc.commands.pipeline import explain_texts

    for path, _ in texts:
        print(f"crashdoc: {path} is a text log, read as a pasted log (as `crashdoc explain` does)", file=sys.stderr)
    print_explained(explain_texts(texts, library, release, derived), as_json=args.json)
    return 0


def _unit_name(name: str) -> str:
    return name if "." in name else f"{name}.service"


def journal_file_problem(path: str) -> str | None:
    """Why `path` cannot be read as a journal file, in words; None when it looks like one."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(JOURNAL_MAGIC))
    except IsADirectoryError:
        return f"{path} is a folder: use --directory {path}"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    if not head:
        return f"{path} is empty, not a journal file"
    if head != JOURNAL_MAGIC:
        return f"{path} is not a journal file (a text log? use `crashdoc explain {path}`)"
    return None
