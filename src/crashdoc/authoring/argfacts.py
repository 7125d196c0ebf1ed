"""A release's own argument facts, read from its source with `ast` (never imported).

For every option SGLang's launcher accepts: its dest (the `ServerArgs` field), its flag names, the type its value
is parsed with, the choices, the default, `nargs`, and whether it is a switch (`store_true`/`store_false`). Two
ways of declaring them are read, as the releases wrote them:

- `parser.add_argument("--x", type=int, default=ServerArgs.x, choices=[...])` in `srt/server_args.py`
  (0.4 ... 0.5.1x), defaults taken from the dataclass's fields;
- fields annotated `A[T, Arg(help=..., choices=..., aliases=[...])]` (or `A[T, "help"]`) in
  `srt/arg_groups/fields/*.py` (0.5.2x), turned into options the way `add_cli_args_from_dataclass` does.

Names used for choices and defaults (`choices=ATTENTION_BACKEND_CHOICES`) are looked up among the module-level
literals of the files read and of the modules they import names from; what only exists at run time (a registry
filled by imports) is recorded as unknown, never guessed. `remedy.argfacts` loads what this writes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from crashdoc.authoring.mine.tree import SourceTree
from crashdoc.remedy.argfacts import UNKNOWN, ArgFacts, Option

SERVER_ARGS = "srt/server_args.py"
FIELDS_DIR = "srt/arg_groups/"
_SWITCH_ACTIONS = {"store_true": "store_true", "store_false": "store_false"}
_TYPE_NAMES = {"int": "int", "float": "float", "str": "str", "bool": "bool"}
MAX_IMPORTED = 40  # modules read for names (choices.py, quantization's list...): a bound, not a crawl


class _Names:
    """Module-level literal values by name (`X = [...]`, `class C: A = (...)` as `C.A`), evaluated lazily."""

    def __init__(self) -> None:
        self.nodes: dict[str, ast.expr] = {}
        self.values: dict[str, Any] = {}
        self._busy: set[str] = set()

    def add_module(self, tree: ast.Module) -> None:
        for stmt in tree.body:
            self._add(stmt, "")

    def _add(self, stmt: ast.stmt, prefix: str) -> None:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            self.nodes.setdefault(prefix + stmt.targets[0].id, stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            self.nodes.setdefault(prefix + stmt.target.id, stmt.value)
        elif isinstance(stmt, ast.ClassDef) and not prefix:
            for inner in stmt.body:
                self._add(inner, stmt.name + ".")

    def get(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        node = self.nodes.get(name)
        if node is None or name in self._busy:
            return UNKNOWN
        self._busy.add(name)
        try:
            value = self.evaluate(node)
        finally:
            self._busy.discard(name)
        self.values[name] = value
        return value

    def evaluate(self, node: ast.expr) -> Any:
        """A literal value, built only from literals, known names, `+`, and list()/sorted()/keys(); else UNKNOWN."""
        try:
            return self._eval(node)
        except (TypeError, ValueError, RecursionError, AttributeError):
            return UNKNOWN

    def _eval(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value if not isinstance(node.value, bytes) else UNKNOWN
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = self._eval(node.operand)
            return -value if isinstance(value, int | float) and not isinstance(value, bool) else UNKNOWN
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items = [self._eval(e) for e in node.elts]
            if any(i is UNKNOWN for i in items):
                return UNKNOWN
            return items if not isinstance(node, ast.Set) else sorted(set(items), key=str)
        if isinstance(node, ast.Dict):
            keys = [self._eval(k) if k is not None else UNKNOWN for k in node.keys]
            values = [self._eval(v) for v in node.values]
            if any(k is UNKNOWN or isinstance(k, list | dict) for k in keys):
                return UNKNOWN
            return dict(zip(keys, values, strict=True))
        if isinstance(node, ast.Name):
            return self.get(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return self.get(f"{node.value.id}.{node.attr}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self._eval(node.left), self._eval(node.right)
            if isinstance(left, list) and isinstance(right, list):
                return left + right
            if isinstance(left, str) and isinstance(right, str):
                return left + right
            return UNKNOWN
        if isinstance(node, ast.Call):
            return self._call(node)
        return UNKNOWN

    def _call(self, node: ast.Call) -> Any:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "keys" and not node.args:
            base = self._eval(func.value)
            return list(base) if isinstance(base, dict) else UNKNOWN
        if isinstance(func, ast.Name) and func.id in ("list", "sorted", "tuple", "set", "frozenset") and node.args:
            base = self._eval(node.args[0])
            if isinstance(base, dict):
                base = list(base)
            if not isinstance(base, list):
                return UNKNOWN
            return sorted(base, key=str) if func.id in ("sorted", "set", "frozenset") else list(base)
        return UNKNOWN


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None


def _imported_modules(tree: ast.Module) -> list[str]:
    """Package-relative files of `from sglang.x.y import NAME` statements (relative imports left out)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang.") and not node.level:
            out.append(node.module[len("sglang.") :].replace(".", "/"))
    return out


