"""`crashdoc signatures mine`: candidate signatures from SGLang's own raise and assert statements.

Most of what makes an SGLang unit crash-loop is a check that names the flag to change
(`raise ValueError(f"--x requires --y")`). Reading those statements from the source gives
every such message with its exact text, where it is raised and which flags it names; that is
the list a reviewed library should cover, and the starting point of each new signature.

The source is only parsed (`ast`), never imported: mining must not need SGLang's
dependencies nor run its code. A message template is rebuilt from the statement and the
names it uses in the same file; what cannot be rebuilt is kept as a hole and reported.
Coverage runs each mined message through the real assembler, matcher and root-cause choice,
so "matched" means the daemon would name a signature for that crash.

What is counted (DEFINITION) and what it gives on SGLang 0.5.23: 1,182 statements, 1,012 raise
and 170 assert. Raises naming a flag: 858, naming an SGLANG_ variable: 200 (46 name both);
asserts: 141 and 36, as the reference AST pass counts. The reference's 1,193 also counts
raises that name only another project's variable (MOONCAKE_PROTOCOL, ASCEND_USE_FIA...), and
its 862 raises naming a flag are 4 more than ours. The issue's "about 770" is the narrower
count of raises in srt/, the runtime a systemd unit serves: 783 here. 7 of them have a message
assigned in branches or extended with `+=`, and 7 more splice text held in a local or a
constant into an f-string hole; a pass that leaves both as holes finds 769.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import dataclasses
import gc
import hashlib
import importlib.util
import json
import os
import re
import string
import sys
import zipfile
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re2
import yaml

from crashdoc.authoring.selftest import diagnose_example
from crashdoc.diagnosis.category import guess_category
from crashdoc.events import ExceptionInfo, Frame
from crashdoc.matching.library import Example, Library
from crashdoc.matching.matcher import Matcher, re2_options
from crashdoc.text import clean

PACKAGE = "sglang"
TRACEBACK_DIR = f"/x/{PACKAGE}"  # where mined examples say the package is installed
MAX_ID = 80
MAX_RESOLVE_DEPTH = 8
MAX_CHOICES = 6  # branches of one message rebuilt as alternatives
PARALLEL_BYTES = 4 << 20  # below this, parsing in-process is faster than starting workers
_TODO = "TODO(review)"

# A flag as SGLang's messages write it: `--x` not glued to a word or another dash. The schema
# wants lowercase kebab-case; `--Foo` or `--foo_bar` in a message is reported but not listed.
_FLAG = re.compile(r"(?<![\w-])--([A-Za-z0-9][A-Za-z0-9_-]*[A-Za-z0-9]|[A-Za-z0-9])(?![\w])")
_SCHEMA_FLAG = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
# SGLang's own environment variables. Other variables that SGLang messages name (MOONCAKE_*,
# NCCL_*, CUDA_VISIBLE_DEVICES) belong to other projects and are not counted; see DEFINITION.
_ENV = re.compile(r"(?<![A-Za-z0-9_])SGLANG_[A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_])")
# cheap whole-file prefilter: a file without one of these cannot yield a mined error, because
# templates are rebuilt only from the text of the file that raises
_PREFILTER = re2.compile(r"--[A-Za-z0-9]|SGLANG_")  # RE2: one DFA pass over 68 MB
_EXCEPTION_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt", "Warning", "Failure")

DEFINITION = (
    "A mined error is one `raise X(...)` or `assert cond, msg` statement whose message, rebuilt from the "
    "statement and the names it uses in the same file, has a command-line flag (`--x`) or an SGLang "
    "environment variable (`SGLANG_*`) in its literal text. Text that is only known at run time (a hole) does "
    "not count; other projects' variables (MOONCAKE_*, NCCL_*) do not count; a statement counts once however "
    "many flags it names, and the same message raised in two places counts twice. The whole package is mined "
    "(srt/ is the LLM runtime; multimodal_gen/, kernels/, benchmark/, test/ and cli/ are reported by folder)."
)


class MineError(Exception):
    """The source to mine cannot be found or read; printed as is."""


# --- templates -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hole:
    """A part of a message that is only known at run time."""

    expr: str  # the expression as written, for the reviewer
    name: str | None = None  # capture name, when the expression is a simple name or attribute
    conversion: str = ""  # "r", "s", "a" or "" (f-string and .format conversions)
    spec: str = ""  # format spec, or a %-conversion such as "%.2f"
    gap: str = ""  # why this hole stands for message text that could not be rebuilt ("" = a value)
    # text rather than a value: one of these templates (`msg` assigned in each branch), or,
    # when `optional`, one template that is appended only sometimes (`msg += "..."`)
    choices: tuple[tuple[Part, ...], ...] = ()
    optional: bool = False


Part = str | Hole


@dataclass(frozen=True, slots=True)
class Template:
    parts: tuple[Part, ...]

    @property
    def literal(self) -> str:
        """All literal text, every choice included, holes as NUL so that no flag is read across one."""
        return _literal(self.parts)

    @property
    def display(self) -> str:
        return _display(self.parts)

    @property
    def gaps(self) -> tuple[str, ...]:
        return _gaps(self.parts)

    def stripped(self) -> Template:
        """Without surrounding whitespace: a traceback does not show it (trailing blank lines are dropped)."""
        parts = _rstrip_end(self.parts)
        while parts and isinstance(parts[0], str) and not parts[0].strip():
            parts.pop(0)
        if parts and isinstance(parts[0], str):
            parts[0] = parts[0].lstrip()
        return Template(tuple(parts))


def _rstrip_end(parts: Sequence[Part]) -> list[Part]:
    """Strip the end of the text, and of every optional piece that may end it.

    The whitespace that separated a piece from an optional one after it moves into that
    optional piece, so `"a\n" [+= "b\n"]` becomes `"a" ["\nb"]`: same text when the piece is
    there, no dangling newline when it is not.
    """
    out = list(parts)
    follow: int | None = None  # the optional piece just after the current position
    i = len(out) - 1
    while i >= 0:
        part = out[i]
        if isinstance(part, str):
            kept = part.rstrip()
            if follow is not None and len(kept) < len(part):
                out[follow] = _prefixed(out[follow], part[len(kept) :])
            out[i] = kept
            if kept:
                break
        elif part.choices:
            tail = part.choices[0][-1] if part.choices[0] else ""
            space = tail[len(tail.rstrip()) :] if isinstance(tail, str) else ""
            out[i] = dataclasses.replace(part, choices=tuple(tuple(_rstrip_end(c)) for c in part.choices))
            if not part.optional:
                break
            if follow is not None and space:
                out[follow] = _prefixed(out[follow], space)
            follow = i
        else:
            break
        i -= 1
    return _merge(out)


def _prefixed(part: Part, text: str) -> Part:
    assert isinstance(part, Hole)
    return dataclasses.replace(part, choices=tuple(tuple(_merge([text, *c])) for c in part.choices))


def _literal(parts: Iterable[Part]) -> str:
    out: list[str] = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
        else:
            out.append("\0")
            for choice in p.choices:
                out.extend((_literal(choice), "\0"))
    return "".join(out)


def _display(parts: Iterable[Part]) -> str:
    out: list[str] = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
        elif p.choices:
            body = "|".join(_display(c) for c in p.choices)
            out.append(f"[{body}]" if p.optional else f"({body})")
        else:
            out.append("{" + p.expr + "}")
    return "".join(out)


def _gaps(parts: Iterable[Part]) -> tuple[str, ...]:
    found: list[str] = []
    for p in parts:
        if isinstance(p, Hole):
            if p.gap:
                found.append(p.gap)
            for choice in p.choices:
                found.extend(_gaps(choice))
    return tuple(found)


def _merge(parts: Iterable[Part]) -> list[Part]:
    out: list[Part] = []
    for part in parts:
        if isinstance(part, str):
            if not part:
                continue
            if out and isinstance(out[-1], str):
                out[-1] += part
                continue
        out.append(part)
    return out


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


class _Scope:
    """Name bindings of one function or module body, computed on first use."""

    def __init__(self, node: ast.AST, params: Iterable[str] = ()) -> None:
        self.node = node
        self._bindings: dict[str, list[ast.AST | None]] | None = None
        self._params = set(params)

    def bindings(self, name: str) -> list[ast.AST | None]:
        """Each binding of `name`: the assigned value, or None for any other kind of binding."""
        if self._bindings is None:
            self._bindings = {}
            for param in self._params:
                self._bindings.setdefault(param, []).append(None)
            body = self.node.body if isinstance(self.node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef) else []
            for stmt in _statements(body):
                _record_bindings(stmt, self._bindings)
        return self._bindings.get(name, [])


def _statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of a body, nested blocks included, nested scopes excluded."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for name in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(stmt, name, ()))
        for handler in getattr(stmt, "handlers", ()):
            yield handler
            yield from _statements(handler.body)
        for case in getattr(stmt, "cases", ()):
            yield from _statements(case.body)


def _record_bindings(stmt: ast.AST, out: dict[str, list[ast.AST | None]]) -> None:
    def bind(target: ast.AST, value: ast.AST | None) -> None:
        if isinstance(target, ast.Name):
            out.setdefault(target.id, []).append(value)
        elif isinstance(target, ast.Tuple | ast.List):
            for elt in target.elts:
                bind(elt, None)
        elif isinstance(target, ast.Starred):
            bind(target.value, None)

    if isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            bind(target, stmt.value if len(stmt.targets) == 1 else None)
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        bind(stmt.target, stmt.value)
    elif isinstance(stmt, ast.AugAssign):
        if isinstance(stmt.target, ast.Name):
            out.setdefault(stmt.target.id, []).append(stmt)  # kept to look for flags in what it appends
    elif isinstance(stmt, ast.For | ast.AsyncFor):
        bind(stmt.target, None)
    elif isinstance(stmt, ast.With | ast.AsyncWith):
        for item in stmt.items:
            if item.optional_vars is not None:
                bind(item.optional_vars, None)
    elif isinstance(stmt, ast.ExceptHandler) and stmt.name:
        out.setdefault(stmt.name, []).append(None)
    elif isinstance(stmt, ast.Import | ast.ImportFrom):
        for alias in stmt.names:
            out.setdefault((alias.asname or alias.name).split(".")[0], []).append(stmt)
    elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        out.setdefault(stmt.name, []).append(stmt)
    elif isinstance(stmt, ast.Global | ast.Nonlocal):
        for name in stmt.names:
            out.setdefault(name, []).extend([None, None])


_CONVERSIONS = {-1: "", 115: "s", 114: "r", 97: "a"}
_PERCENT = re.compile(
    r"%(?:\((?P<key>[^)]*)\))?(?P<flags>[#0\- +]*)(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?[hlL]?"
    r"(?P<conv>[diouxXeEfFgGcrsa%])"
)
_JOIN_ITEMS = 64


class _Rebuilder:
    """Rebuilds message templates for the statements of one module."""

    def __init__(self, module: ast.Module) -> None:
        self.module_scope = _Scope(module)

    def template(self, node: ast.AST, scopes: Sequence[_Scope], depth: int = 0) -> list[Part]:
        """The parts of the text `node` evaluates to; a hole where it cannot be read."""
        if depth > MAX_RESOLVE_DEPTH:
            return [Hole(_source(node), gap="names refer to each other too deeply")]
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return [node.value]
            return (
                [str(node.value)]
                if isinstance(node.value, int | float) and not isinstance(node.value, bool)
                else [Hole(_source(node))]
            )
        if isinstance(node, ast.JoinedStr):
            parts: list[Part] = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                elif isinstance(value, ast.FormattedValue):
                    parts.extend(self._formatted(value, scopes, depth))
            return _merge(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.template(node.left, scopes, depth + 1)
            right = self.template(node.right, scopes, depth + 1)
            return _merge([*left, *right])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return self._percent(node, scopes, depth)
        if isinstance(node, ast.Call):
            return self._call(node, scopes, depth)
        if isinstance(node, ast.Name):
            return self._name(node, scopes, depth)
        return [Hole(_source(node), _capture_name(node))]

    def _formatted(self, value: ast.FormattedValue, scopes: Sequence[_Scope], depth: int) -> list[Part]:
        spec = ""
        if value.format_spec is not None:
            spec_parts = self.template(value.format_spec, scopes, depth + 1)
            spec = (
                "".join(p for p in spec_parts if isinstance(p, str))
                if all(isinstance(p, str) for p in spec_parts)
                else ""
            )
        inner = value.value
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and not spec and value.conversion == -1:
            return [inner.value]
        if isinstance(inner, ast.Name) and not spec and value.conversion == -1:
            resolved = self._name(inner, scopes, depth + 1)
            # text the function spells out (`prefix = "..."`) is spliced in; a value stays a hole
            if any(isinstance(p, str) for p in resolved) and not any(isinstance(p, Hole) and p.gap for p in resolved):
                return resolved
        return [Hole(_source(inner), _capture_name(inner), _CONVERSIONS.get(value.conversion, ""), spec)]

    def _percent(self, node: ast.BinOp, scopes: Sequence[_Scope], depth: int) -> list[Part]:
        fmt = self.template(node.left, scopes, depth + 1)
        if not all(isinstance(p, str) for p in fmt):
            return [Hole(_source(node), gap="`%` formatting of a string that is not literal")]
        text = "".join(fmt)  # type: ignore[arg-type]
        right = node.right
        values: list[ast.AST] = list(right.elts) if isinstance(right, ast.Tuple) else [right]
        keyed: dict[str, ast.AST] = {}
        if isinstance(right, ast.Dict):
            keyed = {
                k.value: v
                for k, v in zip(right.keys, right.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
        parts: list[Part] = []
        pos = 0
        index = 0
        for m in _PERCENT.finditer(text):
            parts.append(text[pos : m.start()])
            pos = m.end()
            if m.group("conv") == "%":
                parts.append("%")
                continue
            spec = m.group(0)
            if m.group("key") is not None:
                expr = keyed.get(m.group("key"))
                name = m.group("key") if m.group("key").isidentifier() else None
                parts.append(Hole(_source(expr) if expr is not None else m.group("key"), name, spec=spec))
                continue
            expr = values[index] if index < len(values) and not isinstance(right, ast.Dict) else None
            index += 1
            if expr is not None and isinstance(expr, ast.Constant) and isinstance(expr.value, str) and spec == "%s":
                parts.append(expr.value)
            else:
                parts.append(Hole(_source(expr) if expr is not None else "?", _capture_name(expr), spec=spec))
        parts.append(text[pos:])
        return _merge(parts)

    def _call(self, node: ast.Call, scopes: Sequence[_Scope], depth: int) -> list[Part]:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "format":
            return self._format(node, scopes, depth)
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "join"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.List | ast.Tuple)
            and len(node.args[0].elts) <= _JOIN_ITEMS
            and not any(isinstance(e, ast.Starred) for e in node.args[0].elts)
        ):
            sep = self.template(func.value, scopes, depth + 1)
            if all(isinstance(p, str) for p in sep):
                parts: list[Part] = []
                for i, elt in enumerate(node.args[0].elts):
                    if i:
                        parts.extend(sep)
                    parts.extend(self.template(elt, scopes, depth + 1))
                return _merge(parts)
        if isinstance(func, ast.Name) and func.id == "str" and len(node.args) == 1 and not node.keywords:
            inner = node.args[0]
            if isinstance(inner, ast.Constant | ast.JoinedStr | ast.BinOp):
                return self.template(inner, scopes, depth + 1)
        return [Hole(_source(node))]

    def _format(self, node: ast.Call, scopes: Sequence[_Scope], depth: int) -> list[Part]:
        assert isinstance(node.func, ast.Attribute)
        fmt = self.template(node.func.value, scopes, depth + 1)
        if not all(isinstance(p, str) for p in fmt):
            return [Hole(_source(node), gap="`.format` of a string that is not literal")]
        text = "".join(fmt)  # type: ignore[arg-type]
        keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
        parts: list[Part] = []
        auto = 0
        try:
            fields = list(string.Formatter().parse(text))
        except ValueError as exc:
            return [Hole(_source(node), gap=f"`.format` string does not parse: {exc}")]
        for literal, field_name, spec, conversion in fields:
            parts.append(literal)
            if field_name is None:
                continue
            head = re.split(r"[.\[]", field_name, maxsplit=1)[0]
            rest = field_name[len(head) :]
            expr: ast.AST | None
            if head == "":
                expr = node.args[auto] if auto < len(node.args) else None
                auto += 1
            elif head.isdigit():
                expr = node.args[int(head)] if int(head) < len(node.args) else None
            else:
                expr = keywords.get(head)
            shown = (_source(expr) if expr is not None else head or "?") + rest
            if rest:
                name = rest.rsplit(".", 1)[-1] if rest.startswith(".") and "[" not in rest else None
            elif head and not head.isdigit():
                name = head
            else:
                name = _capture_name(expr)
            if expr is not None and not rest and not spec and not conversion:
                inner = self.template(expr, scopes, depth + 1)
                if all(isinstance(p, str) for p in inner):
                    parts.extend(inner)
                    continue
            parts.append(Hole(shown, name if name and name.isidentifier() else None, conversion or "", spec or ""))
        return _merge(parts)

    def _name(self, node: ast.Name, scopes: Sequence[_Scope], depth: int) -> list[Part]:
        name = node.id
        for scope in (*scopes, self.module_scope):
            bound = scope.bindings(name)
            if not bound:
                continue
            values = [b for b in bound if isinstance(b, ast.expr)]
            if len(bound) == 1 and values:
                if scope is self.module_scope and scopes and not name.isupper():
                    return [Hole(name, name)]  # a module variable, not a constant: its value may change
                return self.template(values[0], scopes if scope is not self.module_scope else (), depth + 1)
            if any(isinstance(b, ast.Import | ast.ImportFrom) for b in bound):
                return [Hole(name, name, gap=f"`{name}` is imported from another module")]
            if len(bound) > 1 and values:
                return self._several(name, bound, scopes if scope is not self.module_scope else (), depth)
            return [Hole(name, name)]
        return [Hole(name, name)]

    def _several(self, name: str, bound: list[ast.AST | None], scopes: Sequence[_Scope], depth: int) -> list[Part]:
        """A message built in steps: `msg = A` then `msg += B`, or `msg = A` / `msg = B` in branches."""
        values = [b for b in bound if isinstance(b, ast.expr)]
        appended = [b for b in bound if isinstance(b, ast.AugAssign)]
        if len(values) + len(appended) == len(bound):
            if (
                len(values) == 1
                and all(isinstance(a.op, ast.Add) for a in appended)
                and all(a.lineno > values[0].lineno for a in appended)
            ):
                parts = self.template(values[0], scopes, depth + 1)
                for a in appended:
                    extra = tuple(self.template(a.value, scopes, depth + 1))
                    parts.append(Hole(f"{name} += ...", choices=(extra,), optional=True))
                return _merge(parts)
            if not appended and len(values) <= MAX_CHOICES:
                choices = tuple(tuple(self.template(v, scopes, depth + 1)) for v in values)
                return [Hole(name, name, choices=choices)]
        return [Hole(name, name, gap=f"`{name}` is assigned in {len(bound)} places")]

    def names_flag(self, node: ast.AST, scopes: Sequence[_Scope], depth: int = 0) -> bool:
        """Whether a flag or SGLANG_ variable is written in text the message could be built from.

        Follows the names used into every binding the template refused to choose between, but
        only through string-building expressions, so that `subprocess.run(["--x"]).returncode`
        does not count.
        """
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and bool(_FLAG.search(node.value) or _ENV.search(node.value))
        if isinstance(node, ast.JoinedStr):
            return any(self.names_flag(v, scopes, depth) for v in node.values)
        if isinstance(node, ast.FormattedValue):
            return self.names_flag(node.value, scopes, depth) if isinstance(node.value, ast.Name) else False
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
            return self.names_flag(node.left, scopes, depth) or self.names_flag(node.right, scopes, depth)
        if isinstance(node, ast.IfExp):
            return self.names_flag(node.body, scopes, depth) or self.names_flag(node.orelse, scopes, depth)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("format", "join"):
            return any(self.names_flag(n, scopes, depth) for n in (node.func.value, *node.args))
        if isinstance(node, ast.List | ast.Tuple):
            return any(self.names_flag(e, scopes, depth) for e in node.elts)
        if isinstance(node, ast.Call) and node.args and depth < 3:
            # a helper that builds the exception: look at the text it is handed
            return any(self.names_flag(a, scopes, depth + 1) for a in node.args)
        if isinstance(node, ast.Name) and depth < 3:
            for scope in (*scopes, self.module_scope):
                bound = scope.bindings(node.id)
                if bound:
                    values = [b.value if isinstance(b, ast.AugAssign) else b for b in bound]
                    return any(isinstance(v, ast.expr) and self.names_flag(v, scopes, depth + 1) for v in values)
        return False


def _source(node: ast.AST | None) -> str:
    if node is None:
        return "?"
    try:
        text = ast.unparse(node)
    except Exception:  # unparse has no documented failure modes; a hole name is not worth a crash
        return "?"
    return text if len(text) <= 80 else text[:77] + "..."


def _capture_name(node: ast.AST | None) -> str | None:
    """`tp_size` for `tp_size`, `cfg.tp_size` and `self.server_args.tp_size`; None otherwise."""
    while isinstance(node, ast.Attribute):
        if not isinstance(node.value, ast.Name | ast.Attribute):
            return None
        return node.attr if node.attr.isascii() else None
    if isinstance(node, ast.Name):
        return node.id if node.id.isascii() else None
    return None


# --- reading one file ----------------------------------------------------------------------


def _exception_name(node: ast.expr) -> str | None:
    """`ValueError` for `raise ValueError(...)`; None when a helper builds the exception."""
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Attribute):
        name = node.attr
    else:
        return None
    if name[:1].isupper() or name.endswith(_EXCEPTION_SUFFIXES):
        return _source(node)
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

    Only the code that can hold a mined message is parsed (see `_parse_hot`); `whole` parses
    the entire file, which is what the partial parse falls back to and is tested against.
    """
    result = FileResult(path)
    result.counts["files"] += 1
    if not _PREFILTER.search(text):
        return result
    result.counts["files_parsed"] += 1
    lines = text.split("\n")
    try:
        module = None if whole else _parse_hot(text, lines)
        if module is None:
            result.counts["files_parsed_whole"] += 1
            module = ast.parse(text, filename=path)
    except (SyntaxError, ValueError) as exc:
        result.error = f"does not parse: {exc}"
        return result
    parts = Path(path).with_suffix("").parts
    is_package = parts[-1:] == ("__init__",)
    dotted = ".".join([PACKAGE, *(parts[:-1] if is_package else parts)])
    rebuilder = _Rebuilder(module)
    imports = _Imports(module, dotted, is_package)
    _walk(module.body, [], "<module>", rebuilder, imports, lines, result)
    return result


