"""SGLang's guarding conditions evaluated on a command's values: true, false, or unknown.

A derived check carries the `if`/`assert` condition SGLang tests (`cfg.tp_size % cfg.attn_cp_size != 0`). With
the command's values (the release's defaults for what it does not set) the condition can often be decided
without SGLang: a change that makes a raise's condition false gets past that check; one that leaves it true never
does. What the source computes at run time (a local, a resolved view, the model's config) stays unknown: three
values, never a guess. Values are the Python values argparse would give (`int`, `float`, `bool`, `None`, `str`).
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Callable, Mapping
from typing import Any

from crashdoc.remedy.argfacts import UNKNOWN, ArgFacts, Option

# what holds the parsed arguments in SGLang's checks: `cfg.x`, `self.x`, `server_args.x`, `args.x`
_HOLDERS = frozenset({"cfg", "self", "server_args", "args", "sa", "config", "record", "inputs", "raw"})
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: lambda a, b: a is b if b is None or a is None else a == b,
    ast.IsNot: lambda a, b: a is not b if b is None or a is None else a != b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_ARITH: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_CALLS: dict[str, Callable[[Any], Any]] = {"len": len, "int": int, "float": float, "str": str, "bool": bool}


@functools.lru_cache(maxsize=512)
def parse(condition: str) -> ast.expr | None:
    try:
        return ast.parse(condition.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None


def dest_of(node: ast.AST, dests: frozenset[str]) -> str | None:
    """The option a node reads: `cfg.tp_size`, `self.server_args.tp_size`, or a bare `tp_size` that is one."""
    if isinstance(node, ast.Attribute) and node.attr in dests:
        base = node.value
        if isinstance(base, ast.Name) and base.id in _HOLDERS:
            return node.attr
        if isinstance(base, ast.Attribute) and base.attr in _HOLDERS:
            return node.attr
        return None
    if isinstance(node, ast.Name) and node.id in dests:
        return node.id
    return None


def referenced(condition: str, facts: ArgFacts) -> list[str]:
    """The options a condition reads, in order."""
    tree = parse(condition)
    if tree is None:
        return []
    dests = facts.dests()
    found = [d for node in ast.walk(tree) if (d := dest_of(node, dests)) is not None]
    return list(dict.fromkeys(found))


def typed(option: Option, flag: str, words: tuple[str, ...] | None) -> Any:
    """The value argparse would store for `flag words` (words None: the flag is absent, so the default)."""
    if words is None:
        return option.default
    if option.switch:
        if option.action == "store_false" or (option.action == "boolean-optional" and flag.startswith("--no-")):
            return False
        return True if option.action != "store_const" else UNKNOWN
    if option.many:
        return [_one(option.type, w) for w in words]
    return _one(option.type, " ".join(words))


def _one(type_: str, word: str) -> Any:
    try:
        if type_ == "int":
            return int(word)
        if type_ == "float":
            return float(word)
        if type_ == "bool":
            return word.lower() in ("1", "true", "yes")
    except ValueError:
        return UNKNOWN
    if type_ in ("str", "nullable_str"):
        return None if type_ == "nullable_str" and word.lower() in ("none", "null") else word
    return UNKNOWN


def evaluate(condition: str, values: Mapping[str, Any], facts: ArgFacts) -> Any:
    """True, False or UNKNOWN: the condition on these values (dest -> value; the defaults for the others)."""
    tree = parse(condition)
    if tree is None:
        return UNKNOWN
    dests = facts.dests()

    def value_of(dest: str) -> Any:
        if dest in values:
            return values[dest]
        option = facts.by_dest(dest)
        return option.default if option is not None else UNKNOWN

    try:
        result = _eval(tree, value_of, dests)
    except (TypeError, ValueError, ZeroDivisionError, RecursionError, OverflowError):
        return UNKNOWN
    return UNKNOWN if result is UNKNOWN else bool(result)


def _eval(node: ast.AST, value_of: Callable[[str], Any], dests: frozenset[str]) -> Any:
    dest = dest_of(node, dests)
    if dest is not None:
        return value_of(dest)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        items = [_eval(e, value_of, dests) for e in node.elts]
        if any(i is UNKNOWN for i in items):
            return UNKNOWN
        return tuple(items) if not isinstance(node, ast.Set) else frozenset(items)
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, value_of, dests)
        if isinstance(node.op, ast.Not):
            return UNKNOWN if operand is UNKNOWN else not operand
        if operand is UNKNOWN:
            return UNKNOWN
        if isinstance(node.op, ast.USub):
            return -operand
        return UNKNOWN
    if isinstance(node, ast.BoolOp):
        return _bool_op(node, value_of, dests)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, value_of, dests)
        result: Any = True
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, value_of, dests)
            if left is UNKNOWN or right is UNKNOWN or type(op) not in _COMPARE:
                result = UNKNOWN if result is not False else False
            elif not _COMPARE[type(op)](left, right):
                return False
            left = right
        return result
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, value_of, dests), _eval(node.right, value_of, dests)
        if left is UNKNOWN or right is UNKNOWN or type(node.op) not in _ARITH:
            return UNKNOWN
        return _ARITH[type(node.op)](left, right)
    if isinstance(node, ast.IfExp):
        test = _eval(node.test, value_of, dests)
        if test is UNKNOWN:
            return UNKNOWN
        return _eval(node.body if test else node.orelse, value_of, dests)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _CALLS
        and len(node.args) == 1
    ):
        arg = _eval(node.args[0], value_of, dests)
        return UNKNOWN if arg is UNKNOWN else _CALLS[node.func.id](arg)
    return UNKNOWN


def _bool_op(node: ast.BoolOp, value_of: Callable[[str], Any], dests: frozenset[str]) -> Any:
    is_and = isinstance(node.op, ast.And)
    unknown = False
    for sub in node.values:
        v = _eval(sub, value_of, dests)
        if v is UNKNOWN:
            unknown = True
        elif bool(v) != is_and:  # a false operand decides `and`, a true one decides `or`
            return not is_and
    return UNKNOWN if unknown else is_and