def _read(tree: SourceTree, paths: Sequence[str]) -> dict[str, str]:
    have = set(tree.files())
    wanted = [p for p in paths if p in have]
    return dict(tree.read_many(wanted)) if wanted else {}


def extract(tree: SourceTree) -> list[Option]:
    """Every command-line option of the release in `tree`, in declaration order (first declaration of a flag
    wins, as argparse refuses a second one)."""
    files = tree.files()
    primary = [SERVER_ARGS, *(f for f in files if f.startswith(FIELDS_DIR) and f.endswith(".py"))]
    texts = _read(tree, primary)
    modules = {path: _parse(text) for path, text in texts.items()}
    parsed = {p: m for p, m in modules.items() if m is not None}
    names = _Names()
    for module in parsed.values():  # first come, first kept: the files' own names win over imported ones
        names.add_module(module)
    imported = [mod for module in parsed.values() for mod in _imported_modules(module)]
    wanted = [p for mod in dict.fromkeys(imported) for p in (f"{mod}.py", f"{mod}/__init__.py") if p not in texts]
    for text in _read(tree, wanted[: MAX_IMPORTED * 2]).values():
        other = _parse(text)
        if other is not None:
            names.add_module(other)
    options: list[Option] = []
    seen: set[str] = set()

    def keep(option: Option) -> None:
        if not option.flags or any(f in seen for f in option.flags):
            return
        seen.update(option.flags)
        options.append(option)

    ordered = [p for p in primary if p in parsed]
    for path in ordered:  # dataclass-declared options first: add_cli_args registers them before its own
        for option in _annotated_options(parsed[path], names):
            keep(option)
    for path in ordered:
        for option in _add_argument_options(parsed[path], names):
            keep(option)
    return options


# --- parser.add_argument(...) ------------------------------------------------------------------------


def _add_argument_options(module: ast.Module, names: _Names) -> Iterable[Option]:
    defaults = _class_field_defaults(module, names)
    for node in ast.walk(module):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "add_argument" or not node.args:
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not flags or not all(f.startswith("-") for f in flags):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        yield _option_from_call(flags, kw, names, defaults)


def _class_field_defaults(module: ast.Module, names: _Names) -> dict[str, Any]:
    """`ServerArgs.x` -> the dataclass field's default (`field(default_factory=list)` -> [])."""
    out: dict[str, Any] = {}
    for cls in module.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                out[f"{cls.name}.{stmt.target.id}"] = _field_default(stmt.value, names)
    return out


def _field_default(node: ast.expr | None, names: _Names) -> Any:
    """A dataclass/msgspec field's default: the literal, `field(default=...)`, `field(default_factory=list)`."""
    if node is None:
        return UNKNOWN
    if isinstance(node, ast.Call):
        func = node.func
        fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if fname == "field":
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            if "default" in kw:
                return names.evaluate(kw["default"])
            factory = kw.get("default_factory")
            if isinstance(factory, ast.Name) and factory.id in ("list", "dict", "set", "tuple"):
                return [] if factory.id != "dict" else {}
            if isinstance(factory, ast.Lambda):
                return names.evaluate(factory.body)
            return UNKNOWN
    return names.evaluate(node)