# --- parsing only what matters -------------------------------------------------------------
#
# SGLang 0.5.23 has 68 MB of Python; `ast.parse` reads about 2-3 MB/s, so parsing every file
# that mentions a flag takes tens of CPU seconds. A message can only name a flag if its text
# is written in the function that raises or in a module constant, so a module is cut into its
# top-level statements (and a large class into its members) by indentation, and only the
# pieces that hold a flag (or use a constant that does) are parsed, each at its own line
# numbers. Every other top-level statement (imports, constants) is parsed too, for the module
# scope. A cut in the wrong place (a string or bracket continued at a lower indentation) leaves
# an unclosed construct, which does not parse: the whole file is then parsed instead.

# `envs.SGLANG_X.get()` is code, not text: an SGLANG_ after a dot is hot only after a quote
_HOT = re.compile(r"(?<![\w-])--[A-Za-z0-9]|(?<![\w.])SGLANG_|[\"'].*SGLANG_")
_DEF = re.compile(r"(?:async[ \t]+)?def[ \t]+(\w+)|class[ \t]+(\w+)")
SPLIT_CLASS_LINES = 200  # a hot class longer than this is parsed member by member


class _Unsplittable(Exception):
    """The indentation cut did not give valid pieces: parse the whole file."""


def _hot_lines(text: str, lines: list[str]) -> set[int]:
    """0-based lines that name a flag or SGLANG_ outside a comment line."""
    hot: set[int] = set()
    for i, line in enumerate(lines):
        if ("--" in line or "SGLANG_" in line) and _HOT.search(line) and not line.lstrip().startswith("#"):
            hot.add(i)
    return hot


