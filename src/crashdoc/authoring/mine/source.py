"""Reading one SGLang source file with `ast`: the raise and assert statements whose message names a flag."""

from __future__ import annotations

import ast
import builtins
import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crashdoc.authoring.mine.base import ENV, EXCEPTION_SUFFIXES, FLAG, MAX_CONDITION, PACKAGE, PREFILTER
from crashdoc.authoring.mine.hot import parse_hot
from crashdoc.authoring.mine.templates import Rebuilder, Scope, Template, source_text

# --- what one file holds -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Statement:
    """A raise or assert whose message names a flag or an environment variable."""

    path: str  # relative to the package root: srt/arg_groups/hicache_hook.py
    line: int
    function: str
    kind: str  # raise | assert
    exception: str  # as written: ValueError, torch.OutOfMemoryError
    printed_type: str  # as a traceback prints it: builtins bare, others with their module
    template: Template
    code: str  # the statement's first source line, as a traceback frame shows it
    # what SGLang checks: the enclosing `if` tests that lead to a raise (`a and not (b)` for an
    # else branch), or an assert's own test; "" when the raise is unconditional
    condition: str = ""

    @property
    def source(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class Failure:
    """A statement whose message could not be (fully) rebuilt."""

    path: str
    line: int
    reason: str
    names_flag: bool  # a flag or SGLANG_ variable is visible in what could be read
    mined: bool  # it was mined anyway, with a hole where the text is missing

    @property
    def source(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(slots=True)
class FileResult:
    path: str
    statements: list[Statement] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    error: str = ""  # the file could not be parsed


# --- reading one file ----------------------------------------------------------------------


def _exception_name(node: ast.expr) -> str | None:
    """`ValueError` for `raise ValueError(...)`; None when a helper builds the exception."""
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Attribute):
        name = node.attr
    else:
        return None
    if name[:1].isupper() or name.endswith(EXCEPTION_SUFFIXES):
        return source_text(node)
    return None


class _Imports:
    """Where the names of one module come from, to print an exception type as a traceback would."""

    def __init__(self, module: ast.Module, dotted: str, is_package: bool = False) -> None:
        self.names: dict[str, str] = {}
        self.defined: set[str] = set()
        package = dotted if is_package or "." not in dotted else dotted.rsplit(".", 1)[0]
        self.dotted = dotted
        for stmt in module.body:
            if isinstance(stmt, ast.ClassDef):
                self.defined.add(stmt.name)
            elif isinstance(stmt, ast.ImportFrom):
                base = stmt.module or ""
                if stmt.level:
                    parts = package.split(".")
                    up = parts[: len(parts) - (stmt.level - 1)] if stmt.level > 1 else parts
                    base = ".".join([*up, base] if base else up)
                for alias in stmt.names:
                    self.names[alias.asname or alias.name] = f"{base}.{alias.name}"
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    self.names[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else (alias.name.split(".")[0])
                    )

    def printed(self, written: str) -> str:
        head, _, rest = written.partition(".")
        if not rest:
            if head in self.defined:
                return f"{self.dotted}.{head}"
            if head in self.names:
                return self.names[head]
            if isinstance(getattr(builtins, head, None), type):
                return head
            return head
        if head in self.names:
            return f"{self.names[head]}.{rest}"
        return written


def mine_source(path: str, text: str, whole: bool = False) -> FileResult:
    """Mine one file's text; never raises (a file that does not parse is reported).

    Only the code that can hold a mined message is parsed (see `parse_hot`); `whole` parses
    the entire file, which is what the partial parse falls back to and is tested against.
    """
    result = FileResult(path)
    result.counts["files"] += 1
    if not PREFILTER.search(text):
        return result
    result.counts["files_parsed"] += 1
    lines = text.split("\n")
    try:
        module = None if whole else parse_hot(text, lines)
        if module is None:
            result.counts["files_parsed_whole"] += 1
            module = ast.parse(text, filename=path)
    except (SyntaxError, ValueError) as exc:
        result.error = f"does not parse: {exc}"
        return result
    parts = Path(path).with_suffix("").parts
    is_package = parts[-1:] == ("__init__",)
    dotted = ".".join([PACKAGE, *(parts[:-1] if is_package else parts)])
    rebuilder = Rebuilder(module)
    imports = _Imports(module, dotted, is_package)
    _walk(module.body, [], "<module>", rebuilder, imports, lines, result)
    return result


def _walk(
    body: Sequence[ast.stmt],
    scopes: list[Scope],
    function: str,
    rebuilder: Rebuilder,
    imports: _Imports,
    lines: list[str],
    result: FileResult,
    guards: tuple[str, ...] = (),
) -> None:
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            args = stmt.args
            params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            params += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
            _walk(stmt.body, [*scopes, Scope(stmt, params)], stmt.name, rebuilder, imports, lines, result)
            continue
        if isinstance(stmt, ast.ClassDef):
            _walk(stmt.body, scopes, stmt.name, rebuilder, imports, lines, result)
            continue
        found = len(result.statements)
        if isinstance(stmt, ast.Raise):
            _raise(stmt, scopes, function, rebuilder, imports, lines, result)
            if len(result.statements) > found and guards:
                result.statements[-1] = dataclasses.replace(result.statements[-1], condition=_joined(guards))
        elif isinstance(stmt, ast.Assert):
            _assert(stmt, scopes, function, rebuilder, lines, result)
            if len(result.statements) > found:
                result.statements[-1] = dataclasses.replace(
                    result.statements[-1], condition=source_text(stmt.test, MAX_CONDITION)
                )
        test = source_text(stmt.test, MAX_CONDITION) if isinstance(stmt, ast.If | ast.While) else None
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, name, None)
            if inner:
                inner_guards = guards
                if test is not None and name == "body":
                    inner_guards = (*guards, test)
                elif test is not None and name == "orelse":
                    inner_guards = (*guards, f"not ({test})")
                _walk(inner, scopes, function, rebuilder, imports, lines, result, inner_guards)
        for handler in getattr(stmt, "handlers", ()):
            _walk(handler.body, scopes, function, rebuilder, imports, lines, result, guards)
        for case in getattr(stmt, "cases", ()):
            _walk(case.body, scopes, function, rebuilder, imports, lines, result, guards)


