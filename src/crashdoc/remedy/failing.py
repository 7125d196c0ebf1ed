"""What a search for a fix starts from: the failure SGLang reported (`Failure`: its message, and what crashdoc
read from SGLang's source about the check) and what the failing command sets (`Current`: its options as
written, and the values its log's `server_args` show)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crashdoc.events import FlagChange
from crashdoc.remedy import conditions
from crashdoc.remedy.argfacts import UNKNOWN, ArgFacts, Option


@dataclass(frozen=True, slots=True)
class Failure:
    """What SGLang said, and what crashdoc read from its source about the check that said it."""

    exception_type: str
    message: str
    condition: str = ""  # the guarding condition of the derived check ("" when none is known)
    kind: str = "raise"  # raise | assert: the condition must become false | true
    curated: tuple[FlagChange, ...] = ()  # the diagnosis's own fix
    stage: str = ""  # parse (argparse) | resolve | "" (not known)
    reviewed: bool = False  # the fix is a reviewed signature's (else derived from SGLang's source, or none)


@dataclass(frozen=True, slots=True)
class Current:
    """The failing command's options: dest -> (the flag as written, its words); and values read from the log."""

    present: Mapping[str, tuple[str, tuple[str, ...]]]
    logged: Mapping[str, Any] = field(default_factory=dict)  # dest -> value, from `server_args=ServerArgs(...)`
    environment: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        flags: Iterable[tuple[str, tuple[str, ...]]],
        facts: ArgFacts,
        logged: Mapping[str, str] | None = None,
        environment: Iterable[tuple[str, str]] = (),
    ) -> Current:
        present: dict[str, tuple[str, tuple[str, ...]]] = {}
        present_flags = list(flags)
        for flag, words in present_flags:
            option = facts.option(flag)
            if option is not None:
                present[option.dest] = (flag, tuple(words))
        values: dict[str, Any] = {}
        for flag, text in (logged or {}).items():
            option = facts.option(flag)
            if option is not None:
                values[option.dest] = logged_value(option, text)
                if not present_flags and option.dest not in present and _set_in_log(option, values[option.dest]):
                    # no command: what the log's server_args shows set is what the command set
                    words = () if option.switch else tuple(str(values[option.dest]).split() if option.many else [text])
                    present[option.dest] = (option.flag, tuple(w.strip("'\"") for w in words))
        return cls(present, values, dict(environment))

    def value(self, option: Option) -> Any:
        if option.dest in self.present:
            flag, words = self.present[option.dest]
            return conditions.typed(option, flag, words)
        if option.dest in self.logged:
            return self.logged[option.dest]
        return option.default

    def values(self, facts: ArgFacts) -> dict[str, Any]:
        out = dict(self.logged)
        for dest in self.present:
            option = facts.by_dest(dest)
            if option is not None:
                out[dest] = self.value(option)
        return out


def _set_in_log(option: Option, value: Any) -> bool:
    """A logged value that a command must have set. The log shows resolved values, some filled in by SGLang
    itself, so only a switch turned on, or a value of an option without a default, is taken as the user's."""
    if value is UNKNOWN or value is None or value == option.default:
        return False
    if option.switch:
        return value is True and option.default is False
    return option.default is None or option.default is UNKNOWN


def logged_value(option: Option, text: str) -> Any:
    """A value as SGLang logs it (`None`, `True`, `'auto'`, `0.35`, `[1, 2]`) typed as the option's."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, RecursionError):
        value = text
    if isinstance(value, str) and option.type in ("int", "float"):
        return UNKNOWN
    return value
