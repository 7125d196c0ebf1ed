"""`crashdoc signatures derive`: a signature for every flag-naming check of an SGLang release.

Each raise or assert the miner reads (message rebuilt as a template, condition as written)
becomes a `DerivedSignature`: a pattern from the template, the flags and SGLANG_ variables it
names, and a generic fix read from what the message asks for and what the condition tests:

- the message proposes a setting (`use --attention-backend triton`, `set SGLANG_X=1`): set it;
- it renames a flag (`--x is deprecated, use --y`): replace it;
- it says one flag requires another (`--x requires --enable-y`): add the switch, or drop `--x`;
- it names two flags that cannot go together: drop the first one named;
- it asks to disable or stop passing a flag: remove it;
- the condition compares a named flag with a constant (`if cfg.page_size < 1: raise`): set a
  value the check accepts; it tests a named switch (`if cfg.enable_x and ...: raise`): remove it;
  it tests an SGLANG_ variable: unset or set it.

When the check wants a value only the operator knows (`please provide --dist-init-addr as host:port
of head node`, `requires --spatial-upsampler-path`, `check the --ssl-keyfile path`), the fix sets
that flag to a placeholder (`<head-node-host>:<port>`, marked `FlagChange.placeholder`: shown in the
corrected command, never applied). When none of these can be read, the fix is empty and the
summary names the flags to look at.
Derived signatures are never reviewed: the daemon uses them only when no curated one matches.
"""

from __future__ import annotations

import ast
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

from crashdoc.authoring.mine import MineError, Statement, locate, mine_tree
from crashdoc.authoring.mine.base import ENV, FLAG, SCHEMA_FLAG
from crashdoc.authoring.mine.candidates import pattern_and_example
from crashdoc.authoring.mine.templates import Part, display
from crashdoc.events import FlagChange
from crashdoc.matching.derived import DerivedLibrary, DerivedSignature, library_of, signature_id
from crashdoc.matching.flagnames import canonical

_DIST_INFO_VERSION = re.compile(r"^Version:\s*(\S+)", re.M)
_HOLE_BODY = re.compile(r"\\.|\.\+\??")  # an escape pair, or a hole's `.+` / `.+?`
_SWITCH_PREFIXES = ("--enable-", "--disable-", "--use-", "--no-", "--skip-", "--allow-", "--force-", "--trust-")
_VALUE = r"[=\s]+['\"`]?(?P<value>[A-Za-z0-9_][A-Za-z0-9_.:/+-]*)"
_SUGGEST = re.compile(
    r"(?:\buse|\bset|\bsetting|\btry|\bpass|\bspecify|\bswitch to|\bchoose|\bselect|\bconfigure|\brun with|"
    r"\brequires?|\bneeds?|\bexpects?|\bonly supports?|\blaunch with|\bstart (?:the server )?with)"
    r"\W{0,3}(?P<flag>--[a-z0-9][a-z0-9-]*|SGLANG_[A-Z0-9_]+)" + _VALUE,
    re.I,
)
_RANGE = re.compile(
    r"(?P<flag>--[a-z0-9][a-z0-9-]*|SGLANG_[A-Z0-9_]+)[^.;]{0,40}?(?:(?:must|should) be|to(?: be)?) (?:an? )?"
    r"(?:(?:in|within|between) )?"
    r"(?:(?P<open>[\[(])\s*(?P<low>-?\d+(?:\.\d+)?)\s*,\s*(?P<high>-?\d+(?:\.\d+)?)\s*(?P<close>[\])])|"
    r"(?P<word>positive|non-negative|nonnegative|greater than(?: or equal to)?|at least|>=|>)"
    r"\s*(?P<bound>-?\d+(?:\.\d+)?)?)",
    re.I,
)
_RENAMED = re.compile(
    r"(?P<old>--[a-z0-9][a-z0-9-]*)[^.;]{0,60}?(?:deprecated|renamed|removed|replaced|no longer)[^.;]{0,80}?"
    r"(?:use|to|by|with|in favor of|instead)\W{0,3}(?P<new>--[a-z0-9][a-z0-9-]*)",
    re.I,
)
_INSTEAD = re.compile(
    r"(?:use|pass|specify)\W{0,3}(?P<new>--[a-z0-9][a-z0-9-]*)\W{0,3}instead of\W{0,3}(?P<old>--[a-z0-9][a-z0-9-]*)",
    re.I,
)
_DROP = re.compile(
    r"(?:disable|remove|drop|unset|without|turn off|do not (?:use|set|pass|enable|specify)|don't (?:use|set|pass)|"
    r"omit|stop (?:using|passing))\W{0,3}(?P<flag>--[a-z0-9][a-z0-9-]*|SGLANG_[A-Z0-9_]+)",
    re.I,
)
_ADD = re.compile(
    r"(?P<verb>enable|add|turn on|set|pass|specify|provide|launch with|start (?:the server )?with|requires?|needs?|"
    r"must (?:also )?(?:be )?(?:used |enabled )?(?:with|together with)|only (?:works|supported|valid|meaningful|"
    r"available|allowed) (?:with|when)|depends on)\W{0,3}(?:the\s)?(?P<flag>--[a-z0-9][a-z0-9-]*|SGLANG_[A-Z0-9_]+)",
    re.I,
)
_CONFLICT = re.compile(
    r"not (?:yet )?(?:supported|compatible|allowed|available)|incompatible|cannot|can't|can not|conflict|"
    r"mutually exclusive|unsupported|not work|does not support|doesn't support|don't support|only support|"
    r"is only|are only|not implemented|not valid|invalid|must not|should not",
    re.I,
)


