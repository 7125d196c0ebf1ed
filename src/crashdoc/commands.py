"""What each subcommand does, wired from the parts; `cli.py` only parses arguments."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import time
from collections.abc import Iterable
from datetime import datetime

from crashdoc.cli import UserError, load_library_or_fail
from crashdoc.diagnosis.engine import Engine
from crashdoc.diagnosis.report import DiagnosisBuilder
from crashdoc.events import Diagnosis, LifecycleRecord, LogLine
from crashdoc.matching.library import Library
from crashdoc.matching.matcher import Matcher
from crashdoc.sources.textlog import parse_text

DEFAULT_HOST_SINCE = 24 * 3600  # `diagnose` on the host journal looks back this far by default


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


def default_builder() -> DiagnosisBuilder:
    """Pasted logs carry no unit to read a command line from: fixes are described, not applied to one."""
    return DiagnosisBuilder()


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


def diagnose(args: argparse.Namespace) -> int:
    """One shot over the host journal or copied journal files."""
    from crashdoc.config import ConfigError, load_config
    from crashdoc.outputs.render import diagnoses_json, diagnoses_text
    from crashdoc.sources.journal import JournalSource, UnitFilter, WatchRule, unreadable_journal_files
    from crashdoc.sources.units import UnitWatcher

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UserError("invalid configuration:\n" + "\n".join(f"  {p}" for p in exc.problems)) from exc
    rules = tuple(WatchRule(u if "." in u else f"{u}.service", "any") for u in args.unit) if args.unit else config.units
    units = UnitFilter(rules)
    library = load_library_or_fail(args.signatures)
    problems = [p for p in map(journal_file_problem, args.file or ()) if p]
    if problems:  # libsystemd would only say "No data available" or "Bad message", and not for which file
        raise UserError("\ncrashdoc: ".join(problems))
    try:
        source = JournalSource(units, directory=args.directory, files=args.file)
    except (OSError, FileNotFoundError) as exc:
        raise UserError(f"cannot open the journal: {exc}") from exc
    if args.since:
        source.seek_since(parse_since(args.since))
    elif not (args.directory or args.file):
        source.seek_since(time.time() - DEFAULT_HOST_SINCE)
    else:
        source.seek_head()
    live = not (args.directory or args.file)
    watcher = UnitWatcher(units) if live else None
    if watcher is not None and not watcher.connect():
        watcher = None
    from crashdoc.diagnosis.fixes import unit_fix_synthesizer, unit_flags
    from crashdoc.diagnosis.report import DiagnosisBuilder

    engine = Engine(
        Matcher(library),
        thresholds=config.thresholds,
        role_of=units.role_of,
        builder=DiagnosisBuilder(unit_fix_synthesizer(), unit_flags),
    )
    if watcher is not None:  # the real command lines first, so that fixes can be shown on them
        for unit in watcher.discover():
            engine.watch(unit)
            state = watcher.state(unit)
            if state is not None:
                engine.on_unit_state(state)
    while True:
        feed(engine, source.read(20_000))
        if source.at_end:
            break
    if watcher is not None:
        for name in list(engine.units()):
            state = watcher.state(name)
            if state is not None:
                engine.on_unit_state(state)
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
    diagnoses = engine.diagnoses(wanted)
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
        print(diagnoses_json(diagnoses))
    else:
        sys.stdout.write(diagnoses_text(diagnoses, color=sys.stdout.isatty()))
    return 0


def _unit_name(name: str) -> str:
    return name if "." in name else f"{name}.service"


JOURNAL_MAGIC = b"LPKSHHRH"  # the first bytes of every journal file (systemd's journal-def.h)


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


def run(args: argparse.Namespace) -> int:
    """The daemon."""
    from crashdoc.config import ConfigError, load_config, parse_listen
    from crashdoc.daemon import build, log

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UserError("invalid configuration, not starting:\n" + "\n".join(f"  {p}" for p in exc.problems)) from exc
    overrides = {}
    if args.state_directory:
        overrides["state_directory"] = args.state_directory
    if args.directory:
        overrides["journal_directory"] = args.directory
    if args.runbook_base_url:
        overrides["runbook_base_url"] = args.runbook_base_url
    if args.alertmanager_url:
        overrides["alertmanager"] = dataclasses.replace(config.alertmanager, url=args.alertmanager_url)
    if args.listen:
        try:
            parse_listen(args.listen)
        except ValueError as exc:
            raise UserError(f"--listen: {exc}") from exc
        overrides["listen"] = args.listen
    for option, url in (("--runbook-base-url", args.runbook_base_url), ("--alertmanager-url", args.alertmanager_url)):
        if url and not url.startswith(("http://", "https://")):
            raise UserError(f"{option}: must be an http(s) URL, got {url!r}")
    if overrides:
        config = dataclasses.replace(config, **overrides)
    try:
        daemon, http = build(config)
    except OSError as exc:
        raise UserError(str(exc.strerror or exc)) from exc
    except Exception as exc:
        from crashdoc.matching.library import LibraryError

        if isinstance(exc, LibraryError):
            raise UserError(
                "the signature library has problems:\n" + "\n".join(f"  {p}" for p in exc.problems)
            ) from exc
        raise
    daemon.notify = sd_notify
    daemon.config_path = args.config  # SIGHUP reads it again; the options above keep winning
    daemon.overrides = overrides
    daemon.prepare()
    host, port = http.address
    log(
        f"watching {', '.join(r.pattern for r in config.units)}; http://{host}:{port}/metrics "
        f"(library: {len(daemon.holder.library)} signatures, D-Bus: {'up' if daemon.health.dbus_up else 'down'})"
    )
    return daemon.run(http)


def sd_notify(state: str) -> None:
    """Tell systemd (Type=notify) we are ready / alive; a no-op outside a notify unit."""
    if not os.environ.get("NOTIFY_SOCKET"):
        return
    try:
        from systemd import daemon as sd_daemon

        sd_daemon.notify(state)
    except (ImportError, OSError):
        pass


def demo(args: argparse.Namespace) -> int:
    """Boot the built-in sandbox (a private systemd with a crash-looping SGLang prefill unit and a
    healthy decode unit), run the daemon inside it and show its diagnosis."""
    import subprocess

    from crashdoc.sandbox.demo import DECODE_UNIT, PREFILL_UNIT, boot_demo
    from crashdoc.sandbox.systemd import SandboxError, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        raise UserError(f"cannot boot the demo sandbox here: {reason}")
    print("booting a private systemd with sglang-prefill.service (crash-looping) and sglang-decode.service ...")
    try:
        sandbox = boot_demo(python=sys.executable)
    except SandboxError as exc:
        raise UserError(f"the demo sandbox did not boot: {exc}") from exc
    daemon = None
    try:
        state = sandbox.workdir / "crashdoc-state"
        log_path = sandbox.workdir / "crashdoc.log"
        argv = [sys.executable, "-m", "crashdoc", "run", "--listen", args.listen, "--state-directory", str(state)]
        with open(log_path, "wb") as log:
            daemon = sandbox.popen(argv, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://{args.listen}"
        print(f"crashdoc is running inside it: {url}/  {url}/metrics  {url}/diagnoses")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if daemon.poll() is not None:
                raise UserError("crashdoc stopped in the sandbox:\n" + log_path.read_text(errors="replace"))
            if _demo_looping(url, PREFILL_UNIT):
                break
            time.sleep(0.5)
        else:
            raise UserError("no crash loop was diagnosed within 90 s:\n" + log_path.read_text(errors="replace"))
        result = sandbox.run([sys.executable, "-m", "crashdoc", "diagnose", "--unit", PREFILL_UNIT], timeout=60)
        print()
        print(result.stdout, end="")
        healthy = sandbox.systemctl("is-active", DECODE_UNIT).stdout.strip()
        print(f"\n{DECODE_UNIT} beside it: {healthy}, not crash-looping.")
        print(f"On-call page: {url}/units/{PREFILL_UNIT}")
        if args.keep_running:
            print("Press Ctrl-C to stop the sandbox.")
            while daemon.poll() is None:
                time.sleep(1)
        return 0
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.terminate()
        sandbox.stop()


def _demo_looping(url: str, unit: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=2) as response:
            body = response.read().decode()
    except OSError:
        return False
    return f'crashdoc_unit_crashloop{{unit="{unit}"}} 1.0' in body


def check_config(args: argparse.Namespace) -> int:
    """Validate a configuration as `crashdoc run` would, plus what would only fail once it runs
    (signature folders and their files, the journal folder, a relative state folder), so that a
    config rollout can be gated on it: OK and a summary on stdout, or every problem as FILE:LINE on
    stderr and exit 1."""
    import socket
    from pathlib import Path

    from crashdoc.config import ConfigError, load_config
    from crashdoc.matching.library import LibraryError, builtin_signature_dirs, load_library
    from crashdoc.yamlfile import YamlError, parse_located

    name = args.file
    try:
        config = load_config(name)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    try:
        lines = parse_located(Path(name).read_text(encoding="utf-8")).lines
    except (OSError, UnicodeDecodeError, YamlError):
        lines = {}

    def at(*paths: tuple[object, ...]) -> str:
        """FILE:LINE of the first of `paths` written in the file (FILE alone for a default)."""
        line = next((lines[p] for p in paths if p in lines), 0)
        return f"{name}:{line}" if line else name

    problems: list[str] = []
    folders: list[Path] = []
    for i, folder in enumerate(config.signature_folders):
        if Path(folder).is_dir():
            folders.append(Path(folder))
        else:
            where = at(("signatures", "folders", i), ("signatures", i))
            problems.append(f"{where}: signatures.folders: {folder}: no such folder")
    builtin = builtin_signature_dirs() if config.builtin_signatures else []
    if config.builtin_signatures and not builtin:
        problems.append(f"{at(('signatures', 'builtin'))}: signatures.builtin: the built-in library is not installed")
    library = None
    if not config.builtin_signatures and not config.signature_folders:
        problems.append(
            f"{at(('signatures', 'builtin'), ('signatures',))}: signatures: no library (builtin is "
            "false and there are no folders)"
        )
    elif builtin or folders:
        try:
            library = load_library([*builtin, *folders])
        except LibraryError as exc:
            problems.extend(f"{p} (signature library, {at(('signatures',))})" for p in exc.problems)
    if config.journal_directory and not Path(config.journal_directory).is_dir():
        where = at(("journal", "directory"))
        problems.append(f"{where}: journal.directory: {config.journal_directory}: no such folder")
    if not Path(config.state_directory).is_absolute():
        problems.append(
            f"{at(('state_directory',))}: state_directory: must be an absolute path, got "
            f"{config.state_directory!r} (a unit runs in /, which is read-only)"
        )
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1

    t, am = config.thresholds, config.alertmanager
    host, port = config.listen_address
    shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
    links = (config.runbook_base_url or f"http://{shown}:{port}").rstrip("/")
    sources = ["built-in"] * bool(builtin) + [str(f) for f in folders]
    print(f"{name}: OK")
    print(f"  units:         {', '.join(f'{r.pattern} ({r.role})' for r in config.units)}")
    print(f"  listen:        {config.listen} (/metrics, /diagnoses, /units/<unit>, /runbook/<signature>)")
    print(
        f"  crash loop:    {t.startup_crashes} crashes before ready in a row, or {t.runtime_crashes} within "
        f"{t.runtime_window:g} s; recovered after {t.recovery:g} s up"
    )
    print(f"  signatures:    {len(library) if library is not None else 0} from {', '.join(sources)}")
    print(f"  state:         {config.state_directory}")
    print(
        f"  journal:       {config.journal_directory or 'the system journal'}; D-Bus: "
        f"{'yes' if config.dbus else 'no (the journal alone)'}"
    )
    print(
        f"  alerts:        {f'pushed to {am.url} every {am.resend_interval:g} s' if am.url else 'not pushed'}"
        f" (instance {config.instance})"
    )
    print(f"  runbook links: {links}/runbook/<signature>")
    return 0


def mine(args: argparse.Namespace) -> int:
    """Candidate signatures from SGLang's source, and how much of it the library covers."""
    from crashdoc.matching.mine import MineError, run

    library = load_library_or_fail(args.signatures)
    try:
        return run(args.path, library, out=args.out, as_json=args.json)
    except MineError as exc:
        raise UserError(str(exc)) from exc
    except OSError as exc:
        raise UserError(f"{exc.filename or args.out}: {exc.strerror or exc}") from exc


def render_runbooks(args: argparse.Namespace) -> int:
    """Every signature's runbook as Markdown in DIR, plus index.md, for a wiki."""
    from pathlib import Path

    from crashdoc.outputs.runbooks import INDEX, write_runbooks

    library = load_library_or_fail(args.signatures)
    try:
        rendered = write_runbooks(library, Path(args.dir))
    except OSError as exc:
        raise UserError(f"cannot write the runbooks to {args.dir}: {exc.strerror or exc}") from exc
    stale = f"; removed {len(rendered.removed)} page(s) of signatures that are gone" if rendered.removed else ""
    print(f"wrote {len(rendered.written) - 1} runbooks and {INDEX} to {args.dir}{stale}")
    return 0
