"""Candidate signatures: an RE2 pattern, an example message and traceback, and a reviewable YAML entry."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import re2
import yaml

from crashdoc.authoring.mine.base import ENV, FLAG, MAX_ID, SCHEMA_FLAG, TODO, TRACEBACK_DIR
from crashdoc.authoring.mine.source import Statement
from crashdoc.authoring.mine.templates import Hole, Part, Template
from crashdoc.diagnosis.category import guess_category
from crashdoc.events import ExceptionInfo, Frame
from crashdoc.matching.programs import re2_options
from crashdoc.text import clean

# --- patterns and examples -----------------------------------------------------------------

_RE2_SPECIAL = set("\\.^$|?*+()[]{}")
_NUMBER_WORDS: tuple[tuple[frozenset[str], int | float], ...] = (
    (frozenset({"port"}), 30000),
    (frozenset({"tp", "tensor"}), 4),
    (frozenset({"dp", "pp", "cp", "dcp"}), 2),
    (frozenset({"ep", "experts", "expert"}), 8),
    (frozenset({"rank", "idx", "index", "id", "node", "gpu", "device"}), 1),
    (frozenset({"fraction", "frac", "static", "util", "utilization", "threshold"}), 0.8),
    (frozenset({"ratio", "factor", "scale", "multiplier"}), 2.0),
    (frozenset({"timeout", "seconds", "secs", "interval", "sec"}), 30),
    (frozenset({"page", "block", "chunk", "bs", "batch"}), 64),
    (
        frozenset(
            {
                "size",
                "num",
                "count",
                "len",
                "length",
                "tokens",
                "layers",
                "heads",
                "dim",
                "world",
                "max",
                "min",
                "total",
                "capacity",
                "limit",
                "step",
                "steps",
                "n",
                "width",
                "depth",
                "bits",
                "gb",
                "mb",
            }
        ),
        8,
    ),
)
_STRING_WORDS: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"dtype"}), "bfloat16"),
    (frozenset({"quantization", "quant"}), "fp8"),
    (frozenset({"path", "dir", "file", "filename"}), "/models/x"),
    (frozenset({"model", "arch", "architecture", "architectures"}), "x"),
    (frozenset({"host", "addr", "address", "ip"}), "127.0.0.1"),
)
_BOOL_WORDS = frozenset({"enable", "disable", "is", "use", "has", "should", "allow", "skip", "enabled", "disabled"})


def _escape(text: str) -> str:
    out = []
    for ch in text:
        if ch in _RE2_SPECIAL:
            out.append("\\" + ch)
        elif ch == "\n":
            out.append(r"\n")
        elif ch == "\t":
            out.append(r"\t")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{{{ord(ch):x}}}")
        else:
            out.append(ch)
    return "".join(out)


def _value(hole: Hole) -> object:
    """A plausible run-time value for a hole, from its name and its format."""
    words = set(re.split(r"[^a-z0-9]+", (hole.name or hole.expr).lower())) - {""}
    kind = hole.spec[-1:] if hole.spec[-1:].isalpha() or hole.spec.endswith("%") else ""
    floating = kind in ("e", "E", "f", "F", "g", "G", "%")
    numeric = floating or kind in ("d", "i", "o", "u", "x", "X", "b", "c", "n")
    tokens = re.split(r"[^a-z0-9]+", (hole.name or hole.expr).lower())
    last = {tokens[-1]} if tokens else set()
    for look in (last, words):  # the last word says most: `hicache_host_memory_mode` is a mode
        if look & _BOOL_WORDS and not numeric:
            return True
        for keys, number in _NUMBER_WORDS:
            if look & keys:
                return float(number) if floating else int(number) if numeric else number
        if numeric:
            return 1.0 if floating else 1
        for keys, text in _STRING_WORDS:
            if look & keys:
                return text
        if look is last and tokens[-1] in ("mode", "backend", "type", "name", "method", "algorithm", "kind"):
            return "x"
    return "x"


def _render(hole: Hole) -> str:
    if hole.gap:
        return f"<{hole.expr}>"  # text we could not read: say so rather than invent it
    value = _value(hole)
    try:
        if hole.spec.startswith("%"):
            return hole.spec % (value,)
        if hole.conversion == "r":
            value = repr(value)
        elif hole.conversion == "a":
            value = ascii(value)
        elif hole.conversion == "s":
            value = str(value)
        return format(value, hole.spec)
    except (TypeError, ValueError):
        return str(value)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A statement turned into a signature candidate."""

    id: str
    statement: Statement
    category: str
    flags: tuple[str, ...]  # --flags then SGLANG_ variables, as the message names them
    odd_flags: tuple[str, ...]  # `--Foo`, `--foo_bar`: named, but not in argparse's spelling
    pattern: str
    message: str  # the example message: the template with plausible values
    captures: dict[str, str]
    traceback: str
    problem: str = ""  # the example does not match the pattern (should never happen)

    @property
    def kind(self) -> str:
        has_flag = any(f.startswith("--") for f in self.flags) or bool(self.odd_flags)
        has_env = any(not f.startswith("--") for f in self.flags)
        return "flag+env" if has_flag and has_env else "flag" if has_flag else "env"


