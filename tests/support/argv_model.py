"""A reference model of what argparse reads after flag changes, for the fix synthesizer's property tests."""

from __future__ import annotations

from crashdoc.events import FlagChange
from crashdoc.remedy.commandline import LaunchCommand
from crashdoc.remedy.rewrite import change_values


def expected_values(changes: list[FlagChange], before: LaunchCommand) -> dict[str, tuple[str, ...] | None]:
    """What argparse would read after the changes, for every flag a change names (reference model)."""
    state: dict[str, tuple[str, ...] | None] = {f: before.values(f) for c in changes for f in (c.flag, c.new_flag) if f}
    for c in changes:
        values = change_values(c.value)
        if c.action == "replace":
            state[c.flag] = None
            state[c.new_flag or c.flag] = values
        elif c.action == "remove":
            state[c.flag] = None
        elif c.action == "add":
            if state.get(c.flag) is None:
                state[c.flag] = values
        else:
            state[c.flag] = values
    return state
