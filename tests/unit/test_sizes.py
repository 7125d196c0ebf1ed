"""One module, one job (issue 23's size rule): no module of the package over 600 lines, no class over 25
methods. A file or class past the bound is split by job; the ones main holds past it today are listed in
`OVER` with the size they may not grow beyond, until they are split."""

from __future__ import annotations

import ast
from pathlib import Path

import crashdoc

PACKAGE = Path(crashdoc.__file__).resolve().parent
MAX_LINES = 600
MAX_METHODS = 25
# past the bound, each with the most it may hold; its docstring says why it must be one (not a place to add to)
OVER = {
    "diagnosis/engine.py: class Engine": 28,  # one interface: 7 inputs, 7 views, state, settings (issue 27: +3)
}


def oversized(path: Path, root: Path = PACKAGE) -> list[str]:
    """What in `path` is past the bounds, in words (named from `root`)."""
    text = path.read_text(encoding="utf-8")
    found = []
    lines = text.count("\n")
    if lines > MAX_LINES:
        found.append(f"{path.relative_to(root)}: {lines} lines (at most {MAX_LINES})")
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.ClassDef):
            methods = sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body)
            where = f"{path.relative_to(root)}: class {node.name}"
            if methods > OVER.get(where, MAX_METHODS):
                found.append(f"{where} has {methods} methods")
            elif methods > MAX_METHODS and "More methods than" not in (ast.get_docstring(node) or ""):
                found.append(f"{where} has {methods} methods and no docstring that says why")
    return found


def test_no_module_or_class_is_past_the_size_bounds() -> None:
    """Every part of the package (sources/ included), not only the ones split so far."""
    modules = sorted(PACKAGE.rglob("*.py"))
    assert any(p.parent.name == "sources" for p in modules)
    found = [problem for path in modules for problem in oversized(path)]
    assert not found, "split these by job:\n" + "\n".join(found)


def test_the_size_check_sees_a_long_module_and_a_large_class(tmp_path: Path) -> None:
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_LINES + 1))
    large = tmp_path / "large.py"
    large.write_text("class Big:\n" + "".join(f"    def m{i}(self): ...\n" for i in range(MAX_METHODS + 1)))
    small = tmp_path / "small.py"
    small.write_text("class Small:\n" + "".join(f"    def m{i}(self): ...\n" for i in range(MAX_METHODS)))
    assert oversized(long, tmp_path) == [f"long.py: {MAX_LINES + 1} lines (at most {MAX_LINES})"]
    assert oversized(large, tmp_path) == [f"large.py: class Big has {MAX_METHODS + 1} methods"]
    assert oversized(small, tmp_path) == []
