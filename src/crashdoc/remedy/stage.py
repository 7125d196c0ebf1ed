"""The remedy stage: what the engine decided to change, turned into what an engineer runs, outside the engine.

The engine's diagnosis says what to change (`fix.changes`: flag and value) and where (`target`: the run's
command, the unit's drop-ins and NUMA settings, the run's KV-pool lines). This stage does the rest, in two
steps, each on a copy (the engine's own diagnosis is never changed):

- `apply`: the corrected command, the diff of the file to edit, the commands to apply and roll it back, and
  the safety check the signature names. It reads the launch script, /proc and /sys: milliseconds.
- `check`: the corrected command put to the unit's own SGLang, whose argument checks run in a child process
  (`remedy.verify`): seconds. Fix candidates checked one by one the same way belong here, after `apply`.

`explain` (no unit on disk: `RemedyStage(on_disk=False)` leaves the fix described) and `diagnose` call it in
line; the daemon runs it on worker threads (`runtime.remedies`), never under its lock, and publishes what
comes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from crashdoc.events import Diagnosis, FixTarget, FlagChange
from crashdoc.redact import redact

if TYPE_CHECKING:  # imported where used: `explain` (no unit on disk) loads none of them
    from crashdoc.remedy.commandline import Reader
    from crashdoc.remedy.safety import SafeFix
    from crashdoc.remedy.verify import Runner

PARALLEL = 4  # `diagnose`: SGLang checks at once (each child spends seconds importing SGLang)
NO_COMMAND = "the unit's command line is unknown here (no D-Bus); apply the change by hand"
CheckKey = tuple[tuple[str, ...], tuple[tuple[str, str, str | None, str | None], ...]]


class RemedyStage:
    """`on_disk` False: the unit is not on this host (a pasted log), the changes stay described."""

    def __init__(
        self,
        *,
        on_disk: bool = True,
        read: Reader | None = None,  # how files are read (remedy.commandline.read_text_file)
        root: Path = Path("/"),  # where /proc and /sys are read for safety checks (a fake tree in tests)
        run: Runner | None = None,  # how a child is run (subprocess.run; a stub in tests)
        timeout: float = 90.0,  # remedy.verify.TIMEOUT
    ) -> None:
        self.on_disk = on_disk
        self._reader, self._root, self._run, self._timeout = read, root, run, timeout

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

    def check(self, d: Diagnosis) -> Diagnosis:
        """What the unit's own SGLang says of the corrected command (`fix.verified`)."""
        if not self.wants_check(d):
            return d
        return with_verified(d, self.verdict(d))

    def verdict(self, d: Diagnosis) -> str:
        """SGLang's argument checks run on the corrected command, in a child process: the line shown as verified."""
        from crashdoc.remedy.verify import verify_fix

        assert d.target is not None
        changes = d.fix.changes
        if self._run is None:
            return verify_fix(d.target.exec_start, changes, read=self._read, timeout=self._timeout).text
        return verify_fix(d.target.exec_start, changes, read=self._read, run=self._run, timeout=self._timeout).text

    def wants_check(self, d: Diagnosis) -> bool:
        return self.on_disk and d.target is not None and bool(d.fix.changes)

    def remedy_all(self, diagnoses: Sequence[Diagnosis], *, check: bool = True) -> list[Diagnosis]:
        """`diagnose`: every diagnosis applied, and each distinct corrected command checked once, a few at a time."""
        applied = [self.apply(d) for d in diagnoses]
        if not check:
            return applied
        from concurrent.futures import ThreadPoolExecutor

        todo = {check_key(d): d for d in applied if self.wants_check(d)}
        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            futures = {key: pool.submit(self.verdict, d) for key, d in todo.items()}
            said = {key: future.result() for key, future in futures.items()}
        return [with_verified(d, said[check_key(d)]) if self.wants_check(d) else d for d in applied]


def check_key(d: Diagnosis) -> CheckKey:
    """What a check depends on: the command systemd runs and the changes (one child per distinct pair)."""
    exec_start = d.target.exec_start if d.target is not None else ()
    return tuple(exec_start), tuple((c.action, c.flag, c.value, c.new_flag) for c in d.fix.changes)


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
    from crashdoc.remedy.commandline import find_invocation
    from crashdoc.remedy.safety import safe_fix

    inv = find_invocation(target.cmdline, read).invocation if target.cmdline else None
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
