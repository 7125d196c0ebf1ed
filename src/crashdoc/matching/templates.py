"""`${...}` templates in fix values and summaries.

A fix value often depends on the failure ("raise --mem-fraction-static above 0.874") or on
the unit's current flags ("halve --cuda-graph-max-bs"). Templates say that without code:

    ${suggested}                          a named capture of the signature's regex
    ${flag:--cuda-graph-max-bs}           the unit's current value of a flag
    ${flag:--cuda-graph-max-bs|default:256|div:2|int}

Filters are arithmetic only (no eval): default, add, sub, mul, div, min, max, round, int.

A value the log does not give is never left as template text nor as nothing: it becomes a named placeholder
that says how it would be computed (`<current --mem-fraction-static + 0.05, at most 0.95>`), and `current`, when
no capture gives it, is the flag's own value on the command or in the logged `server_args` (`with_current`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from crashdoc.events import FlagChange
from crashdoc.text import LazyPattern

_TEMPLATE = LazyPattern(r"\$\{([^{}]*)\}")
_FILTERS: dict[str, Callable[[float, float], float]] = {
    "add": lambda v, a: v + a,
    "sub": lambda v, a: v - a,
    "mul": lambda v, a: v * a,
    "div": lambda v, a: v / a if a else v,
    "min": lambda v, a: min(v, a),
    "max": lambda v, a: max(v, a),
}
_SOURCE = LazyPattern(r"^(flag:--[a-z0-9][a-z0-9-]*|flag:[A-Z][A-Z0-9_]*|[A-Za-z_][A-Za-z0-9_]*)$")


def template_problem(template: str) -> str | None:
    """Why a template cannot be rendered, or None when it is well formed."""
    for body in _TEMPLATE.findall(template):
        source, *filters = body.split("|")
        if not _SOURCE.match(source.strip()):
            return f"template ${{{body}}}: unknown source {source!r} (use a capture name or flag:--name)"
        for f in filters:
            name, _, arg = f.partition(":")
            if name == "default":
                continue
            if name == "int":
                continue
            if name == "round":
                if arg and not arg.isdigit():
                    return f"template ${{{body}}}: round takes a number of decimals"
                continue
            if name not in _FILTERS:
                return f"template ${{{body}}}: unknown filter {name!r}"
            try:
                float(arg)
            except ValueError:
                return f"template ${{{body}}}: filter {name} needs a number, got {arg!r}"
    return None


def render(template: str, captures: Mapping[str, str], flags: Mapping[str, str]) -> str | None:
    """Render every `${...}`; None when a value is unknown and has no default."""
    missing = False

    def one(match: re.Match[str]) -> str:
        nonlocal missing
        value = _evaluate(match.group(1), captures, flags)
        if value is None:
            missing = True
            return ""
        return value

    text = _TEMPLATE.sub(one, template)
    return None if missing else text


def render_text(template: str, captures: Mapping[str, str], flags: Mapping[str, str], flag: str = "") -> str:
    """Render for prose: an unknown value is a named placeholder (`<current --x + 0.05>`), never a gap."""
    return _TEMPLATE.sub(lambda m: _evaluate(m.group(1), captures, flags) or placeholder(m.group(0), flag), template)


_WORDS = {"add": "+ {}", "sub": "- {}", "mul": "x {}", "div": "/ {}", "min": "at most {}", "max": "at least {}"}


def placeholder(template: str, flag: str = "") -> str:
    """What a template computes, said in words as a placeholder the operator fills in: `${current|add:0.05|
    min:0.95|round:2}` for --mem-fraction-static -> `<current --mem-fraction-static + 0.05, at most 0.95>`."""
    parts = []
    for body in _TEMPLATE.findall(template) or [template]:
        source, *filters = (part.strip() for part in body.split("|"))
        name = source[5:] if source.startswith("flag:") else source.replace("_", " ")
        if name == "current" and flag:
            name = f"current {flag}"
        steps = []
        for f in filters:
            op, _, arg = f.partition(":")
            if op in _WORDS:
                steps.append(_WORDS[op].format(arg))
        said = name + (" " + steps[0] if steps and not steps[0].startswith("at ") else "")
        rest = steps[1:] if steps and not steps[0].startswith("at ") else steps
        parts.append(", ".join([said, *rest]))
    return "<" + "; ".join(parts) + ">"


def with_current(captures: Mapping[str, str], flags: Mapping[str, str], flag: str) -> dict[str, str]:
    """`current` for a change of `flag`: the capture when the message gives it, else the flag's value on the
    command or in the logged `server_args=` (an unset one, `None`, is not a value)."""
    out = dict(captures)
    value = flags.get(flag)
    if not out.get("current") and value not in (None, "", "None", "null"):
        out["current"] = str(value)
    return out


def _evaluate(body: str, captures: Mapping[str, str], flags: Mapping[str, str]) -> str | None:
    source, *filters = (part.strip() for part in body.split("|"))
    value = flags.get(source[5:]) if source.startswith("flag:") else captures.get(source)
    for f in filters:
        name, _, arg = f.partition(":")
        if name == "default":
            if value is None or value == "":
                value = arg
            continue
        if value is None:
            return None
        try:
            number = float(value)
        except ValueError:
            return None
        if name == "int":
            value = str(int(number))
        elif name == "round":
            value = _format(round(number, int(arg or 0)))
        else:
            value = _format(_FILTERS[name](number, float(arg)))
    return value


def _format(number: float) -> str:
    if number == int(number) and abs(number) < 1e15:
        return str(int(number))
    return f"{number:.6g}"


def placeholder_note(waiting: Sequence[FlagChange]) -> str:
    """Why a fix whose value is a placeholder (`FlagChange.placeholder`) has no apply command: the value is
    the operator's to choose, and a placeholder is never written into a launch script or drop-in."""
    shown = ", ".join(f"`{c.flag} {c.value}`" for c in waiting)
    return (
        f"Needs your value: {shown} is a placeholder (shown in the corrected command); fill in the real "
        "value and edit the launch command by hand: crashdoc offers no apply command until then."
    )
