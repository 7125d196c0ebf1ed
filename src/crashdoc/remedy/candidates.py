"""Every change crashdoc can justify for one failure, ranked by what the release's own facts say of it.

A launch failure names a flag (`--x requires --y`), a `ServerArgs` field (`tp_size must be divisible by ...`) or
only a value (`Unknown diffusion LLM algorithm: none`). From everything crashdoc knows, candidates are: the
curated (or derived) fix; the changes that make the guarding condition of the check false (add the required
flag, set the value the comparison asks for, remove the conflicting one: both directions, as the condition
decides); the flag whose value the message quotes (the culprit), put back to the release's default or set to
one of its choices; the values the message offers ("Registered: [...]", "must be one of", "please use --x");
fields mapped to options by the release's facts; options the message only describes in words; argparse's own
errors. Each candidate is then judged with the facts: a value outside the option's type or choices, a change
that changes nothing and one that leaves the failing condition true are dropped; one that makes it false, and
a flag put back to the release's default, rank higher. Pure: no I/O; `remedy.search` asks SGLang when it can.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crashdoc.events import FlagChange
from crashdoc.matching.protection import gives_up
from crashdoc.remedy import conditions
from crashdoc.remedy.argfacts import UNKNOWN, ArgFacts, Option
from crashdoc.remedy.failing import Current, Failure

MAX_CANDIDATES = 24
WEAKENS = 40  # the score a change loses when it turns TLS or a key off (`matching.protection`)
MAX_CHOICES = 3  # values tried from a long list of choices (the default and the message's first)
_FLAG = re.compile(r"(?<![\w-])--[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?![\w-])")
_WORD = re.compile(r"(?<![\w.-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w-])")
_QUOTED = re.compile(r"'([^'\n]{1,200})'|\"([^\"\n]{1,200})\"|`([^`\n]{1,200})`")
_TOKEN = re.compile(r"[^\s,;:()\[\]{}'\"`=]+")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_BRACKETS = re.compile(r"[\[({]([^\[\](){}\n]{1,600})[\])}]")
_AFTER_WORD = re.compile(
    r"(?:choose from|one of|must be|should be|expected|supported|available|valid|allowed|options(?: are)?|"
    r"choices(?: are)?|registered|supports?|use)[:\s]+(?P<items>['\"`]?[\w./:+-]+['\"`]?(?:\s*(?:,|\bor\b|/)\s*"
    r"['\"`]?[\w./:+-]+['\"`]?)+)",
    re.I,
)
_ITEM = re.compile(r"^[\w./:+-]+$")
# a value named after one vendor's hardware passes only on that hardware: the portable ones first
_PLATFORM = re.compile(r"ascend|npu|hpu|xpu|musa|aiter|amx|mlx|mps|rocm|hip|gaudi|intel|cambricon|mlu", re.I)
_USE = re.compile(
    r"(?:please |you can |instead |you may |or )?(?:use|try|set|pass|add|specify|enable|launch with|run with)\s+"
    r"(?P<flag>--[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)(?:[= ](?P<value>[\w./:+-]+))?",
    re.I,
)
_ARGPARSE = re.compile(r"argument (?P<flags>--[\w-]+(?:/-[\w-]+)*): (?P<what>.*)")
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (?P<args>.*)")
_AMBIGUOUS = re.compile(r"ambiguous option: (?P<flag>--[\w-]+)(?:=\S*)? could match (?P<matches>.*)")
_NOT_ALLOWED = re.compile(r"argument (?P<a>--[\w-]+).*?not allowed with argument (?P<b>--[\w-]+)")


@dataclass(frozen=True, slots=True)
class Candidate:
    changes: tuple[FlagChange, ...]
    why: str  # where the candidate comes from, in words
    score: float = 0.0  # higher first when SGLang cannot be asked
    resolves: bool | None = None  # the failing condition after the change: False->True... None: unknown

    def key(self) -> tuple[object, ...]:
        return tuple((c.action, c.flag, c.value, c.new_flag) for c in self.changes)


# --- reading the message ---------------------------------------------------------------------------------


def named_options(message: str, facts: ArgFacts) -> list[Option]:
    """The options a message names: `--flags` (any alias, or a prefix argparse accepts), `ServerArgs` fields."""
    found: list[Option] = []
    for m in _FLAG.finditer(message):
        option = facts.option(m.group(0))
        if option is not None:
            found.append(option)
    for m in _WORD.finditer(message):
        option = facts.by_dest(m.group(0))
        if option is not None:
            found.append(option)
    return list({o.dest: o for o in found}.values())


def quoted_values(message: str) -> set[str]:
    """Every value a message could be quoting: quoted text, and each bare token."""
    out = {next(g for g in m.groups() if g is not None) for m in _QUOTED.finditer(message)}
    out |= {t.rstrip(".") for t in _TOKEN.findall(message)}
    return {v for v in out if v}


def culprits(message: str, current: Current, facts: ArgFacts) -> list[Option]:
    """The options on the command whose value the message quotes (`Unknown parser '/tmp/x'`: the one set to
    /tmp/x; `Unknown algorithm name: {"A": 1}`). A short number is only taken when the message also names the
    option (`1` is everywhere)."""
    said = quoted_values(message)
    named = {o.dest for o in named_options(message, facts)}
    out = []
    for dest, (_, words) in current.present.items():
        if not words:
            continue
        text = " ".join(words)
        hits = [w for w in (text, *words) if w in said or _inside(w, message)]
        if not hits:
            continue
        if all(_NUMBER.fullmatch(h) and len(h) < 3 for h in hits) and dest not in named:
            continue
        option = facts.by_dest(dest)
        if option is not None:
            out.append(option)
    return out


def _inside(value: str, message: str) -> bool:
    """The value appears in the message as itself (not inside a longer word or number)."""
    if len(value) < 2 or (value.isalpha() and len(value) < 3):
        return False
    at = message.find(value)
    while at >= 0:
        before = message[at - 1] if at else " "
        after = message[at + len(value)] if at + len(value) < len(message) else " "
        if not (before.isalnum() or before in "_-.") and not (after.isalnum() or after in "_-"):
            return True
        at = message.find(value, at + 1)
    return False


_NAME_WORD = re.compile(r"[a-z0-9]+")
# words in flag names that say nothing about which feature a message is about
_GENERIC = frozenset(
    [
        "enable",
        "disable",
        "use",
        "size",
        "mode",
        "config",
        "path",
        "backend",
        "type",
        "num",
        "max",
        "min",
        "file",
        "dir",
        "name",
        "args",
        "arg",
        "only",
        "is",
        "set",
        "true",
        "false",
        "none",
        "auto",
        "default",
        "on",
        "off",
        "the",
        "for",
        "with",
    ]
)


def described(message: str, current: Current, facts: ArgFacts) -> list[tuple[Option, int]]:
    """Options on the command the message describes in words, not by name, with how many words tell: every word
    of the flag's name (`watermark config` for --watermark-config) or of its value (`TRTLLM MLA` for trtllm_mla,
    `NVFP4` for nvfp4), else one distinctive word of its name (`encoder disaggregation` for --encoder-only)."""
    said = set(_NAME_WORD.findall(message.lower()))
    out = []
    for dest, (flag, words) in current.present.items():
        name = [w for w in _NAME_WORD.findall(flag.lower()) if w not in ("enable", "disable", "use", "size")]
        value = [w for w in _NAME_WORD.findall(" ".join(words).lower()) if len(w) > 1 and not w.isdigit()]
        distinctive = [w for w in name if len(w) >= 4 and w not in _GENERIC]
        value_words = [w for w in value if w not in _GENERIC]
        if (len(name) >= 2 and set(name) <= said) or (
            value_words and set(value_words) <= said and (len(value_words) >= 2 or len(value_words[0]) >= 4)
        ):
            strength = 3
        elif distinctive and set(distinctive) & said:
            strength = 1
        else:
            continue
        option = facts.by_dest(dest)
        if option is not None:
            out.append((option, strength))
    return sorted(out, key=lambda pair: -pair[1])


def unreadable_json(failure_type: str, message: str, current: Current, facts: ArgFacts) -> list[Option]:
    """A JSON error that names no flag: the options on the command whose value should be JSON and is not."""
    if "json" not in failure_type.lower() and "json" not in message.lower():
        return []
    out = []
    for dest, (flag, words) in current.present.items():
        option = facts.by_dest(dest)
        if option is None or not words:
            continue
        if option.type in ("json", "json_list_type") or "json" in flag or dest.endswith(("_args", "_config")):
            try:
                json.loads(" ".join(words))
            except ValueError:
                out.append(option)
    return out


def chosen_for_it(message: str, current: Current, facts: ArgFacts, offered: Sequence[str]) -> list[Option]:
    """Options the command does not set whose value SGLang chose and the message quotes (`you explicitly specified
    'intel_amx'` for an attention backend picked on this host): one of the values the message offers is the way
    out. Only options whose choices hold both the quoted value and an offered one."""
    said = {next(g for g in m.groups() if g is not None) for m in _QUOTED.finditer(message)}
    out = []
    for option in facts.options:
        if option.dest in current.present or not isinstance(option.choices, tuple) or not option.choices:
            continue
        names = {str(x) for x in option.choices}
        if names & said and names & set(offered):
            out.append(option)
    return out[:MAX_CHOICES]


def offered_values(message: str) -> list[str]:
    """Values the message offers: `Registered: ['a', 'b']`, `only ['x', 'y'] are supported`, `must be one of a, b
    or c`, argparse's `choose from 'x', 'y'`. A list needs two items or more (one word in brackets is not one)."""
    out: list[str] = []
    lists = [m.group(1) for m in _BRACKETS.finditer(message)] + [
        m.group("items") for m in _AFTER_WORD.finditer(message)
    ]
    for text in lists:
        items = [i.strip().strip("'\"`").strip() for i in re.split(r",|\s+or\s+|/(?=\s)|\s+and\s+", text)]
        items = [i for i in items if i and _ITEM.match(i) and i.lower() not in ("or", "and", "etc")]
        if len(items) >= 2:
            out.extend(items)
    return list(dict.fromkeys(out))