def _starts(lines: list[str], indent: str, first: int, last: int) -> list[int]:
    """The lines in [first, last) where a statement at exactly `indent` begins.

    A regex with a literal head ("\\n" + indent) finds the candidates in C; lines are then
    counted between matches.
    """
    text = "\n" + "\n".join(lines[first:last])
    pattern = re.compile("\n" + re.escape(indent) + r"(?=[^\s#)\]}])(?!(?:else|elif|except|finally)\b)(@?)")
    starts: list[int] = []
    line, pos = first - 1, 0
    after_decorator = False
    for m in pattern.finditer(text):
        line += text.count("\n", pos, m.start() + 1)
        pos = m.start() + 1
        if not after_decorator:
            starts.append(line)
        after_decorator = bool(m.group(1))
    return starts


def _parse_piece(lines: list[str], first: int, last: int, indent: str) -> list[ast.stmt]:
    """Parse lines [first, last) at their own line numbers; an indented piece goes under `if 1:`."""
    body = "\n".join(lines[first:last])
    if indent:
        if first == 0:
            raise _Unsplittable
        source = "\n" * (first - 1) + "if 1:\n" + body
    else:
        source = "\n" * first + body
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        raise _Unsplittable from exc
    if indent:
        if len(tree.body) != 1 or not isinstance(tree.body[0], ast.If):
            raise _Unsplittable
        return tree.body[0].body
    return tree.body


