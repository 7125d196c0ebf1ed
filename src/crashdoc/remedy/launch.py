"""A unit's launch command as its files tell it: its SGLang flags, its SGLang release, the files it is made of.

The engine reads no file: `LaunchReader` reads, before the engine's step, what the step's events need from
disk and hands it in as `LaunchFacts` ahead of them (for the daemon: outside its lock). A command is read
when a unit's ExecStart is first seen over D-Bus, when a process logs it as its argv, and again at every start
of the unit (so that a launch script edited since counts from the next run, as SGLang itself sees it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from crashdoc.assembly.markers import launches_sglang
from crashdoc.events import GpuEvent, LaunchFacts, Lifecycle, LifecycleRecord, LogLine, UnitState
from crashdoc.matching.flagnames import canonical_flags
from crashdoc.remedy.commandline import Reader, find_launch_command, read_text_file

# a unit's command line -> (the SGLang release its interpreter imports, where that was read), or None: the
# daemon's and `diagnose`'s is authoring.hostrelease.HostReleases.sglang_release (it derives unshipped ones)
ReleaseResolver = Callable[[tuple[str, ...]], "tuple[str, str] | None"]
FeedEvent = LogLine | LifecycleRecord | UnitState | LaunchFacts | GpuEvent
MAX_GIVEN = 4096  # (unit, command) pairs remembered as handed in


def unit_flags(cmdline: tuple[str, ...], read: Reader = read_text_file) -> dict[str, str]:
    """The flags of the SGLang command behind an ExecStart argv (last occurrence wins, like argparse)."""
    located = find_launch_command(cmdline, read)
    if located.command is None:
        return {}
    return {flag.name: " ".join(flag.values) for flag in located.command.flags}


def unit_files(state: UnitState, read: Reader = read_text_file) -> list[str]:
    """The files a unit is made of: unit file, drop-ins, environment files and the launch script(s)."""
    paths = [state.fragment_path, *state.drop_in_paths, *(p.lstrip("-") for p in state.environment_files)]
    if state.exec_start:
        located = find_launch_command(state.exec_start, read)
        for inv in (located.command, *located.others):
            if inv is not None and inv.path:
                paths.append(inv.path)
    return [p for p in dict.fromkeys(paths) if p]


def _no_release(cmdline: tuple[str, ...]) -> tuple[str, str] | None:
    return None


class LaunchReader:
    """Reads the launch facts the engine's next events need; `sglang_release` None reads no release (journal
    files copied from another host: this host's interpreters say nothing of theirs)."""

    def __init__(self, *, read: Reader = read_text_file, sglang_release: ReleaseResolver | None = None) -> None:
        self._read = read
        self._sglang_release = sglang_release or _no_release
        self._exec_start: dict[str, tuple[str, ...]] = {}  # each unit's ExecStart, as D-Bus last said
        self._given: set[tuple[str, tuple[str, ...]]] = set()  # handed in since the unit's last start

    def facts(self, unit: str, cmdline: tuple[str, ...]) -> LaunchFacts:
        """Read one command now: its flags (canonical names) and the release its interpreter imports."""
        flags = canonical_flags(unit_flags(cmdline, self._read)) if cmdline else {}
        found = self._sglang_release(cmdline) if cmdline else None
        release, where = found if found is not None else ("", "")
        return LaunchFacts(unit, cmdline, flags, release, where)

    def for_state(self, state: UnitState) -> LaunchFacts | None:
        """What to hand in before this D-Bus state: its ExecStart's facts, when they are new."""
        if not state.exec_start:
            return None
        self._exec_start[state.unit] = state.exec_start
        return self._once(state.unit, state.exec_start)

    def for_event(self, event: LogLine | LifecycleRecord | GpuEvent) -> LaunchFacts | None:
        """What to hand in before a journal event: a start reads the unit's ExecStart again, a process's first
        line its own argv (once); a kernel GPU fault needs nothing."""
        if isinstance(event, LogLine):
            if event.cmdline and launches_sglang(event.cmdline):
                return self._once(event.unit, tuple(event.cmdline.split()))
            return None
        if isinstance(event, LifecycleRecord) and event.kind is Lifecycle.STARTED:
            self._given = {given for given in self._given if given[0] != event.unit}
            exec_start = self._exec_start.get(event.unit)
            if exec_start:
                return self._once(event.unit, exec_start)
        return None

    def prepare(self, events: Iterable[LogLine | LifecycleRecord | UnitState | GpuEvent]) -> list[FeedEvent]:
        """The events with the launch facts they need in front of them, in order (a kernel GPU fault needs none)."""
        out: list[FeedEvent] = []
        append = out.append
        for event in events:
            if type(event) is LogLine and not event.cmdline:  # nearly every event: a line, not a process's first
                append(event)
                continue
            facts = self.for_state(event) if isinstance(event, UnitState) else self.for_event(event)
            if facts is not None:
                out.append(facts)
            out.append(event)
        return out

    def _once(self, unit: str, cmdline: tuple[str, ...]) -> LaunchFacts | None:
        key = (unit, cmdline)
        if key in self._given:
            return None
        if len(self._given) >= MAX_GIVEN:  # argvs a hostile unit makes up: read again, never kept without bound
            self._given.clear()
        self._given.add(key)
        return self.facts(unit, cmdline)