# --- changes -----------------------------------------------------------------------------------------------


def change_to(option: Option, value: Any, current: Current) -> FlagChange | None:
    """The flag change that gives `option` this value; None when no command line can say it."""
    present = option.dest in current.present
    flag = current.present[option.dest][0] if present else option.flag
    if option.switch:
        if option.action == "boolean-optional":
            if value is None or value is UNKNOWN:
                return FlagChange("remove", flag) if present else None
            positive = next(f for f in option.flags if not f.startswith("--no-"))
            negative = next((f for f in option.flags if f.startswith("--no-")), None)
            if value:
                return FlagChange("replace", flag, None, positive) if present else FlagChange("add", positive)
            if negative is None:
                return None
            return FlagChange("replace", flag, None, negative) if present else FlagChange("add", negative)
        on = option.action != "store_false"
        if bool(value) == on:
            return None if present else FlagChange("add", option.flag)
        return FlagChange("remove", flag) if present else None
    if value is None or (value == option.default and option.default is not UNKNOWN):
        return FlagChange("remove", flag) if present else None
    if value is UNKNOWN:
        return None
    text = " ".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)
    if isinstance(value, bool):
        return None
    return FlagChange("set", flag, text)


def apply_values(changes: Sequence[FlagChange], values: Mapping[str, Any], facts: ArgFacts) -> dict[str, Any] | None:
    """The command's values after the changes (None when a change names no option of the release)."""
    out = dict(values)
    for change in changes:
        if change.flag.startswith("SGLANG_") or re.fullmatch(r"[A-Z_][A-Z0-9_]*", change.flag):
            continue
        target = change.new_flag if change.action == "replace" and change.new_flag else change.flag
        option = facts.option(target)
        old = facts.option(change.flag)
        if option is None or old is None:
            return None
        if change.action == "remove":
            out.pop(option.dest, None)
            out[option.dest] = option.default
            continue
        if change.action == "replace" and old.dest != option.dest:
            out[old.dest] = old.default
        words = (
            tuple(change.value.split())
            if change.value is not None and option.many
            else ((change.value,) if change.value is not None else ())
        )
        out[option.dest] = conditions.typed(option, target, words)
    return out