def _stub(line: str, lineno: int) -> ast.stmt | None:
    """A body-less def or class that stands for an unparsed one: its name is still bound."""
    m = _DEF.match(line.lstrip())
    if m is None:
        return None
    if m.group(1):
        args = ast.arguments(
            posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]
        )
        node: ast.stmt = ast.FunctionDef(
            name=m.group(1), args=args, body=[], decorator_list=[], returns=None, type_comment=None
        )
    else:
        node = ast.ClassDef(name=m.group(2), bases=[], keywords=[], body=[], decorator_list=[])
    node.lineno = lineno + 1
    return node


def _parse_hot(text: str, lines: list[str]) -> ast.Module | None:
    """The module with only its hot definitions parsed; None when the file must be parsed whole."""
    hot = sorted(_hot_lines(text, lines))
    if not hot:
        return ast.Module(body=[], type_ignores=[])
    starts = _starts(lines, "", 0, len(lines))
    if not starts:
        return None
    if any(lines[i].strip() and not lines[i].lstrip().startswith("#") for i in range(starts[0])):
        return None  # indented text before the first statement: not something to cut
    pieces = list(zip(starts, [*starts[1:], len(lines)], strict=True))
    try:
        # consecutive plain statements are parsed together; definitions wait until we know
        # which module constants name a flag
        plan: list[list[ast.stmt] | tuple[int, int]] = []
        run: list[tuple[int, int]] = []
        for first, last in pieces:
            if _DEF.match(lines[_after_decorators(lines, first, last)]):
                if run:
                    plan.append(_parse_piece(lines, run[0][0], run[-1][1], ""))
                    run = []
                plan.append((first, last))
            else:
                run.append((first, last))
        if run:
            plan.append(_parse_piece(lines, run[0][0], run[-1][1], ""))
        plain = [stmt for step in plan if isinstance(step, list) for stmt in step]
        used = _constants_named_hot(plain, hot)
        used_pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(used))) + r")\b") if used else None
        body: list[ast.stmt] = []
        for step in plan:
            if isinstance(step, list):
                body.extend(step)
            else:
                body.append(_parse_definition(lines, step[0], step[1], hot, used_pattern))
        return ast.Module(body=body, type_ignores=[])
    except _Unsplittable:
        return None


