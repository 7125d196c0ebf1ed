"""Parsing only the pieces of a module that can hold a mined message (the rest is stubbed)."""

from __future__ import annotations

import ast
import bisect
import re

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


def parse_hot(text: str, lines: list[str]) -> ast.Module | None:
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