def _type_name(node: ast.expr | None) -> str:
    if node is None:
        return "str"
    if isinstance(node, ast.Name):
        return _TYPE_NAMES.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = node.value.id if isinstance(node.value, ast.Name) else ""
        return "json" if (base, node.attr) == ("json", "loads") else node.attr
    return "callable"


def _nargs(node: ast.expr | None) -> str | int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int) and not isinstance(node.value, bool):
        return node.value
    return None


def _action(node: ast.expr | None) -> str:
    if node is None:
        return "store"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    if name == "BooleanOptionalAction":
        return "boolean-optional"
    if "StoreTrue" in name:
        return "store_true"
    if "StoreConst" in name:
        return "store_const"
    return name or "custom"


def _option_from_call(
    flags: list[str], kw: Mapping[str, ast.expr], names: _Names, defaults: Mapping[str, Any]
) -> Option:
    long = [f for f in flags if f.startswith("--")] or flags
    dest_node = kw.get("dest")
    dest = (
        dest_node.value
        if isinstance(dest_node, ast.Constant) and isinstance(dest_node.value, str)
        else long[0].lstrip("-").replace("-", "_")
    )
    action = _action(kw.get("action"))
    if action == "store_const" and "choices" in kw:  # a deprecated spelling that still takes its one value
        action = "store"
    choices = names.evaluate(kw["choices"]) if "choices" in kw else None
    default: Any = None
    if "default" in kw:
        node = kw["default"]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            default = defaults.get(f"{node.value.id}.{node.attr}", names.evaluate(node))
        else:
            default = names.evaluate(node)
    elif action == "store_true":
        default = False
    elif action == "store_false":
        default = True
    return Option(
        dest=dest,
        flags=tuple(flags),
        type=_type_name(kw.get("type")) if action not in _SWITCH_ACTIONS else "bool",
        choices=_choices(choices),
        default=default,
        nargs=_nargs(kw.get("nargs")),
        action=action,
        required=_true(kw.get("required")),
    )


def _choices(value: Any) -> tuple[Any, ...] | None:
    """A list of choices as JSON values; UNKNOWN stays UNKNOWN (a registry filled at run time)."""
    if value is None:
        return None
    if value is UNKNOWN:
        return UNKNOWN
    if isinstance(value, dict):
        value = list(value)
    if not isinstance(value, list):
        return UNKNOWN
    return tuple(v for v in value if isinstance(v, str | int | float | bool) or v is None)


# --- A[T, Arg(...)] fields -----------------------------------------------------------------------------


def _annotated_options(module: ast.Module, names: _Names) -> Iterable[Option]:
    for cls in module.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for stmt in cls.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            found = _annotated(stmt.annotation)
            if found is None:
                continue
            inner, meta = found
            option = _option_from_field(stmt.target.id, inner, meta, stmt.value, names)
            if option is not None:
                yield option