def _after_decorators(lines: list[str], first: int, last: int) -> int:
    """The `def`/`class` line of a piece that may begin with decorators; `first` when there is none."""
    if not lines[first].lstrip().startswith("@"):
        return first
    for i in range(first + 1, last):
        if _DEF.match(lines[i].lstrip()):
            return i
    return first


def _constants_named_hot(body: list[ast.stmt], hot: list[int]) -> set[str]:
    """Module names assigned text that names a flag: functions that use them are hot too."""
    names: set[str] = set()
    for stmt in body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and _has_hot(hot, stmt.lineno - 1, stmt.end_lineno or 0):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _has_hot(hot: list[int], first: int, last: int) -> bool:
    i = bisect.bisect_left(hot, first)
    return i < len(hot) and hot[i] < last


def _is_hot(lines: list[str], first: int, last: int, hot: list[int], used: re.Pattern[str] | None) -> bool:
    """Whether a definition can hold a mined statement: it names a flag (or a constant that does)
    and it raises or asserts at all."""
    if not _has_hot(hot, first, last) and used is None:
        return False
    text = "\n".join(lines[first:last])
    if "raise" not in text and "assert" not in text:
        return False
    return _has_hot(hot, first, last) or (used is not None and used.search(text) is not None)


def _header_end(lines: list[str], head: int, last: int) -> int:
    """The line that ends a class header (`class A(\n    B,\n):`), or -1 when it is not plain."""
    depth = 0
    for i in range(head, min(last, head + 40)):
        code = lines[i].split("#", 1)[0].rstrip()
        depth += code.count("(") + code.count("[") - code.count(")") - code.count("]")
        if depth == 0 and code.endswith(":"):
            return i
        if depth < 0:
            return -1
    return -1


def _parse_definition(
    lines: list[str], first: int, last: int, hot: list[int], used: re.Pattern[str] | None, indent: str = ""
) -> ast.stmt:
    """A def or class: parsed when hot (a long class member by member), else a stub."""
    head = _after_decorators(lines, first, last)
    if not _is_hot(lines, first, last, hot, used):
        stub = _stub(lines[head], head)
        if stub is None:
            raise _Unsplittable
        return stub
    is_class = lines[head].lstrip().startswith("class")
    body_start = _header_end(lines, head, last) + 1 if is_class else 0
    if not is_class or last - first <= SPLIT_CLASS_LINES or body_start <= 0:
        parsed = _parse_piece(lines, first, last, indent)
        if len(parsed) != 1:
            raise _Unsplittable
        return parsed[0]
    inner = next((ln for ln in lines[body_start:last] if ln.strip() and not ln.lstrip().startswith("#")), "")
    member_indent = inner[: len(inner) - len(inner.lstrip())]
    if len(member_indent) <= len(indent):
        raise _Unsplittable
    starts = _starts(lines, member_indent, body_start, last)
    members: list[ast.stmt] = []
    for a, b in zip(starts, [*starts[1:], last], strict=True):
        if _DEF.match(lines[_after_decorators(lines, a, b)].lstrip()):
            members.append(_parse_definition(lines, a, b, hot, used, member_indent))
    node = _stub(lines[head], head)
    assert isinstance(node, ast.ClassDef)
    node.body = members
    return node


