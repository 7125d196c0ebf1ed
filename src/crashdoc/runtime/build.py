"""Assembles a daemon from a configuration: which parts, and how they are connected."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from crashdoc.authoring.hostrelease import HostReleases, derive_in_child
from crashdoc.config import Config, parse_listen
from crashdoc.diagnosis.engine import Engine
from crashdoc.events import Thresholds
from crashdoc.matching.cache import CompiledCache
from crashdoc.matching.derived import DerivedLibrary, load_shipped
from crashdoc.matching.library import builtin_signature_dirs
from crashdoc.matching.matcher import Matcher
from crashdoc.matching.reload import LibraryHolder
from crashdoc.outputs.http import HttpServer
from crashdoc.outputs.journal_records import JournalRecorder
from crashdoc.outputs.metrics import Health
from crashdoc.remedy.launch import LaunchReader, unit_files
from crashdoc.remedy.stage import RemedyStage
from crashdoc.runtime.daemon import Daemon
from crashdoc.runtime.effects import Effects
from crashdoc.runtime.heap import bound_malloc
from crashdoc.runtime.log import log
from crashdoc.runtime.remedies import RemedyWorker
from crashdoc.runtime.saving import StateSaver
from crashdoc.runtime.view import HttpView
from crashdoc.sources.cursor import CursorStore
from crashdoc.sources.files import UnitFilesWatcher
from crashdoc.sources.gpu_facts import GpuFactsReader
from crashdoc.sources.journal import JournalSource, UnitFilter
from crashdoc.sources.units import UnitWatcher

# (the current matcher, thresholds, role of a unit) -> the engine; commands/pipeline.py makes the one `run`,
# `diagnose` and `explain` share
EngineFactory = Callable[[Callable[[], Matcher], Thresholds, Callable[[str], str | None]], Engine]


def build(config: Config, make_engine: EngineFactory, *, listen: str | None = None) -> tuple[Daemon, HttpServer]:
    """A daemon and its HTTP server (not started) for `config` (the CLI's `run`)."""
    bound_malloc()
    # the validated library is kept in the state folder: a restart skips the YAML and schema work
    holder = LibraryHolder(
        library_folders(config),
        log=log,
        derived=load_shipped(),
        compiled=CompiledCache(library_cache_dir(config), log),
        matching_only=True,  # runbook texts are read for the pages that show them
        validate_apart=True,  # jsonschema is imported by a child, not kept by the daemon
    )
    own = own_unit()
    units = UnitFilter(config.units, ignore=frozenset({own}) if own else frozenset())
    releases = host_releases(config, holder)
    engine = make_engine(lambda: holder.matcher, config.thresholds, units.role_of)
    # read by the C batch reader, built into the state folder's cache on first use (systemd-python without it)
    source = JournalSource(units, directory=config.journal_directory, build_dir=library_cache_dir(config))
    source.read_gpu_events()  # the kernel's GPU faults (Xid, fallen off the bus), joined with the units' crashes
    store = CursorStore(config.state_directory)
    watcher = UnitWatcher(units, build_dir=library_cache_dir(config)) if config.dbus else None
    health = Health()
    lock = threading.Lock()
    remedies = RemedyWorker(RemedyStage(derived=lambda: holder.derived), checks=config.sglang_checks)
    view = HttpView(engine, holder, lock, health, store, watcher, config, remedies=remedies, releases=releases)
    recorder = JournalRecorder(runbook_url=view.runbook_url)
    effects = Effects(recorder, health)
    am = config.alertmanager
    if am.url:
        from crashdoc.outputs.alerts import AlertSender

        effects.alerts = AlertSender(
            am.url, config.instance, view.runbook_url, health, am.resend_interval, am.timeout, log=log
        )
        effects.alerts.post = am.client.post  # TLS, basic auth or bearer token, proxy
    daemon = Daemon(
        config,
        holder,
        engine,
        source,
        StateSaver(store, health),
        watcher,
        effects,
        view,
        lock,
        health,
        LaunchReader(sglang_release=releases.sglang_release),
        remedies,
        unit_files=unit_files,
        library_folders=library_folders,
        gpu_facts=GpuFactsReader(Path(config.nvidia_gpus) if config.nvidia_gpus else None),
    )
    remedies.wake = daemon.wake  # a fix or a check that is done wakes the loop, which publishes it
    if watcher is not None:
        daemon.files = UnitFilesWatcher(daemon.file_changed)
    host, port = parse_listen(listen or config.listen)
    web = None
    if config.web_config_file:  # TLS and basic auth; a bad file raises WebConfigError (not starting)
        from crashdoc.outputs.webconfig import WebConfigHolder

        web = WebConfigHolder(config.web_config_file, health, log=log)
        view.scheme = "https" if web.current.ssl_context is not None else "http"
    return daemon, HttpServer(view, host, port, web=web)


def library_cache_dir(config: Config) -> Path:
    return Path(config.state_directory) / "cache"


def host_releases(config: Config, holder: LibraryHolder) -> HostReleases:
    """Each unit's SGLang release, read from its interpreter's files; a release the package does not ship is
    derived from the unit's installed source in a child process, cached in `<state_directory>/cache`, and
    joins the matcher's derived signatures when ready (diagnoses from then on use it)."""

    def use(library: DerivedLibrary) -> None:
        holder.derived = library  # kept across library reloads
        holder.matcher.derived = library  # one attribute: the engine's thread sees the old or the new

    return HostReleases(
        holder.derived if holder.derived is not None else load_shipped(),
        library_cache_dir(config),
        derive=derive_in_child,
        background=True,
        on_change=use,
        log=log,
    )


def library_folders(config: Config) -> list[Path]:
    return [
        *(builtin_signature_dirs() if config.builtin_signatures else []),
        *(Path(f) for f in config.signature_folders),
    ]


def own_unit() -> str | None:
    """The unit crashdoc itself runs in, from /proc/self/cgroup: its records must never feed it."""
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        path = line.rsplit(":", 1)[-1]
        for part in reversed(path.split("/")):
            if part.endswith(".service"):
                return part
    return None