def pattern_and_example(template: Template) -> tuple[str, str, dict[str, str]]:
    """(RE2 pattern, example message, capture -> value) for one template.

    Holes are non-greedy captures named after the expression, except the last one, which is
    greedy: a lazy hole at the end would capture a single character, and one before a final
    "." would stop inside "0.8". Text that the
    log pipeline cleans (ANSI escapes, tabs) is cleaned first, so the pattern matches the journal.
    Branches become alternatives and appended text an optional group; the example takes the
    first branch and every appended piece.
    """
    expected: dict[str, str] = {}
    pattern, example = _emit(template.parts, True, expected, set())
    return pattern, example, expected


def _emit(parts: Sequence[Part], at_end: bool, expected: dict[str, str], taken: set[str]) -> tuple[str, str]:
    pattern: list[str] = []
    example: list[str] = []
    for index, part in enumerate(parts):
        # the last hole is greedy: lazy, it would stop at the first "." of "0.8." or capture one character
        last = at_end and all(isinstance(p, str) or p.optional for p in parts[index + 1 :])
        if isinstance(part, str):
            text = clean(part)
            pattern.append(_escape(text))
            example.append(text)
            continue
        if part.choices:
            bodies = []
            for i, choice in enumerate(part.choices):
                scratch: dict[str, str] = {}
                body, text = _emit(choice, last, scratch, taken)
                bodies.append(body)
                if i == 0:
                    example.append(text)
                    expected.update(scratch)
            group = "(?:" + "|".join(bodies) + ")"
            pattern.append(group + "?" if part.optional else group)
            continue
        value = clean(_render(part)).replace("\n", " ") or "x"
        body = ".+" if last else ".+?"
        if part.name and not part.gap and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part.name):
            name, n = part.name, 2
            while name in taken:
                name, n = f"{part.name}_{n}", n + 1
            taken.add(name)
            pattern.append(f"(?P<{name}>{body})")
            expected[name] = value
        else:
            pattern.append(body)
        example.append(value)
    return "".join(pattern), "".join(example)


def candidate_id(path: str, line: int) -> str:
    """Stable and readable: the module path and the line, shortened with a hash when too long."""
    slug = re.sub(r"[^a-z0-9]+", "-", path.removesuffix(".py").lower()).strip("-")
    full = f"{slug}-{line}"
    if len(full) <= MAX_ID:
        return full
    digest = hashlib.sha1(path.encode()).hexdigest()[:6]
    keep = MAX_ID - len(f"-{digest}-{line}")
    tail = slug[-keep:].lstrip("-")
    return f"{tail}-{digest}-{line}"


def traceback_text(statement: Statement, message: str) -> str:
    """The traceback SGLang's launcher would print for this statement with this message."""
    return (
        "Traceback (most recent call last):\n"
        f'  File "{TRACEBACK_DIR}/{statement.path}", line {statement.line}, in {statement.function}\n'
        f"    {statement.code}\n"
        f"{statement.printed_type}: {message}\n"
    )


def guess_statement_category(statement: Statement, message: str) -> str:
    """Where it is raised says most (srt/disaggregation -> disaggregation); the message says the rest.

    The daemon's own guess for an unknown crash (`guess_category`) is reused, fed first the
    frame alone and then the message, so a reviewed signature lands where the daemon would
    have filed the crash.
    """
    frame = Frame(f"{TRACEBACK_DIR}/{statement.path}", statement.line, statement.function)
    by_path = guess_category(ExceptionInfo(type="", message="", frames=(frame,)))
    if by_path != "other":
        return by_path
    return guess_category(ExceptionInfo(type=statement.printed_type, message=message))