def _walk(
    body: Sequence[ast.stmt],
    scopes: list[_Scope],
    function: str,
    rebuilder: _Rebuilder,
    imports: _Imports,
    lines: list[str],
    result: FileResult,
) -> None:
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            args = stmt.args
            params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            params += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
            _walk(stmt.body, [*scopes, _Scope(stmt, params)], stmt.name, rebuilder, imports, lines, result)
            continue
        if isinstance(stmt, ast.ClassDef):
            _walk(stmt.body, scopes, stmt.name, rebuilder, imports, lines, result)
            continue
        if isinstance(stmt, ast.Raise):
            _raise(stmt, scopes, function, rebuilder, imports, lines, result)
        elif isinstance(stmt, ast.Assert):
            _assert(stmt, scopes, function, rebuilder, lines, result)
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, name, None)
            if inner:
                _walk(inner, scopes, function, rebuilder, imports, lines, result)
        for handler in getattr(stmt, "handlers", ()):
            _walk(handler.body, scopes, function, rebuilder, imports, lines, result)
        for case in getattr(stmt, "cases", ()):
            _walk(case.body, scopes, function, rebuilder, imports, lines, result)


def _message_arg(call: ast.Call) -> ast.expr | None:
    if call.args:
        return None if isinstance(call.args[0], ast.Starred) else call.args[0]
    for keyword in call.keywords:
        if keyword.arg in ("message", "msg", "detail", "reason", "error"):
            return keyword.value
    return None


def _raise(
    stmt: ast.Raise,
    scopes: list[_Scope],
    function: str,
    rebuilder: _Rebuilder,
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
        reason = f"the exception is built by `{_source(exc.func)}(...)`"
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
    scopes: list[_Scope],
    function: str,
    rebuilder: _Rebuilder,
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
    scopes: list[_Scope],
    function: str,
    rebuilder: _Rebuilder,
    lines: list[str],
    result: FileResult,
) -> None:
    template = Template(tuple(rebuilder.template(arg, scopes))).stripped()
    literal = template.literal
    names = bool(_FLAG.search(literal) or _ENV.search(literal))
    if any(isinstance(p, str) and p.strip() for p in template.parts):
        result.counts[f"{kind}_rebuilt"] += 1
    if not names:
        gaps = template.gaps
        if gaps or not literal.replace("\0", "").strip():
            result.counts[f"{kind}_unreadable"] += 1
            reason = "; ".join(gaps) or f"the message is `{_source(arg)}`, known only at run time"
            result.failures.append(Failure(result.path, stmt.lineno, reason, rebuilder.names_flag(arg, scopes), False))
        return
    result.counts[f"{kind}_mined"] += 1
    if template.gaps:
        result.failures.append(Failure(result.path, stmt.lineno, "; ".join(template.gaps), True, True))
    code = lines[stmt.lineno - 1].strip() if 0 < stmt.lineno <= len(lines) else kind
    result.statements.append(Statement(result.path, stmt.lineno, function, kind, written, printed, template, code))


@contextmanager
def _no_gc() -> Iterator[None]:
    """Parsing allocates millions of nodes, freed by reference counting (syntax trees hold no cycles):
    letting the cycle collector walk them again and again is most of the cost otherwise."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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
    for m in _FLAG.finditer(literal):
        flag = "--" + m.group(1)
        target = flags if _SCHEMA_FLAG.match(flag) else odd
        if flag not in target:
            target.append(flag)
    for m in _ENV.finditer(literal):
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


# --- reading a package ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceTree:
    """Where the package's files are: a folder, or a wheel/zip and the prefix of the package inside it."""

    label: str
    folder: Path | None = None
    archive: Path | None = None
    prefix: str = ""  # inside the archive: "sglang/"

    def files(self) -> list[str]:
        """Package-relative paths of every .py file, sorted."""
        if self.folder is not None:
            found: list[str] = []
            for folder, dirs, names in os.walk(self.folder):
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                rel = os.path.relpath(folder, self.folder)
                prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
                found.extend(prefix + n for n in names if n.endswith(".py"))
            return sorted(found)
        assert self.archive is not None
        with zipfile.ZipFile(self.archive) as zf:
            return sorted(
                n[len(self.prefix) :]
                for n in zf.namelist()
                if n.startswith(self.prefix) and n.endswith(".py") and not n.endswith("/")
            )

    def read_many(self, paths: Sequence[str]) -> Iterator[tuple[str, str]]:
        if self.folder is not None:
            for path in paths:
                yield path, (self.folder / path).read_bytes().decode("utf-8", "replace")
            return
        assert self.archive is not None
        with zipfile.ZipFile(self.archive) as zf:
            for path in paths:
                yield path, zf.read(self.prefix + path).decode("utf-8", "replace")

    def version(self) -> str:
        """The package version from `_version.py` or `version.py`, read as source."""
        for name in ("_version.py", "version.py"):
            try:
                [(_, text)] = list(self.read_many([name]))
            except (OSError, KeyError):
                continue
            m = re.search(
                r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", text, re.M
            )
            if m:
                return m.group(1)
        return ""


def locate(path_or_name: str) -> SourceTree:
    """A folder, a wheel or zip, or the name of an installed package (found without importing it)."""
    path = Path(path_or_name)
    if path.is_dir():
        if not (path / "__init__.py").exists() and (path / PACKAGE / "__init__.py").exists():
            path = path / PACKAGE
        return SourceTree(str(path), folder=path)
    if path.is_file():
        if not zipfile.is_zipfile(path):
            raise MineError(f"{path}: not a folder, a wheel or a zip file")
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
        prefix = f"{PACKAGE}/" if any(n.startswith(f"{PACKAGE}/") for n in names) else ""
        return SourceTree(str(path), archive=path, prefix=prefix)
    if re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*", path_or_name):
        top, *rest = path_or_name.split(".")
        try:
            spec = importlib.util.find_spec(top)  # a top-level name: finders only, nothing runs
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            folder = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest)
            if folder.is_dir():
                return SourceTree(str(folder), folder=folder)
        raise MineError(f"{path_or_name}: no such folder or file, and no installed package of that name")
    raise MineError(f"{path_or_name}: no such folder or file")