def acceptable(changes: Sequence[FlagChange], facts: ArgFacts) -> bool:
    """Every flag exists in the release and every value is one its argparse takes (as far as the facts say)."""
    for change in changes:
        if re.fullmatch(r"[A-Z_][A-Z0-9_]*", change.flag):
            continue
        target = change.new_flag if change.action == "replace" and change.new_flag else change.flag
        option = facts.option(target)
        if option is None or (change.action != "remove" and facts.option(change.flag) is None):
            return False
        if change.placeholder:
            return False
        if change.action in ("set", "replace") and change.value is not None and option.accepts(change.value) is False:
            return False
        if change.action in ("set",) and change.value is None and not option.switch:
            return False
        if option.required and change.action == "remove":
            return False
    return True


# --- the candidates ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Collector:
    facts: ArgFacts
    current: Current
    failure: Failure
    values: dict[str, Any]
    found: dict[tuple[object, ...], Candidate] = field(default_factory=dict)
    failing: bool | None = None  # the condition evaluates as failing on the command as it is (None: not asked)

    def add(self, changes: Sequence[FlagChange | None], why: str, score: float) -> None:
        real = tuple(c for c in changes if c is not None)
        if not real or len(real) != len(changes):
            return
        if not acceptable(real, self.facts) or not self._changes_something(real):
            return
        after = apply_values(real, self.values, self.facts)
        if after is None:
            return
        resolves: bool | None = None
        if self._condition_holds() and self._touches_condition(real):
            verdict = conditions.evaluate(self.failure.condition, after, self.facts)
            if verdict is not UNKNOWN:
                resolves = verdict == (self.failure.kind == "assert")
                if not resolves:
                    return  # the failing condition stays true: this change cannot pass that check
        final = score + (12 if resolves else 0) - 8 * (len(real) - 1) + sum(map(self._direction, real))
        final -= WEAKENS * sum(1 for c in real if gives_up(c) is not None)  # any other way out first
        candidate = Candidate(real, why, final, resolves)
        key = candidate.key()
        known = self.found.get(key)
        if known is None or known.score < final:
            self.found[key] = candidate

    def _condition_holds(self) -> bool:
        """The derived condition, on the failing command's own values, says the check fails: then its verdict on
        a change can be trusted (else crashdoc's reading of it misses what SGLang resolves before checking)."""
        if not self.failure.condition:
            return False
        if self.failing is None:
            verdict = conditions.evaluate(self.failure.condition, self.values, self.facts)
            self.failing = verdict is not UNKNOWN and verdict == (self.failure.kind != "assert")
        return self.failing

    def _touches_condition(self, changes: Sequence[FlagChange]) -> bool:
        """A change of an option the condition reads (the condition is the innermost `if`: for any other
        change it says nothing, an outer guard may be what the change turns off)."""
        read = set(conditions.referenced(self.failure.condition, self.facts))
        for change in changes:
            for flag in (change.flag, change.new_flag):
                option = self.facts.option(flag) if flag else None
                if option is not None and option.dest in read:
                    return True
        return False

    def _changes_something(self, changes: Sequence[FlagChange]) -> bool:
        """Every change alters the command: removing an absent flag, adding a present switch or setting the
        value it already has is no change (and its check would fail the same way)."""
        for change in changes:
            if re.fullmatch(r"[A-Z_][A-Z0-9_]*", change.flag):
                continue  # a variable may be set where the command does not show it (the unit's Environment=)
            option = self.facts.option(change.flag)
            if option is None:
                return False
            here = self.current.present.get(option.dest)
            if change.action == "remove" and (here is None or here[0] not in {change.flag, *option.flags}):
                return False
            if change.action == "add" and here is not None and here[0] == change.flag:
                return False
            if change.action == "set" and here is not None and " ".join(here[1]) == (change.value or ""):
                return False
        return True

    def _direction(self, change: FlagChange) -> int:
        """Back to the release's default is the safer way (defaults pass its own checks); a flag the command
        does not have yet brings checks of its own."""
        if change.action == "remove":
            return 6
        option = self.facts.option(change.flag)
        return -4 if option is not None and option.dest not in self.current.present else 0