def make_candidate(statement: Statement, taken: set[str] | None = None) -> Candidate:
    pattern, message, expected = pattern_and_example(statement.template)
    problem = ""
    try:
        compiled = re2.compile(pattern, re2_options())
    except re2.error as exc:
        compiled = None
        problem = f"pattern does not compile: {exc}"
    captures: dict[str, str] = {}
    if compiled is not None:
        m = compiled.search(message)
        if m is None:
            problem = "the example does not match the pattern"
        else:
            got = m.groupdict()
            captures = {k: v for k, v in expected.items() if got.get(k) == v}
    literal = statement.template.literal
    flags: list[str] = []
    odd: list[str] = []
    for m in FLAG.finditer(literal):
        flag = "--" + m.group(1)
        target = flags if SCHEMA_FLAG.match(flag) else odd
        if flag not in target:
            target.append(flag)
    for m in ENV.finditer(literal):
        if m.group(0) not in flags:
            flags.append(m.group(0))
    ident = candidate_id(statement.path, statement.line)
    if taken is not None:
        base, n = ident, 2
        while ident in taken:
            ident = f"{base}-{n}"
            n += 1
        taken.add(ident)
    return Candidate(
        id=ident,
        statement=statement,
        category=guess_statement_category(statement, message),
        flags=tuple(flags),
        odd_flags=tuple(odd),
        pattern=pattern,
        message=message,
        captures=captures,
        traceback=traceback_text(statement, message),
        problem=problem,
    )


# --- candidate files -----------------------------------------------------------------------


class CandidateDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Block style for multi-line text, so a reviewer reads the traceback as it is printed."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if (
        "\n" in value
        and not any(ch in value for ch in "\r\x85\u2028\u2029")
        and value == value.rstrip(" ")
        and (not any(line != line.rstrip() for line in value.split("\n")))
    ):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


CandidateDumper.add_representer(str, _str_representer)


def candidate_entry(candidate: Candidate, version: str, same: Sequence[Candidate] = ()) -> dict[str, Any]:
    """One signature, valid for the schema, with everything a reviewer must decide marked TODO(review).

    `same` are the other statements that raise the same message: the frame where it is raised
    then tells them apart (when the file or function differs), and the runbook lists them.
    """
    st = candidate.statement
    preview = re.sub(r"\s+", " ", candidate.message).strip()
    title = f"{st.exception.rsplit('.', 1)[-1]}: {preview}"
    if len(title) > 140:
        title = title[:137] + "..."
    flags = list(candidate.flags)
    flag_text = ", ".join(f"`{f}`" for f in flags) or "no flag in argparse's spelling"
    grep = _grep_fragment(st.template)
    runbook = (
        "## Why it happens\n"
        f"{TODO}: SGLang raises this {st.printed_type} at `{st.source}` (in `{st.function}`); "
        f"the message names {flag_text}.\n"
        f"Template: `{st.template.display.strip()[:400]}`\n"
        + (f"The same message is raised at {', '.join(f'`{o.statement.source}`' for o in same)}.\n" if same else "")
        + "\n## How to confirm\n"
        f"`journalctl -u UNIT -g '{grep}'`\n\n"
        "## Safe fix\n"
        f"{TODO}: which flag to change, and to what.\n\n"
        "## Roll back\n"
        f"{TODO}: restore the previous launch script (or remove the drop-in) and restart the unit.\n"
    )
    entry: dict[str, Any] = {
        "id": candidate.id,
        "title": title,
        "category": candidate.category,
        "severity": "critical",
        "roles": ["any"],
    }
    if version:
        entry["sglang"] = version
    entry["source"] = st.source
    entry["match"] = {"exception": [st.exception.rsplit(".", 1)[-1]], "message": candidate.pattern}
    if same and all((o.statement.path, o.statement.function) != (st.path, st.function) for o in same):
        entry["match"]["frame"] = _escape(f"{st.path}:{st.function}") + "$"
    if flags:
        entry["flags"] = flags
    entry["fix"] = {"summary": f"{TODO}: " + (f"change {', '.join(flags)}" if flags else "say what to change")}
    entry["runbook"] = runbook
    example: dict[str, Any] = {"text": candidate.traceback}
    if candidate.captures:
        example["captures"] = dict(candidate.captures)
    entry["examples"] = {"match": [example], "no_match": []}
    return entry


def _grep_fragment(template: Template) -> str:
    """The longest single-line literal piece of the message: what to grep the journal for."""
    pieces = [seg.strip() for p in template.parts if isinstance(p, str) for seg in p.split("\n")]
    best = max(pieces, key=len, default="")[:80]
    return _escape(best).replace("'", ".")
