"""Message templates: SGLang's message text rebuilt from the raising statement, holes where only run time knows."""

from __future__ import annotations

import ast
import dataclasses
import re
import string
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from crashdoc.authoring.mine.base import ENV, FLAG, MAX_CHOICES, MAX_RESOLVE_DEPTH

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
        return display(self.parts)

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


def display(parts: Iterable[Part], hole: Callable[[Hole], str] = lambda p: "{" + p.expr + "}") -> str:
    """The template as text: each hole as `hole` writes it, branches as `(a|b)`, appended text as `[a]`."""
    out: list[str] = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
        elif p.choices:
            body = "|".join(display(c, hole) for c in p.choices)
            out.append(f"[{body}]" if p.optional else f"({body})")
        else:
            out.append(hole(p))
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


class Scope:
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


class Rebuilder:
    """Rebuilds message templates for the statements of one module."""

    def __init__(self, module: ast.Module) -> None:
        self.module_scope = Scope(module)

    def template(self, node: ast.AST, scopes: Sequence[Scope], depth: int = 0) -> list[Part]:
        """The parts of the text `node` evaluates to; a hole where it cannot be read."""
        if depth > MAX_RESOLVE_DEPTH:
            return [Hole(source_text(node), gap="names refer to each other too deeply")]
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return [node.value]
            return (
                [str(node.value)]
                if isinstance(node.value, int | float) and not isinstance(node.value, bool)
                else [Hole(source_text(node))]
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
        return [Hole(source_text(node), _capture_name(node))]

    def _formatted(self, value: ast.FormattedValue, scopes: Sequence[Scope], depth: int) -> list[Part]:
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
        return [Hole(source_text(inner), _capture_name(inner), _CONVERSIONS.get(value.conversion, ""), spec)]

    def _percent(self, node: ast.BinOp, scopes: Sequence[Scope], depth: int) -> list[Part]:
        fmt = self.template(node.left, scopes, depth + 1)
        if not all(isinstance(p, str) for p in fmt):
            return [Hole(source_text(node), gap="`%` formatting of a string that is not literal")]
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
                parts.append(Hole(source_text(expr) if expr is not None else m.group("key"), name, spec=spec))
                continue
            expr = values[index] if index < len(values) and not isinstance(right, ast.Dict) else None
            index += 1
            if expr is not None and isinstance(expr, ast.Constant) and isinstance(expr.value, str) and spec == "%s":
                parts.append(expr.value)
            else:
                parts.append(Hole(source_text(expr) if expr is not None else "?", _capture_name(expr), spec=spec))
        parts.append(text[pos:])
        return _merge(parts)

    def _call(self, node: ast.Call, scopes: Sequence[Scope], depth: int) -> list[Part]:
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
        return [Hole(source_text(node))]

    def _format(self, node: ast.Call, scopes: Sequence[Scope], depth: int) -> list[Part]:
        assert isinstance(node.func, ast.Attribute)
        fmt = self.template(node.func.value, scopes, depth + 1)
        if not all(isinstance(p, str) for p in fmt):
            return [Hole(source_text(node), gap="`.format` of a string that is not literal")]
        text = "".join(fmt)  # type: ignore[arg-type]
        keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
        parts: list[Part] = []
        auto = 0
        try:
            fields = list(string.Formatter().parse(text))
        except ValueError as exc:
            return [Hole(source_text(node), gap=f"`.format` string does not parse: {exc}")]
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
            shown = (source_text(expr) if expr is not None else head or "?") + rest
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

    def _name(self, node: ast.Name, scopes: Sequence[Scope], depth: int) -> list[Part]:
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

    def _several(self, name: str, bound: list[ast.AST | None], scopes: Sequence[Scope], depth: int) -> list[Part]:
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

    def names_flag(self, node: ast.AST, scopes: Sequence[Scope], depth: int = 0) -> bool:
        """Whether a flag or SGLANG_ variable is written in text the message could be built from.

        Follows the names used into every binding the template refused to choose between, but
        only through string-building expressions, so that `subprocess.run(["--x"]).returncode`
        does not count.
        """
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and bool(FLAG.search(node.value) or ENV.search(node.value))
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


def source_text(node: ast.AST | None, limit: int = 80) -> str:
    """The expression as written (normalised by `ast.unparse`), cut at `limit` characters."""
    if node is None:
        return "?"
    try:
        text = ast.unparse(node)
    except Exception:  # unparse has no documented failure modes; a hole name is not worth a crash
        return "?"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _capture_name(node: ast.AST | None) -> str | None:
    """`tp_size` for `tp_size`, `cfg.tp_size` and `self.server_args.tp_size`; None otherwise."""
    while isinstance(node, ast.Attribute):
        if not isinstance(node.value, ast.Name | ast.Attribute):
            return None
        return node.attr if node.attr.isascii() else None
    if isinstance(node, ast.Name):
        return node.id if node.id.isascii() else None
    return None
