"""`crashdoc diagnose`: one shot over the host journal or copied journal files.

`--file` given only text logs (a log saved from a ticket) reads them as `crashdoc explain` does, with
a note on stderr; a text log among journal files is named and skipped. Every input that cannot be read
(a missing or damaged file, a folder without journal files, a journal with no entries of the units asked
for) is named with the reason, on stderr and in the JSON's `problems`, and the exit status says the worst
(`crashdoc.errors`): 3 nothing read, 1 a failure found, 0 none.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from crashdoc.errors import (
    EXIT_CANNOT_RUN,
    EXIT_FAILURE_FOUND,
    EXIT_OK,
    EXIT_READ_NOTHING,
    NothingRead,
    UsageError,
    UserError,
)

if TYPE_CHECKING:
    from crashdoc.config import Config
    from crashdoc.matching.derived import DerivedLibrary
    from crashdoc.matching.library import Library
    from crashdoc.sources.gpu_facts import GpuFactsReader
    from crashdoc.sources.textinput import TextInput

DEFAULT_HOST_SINCE = 24 * 3600  # `diagnose` on the host journal looks back this far by default
PROBLEM_EXIT = EXIT_CANNOT_RUN  # a UserError here (configuration, library) is no verdict on the journal
HOST_JOURNALS = ("/var/log/journal", "/run/log/journal")
BATCH = 5_000  # journal entries a read hands the engine (the walk of the next runs meanwhile: the last is short)

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
        raise UsageError(f"--since {text!r}: use -1h, -30m, -2d, an epoch number or 2026-12-02T12:00:00") from exc


def main(args: argparse.Namespace) -> int:
    """One shot over the host journal or copied journal files."""
    if args.file:  # text logs among them are read as `explain` reads them, the collector on as there
        return _diagnose(args)
    from crashdoc.collector import collector_paused

    # reference counts free what reading makes (2M entries peaked at 114.5 MB without the collector, 115-117 with
    # it); its passes over what the library and the engine keep cost ~10 ms of a tenth's 300k, ~20 ms of the half
    with collector_paused(freeze=True):
        return _diagnose(args)


def _diagnose(args: argparse.Namespace) -> int:
    from crashdoc.config import ConfigError, load_config
    from crashdoc.events import WatchRule
    from crashdoc.matching.cache import default_cache_directory
    from crashdoc.outputs.progress import Progress
    from crashdoc.outputs.render import diagnoses_json, diagnoses_text
    from crashdoc.sources.journal import JournalSource, UnitFilter, unreadable_journal_files
    from crashdoc.sources.units import UnitWatcher

    since = parse_since(args.since) if args.since else None  # a malformed value is usage, said first
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UserError(exc.said("invalid configuration")) from exc
    rules = tuple(WatchRule(u if "." in u else f"{u}.service", "any") for u in args.unit) if args.unit else config.units
    units = UnitFilter(rules)
    cache = Path(config.state_directory) / "cache"
    problems: list[str] = []  # every input that could not be read, with the reason
    files: list[str] | None = None
    if args.file:
        journals, texts, problems = sort_files(args.file)
        if texts and not journals:  # pasted logs saved to files: read them as `explain` does
            from crashdoc.commands.pipeline import derived_setup, load_library_or_fail

            library = load_library_or_fail(args.signatures, matching_only=True)
            release, derived = derived_setup(args.sglang_version, args.sglang_source, cache)
            return _diagnose_text_logs(args, texts, problems, library, release, derived)
        problems += [f"{path} is not a journal file (a text log? use `crashdoc explain {path}`)" for path, _ in texts]
        for _, unread in texts:
            unread.close()
        if not journals:
            return _nothing_read(problems, args.json)
        files = journals
    if args.directory and not os.path.isdir(args.directory):
        what = "is not a folder" if os.path.exists(args.directory) else "does not exist"
        return _nothing_read([f"journal folder {args.directory} {what}"], args.json)
    try:
        # read once, with the C batch reader when it can be built (into the cache folder)
        source = JournalSource(
            units, directory=args.directory, files=files, once=True, build_dir=default_cache_directory()
        )
    except OSError as exc:
        raise NothingRead(f"cannot open the journal: {exc}") from exc
    start: float | None = since
    live = not (args.directory or files)
    if since is not None:
        source.seek_since(since)
    elif live:
        source.seek_since(start := time.time() - DEFAULT_HOST_SINCE)
    else:
        source.seek_head()
    progress = Progress(sys.stderr, None, None)  # on a terminal only, once the read takes over a second
    if progress.enabled:
        oldest = source.newest_timestamp(oldest=True)
        progress.start, progress.end = max(start or 0.0, oldest or 0.0) or None, source.newest_timestamp()
    source.start_reading(BATCH)  # the first entries are walked while the library loads and the engine is built
    source.read_gpu_events()  # the kernel's GPU faults, joined with the units' crashes (from the first read on)
    from crashdoc.commands.pipeline import build_engine, derived_setup, feed, load_library_or_fail
    from crashdoc.matching.matcher import Matcher

    library = load_library_or_fail(args.signatures, matching_only=True)
    release, derived = derived_setup(args.sglang_version, args.sglang_source, cache)
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
    gpu_facts = _gpu_facts(config, live)
    host = gpu_facts.host()
    if host is not None:
        feed(engine, [host])
    discovered = 0  # units systemd knows (D-Bus): their state is something read, even without journal entries
    if watcher is not None:  # the real command lines first, so that fixes can be shown on them
        for unit in watcher.discover():
            discovered += 1
            engine.watch(unit)
            state = watcher.state(unit)
            if state is not None:
                devices = gpu_facts.for_state(state)  # its CUDA_VISIBLE_DEVICES
                feed(engine, [*([devices] if devices is not None else []), *launches.prepare([state])])
    stage = RemedyStage(derived=derived)  # the fixes applied to the units' commands, after the engine
    preparing = stage.preparation()
    while True:
        feed(engine, launches.prepare(source.read(BATCH)))
        while source.walking() and next(preparing, False):  # what the stage needs, while the next batch is walked
            pass
        if source.driver_loaded:  # the NVIDIA driver loaded again (a reboot in the journal): its GPUs as now
            source.driver_loaded = False
            host = gpu_facts.host()
            if host is not None:
                feed(engine, [host])
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
    if not live:
        for path, count in unreadable_journal_files(args.directory, files or ()):
            entries = f"its {count} entries" if count is not None else "all of it"
            problems.append(f"skipped {path}: truncated or corrupt, {entries} could not be read")
    wanted = None
    missing: list[str] = []
    # nothing of the watched units (their lines, PID 1's records about them) came out of the journal
    empty = source.stats.lines + source.stats.lifecycle == 0
    blocked = _unreadable_source(args, files, live) if empty else None
    nothing = (empty and not discovered) or blocked is not None
    if blocked is not None:  # no journal files at all, or none this user may read
        problems.append(blocked)
    elif args.unit:
        seen = set(engine.units())
        missing = [u for u in args.unit if not any(ch in u for ch in "*?[") and _unit_name(u) not in seen]
        where = "in these journal files" if not live else "in the journal"
        after = f" (since {args.since})" if args.since else ""
        problems += [f"{unit}: no such unit {where}{after}" for unit in missing]
        wanted = list(engine.units())
    nothing = nothing or bool(args.unit and not wanted)
    if nothing and blocked is None and not missing:
        names = ", ".join(r.pattern for r in rules)
        when = f" since {datetime.fromtimestamp(start).isoformat(sep=' ', timespec='seconds')}" if start else ""
        where = " in these journal files" if files else f" in {args.directory}" if args.directory else ""
        problems.append(f"no entries of {names}{when}{where}")
    if nothing:
        return _nothing_read(problems, args.json)
    # the fixes applied to the units' commands, and each corrected command checked by the unit's own SGLang
    diagnoses = stage.remedy_all(engine.diagnoses(wanted), check=not getattr(args, "no_verify", False))
    warnings = stage.remedy_all(engine.warnings(wanted), check=False)
    if source.stats.errors:
        print(
            f"crashdoc: skipped {source.stats.errors} unreadable journal entries ({source.stats.last_error})",
            file=sys.stderr,
        )
    for problem in problems:
        print(f"crashdoc: {problem}", file=sys.stderr)
    if args.json:
        print(diagnoses_json(diagnoses, warnings=warnings, **({"problems": problems} if problems else {})))
    else:
        sys.stdout.write(diagnoses_text(diagnoses, warnings=warnings, color=sys.stdout.isatty()))
    return max(EXIT_READ_NOTHING if problems else EXIT_OK, EXIT_FAILURE_FOUND if diagnoses else EXIT_OK)


def _gpu_facts(config: Config, live: bool) -> GpuFactsReader:
    """The host's GPUs are read for its own journal; journal files copied from another host are read without
    them (this host's GPUs are not theirs) unless the configuration names a folder other than the driver's."""
    from crashdoc.config import DEFAULT_NVIDIA_GPUS
    from crashdoc.sources.gpu_facts import GpuFactsReader

    folder = config.nvidia_gpus if live or config.nvidia_gpus != DEFAULT_NVIDIA_GPUS else None
    return GpuFactsReader(Path(folder) if folder else None)


def _nothing_read(problems: list[str], as_json: bool) -> int:
    """Nothing to diagnose: every reason on stderr (and in the JSON), the read-nothing exit status."""
    from crashdoc.outputs.render import diagnoses_json

    for problem in problems:
        print(f"crashdoc: {problem}", file=sys.stderr)
    if as_json:
        print(diagnoses_json([], warnings=[], problems=problems))
    return EXIT_READ_NOTHING


def _unreadable_source(args: argparse.Namespace, files: list[str] | None, live: bool) -> str | None:
    """Why a read that found no entry had nothing to read (no journal files, no permission); None when it had."""
    if files:
        return None
    if args.directory:
        return None if journal_files_in(args.directory) else f"no journal files in {args.directory}"
    found = [f for d in HOST_JOURNALS for f in journal_files_in(d)]
    if not found:
        return f"no journal files in {' or '.join(HOST_JOURNALS)} (is journald running and storing logs here?)"
    if not any(os.access(f, os.R_OK) for f in found):
        return (
            "cannot read the system journal (permission denied): run as root or as a member of the "
            "systemd-journal group"
        )
    return None


def journal_files_in(folder: str) -> list[str]:
    """The journal files in a journal folder and its machine-id subfolders (as libsystemd reads them)."""
    out: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return out
    for entry in entries:
        if entry.name.endswith((".journal", ".journal~")):
            out.append(entry.path)
        elif entry.is_dir():
            with contextlib.suppress(OSError):
                out += [e.path for e in os.scandir(entry.path) if e.name.endswith((".journal", ".journal~"))]
    return sorted(out)


def sort_files(paths: list[str]) -> tuple[list[str], list[tuple[str, TextInput]], list[str]]:
    """`--file` arguments sorted into journal files, text logs (path, input: a large one is read in blocks
    later) and problems (why a file is neither: missing, a folder, empty, binary)."""
    from crashdoc.sources.textinput import open_input

    journals: list[str] = []
    texts: list[tuple[str, TextInput]] = []
    problems: list[str] = []
    for path in paths:
        problem = journal_file_problem(path)
        if problem is None:
            journals.append(path)
            continue
        if not problem.endswith(f"(a text log? use `crashdoc explain {path}`)"):  # missing, a folder, empty
            problems.append(problem)
            continue
        source, what = open_input(path)
        if not what:
            texts.append((path, source))
        else:
            problems.append(f"{path}: {what}")
    return journals, texts, problems


def _diagnose_text_logs(
    args: argparse.Namespace,
    texts: list[tuple[str, TextInput]],
    problems: list[str],
    library: Library,
    release: tuple[str, str] | None,
    derived: DerivedLibrary,
) -> int:
    from crashdoc.commands.explain import print_explained
    from crashdoc.commands.pipeline import explain_texts

    for path, _ in texts:
        print(f"crashdoc: {path} is a text log, read as a pasted log (as `crashdoc explain` does)", file=sys.stderr)
    empty = {path for path, text in texts if text.only_notes()}
    results = [
        (name, diagnoses, warnings, "")
        for name, diagnoses, warnings in explain_texts(
            [(p, t) for p, t in texts if p not in empty], library, release, derived
        )
    ]
    results += [(path, [], [], f"{path} holds no log line") for path in sorted(empty)]
    status = print_explained(results, as_json=args.json)
    for problem in problems:
        print(f"crashdoc: {problem}", file=sys.stderr)
    return max(status, EXIT_READ_NOTHING if problems else EXIT_OK)


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