class DeriveError(Exception):
    """The source to derive from cannot be read or says no release; printed as is."""


def release_of(path: Path, tree_version: str) -> str:
    """The release: the tree's `_version.py`, else the `sglang-*.dist-info/METADATA` beside it."""
    if tree_version:
        return tree_version
    folder = path if path.is_dir() else path.parent
    for base in (folder, folder.parent):
        for meta in sorted(base.glob("sglang-*.dist-info/METADATA")):
            m = _DIST_INFO_VERSION.search(meta.read_text("utf-8", "replace"))
            if m:
                return m.group(1)
    m = re.search(r"sglang-(\d[\w.]*?)(?:-py3|-cp3|\.tar|\.zip|$)", path.name)
    return m.group(1) if m else ""


def derive_source(path: Path, workers: int | None = None, release: str | None = None) -> DerivedLibrary:
    """Derived signatures of one SGLang tree, wheel or site-packages dir (read as files, never imported)."""
    try:
        tree = locate(str(path))
        version = release or release_of(Path(path), tree.version())
        if not version:
            raise DeriveError(f"{path}: no _version.py or sglang dist-info says which SGLang release this is")
        results = mine_tree(tree, workers)
    except MineError as exc:
        raise DeriveError(str(exc)) from exc
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DeriveError(f"{path}: cannot read: {exc}") from exc
    statements = [s for r in results for s in r.statements]
    return library_of(derive_statements(statements, version))


def derive_statements(statements: Sequence[Statement], release: str) -> list[DerivedSignature]:
    """One signature per (exception type, template); the first place it is raised gives its site."""
    seen: dict[str, DerivedSignature] = {}
    for statement in statements:
        sig = derive_one(statement, release)
        if sig is not None and sig.id not in seen:
            seen[sig.id] = sig
    return list(seen.values())


def derive_one(statement: Statement, release: str) -> DerivedSignature | None:
    template = statement.template
    literal = template.literal
    flags = list(dict.fromkeys(canonical("--" + m.group(1)) for m in FLAG.finditer(literal)))
    flags = [f for f in flags if SCHEMA_FLAG.match(f)]
    env = list(dict.fromkeys(m.group(0) for m in ENV.finditer(literal)))
    if not flags and not env:
        return None
    exc_type = statement.exception.rsplit(".", 1)[-1]
    shown = braces(template.parts).strip()
    pattern, _, _ = pattern_and_example(template)
    pattern = "^" + bounded(pattern)
    changes, summary = derive_fix(shown, statement.condition, statement.kind, flags, env)
    return DerivedSignature(
        id=signature_id(exc_type, shown),
        exception_type=exc_type,
        template=shown,
        pattern=pattern,
        flags=tuple(flags),
        env=tuple(env),
        condition=statement.condition,
        fix=tuple(changes),
        summary=summary,
        sites=((release, f"sglang/{statement.path}", statement.line, statement.function),),
        releases=(release,),
        kind=statement.kind,
    )


def braces(parts: Sequence[Part]) -> str:
    """The template as text with `{}` for each hole; branches as `(a|b)`, appended text as `[a]`."""
    return display(parts, lambda part: "{}")


def bounded(pattern: str) -> str:
    """Holes that stay within one line of the message (`[^\\n]+?`): a capture cannot run away."""

    def swap(m: re.Match[str]) -> str:
        text = m.group(0)
        if text.startswith("\\"):
            return text
        return r"[^\n]+?" if text.endswith("?") else r"[^\n]+"

    return _HOLE_BODY.sub(swap, pattern)