def candidates(failure: Failure, current: Current, facts: ArgFacts) -> list[Candidate]:
    """The ranked candidates for one failure (best first, at most MAX_CANDIDATES)."""
    values = current.values(facts)
    c = _Collector(facts, current, failure, values)
    message = failure.message
    if failure.curated:
        if failure.reviewed:
            c.add(list(failure.curated), "the reviewed signature's fix", 70)
        else:
            c.add(list(failure.curated), "the fix derived from SGLang's source", 40)
    offered = offered_values(message)
    _from_argparse(c, message, offered)
    _from_condition(c)
    suspects = culprits(message, current, facts)
    named = named_options(message, facts)
    for option in suspects:
        _vary(c, option, offered, f"the message quotes `{current.present[option.dest][0]}`'s value", 52)
    for option in chosen_for_it(message, current, facts, offered):
        _vary(c, option, offered, f"the message quotes the value SGLang chose for `{option.flag}`", 46)
    present = [o for o in named if o.dest in current.present]
    for i, option in enumerate(present):  # the first flag a message names is what it is about
        _vary(c, option, offered, f"the message names `{option.flag}`", 48 - 4 * min(i, 3))
    for option in named:
        if option.dest not in current.present:
            _supply(c, option, offered, f"the message asks for `{option.flag}`")
    for option in unreadable_json(failure.exception_type, message, current, facts):
        _vary(c, option, offered, f"`{option.flag}`'s value is not JSON", 50)
    if not suspects and not present:
        for option, strength in described(message, current, facts):
            _vary(c, option, offered, f"the message describes `{option.flag}`", 32 + 3 * strength)
    _from_hints(c, message)
    ranked = sorted(c.found.values(), key=lambda k: (-k.score, len(k.changes), k.key().__repr__()))
    return ranked[:MAX_CANDIDATES]