def _annotated(node: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    """(type, metadata) of `A[T, meta]` / `Annotated[T, meta]`."""
    if not isinstance(node, ast.Subscript):
        return None
    base = node.value
    name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
    if name not in ("A", "Annotated") or not isinstance(node.slice, ast.Tuple) or len(node.slice.elts) < 2:
        return None
    inner, *metas = node.slice.elts
    for meta in metas:
        if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
            return inner, meta
        if isinstance(meta, ast.Call) and isinstance(meta.func, ast.Name) and meta.func.id == "Arg":
            return inner, meta
    return None


def _unwrap(node: ast.expr) -> tuple[str, ast.expr]:
    """(kind, node): Optional/`| None` removed; kind is literal | list | plain."""
    while True:
        if isinstance(node, ast.Subscript) and _subscript_name(node) in ("Optional",):
            node = node.slice
            continue
        if isinstance(node, ast.Subscript) and _subscript_name(node) == "Union" and isinstance(node.slice, ast.Tuple):
            rest = [e for e in node.slice.elts if not _is_none(e)]
            if len(rest) == 1:
                node = rest[0]
                continue
            return "plain", node
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            rest = [e for e in (node.left, node.right) if not _is_none(e)]
            if len(rest) == 1:
                node = rest[0]
                continue
            return "plain", node
        break
    if isinstance(node, ast.Subscript) and _subscript_name(node) == "Literal":
        return "literal", node
    if isinstance(node, ast.Subscript) and _subscript_name(node) in ("List", "list"):
        return "list", node
    return "plain", node


def _subscript_name(node: ast.Subscript) -> str:
    base = node.value
    return base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""


def _is_none(node: ast.expr) -> bool:
    return (isinstance(node, ast.Constant) and node.value is None) or (isinstance(node, ast.Name) and node.id == "None")


def _plain_type(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id if node.id in ("int", "float", "str", "bool") else "str"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        return node.value if node.value in ("int", "float", "str", "bool") else "str"
    return "str"


def _option_from_field(
    field: str, inner: ast.expr, meta: ast.expr, value: ast.expr | None, names: _Names
) -> Option | None:
    kw: dict[str, ast.expr] = {}
    if isinstance(meta, ast.Call):
        kw = {k.arg: k.value for k in meta.keywords if k.arg}
    if _true(kw.get("no_cli")):
        return None
    cli = kw.get("cli_name")
    cli_name = (
        cli.value if isinstance(cli, ast.Constant) and isinstance(cli.value, str) else "--" + field.replace("_", "-")
    )
    aliases = names.evaluate(kw["aliases"]) if "aliases" in kw else []
    flags = (cli_name, *(a for a in (aliases if isinstance(aliases, list) else []) if isinstance(a, str)))
    default = _field_default(value, names) if value is not None else UNKNOWN
    required = value is None
    parser = kw.get("type_parser")
    choices_node = kw.get("choices")
    choices = _choices(names.evaluate(choices_node)) if choices_node is not None else None
    nargs = _nargs(kw.get("nargs"))
    kind, node = _unwrap(inner)
    if "action" in kw:
        action = _action(kw["action"])
        if action == "boolean-optional":
            flags = (*flags, *("--no-" + f[2:] for f in flags if f.startswith("--")))
        extra = kw.get("action_kwargs")
        more = (
            {k.value: v for k, v in zip(extra.keys, extra.values, strict=True) if isinstance(k, ast.Constant)}
            if (isinstance(extra, ast.Dict))
            else {}
        )
        switch = action in ("boolean-optional", "store_true", "store_false", "store_const")
        type_name = "bool" if switch else _type_name(more.get("type")) if "type" in more else _plain_type(node)
        return Option(field, flags, type_name, choices, default, nargs or _nargs(more.get("nargs")), action, False)
    if kind == "literal":
        literal = names.evaluate(node.slice) if isinstance(node, ast.Subscript) else UNKNOWN
        values = literal if isinstance(literal, list) else [literal] if literal is not UNKNOWN else None
        if choices is None and values is not None:
            choices = _choices(values)
        first = values[0] if values else ""
        type_name = _type_name(parser) if parser is not None else type(first).__name__
        return Option(field, flags, _TYPE_NAMES.get(type_name, type_name), choices, default, nargs, "store", False)
    if kind == "list" and parser is None:
        elem = node.slice if isinstance(node, ast.Subscript) else node
        return Option(field, flags, _plain_type(elem), choices, default, nargs or "+", "store", False)
    plain = _plain_type(node)
    if plain == "bool" and parser is None:
        return Option(field, flags, "bool", None, default if default is not UNKNOWN else False, None, "store_true")
    type_name = _type_name(parser) if parser is not None else plain
    return Option(field, flags, type_name, choices, default, nargs, "store", required)


def _true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def facts_of(tree: SourceTree, release: str) -> ArgFacts:
    """The facts of one release (a folder or wheel of it)."""
    return ArgFacts.of_release(release, extract(tree))