# --- the generic fix ---------------------------------------------------------------------


_SWITCH_WORDS = frozenset({"enable", "disable", "use", "no", "skip", "allow", "force", "trust", "keep", "load", "is"})


def _is_switch(flag: str) -> bool:
    """A flag that takes no value, as far as its name tells: `--enable-x`, `--lora-use-virtual-experts`."""
    return flag.startswith(_SWITCH_PREFIXES) or bool(_SWITCH_WORDS & set(flag[2:].split("-")))


def derive_fix(
    message: str, condition: str, kind: str, flags: Sequence[str], env: Sequence[str]
) -> tuple[list[FlagChange], str]:
    """(changes, summary) from what the message asks for, then from what the condition tests."""
    named = [*flags, *env]
    text = message.replace("{}", "\0")
    for reader in (_from_rename, _from_suggestion, _from_range, _from_drop, _from_requirement):
        found = reader(text, named)
        if found is not None:
            return found
    tested = _from_condition(condition, kind, named)
    if tested is not None:
        return tested
    found = _from_conflict(text, named, condition)
    if found is not None:
        return found
    found = _from_wanted_value(text, named, condition)
    if found is not None:
        return found
    look = ", ".join(named)
    because = f" (SGLang checks `{_short(condition)}`)" if condition else ""
    return [], f"No change can be read from the message; look at {look}{because}."


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _in(flag: str, named: Sequence[str]) -> str | None:
    flag = canonical(flag) if flag.startswith("--") else flag
    return flag if flag in named else None


def _from_rename(text: str, named: Sequence[str]) -> tuple[list[FlagChange], str] | None:
    for regex in (_RENAMED, _INSTEAD):
        m = regex.search(text)
        if m and _in(m.group("old"), named) and m.group("old") != m.group("new"):
            old, new = canonical(m.group("old")), canonical(m.group("new"))
            return [FlagChange("replace", old, None, new)], f"Replace {old} by {new}, as the message says."
    return None


def _from_suggestion(text: str, named: Sequence[str]) -> tuple[list[FlagChange], str] | None:
    for m in _SUGGEST.finditer(text):
        flag = _in(m.group("flag"), named)
        value = m.group("value").rstrip(".")
        if flag is None or not value or value.startswith("-") or value.lower() in _NOT_VALUES:
            continue
        if value.lower() in ("true", "1") and _is_switch(flag):
            return [FlagChange("add", flag)], f"Add {flag}, as the message asks."
        return [FlagChange("set", flag, value)], f"Set {_setting(flag, value)}, as the message asks."
    return None


def _setting(flag: str, value: str) -> str:
    return f"{flag}={value}" if flag.startswith("SGLANG_") else f"{flag} {value}"


def _from_range(text: str, named: Sequence[str]) -> tuple[list[FlagChange], str] | None:
    """`--x must be in (0, 1]`, `SGLANG_Y must be positive`: a value inside the range."""
    for m in _RANGE.finditer(text):
        flag = _in(m.group("flag"), named)
        if flag is None:
            continue
        value: str | None = None
        if m.group("low") is not None:
            low, high = m.group("low"), m.group("high")
            if m.group("open") == "[":
                value = low
            elif m.group("close") == "]":
                value = high
            elif "." not in low + high:
                value = str(int(low) + 1) if int(low) + 1 < int(high) else None
            else:
                value = str((float(low) + float(high)) / 2)
        else:
            word, bound = m.group("word").lower(), m.group("bound")
            if word in ("positive",):
                value = "1"
            elif word in ("non-negative", "nonnegative"):
                value = "0"
            elif bound is not None:
                inclusive = word in ("at least", ">=") or "equal" in word
                if inclusive:
                    value = bound
                elif "." not in bound:
                    value = str(int(bound) + 1)
        if value is not None:
            return [FlagChange("set", flag, value)], f"Set {_setting(flag, value)}, inside the range the message gives."
    return None


_NOT_VALUES = frozenset(
    {"or", "and", "to", "is", "are", "the", "a", "an", "instead", "with", "when", "if", "for", "in", "on", "as",
     "be", "not", "only", "mode", "flag", "option", "argument", "set", "must", "should",
     "requires", "require", "needs", "can", "cannot", "will", "does", "do", "of", "at", "by", "but", "so", "this",
     "that", "it", "than", "because", "together", "also", "both", "either", "none", "value", "values"}
)  # fmt: skip


