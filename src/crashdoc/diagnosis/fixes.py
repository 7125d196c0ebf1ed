"""Connects diagnoses to the unit's real command line: its current flags, and the corrected command.

`commandline` finds the SGLang invocation behind a unit's ExecStart (wrappers, scripts,
continuations); `fix` rewrites it. This module adapts both to what `DiagnosisBuilder` needs.
"""

from __future__ import annotations

from crashdoc.diagnosis.commandline import Reader, find_invocation, read_text_file
from crashdoc.diagnosis.fix import synthesize_fix
from crashdoc.diagnosis.report import FixSynthesizer, UnitContext
from crashdoc.events import Fix, FlagChange


def unit_flags(cmdline: tuple[str, ...], read: Reader = read_text_file) -> dict[str, str]:
    """The flags of the SGLang command behind an ExecStart argv (last occurrence wins, like argparse)."""
    located = find_invocation(cmdline, read)
    if located.invocation is None:
        return {}
    return {flag.name: " ".join(flag.values) for flag in located.invocation.flags}


def unit_fix_synthesizer(read: Reader = read_text_file) -> FixSynthesizer:
    def synthesize(ctx: UnitContext, changes: list[FlagChange], fix: Fix) -> None:
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
