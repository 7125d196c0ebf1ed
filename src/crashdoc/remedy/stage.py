"""The remedy stage: what the engine decided to change, turned into what an engineer runs, outside the engine.

The engine's diagnosis says what to change (`fix.changes`: flag and value) and where (`target`: the run's
command, the unit's drop-ins and NUMA settings, the run's KV-pool lines). This stage does the rest, in two
steps, each on a copy (the engine's own diagnosis is never changed):

- `apply`: the corrected command, the diff of the file to edit, the commands to apply and roll it back, and
  the safety check the signature names. It reads the launch script, /proc and /sys: milliseconds.
- `check`: SGLang's own argument checks, run by the unit's own interpreter in child processes: seconds. A flag
  failure's fix is searched (`remedy.accepted.FixSearch`: candidates from everything crashdoc knows, each
  checked, searched on from one that gets further; without an interpreter it may run, ranked with the
  release's argument facts) and the fix found applied again; any other fix's corrected command is checked as
  it is (`remedy.verify`, through `remedy.checker`).

`explain` (no unit on disk: `RemedyStage(on_disk=False)` leaves the fix described, and searches on the pasted
command with the interpreter the operator names, `remedy_pasted`) and `diagnose` call it in line; the daemon
runs it on worker threads (`runtime.remedies`), never under its lock, and publishes what comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from crashdoc.events import Diagnosis, FixTarget, FlagChange
from crashdoc.redact import redact

if TYPE_CHECKING:  # imported where used: `explain` of a healthy log loads none of them
    from crashdoc.matching.derived import DerivedLibrary
    from crashdoc.remedy.accepted import FixSearch, Pasted
    from crashdoc.remedy.commandline import Reader
    from crashdoc.remedy.safety import SafeFix
    from crashdoc.remedy.search import Budget

PARALLEL = 4  # `diagnose`: SGLang checks at once (each child spends seconds importing SGLang)
NOT_ASKED = "not asked to (--no-verify)"  # why no SGLang judged a fix `diagnose --no-verify` ranked
NO_COMMAND = "the unit's command line is unknown here (no D-Bus); apply the change by hand"
CheckKey = tuple[object, ...]
# what `remedy_all` imports for a diagnosis with a fix (`preparation` imports them ahead)
PREPARED = ("crashdoc.remedy.fix", "crashdoc.remedy.search", "crashdoc.remedy.accepted", "crashdoc.remedy.verify")


class RemedyStage:
    """`on_disk` False: the unit is not on this host (a pasted log), the changes stay described."""

    def __init__(
        self,
        *,
        on_disk: bool = True,
        read: Reader | None = None,  # how files are read (remedy.commandline.read_text_file)
        root: Path = Path("/"),  # where /proc and /sys are read for safety checks (a fake tree in tests)
        timeout: float = 90.0,  # remedy.verify.TIMEOUT
        # the derived signatures the engine matches with (for the search), or how to get the current ones
        derived: DerivedLibrary | Callable[[], DerivedLibrary | None] | None = None,
        budget: Budget | None = None,  # how far a search goes (remedy.search.DEFAULT_BUDGET)
        interpreter: str | None = None,  # `explain --sglang-python`: the only one run when `on_disk` is False
    ) -> None:
        self.on_disk = on_disk
        self._reader, self._root, self._timeout = read, root, timeout
        self._derived, self._budget, self.interpreter = derived, budget, interpreter
        self._search: FixSearch | None = None

    @property
    def _read(self) -> Reader:
        if self._reader is None:
            from crashdoc.remedy.commandline import read_text_file

            self._reader = read_text_file
        return self._reader

    def apply(self, d: Diagnosis) -> Diagnosis:
        """The changes applied to the target's command: command, diff, apply and roll-back, safety warnings.
        A diagnosis without a target is final (an older crashdoc applied its fix) and is handed on as it is."""
        target = d.target
        if not self.on_disk or target is None or not d.fix.changes:
            return d
        from crashdoc.remedy.fix import synthesize_fix

        fix = replace(d.fix, warnings=list(d.fix.warnings))
        if target.safety:  # one truth: the changes, summary and command carry a value the check accepts
            checked = fix_safety(
                target, fix.changes, fix.summary, release=d.sglang_release or "", read=self._read, root=self._root
            )
            fix = replace(fix, changes=list(checked.changes), summary=checked.summary or fix.summary)
            fix.warnings.extend([redact(" ".join(checked.sentences))] if checked.sentences else [])
            if not fix.changes:
                return replace(d, fix=fix)
        if not target.cmdline:
            fix.warnings.append(NO_COMMAND)
            return replace(d, fix=fix)
        done = synthesize_fix(
            d.unit,
            target.cmdline,
            fix.changes,
            fix.summary,
            warnings=fix.warnings,
            read=self._read,
            drop_in_paths=target.drop_in_paths,
        )
        fix = replace(
            fix,
            summary=done.summary,
            command=done.command,
            diff=done.diff,
            apply=done.apply,
            rollback=done.rollback,
            warnings=done.warnings,
        )
        return replace(d, fix=fix)

    def check(self, d: Diagnosis, *, run: bool = True, unrun: str = NOT_ASKED) -> Diagnosis:
        """What the unit's own SGLang says: a flag failure's fix searched and checked (applied again when the
        search changed it), any other fix's corrected command checked (`fix.verified`). `run` False (`diagnose
        --no-verify`, checks off in the configuration: `unrun` says which): the search ranks its candidates with
        the release's argument facts, no SGLang is run."""
        if self.searches(d):
            return self.searched(d, run=run, unrun=unrun)
        if not run or not self.wants_check(d):
            return d
        return with_verified(d, self.verdict(d))

    def searches(self, d: Diagnosis) -> bool:
        """Whether `check` searches this diagnosis's fix: a flag failure of a unit whose command is known. A fix
        with a safety check is not: its value comes from the host (memory, ranks), which SGLang's argument
        checks cannot judge; its corrected command is checked as it is."""
        from crashdoc.remedy.accepted import searchable

        target = d.target
        return self.on_disk and target is not None and bool(target.cmdline) and not target.safety and searchable(d)

    def searched(self, d: Diagnosis, *, run: bool = True, unrun: str = NOT_ASKED) -> Diagnosis:
        """The search on the unit's launch command (the run's command line; the one systemd reported when
        known), judged by the interpreter the unit's own files name (`judge`); the fix found applied again."""
        from crashdoc.remedy.commandline import find_launch_command

        assert d.target is not None
        command = find_launch_command(d.target.cmdline, self._read).command
        interpreter, why = self.judge(d.target) if run else (None, unrun)
        found = self.fix_search.search(d, command, interpreter, unchecked=why)
        if found is d:
            return d
        if found.fix.changes == d.fix.changes:  # the unit's corrected command as `apply` wrote it stands
            return replace(found, fix=replace(found.fix, command=d.fix.command or found.fix.command))
        return self.apply(replace(found, fix=replace(found.fix, command=None, diff=None, apply=[], rollback=[])))

    def judge(self, target: FixTarget) -> tuple[str | None, str]:
        """The interpreter whose SGLang checks the unit's fixes, or None and why not. Only systemd's ExecStart
        (D-Bus, root's configuration) and the files it runs name it, never a command line read from the journal."""
        from crashdoc.remedy.commandline import find_launch_command
        from crashdoc.remedy.interpreter import interpreter_of, unsafe_to_run

        if not target.exec_start:
            return None, "systemd did not report the unit's ExecStart here, and crashdoc runs no command from a log"
        command = find_launch_command(target.exec_start, self._read).command
        if command is None:
            return None, "crashdoc did not find SGLang's command in the unit"
        interpreter, why = interpreter_of(command, self._read)
        if interpreter is None:
            return None, why
        if command.expansions:
            return None, f"the command passes {', '.join(command.expansions)}, which only the shell expands"
        unsafe = unsafe_to_run(interpreter)
        return (None, unsafe) if unsafe else (interpreter, "")

    @property
    def fix_search(self) -> FixSearch:
        if self._search is None:
            from crashdoc.remedy.accepted import FixSearch
            from crashdoc.remedy.search import DEFAULT_BUDGET

            self._search = FixSearch(derived=self._derived, budget=self._budget or DEFAULT_BUDGET)
        return self._search

    def preparation(self) -> Iterator[bool]:
        """`diagnose`: what `remedy_all` needs first, one step of a few ms at a time (its modules, every release's
        argument facts, the derived signatures' index a search reads), for the caller to run while it would
        otherwise wait for the journal's walk; what is left is done where it is needed. The same modules and data,
        read earlier: nothing that comes out changes."""
        import importlib

        for name in PREPARED:
            importlib.import_module(name)
            yield True
        self.fix_search.facts.releases  # noqa: B018 (reads the facts' rows)
        yield True
        self.fix_search.prepare()
        yield True

    def release_search(self) -> None:
        """Forget the fix search and what it loaded (every release's argument facts, a release's checks): the
        daemon's next search builds them again. A search still running keeps the object it was handed."""
        self._search = None

    def verdict(self, d: Diagnosis) -> str:
        """SGLang's argument checks run on the corrected command, in a child process: the line shown as verified."""
        from crashdoc.remedy.verify import verify_fix

        assert d.target is not None
        return verify_fix(d.target.exec_start, d.fix.changes, read=self._read, timeout=self._timeout).text

    def wants_check(self, d: Diagnosis) -> bool:
        """Whether `check` has anything to do: a search, or a corrected command to put to SGLang."""
        return self.on_disk and d.target is not None and (bool(d.fix.changes) or self.searches(d))

    def remedy_all(self, diagnoses: Sequence[Diagnosis], *, check: bool = True) -> list[Diagnosis]:
        """`diagnose`: every diagnosis applied, then checked (searched), each distinct check once, a few at a
        time. `check` False: searches rank their candidates, nothing is run."""
        applied = [self.apply(d) for d in diagnoses]
        todo = {check_key(d): d for d in applied if self.wants_check(d) and (check or self.searches(d))}
        if not todo:
            return applied
        if check and any(d.target is not None and d.target.exec_start for d in todo.values()):
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=PARALLEL) as pool:  # SGLang's checks run in child processes
                futures = {key: pool.submit(self.check, d, run=check) for key, d in todo.items()}
                said = {key: future.result() for key, future in futures.items()}
        else:  # no unit's ExecStart (copied journal files, no D-Bus) or --no-verify: no SGLang is run, only Python
            # (concurrent.futures imports logging, threading, queue: ~4 ms for threads that would take turns)
            said = {key: self.check(d, run=check) for key, d in todo.items()}
        return [_checked(d, said[check_key(d)]) if check_key(d) in said else d for d in applied]

    def remedy_pasted(self, diagnoses: Sequence[Diagnosis], pasted: Pasted) -> list[Diagnosis]:
        """`explain`: each flag failure's fix searched on the pasted command, judged by the interpreter the
        operator named (never one read from the paste); ranked with the release's facts without one."""
        return [self.fix_search.search_pasted(d, pasted, self.interpreter) for d in diagnoses]


def check_key(d: Diagnosis) -> CheckKey:
    """What a check depends on: the command systemd runs and the changes (one child per distinct pair); a search
    also on the unit (its fix is applied to the unit's files), the failure and the run's command line."""
    from crashdoc.remedy.accepted import searchable

    target = d.target if d.target is not None else FixTarget()
    changes = tuple((c.action, c.flag, c.value, c.new_flag) for c in d.fix.changes)
    if searchable(d) and target.cmdline and not target.safety:  # RemedyStage.searches
        return (tuple(target.exec_start), changes, d.unit, d.fingerprint, tuple(target.cmdline))
    return tuple(target.exec_start), changes


def _checked(d: Diagnosis, done: Diagnosis) -> Diagnosis:
    """`done` (a check of another diagnosis with the same key) for `d`: a verdict is shared, a search is the
    unit's own (the key holds the unit and the failure)."""
    return done if done.unit == d.unit else with_verified(d, done.fix.verified)


def with_verified(d: Diagnosis, verified: str | None) -> Diagnosis:
    """A copy of the diagnosis carrying the check's line (the engine's own object is left alone)."""
    return replace(d, fix=replace(d.fix, verified=verified))


def fix_safety(
    target: FixTarget,
    changes: Sequence[FlagChange],
    summary: str,
    *,
    release: str,
    read: Reader,
    root: Path = Path("/"),
) -> SafeFix:
    """The signature's safety check on the fix: the pool size from the run's start-up lines, the ranks and any
    numactl from the unit's command, the NUMA settings systemd reported, the memory from `root`, and what the
    unit's SGLang release does itself (auto-sizing)."""
    from crashdoc.remedy.commandline import find_launch_command
    from crashdoc.remedy.safety import safe_fix

    inv = find_launch_command(target.cmdline, read).command if target.cmdline else None
    return safe_fix(
        target.safety,
        changes,
        summary,
        lines=kv_cache_lines(target),
        inv=inv,
        release=release,
        numa_policy=target.numa_policy,
        numa_mask=target.numa_mask,
        cpu_affinity=target.cpu_affinity,
        root=root,
    )


def kv_cache_lines(target: FixTarget) -> list[str]:
    """SGLang's \"KV Cache is allocated\" lines of the run, as `safety` reads them. The engine keeps them without
    SGLang's rank prefix; each scheduler rank is its own process, so the PID stands in for the rank (otherwise
    the ranks' pools would be added up as if they were one rank's)."""
    return [f"[1970-01-01 00:00:00 PID{pid}] {text}" for pid, text in target.kv_cache]