def _mine_batch(tree: SourceTree, paths: list[str]) -> list[FileResult]:
    with _no_gc():
        return [mine_source(path, text) for path, text in tree.read_many(paths)]


def mine_tree(tree: SourceTree, workers: int | None = None) -> list[FileResult]:
    """Mine every file; large trees are parsed in worker processes (parsing is CPU-bound)."""
    paths = tree.files()
    if workers is None:
        workers = min(os.cpu_count() or 1, 8)
        if tree.folder is not None:
            size = sum((tree.folder / p).stat().st_size for p in paths)
        else:
            assert tree.archive is not None
            size = tree.archive.stat().st_size * 4
        if size < PARALLEL_BYTES:
            workers = 1
    if workers <= 1 or len(paths) < 2:
        return _mine_batch(tree, paths)
    batches = [paths[i :: workers * 4] for i in range(workers * 4)]
    results: list[FileResult] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for batch in pool.map(_mine_batch, [tree] * len(batches), batches):
            results.extend(batch)
    results.sort(key=lambda r: r.path)
    return results


# --- the whole run -------------------------------------------------------------------------


@dataclass(slots=True)
class MineReport:
    """What mining found and how much of it the library recognises."""

    source: str
    version: str
    candidates: list[Candidate]
    failures: list[Failure]
    counts: Counter[str]
    parse_errors: list[tuple[str, str]]
    matched: dict[str, str] = field(default_factory=dict)  # candidate id -> signature id
    library: tuple[str, ...] = ()

    @property
    def unmatched(self) -> list[Candidate]:
        return [c for c in self.candidates if c.id not in self.matched]

    def by_category(self) -> dict[str, tuple[int, int]]:
        table: dict[str, list[int]] = {}
        for c in self.candidates:
            row = table.setdefault(c.category, [0, 0])
            row[0] += 1
            row[1] += c.id in self.matched
        return {k: (v[0], v[1]) for k, v in sorted(table.items(), key=lambda kv: (-kv[1][0], kv[0]))}

    def by_kind(self) -> dict[str, int]:
        counts = Counter(f"{c.statement.kind} naming {c.kind}" for c in self.candidates)
        return dict(sorted(counts.items()))

    def by_scope(self) -> dict[str, dict[str, int]]:
        """Mined statements per top-level folder: `srt/` is the LLM runtime, the rest is not served."""
        table: dict[str, dict[str, int]] = {}
        for c in self.candidates:
            scope = c.statement.path.split("/", 1)[0] if "/" in c.statement.path else "(top)"
            row = table.setdefault(scope, {"raise": 0, "assert": 0})
            row[c.statement.kind] += 1
        return dict(sorted(table.items(), key=lambda kv: -sum(kv[1].values())))

    def same_message(self) -> dict[str, list[Candidate]]:
        """Candidate id -> the other candidates raising the same exception with the same message."""
        groups: dict[tuple[str, str], list[Candidate]] = {}
        for c in self.candidates:
            groups.setdefault((c.statement.exception.rsplit(".", 1)[-1], c.pattern), []).append(c)
        return {c.id: [o for o in group if o is not c] for group in groups.values() if len(group) > 1 for c in group}

    def top_unmatched_files(self, limit: int = 10) -> list[tuple[str, int]]:
        return Counter(c.statement.path for c in self.unmatched).most_common(limit)


def mine(path_or_name: str, workers: int | None = None) -> MineReport:
    tree = locate(path_or_name)
    results = mine_tree(tree, workers)
    counts: Counter[str] = Counter()
    statements: list[Statement] = []
    failures: list[Failure] = []
    errors: list[tuple[str, str]] = []
    for result in results:
        counts.update(result.counts)
        statements.extend(result.statements)
        failures.extend(result.failures)
        if result.error:
            errors.append((result.path, result.error))
    taken: set[str] = set()
    candidates = [make_candidate(s, taken) for s in statements]
    return MineReport(tree.label, tree.version(), candidates, failures, counts, errors)


def measure_coverage(report: MineReport, library: Library, matcher: Matcher | None = None) -> None:
    """Diagnose every candidate's example traceback with the library, as a live crash would be."""
    matcher = matcher or Matcher(library)
    report.library = library.folders
    report.matched = {}
    for candidate in report.candidates:
        chosen, _ = diagnose_example(Example(text=candidate.traceback), matcher)
        if chosen is not None:
            report.matched[candidate.id] = chosen.signature_id


# --- candidate files -----------------------------------------------------------------------


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
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


_Dumper.add_representer(str, _str_representer)


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
        f"{_TODO}: SGLang raises this {st.printed_type} at `{st.source}` (in `{st.function}`); "
        f"the message names {flag_text}.\n"
        f"Template: `{st.template.display.strip()[:400]}`\n"
        + (f"The same message is raised at {', '.join(f'`{o.statement.source}`' for o in same)}.\n" if same else "")
        + "\n## How to confirm\n"
        f"`journalctl -u UNIT -g '{grep}'`\n\n"
        "## Safe fix\n"
        f"{_TODO}: which flag to change, and to what.\n\n"
        "## Roll back\n"
        f"{_TODO}: restore the previous launch script (or remove the drop-in) and restart the unit.\n"
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
    entry["fix"] = {"summary": f"{_TODO}: " + (f"change {', '.join(flags)}" if flags else "say what to change")}
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