def _from_drop(text: str, named: Sequence[str]) -> tuple[list[FlagChange], str] | None:
    for m in _DROP.finditer(text):
        flag = _in(m.group("flag"), named)
        if flag is not None:
            return [FlagChange("remove", flag)], f"Remove {flag}, as the message asks."
    return None


def _from_requirement(text: str, named: Sequence[str]) -> tuple[list[FlagChange], str] | None:
    """`--x requires --enable-y`: add the switch; a required flag that needs a value: drop `--x`."""
    for m in _ADD.finditer(text):
        flag = _in(m.group("flag"), named)
        if flag is None:
            continue
        before = [
            f for f in named if f.startswith("--") and f != flag and text.find(f) != -1 and text.find(f) < m.start()
        ]
        after = text[m.end() : m.end() + 12].lower()
        verb = m.group("verb").lower()
        explicit = verb in ("enable", "add", "turn on", "launch with") or verb.startswith("start")
        explicit = explicit or bool(re.match(r"\W{0,2}to\s+true\b", after))
        if _is_switch(flag) or (explicit and flag.startswith("--")):
            extra = f" (or remove {before[0]})" if before else ""
            return [FlagChange("add", flag)], f"Add {flag}, which the check requires{extra}."
        if flag.startswith("SGLANG_"):
            return [FlagChange("set", flag, "1")], f"Set {flag}=1, which the check requires."
        if before:
            return (
                [FlagChange("remove", before[0])],
                f"Remove {before[0]}: it requires {flag}, which needs a value only you can choose.",
            )
    return None


def _from_conflict(text: str, named: Sequence[str], condition: str) -> tuple[list[FlagChange], str] | None:
    """The last resort: drop a flag the message names, back to SGLang's default.

    Defaults pass SGLang's own validation, so the flag the message names (the one the
    condition tests when it tests one) is the lever. Two flags named in a message that says
    they do not go together: drop the first, or the other.
    """
    required = {_in(m.group("flag"), named) for m in _ADD.finditer(text)}
    flags = [f for f in named if f.startswith("--") and f not in required]  # never drop what it asks for
    if not flags:
        return None
    tested = [f for f in flags if f[2:].replace("-", "_") in condition]
    first = (tested or flags)[0]
    others = [f for f in flags if f != first]
    because = f" (SGLang checks `{_short(condition)}`)" if condition else ""
    if others and _CONFLICT.search(text):
        return (
            [FlagChange("remove", first)],
            f"Remove {first} or {others[0]}: SGLang does not accept them together{because}.",
        )
    return (
        [FlagChange("remove", first)],
        f"Remove {first} (back to SGLang's default) or change its value: the message names it{because}.",
    )


_WANTS_VALUE = re.compile(
    r"(?:provide|specify|pass|set|setting|requires?|needs?|check|different|valid|correct|explicit)\W{0,3}"
    r"(?:the\s|a\s|an\s)?(?P<flag>--[a-z0-9][a-z0-9-]*)",
    re.I,
)


def placeholder_value(flag: str, message: str) -> str:
    """What the operator fills in, said as a placeholder: never a guessed value (a port in use + 1 may be
    taken too; a path is theirs)."""
    words = set(flag[2:].split("-"))
    if re.search(r"host:port|ip:port|address", message, re.I) or words & {"addr", "address"}:
        host = "head-node-host" if re.search(r"head node|master|rank 0|node 0", message, re.I) else "host"
        return f"<{host}>:<port>"
    if "port" in words:
        return "<free-port>"
    if words & {"url"}:
        return "<url>"
    if words & {"path", "file", "dir", "keyfile", "certfile", "certs", "config"}:
        return "<path>"
    return "<value>"


def _from_wanted_value(text: str, named: Sequence[str], condition: str) -> tuple[list[FlagChange], str] | None:
    """The check wants a flag set to a value only the operator knows: set it to a placeholder."""
    for m in _WANTS_VALUE.finditer(text):
        flag = _in(m.group("flag"), named)
        if flag is None or _is_switch(flag):
            continue
        value = placeholder_value(flag, text)
        because = f" (SGLang checks `{_short(condition)}`)" if condition else ""
        return (
            [FlagChange("set", flag, value, placeholder=True)],
            f"Set {flag} to your value (a placeholder: {value}); the check wants one only you know{because}.",
        )
    return None


# --- reading the condition ---------------------------------------------------------------

_FLIP = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}