def _vary(c: _Collector, option: Option, offered: Sequence[str], why: str, score: float) -> None:
    """An option on the command: back to the release's default, or another value it takes."""
    if not option.required and option.default is not UNKNOWN:
        default = option.default_text()
        c.add(
            [change_to(option, option.default, c.current)],
            f"{why}: back to the release's default" + (f" ({default})" if default else ""),
            score + 5,
        )
    choices = option.choices if isinstance(option.choices, tuple) else ()
    current = c.current.value(option)
    pool = [v for v in offered if option.accepts(v) is not False]
    pool += [str(x) for x in choices if x is not None]
    for value in list(dict.fromkeys(pool))[: MAX_CHOICES + len(offered)]:
        typed = conditions.typed(option, option.flag, (value,))
        if typed == current or typed is UNKNOWN:
            continue
        source = "a value the message offers" if value in offered else "one of the release's choices"
        penalty = (0 if value in offered else 4) + (3 if _PLATFORM.search(value) else 0)
        c.add([change_to(option, typed, c.current)], f"{why}: {source}", score - penalty)


def _supply(c: _Collector, option: Option, offered: Sequence[str], why: str) -> None:
    """An option the message asks for that the command lacks: add the switch, or a value the message offers."""
    if option.switch:
        c.add([change_to(option, option.action != "store_false", c.current)], why, 36)
        return
    pool = [v for v in offered if option.accepts(v) is True]
    if isinstance(option.choices, tuple):
        pool += [str(x) for x in option.choices[:MAX_CHOICES] if x is not None]
    for value in list(dict.fromkeys(pool))[:MAX_CHOICES]:
        c.add([change_to(option, conditions.typed(option, option.flag, (value,)), c.current)], why, 30)