def write_candidates(report: MineReport, out: Path) -> list[Path]:
    """One file per category; files of categories with no candidate are left alone."""
    out.mkdir(parents=True, exist_ok=True)
    grouped: dict[str, list[Candidate]] = {}
    for c in report.candidates:
        if not c.problem:
            grouped.setdefault(c.category, []).append(c)
    same = report.same_message()
    written: list[Path] = []
    for category, candidates in sorted(grouped.items()):
        path = out / f"{category}.yaml"
        header = (
            f"# Candidate signatures mined from {PACKAGE} {report.version or '(unknown version)'} by "
            "`crashdoc signatures mine`.\n"
            "# Unreviewed: every TODO(review) needs a human; a shipped signature needs a real fix and a near-miss.\n"
        )
        body = yaml.dump(
            {"signatures": [candidate_entry(c, report.version, same.get(c.id, ())) for c in candidates]},
            Dumper=_Dumper,
            sort_keys=False,
            allow_unicode=True,
            width=120,
        )
        tmp = path.with_suffix(".yaml.tmp")
        tmp.write_text(header + body, encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    return written


# --- reports -------------------------------------------------------------------------------


def report_json(report: MineReport) -> dict[str, Any]:
    matched = len(report.matched)
    return {
        "source": report.source,
        "sglang": report.version,
        "definition": DEFINITION,
        "library": list(report.library),
        "counts": {
            "files": report.counts["files"],
            "files_read": report.counts["files_parsed"],
            "files_parsed_whole": report.counts["files_parsed_whole"],
            "raise": report.counts["raise"],
            "raise_constructing": report.counts["raise_call"],
            "raise_by_helper": report.counts["raise_helper"],
            "assert": report.counts["assert"],
            "assert_with_message": report.counts["assert_message"],
            "mined": len(report.candidates),
            "mined_raise": report.counts["raise_mined"],
            "mined_assert": report.counts["assert_mined"],
        },
        "by_kind": report.by_kind(),
        "matched": matched,
        "unmatched": len(report.candidates) - matched,
        "by_category": {k: {"mined": v[0], "matched": v[1]} for k, v in report.by_category().items()},
        "top_unmatched_files": [{"file": f, "unmatched": n} for f, n in report.top_unmatched_files()],
        "by_scope": report.by_scope(),
        "rebuild_failures": [
            {"source": f.source, "reason": f.reason, "names_flag": f.names_flag, "mined": f.mined}
            for f in report.failures
        ],
        "same_message": {k: [o.id for o in v] for k, v in sorted(report.same_message().items())},
        "parse_errors": [{"file": p, "error": e} for p, e in report.parse_errors],
        "example_problems": [{"id": c.id, "problem": c.problem} for c in report.candidates if c.problem],
        # `--Foo`, `--foo_bar`: named in a message but not in argparse's spelling, so not in `flags`
        "odd_flags": [{"id": c.id, "flags": list(c.odd_flags)} for c in report.candidates if c.odd_flags],
        "matches": [{"id": k, "signature": v} for k, v in sorted(report.matched.items())],
        "unmatched_ids": [c.id for c in report.unmatched],
    }


def report_text(report: MineReport) -> str:
    total = len(report.candidates)
    matched = len(report.matched)
    lines = [
        f"{PACKAGE} {report.version or '(unknown version)'} at {report.source}",
        f"files: {report.counts['files']} ({report.counts['files_parsed']} mention a flag or SGLANG_ and were read; "
        f"{report.counts['files_parsed_whole']} had to be parsed whole)",
        f"statements read in definitions that name a flag: {report.counts['raise']} raise "
        f"({report.counts['raise_call']} construct an exception, {report.counts['raise_helper']} via a helper), "
        f"{report.counts['assert']} assert ({report.counts['assert_message']} with a message)",
        f"mined: {total} ({report.counts['raise_mined']} raise, {report.counts['assert_mined']} assert)",
    ]
    for kind, n in report.by_kind().items():
        lines.append(f"  {kind:<24} {n:>5}")
    scopes = ", ".join(f"{scope}/ {v['raise']} raise + {v['assert']} assert" for scope, v in report.by_scope().items())
    lines.append(f"  by folder: {scopes}")
    failures = report.failures
    naming = [f for f in failures if f.names_flag]
    lines.append(
        f"not rebuilt: {len(failures)} statements with a message ({len(naming)} show a flag or SGLANG_ variable "
        f"in text they could be built from; {sum(f.mined for f in failures)} mined with a hole)"
    )
    for reason, n in Counter(_reason_kind(f.reason) for f in failures).most_common(8):
        lines.append(f"  {reason:<44} {n:>5}")
    for f in naming[:20]:
        lines.append(f"  {'mined' if f.mined else 'missed'}: {f.source}: {f.reason}")
    if report.parse_errors:
        lines.append(f"files that do not parse: {len(report.parse_errors)}")
    same = report.same_message()
    if same:
        groups = {frozenset([c, *(o.id for o in others)]) for c, others in same.items()}
        lines.append(f"same message raised in several places: {len(same)} statements, {len(groups)} messages")
    problems = [c for c in report.candidates if c.problem]
    if problems:
        lines.append(f"examples that do not match their own pattern: {len(problems)}")
    pct = f"{100 * matched / total:.1f}%" if total else "-"
    lines.append("")
    lines.append(
        f"coverage by the library ({', '.join(report.library) or 'built-in'}): {matched} of {total} matched "
        f"({pct}), {total - matched} not matched"
    )
    lines.append(f"  {'category':<18} {'mined':>6} {'matched':>8} {'unmatched':>10}")
    for category, (n, m) in report.by_category().items():
        lines.append(f"  {category:<18} {n:>6} {m:>8} {n - m:>10}")
    top = report.top_unmatched_files()
    if top:
        lines.append("top unmatched files:")
        for path, n in top:
            lines.append(f"  {n:>5}  {path}")
    return "\n".join(lines) + "\n"


def _reason_kind(reason: str) -> str:
    first = reason.split(";", 1)[0]
    return re.sub(r"\d+ places", "N places", re.sub(r"`[^`]*`", "`...`", first))[:44]


def run(
    path: str,
    library: Library,
    out: str | None = None,
    as_json: bool = False,
    stream: Any = None,
) -> int:
    """`crashdoc signatures mine`: mine, measure coverage, write candidates, print the report."""
    stream = stream or sys.stdout
    report = mine(path)
    measure_coverage(report, library)
    if out:
        written = write_candidates(report, Path(out))
        if not as_json:
            stream.write(f"wrote {len(written)} candidate file(s) to {out}\n")
    if as_json:
        stream.write(json.dumps(report_json(report), indent=1) + "\n")
    else:
        stream.write(report_text(report))
    return 0