def _attr_flag(node: ast.AST, named: Sequence[str]) -> str | None:
    """`cfg.page_size`, `self.server_args.page_size`, `page_size` -> `--page-size` when the message names it."""
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
    if name is None:
        return None
    return _in("--" + name.replace("_", "-"), named)


def _env_of(node: ast.AST, named: Sequence[str]) -> str | None:
    """`envs.SGLANG_X.get()`, `get_bool_env_var("SGLANG_X")`, `os.environ.get("SGLANG_X")` -> SGLANG_X."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr in named:
            return sub.attr
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value in named:
            return sub.value
    return None


def _from_condition(condition: str, kind: str, named: Sequence[str]) -> tuple[list[FlagChange], str] | None:
    """A change that makes the check pass: a raise's condition must become false, an assert's true."""
    if not condition:
        return None
    try:
        tree = ast.parse(condition, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    found = _satisfy(tree, kind == "assert", named)
    if found is None:
        return None
    change, why = found
    return [change], f"{why} (SGLang checks `{_short(condition)}`)."


def _satisfy(node: ast.AST, want: bool, named: Sequence[str]) -> tuple[FlagChange, str] | None:
    """A change to one named flag that makes `node` evaluate to `want`."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _satisfy(node.operand, not want, named)
    if isinstance(node, ast.BoolOp):
        # one operand decides a falsified `and` or a satisfied `or`; otherwise the operand about a
        # named flag is the lever the message points at, the others being facts of the model or GPU
        for value in node.values:
            found = _satisfy(value, want, named)
            if found is not None:
                return found
        return None
    env = _env_of(node, [n for n in named if n.startswith("SGLANG_")])
    if env is not None and not isinstance(node, ast.Compare):
        if want:
            return FlagChange("set", env, "1"), f"Set {env}=1"
        return FlagChange("remove", env), f"Unset {env}"
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return _compare(node.left, node.ops[0], node.comparators[0], want, named)
    flag = _attr_flag(node, named)
    if flag is not None and flag.startswith("--"):
        if want:
            return (FlagChange("add", flag), f"Add {flag}") if _is_switch(flag) else None
        return FlagChange("remove", flag), f"Remove {flag}"
    return None


def _literal(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return _NO_VALUE


_NO_VALUE = object()


def _compare(
    left: ast.AST, op: ast.cmpop, right: ast.AST, want: bool, named: Sequence[str]
) -> tuple[FlagChange, str] | None:
    flag = _attr_flag(left, named)
    value = _literal(right)
    if flag is None:
        env = _env_of(left, [n for n in named if n.startswith("SGLANG_")])
        if env is None or value is _NO_VALUE:
            return None
        flag = env
    if not want:
        if type(op) in _FLIP:
            op = _FLIP[type(op)]()
        elif isinstance(op, ast.In | ast.NotIn):
            op = ast.NotIn() if isinstance(op, ast.In) else ast.In()
        elif isinstance(op, ast.Is | ast.IsNot):
            op = ast.IsNot() if isinstance(op, ast.Is) else ast.Is()
    if isinstance(op, ast.Is) and value is None:
        return FlagChange("remove", flag), f"Remove {flag}"
    if isinstance(op, ast.IsNot) and value is None:
        return (FlagChange("add", flag), f"Add {flag}") if _is_switch(flag) else None
    if value is _NO_VALUE or (isinstance(value, bool) and not isinstance(op, ast.Eq | ast.NotEq)):
        return None
    chosen: object = _NO_VALUE
    if isinstance(op, ast.Eq):
        chosen = value
    elif isinstance(op, ast.In) and isinstance(value, list | tuple | set | frozenset) and value:
        chosen = sorted(value, key=str)[0] if isinstance(value, set | frozenset) else value[0]
    elif isinstance(value, int | float) and not isinstance(value, bool):
        step = 1 if isinstance(value, int) else None
        if isinstance(op, ast.GtE | ast.LtE):
            chosen = value
        elif isinstance(op, ast.Gt) and step:
            chosen = value + step
        elif isinstance(op, ast.Lt) and step:
            chosen = value - step
    if chosen is _NO_VALUE or chosen is None or isinstance(chosen, bytes):
        return None
    if isinstance(chosen, bool):
        if flag.startswith("--"):
            if chosen:
                return (FlagChange("add", flag), f"Add {flag}") if _is_switch(flag) else None
            return FlagChange("remove", flag), f"Remove {flag}"
        chosen = "1" if chosen else "0"
    text = str(chosen)
    return FlagChange("set", flag, text), f"Set {_setting(flag, text)}, a value the check accepts"