def _from_hints(c: _Collector, message: str) -> None:
    """`please use --x`, `Try --y 4`, `set --z=auto`: what the message itself proposes."""
    for m in _USE.finditer(message):
        option = c.facts.option(m.group("flag"))
        if option is None:
            continue
        value = m.group("value")
        if option.switch:
            c.add(
                [change_to(option, option.action != "store_false", c.current)],
                f"the message proposes `{m.group(0)}`",
                48,
            )
        elif value and option.accepts(value) is not False:
            typed = conditions.typed(option, option.flag, (value,))
            c.add([change_to(option, typed, c.current)], f"the message proposes `{option.flag} {value}`", 50)


def _from_argparse(c: _Collector, message: str, offered: Sequence[str]) -> None:
    """argparse's own errors: an unknown, ambiguous or refused argument, or one whose value it cannot take."""
    m = _UNRECOGNIZED.search(message)
    if m:
        words = m.group("args").split()
        changes = []
        for word in words:
            if word.startswith("--"):
                name = word.split("=", 1)[0]
                changes.append(FlagChange("remove", name))
        if changes:
            c.add(changes, "argparse does not know it", 60)
        return
    m = _AMBIGUOUS.search(message)
    if m:
        flag = m.group("flag")
        for match in re.findall(r"--[\w-]+", m.group("matches"))[:MAX_CHOICES]:
            words = next((w for d, (f, w) in c.current.present.items() if f == flag), ())
            change = FlagChange("replace", flag, " ".join(words) or None, match)
            c.add([change], f"argparse cannot tell which option `{flag}` means", 55)
        return
    m = _NOT_ALLOWED.search(message)
    if m:
        for flag in (m.group("a"), m.group("b")):
            c.add([FlagChange("remove", flag)], "argparse does not take them together", 55)
        return
    m = _ARGPARSE.search(message)
    if m:  # `argument --x: invalid choice: ...`, `... invalid loads value`, `expected one argument`
        option = c.facts.option(m.group("flags").split("/", 1)[0])
        if option is not None and option.dest in c.current.present:
            _vary(c, option, offered, f"argparse refuses `{option.flag}`'s value", 60)


def _from_condition(c: _Collector) -> None:
    """The changes that make the guarding condition false (a raise) or true (an assert): each option it reads,
    set to its default, to one of its choices, to the numbers the check compares with; both directions."""
    failure = c.failure
    if not failure.condition:
        return
    dests = conditions.referenced(failure.condition, c.facts)
    tree = conditions.parse(failure.condition)
    constants = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)] if tree is not None else []
    for dest in dests:
        option = c.facts.by_dest(dest)
        if option is None or option.required:
            continue
        for value in _domain(option, c, constants):
            change = change_to(option, value, c.current)
            shown = "its default" if value == option.default else repr(value)
            c.add([change], f"SGLang checks `{_short(failure.condition)}`: `{option.flag}` -> {shown}", 45)


def _domain(option: Option, c: _Collector, constants: Sequence[Any]) -> list[Any]:
    """The values worth trying for an option in a condition: default, choices, the check's own constants, and
    small numbers around the current value."""
    current = c.current.value(option)
    out: list[Any] = [option.default] if option.default is not UNKNOWN else []
    if option.switch:
        out += [True, False]
    if isinstance(option.choices, tuple):
        out += list(option.choices[:MAX_CHOICES])
    if option.type in ("int", "float", "human_readable_int"):
        cast = int if option.type != "float" else float
        nums = [x for x in constants if isinstance(x, int | float) and not isinstance(x, bool)]
        nums += [0, 1, 2, -1]
        if isinstance(current, int | float) and not isinstance(current, bool):
            nums += [current + 1, current - 1, current * 2, current // 2 if cast is int else current / 2]
        for number in nums:
            try:
                out.append(cast(number))
            except (TypeError, ValueError, OverflowError):
                continue
    elif option.type == "str" and not option.switch:
        out += [x for x in constants if isinstance(x, str)][:6]
    seen: list[Any] = []
    for value in out:
        if value not in seen and value != current:
            seen.append(value)
    return seen


def _short(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
