"""Connects diagnoses to the unit's real command line: its current flags, and the corrected command.

`commandline` finds the SGLang invocation behind a unit's ExecStart (wrappers, scripts,
continuations); `fix` rewrites it. This module adapts both to what `DiagnosisBuilder` needs, and runs
the safety check a signature names (`fix.safety`) on the unit's own numbers, so that a fix does not
trade one crash loop for another.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from crashdoc.diagnosis.report import FixSynthesizer, UnitContext
from crashdoc.diagnosis.run import Run
from crashdoc.events import Fix, FlagChange, UnitState
from crashdoc.redact import redact
from crashdoc.remedy.commandline import Reader, find_invocation, read_text_file
from crashdoc.remedy.fix import synthesize_fix
from crashdoc.remedy.safety import SafeFix, safe_fix


def unit_flags(cmdline: tuple[str, ...], read: Reader = read_text_file) -> dict[str, str]:
    """The flags of the SGLang command behind an ExecStart argv (last occurrence wins, like argparse)."""
    located = find_invocation(cmdline, read)
    if located.invocation is None:
        return {}
    return {flag.name: " ".join(flag.values) for flag in located.invocation.flags}


def unit_fix_synthesizer(read: Reader = read_text_file, root: Path = Path("/")) -> FixSynthesizer:
    """`root` is where /proc and /sys are read for safety checks (a fake tree in tests)."""

    def synthesize(ctx: UnitContext, changes: list[FlagChange], fix: Fix) -> None:
        if ctx.safety:  # one truth: the changes, summary and command carry a value the check accepts
            checked = fix_safety(ctx, changes, fix.summary, read=read, root=root)
            changes = fix.changes = list(checked.changes)
            fix.summary = checked.summary or fix.summary
            fix.warnings.extend([redact(" ".join(checked.sentences))] if checked.sentences else [])
        if not ctx.cmdline:
            fix.warnings.append("the unit's command line is unknown here (no D-Bus); apply the change by hand")
            return
        drop_ins = ctx.state.drop_in_paths if ctx.state is not None else ()
        result = synthesize_fix(
            ctx.unit, ctx.cmdline, changes, fix.summary, warnings=fix.warnings, read=read, drop_in_paths=drop_ins
        )
        fix.summary = result.summary
        fix.command = result.command
        fix.diff = result.diff
        fix.apply = result.apply
        fix.rollback = result.rollback
        fix.warnings = result.warnings

    return synthesize


def fix_safety(
    ctx: UnitContext,
    changes: Sequence[FlagChange],
    summary: str,
    *,
    read: Reader = read_text_file,
    root: Path = Path("/"),
) -> SafeFix:
    """The signature's safety check on the fix: the pool size from this run's start-up lines, the ranks and any
    numactl from the unit's command, the NUMA settings systemd reported, the memory from `root`, and what the
    unit's SGLang release does itself (auto-sizing)."""
    inv = find_invocation(ctx.cmdline, read).invocation if ctx.cmdline else None
    state = ctx.state
    return safe_fix(
        ctx.safety,
        changes,
        summary,
        lines=kv_cache_lines(ctx.invocation),
        inv=inv,
        release=ctx.sglang_version,
        numa_policy=state.numa_policy if state is not None else "",
        numa_mask=state.numa_mask if state is not None else "",
        cpu_affinity=state.cpu_affinity if state is not None else "",
        root=root,
    )


def kv_cache_lines(run: Run | None) -> list[str]:
    """SGLang's \"KV Cache is allocated\" lines of one run, as `safety` reads them. The engine keeps them as
    markers without SGLang's rank prefix; each scheduler rank is its own process, so the PID stands in for
    the rank (otherwise the ranks' pools would be added up as if they were one rank's)."""
    if run is None:
        return []
    return [f"[1970-01-01 00:00:00 PID{m.pid}] {m.text}" for m in run.markers if m.kind == "kv-cache"]


def unit_files(state: UnitState, read: Reader = read_text_file) -> list[str]:
    """The files a unit is made of: unit file, drop-ins, environment files and the launch script(s)."""
    paths = [state.fragment_path, *state.drop_in_paths, *(p.lstrip("-") for p in state.environment_files)]
    if state.exec_start:
        located = find_invocation(state.exec_start, read)
        for inv in (located.invocation, *located.others):
            if inv is not None and inv.path:
                paths.append(inv.path)
    return [p for p in dict.fromkeys(paths) if p]