def _joined(guards: tuple[str, ...]) -> str:
    """The enclosing tests as one condition; the innermost ones when the whole would be too long."""
    kept: list[str] = []
    for guard in reversed(guards):
        if kept and sum(len(g) + 5 for g in kept) + len(guard) > MAX_CONDITION:
            break
        kept.insert(0, guard if len(guards) == 1 or " " not in guard or guard.startswith("not (") else f"({guard})")
    return " and ".join(kept)


def _message_arg(call: ast.Call) -> ast.expr | None:
    if call.args:
        return None if isinstance(call.args[0], ast.Starred) else call.args[0]
    for keyword in call.keywords:
        if keyword.arg in ("message", "msg", "detail", "reason", "error"):
            return keyword.value
    return None


def _raise(
    stmt: ast.Raise,
    scopes: list[Scope],
    function: str,
    rebuilder: Rebuilder,
    imports: _Imports,
    lines: list[str],
    result: FileResult,
) -> None:
    result.counts["raise"] += 1
    exc = stmt.exc
    if not isinstance(exc, ast.Call):
        result.counts["raise_without_call"] += 1
        return
    written = _exception_name(exc.func)
    if written is None:
        result.counts["raise_helper"] += 1
        reason = f"the exception is built by `{source_text(exc.func)}(...)`"
        result.failures.append(Failure(result.path, stmt.lineno, reason, rebuilder.names_flag(exc, scopes), False))
        return
    result.counts["raise_call"] += 1
    arg = _message_arg(exc)
    if arg is None:
        result.counts["raise_no_message"] += 1
        return
    _statement(stmt, "raise", written, imports.printed(written), arg, scopes, function, rebuilder, lines, result)


def _assert(
    stmt: ast.Assert,
    scopes: list[Scope],
    function: str,
    rebuilder: Rebuilder,
    lines: list[str],
    result: FileResult,
) -> None:
    result.counts["assert"] += 1
    if stmt.msg is None:
        return
    result.counts["assert_message"] += 1
    _statement(stmt, "assert", "AssertionError", "AssertionError", stmt.msg, scopes, function, rebuilder, lines, result)


def _statement(
    stmt: ast.Raise | ast.Assert,
    kind: str,
    written: str,
    printed: str,
    arg: ast.expr,
    scopes: list[Scope],
    function: str,
    rebuilder: Rebuilder,
    lines: list[str],
    result: FileResult,
) -> None:
    template = Template(tuple(rebuilder.template(arg, scopes))).stripped()
    literal = template.literal
    names = bool(FLAG.search(literal) or ENV.search(literal))
    if any(isinstance(p, str) and p.strip() for p in template.parts):
        result.counts[f"{kind}_rebuilt"] += 1
    if not names:
        gaps = template.gaps
        if gaps or not literal.replace("\0", "").strip():
            result.counts[f"{kind}_unreadable"] += 1
            reason = "; ".join(gaps) or f"the message is `{source_text(arg)}`, known only at run time"
            result.failures.append(Failure(result.path, stmt.lineno, reason, rebuilder.names_flag(arg, scopes), False))
        return
    result.counts[f"{kind}_mined"] += 1
    if template.gaps:
        result.failures.append(Failure(result.path, stmt.lineno, "; ".join(template.gaps), True, True))
    code = lines[stmt.lineno - 1].strip() if 0 < stmt.lineno <= len(lines) else kind
    result.statements.append(Statement(result.path, stmt.lineno, function, kind, written, printed, template, code))
