"""A flag given a value outside its choices (argparse's `invalid choice`): the accepted value closest in spelling
to the one given, read from argparse's own list, so that the intent survives (`flash_attn` -> `flashinfer`)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from crashdoc.events import FlagChange
from crashdoc.remedy.actions.common import Action, Inputs

CLOSE_ENOUGH = 0.5  # difflib's ratio below which no choice is taken for the one meant
CLEAR_LEAD = 0.15  # and the lead the closest needs over the next: `flash_attn` is as near flashmla as flashinfer


def choices_of(text: str) -> list[str]:
    """argparse's `(choose from a, b, c)` (3.12+) or `('a', 'b', 'c')` (before): the values, in its order."""
    return [c.strip().strip("'\"") for c in text.split(",") if c.strip().strip("'\"")]


def invalid_choice_action(inputs: Inputs, captures: Mapping[str, str]) -> Action | None:
    flag, value = captures.get("flag", ""), captures.get("value", "").strip("'\"")
    choices = choices_of(captures.get("choices", ""))
    if not flag or not choices:
        return None
    scored = sorted(
        ((difflib.SequenceMatcher(None, value.lower(), c.lower()).ratio(), c) for c in choices), reverse=True
    )
    ratio, best = scored[0]
    second = scored[1][0] if len(scored) > 1 else 0.0
    why = [f"`{flag}` accepts {', '.join(choices)}; `{value}` is none of them."]
    if ratio < CLOSE_ENOUGH or ratio - second < CLEAR_LEAD:
        near = ", ".join(f"`{c}` ({r:.2f})" for r, c in scored[:3])
        why.append(f"No accepted value is clearly the one meant by `{value}` (closest in spelling: {near}).")
        return Action(
            summary=f"`{flag} {value}` is not accepted: set it to one of {', '.join(choices)}",
            changes=[FlagChange("set", flag, f"<one of: {', '.join(choices)}>", placeholder=True)],
            why=why,
        )
    runner_up = f"; next `{scored[1][1]}` at {scored[1][0]:.2f}" if len(scored) > 1 else ""
    why.append(f"The accepted value closest in spelling to `{value}` is `{best}` (similarity {ratio:.2f}{runner_up}).")
    return Action(
        summary=f"`{flag} {value}` is not accepted; `{flag} {best}` is the closest accepted value (check it is the "
        "one meant)",
        changes=[FlagChange("set", flag, best)],
        why=why,
    )
