"""The folder tree is the pipeline: a module imports only from its own layer or the layers below it.

Bottom modules (events, gpu_events, diagnosis_records, failure_records, unit_records, errors, redact, text,
yamlfile, lean, collector) import nothing of crashdoc's layers; sources < assembly < matching < diagnosis < remedy <
authoring < outputs < config < runtime < commands < cli. The sandbox is test and demo infrastructure, imported only by
commands and the tests. The engine's working records are its own: the rest of the package reads what it publishes
(diagnosis.views).
"""

from __future__ import annotations

import ast
from pathlib import Path

import crashdoc

PACKAGE = Path(crashdoc.__file__).resolve().parent
BENCH = PACKAGE.parents[1] / "bench"
# the engine's working state: what it changes as lines arrive (its views are what others read)
WORKING_RECORDS = frozenset(
    {"UnitRecord", "Run", "LineHit", "Handled", "LoopTracker", "Crash", "Transition", "GpuRecord"}
)
WORKING_MODULES = frozenset(
    {
        "crashdoc.diagnosis.unitrecord",
        "crashdoc.diagnosis.run",
        "crashdoc.diagnosis.crashloop",
        "crashdoc.diagnosis.failures",
        "crashdoc.diagnosis.gpustate",
    }
)
LAYERS: dict[str, int] = {
    "__init__": 0,
    "events": 0,
    "gpu_events": 0,
    "diagnosis_records": 0,
    "failure_records": 0,
    "unit_records": 0,
    "errors": 0,
    "redact": 0,
    "text": 0,
    "yamlfile": 0,
    "lean": 0,
    "collector": 0,
    "sandbox": 0,
    "sources": 1,
    "assembly": 2,
    "matching": 3,
    "diagnosis": 4,
    "remedy": 5,
    "authoring": 6,
    "outputs": 7,
    "config": 8,
    "runtime": 9,
    "commands": 10,
    "cli": 11,
    "__main__": 12,
}


def layer_of(module: str) -> tuple[str, int]:
    """`crashdoc.diagnosis.engine` -> ("diagnosis", 4)."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return top, LAYERS[top]


def imports_of(path: Path) -> list[tuple[int, str]]:
    """Every crashdoc module `path` imports, at module level or inside functions, with its line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "crashdoc" else [f"crashdoc.{a.name}" for a in node.names]
            names = ["crashdoc" if n == "crashdoc.__version__" else n for n in names]
            found.extend((node.lineno, n) for n in names if n.startswith("crashdoc"))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.startswith("crashdoc"))
    return found


def test_every_top_level_part_has_a_layer() -> None:
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or p.is_dir()}
    parts -= {"__pycache__", "signatures"}
    assert parts <= set(LAYERS), f"give these a layer in this test: {sorted(parts - set(LAYERS))}"


def test_imports_only_go_down_the_pipeline() -> None:
    upward: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = "crashdoc." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        own_top, own = layer_of(module)
        for line, imported in imports_of(path):
            top, layer = layer_of(imported)
            if top == "sandbox" and own_top not in ("sandbox", "commands"):
                upward.append(f"{path.relative_to(PACKAGE)}:{line}: only commands may use the sandbox ({imported})")
            elif layer > own:
                upward.append(f"{path.relative_to(PACKAGE)}:{line}: {own_top} imports {imported} (a layer above)")
    assert not upward, "imports that run up the pipeline:\n" + "\n".join(upward)


def working_state_imports(path: Path) -> list[str]:
    """Where `path` imports one of the engine's working records, or a module that holds them."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("crashdoc"):
            names = {a.name for a in node.names}
            if node.module in WORKING_MODULES or (
                node.module.startswith("crashdoc.diagnosis") and names & WORKING_RECORDS
            ):
                found.append(f"{path}:{node.lineno}: from {node.module} import {', '.join(sorted(names))}")
        elif isinstance(node, ast.Import):
            found.extend(f"{path}:{node.lineno}: import {a.name}" for a in node.names if a.name in WORKING_MODULES)
    return found


def test_nothing_outside_the_engine_reads_its_working_records() -> None:
    """Outputs, runtime, remedy and the commands read `diagnosis.views` (units, runs, events) and diagnoses;
    a field of a working record can then change without touching them."""
    outside = [p for p in sorted(PACKAGE.rglob("*.py")) if "diagnosis" not in p.relative_to(PACKAGE).parts]
    outside += sorted(BENCH.rglob("*.py")) if BENCH.is_dir() else []
    found = [hit for path in outside for hit in working_state_imports(path)]
    assert not found, "imports of the engine's working records outside diagnosis/:\n" + "\n".join(found)


def test_the_working_records_check_sees_an_import() -> None:
    """The check above is not blind: it finds each way of writing the import."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "probe.py")
        for code in (
            "from crashdoc.diagnosis.unitrecord import UnitRecord\n",
            "from crashdoc.diagnosis.engine import UnitRecord\n",
            "import crashdoc.diagnosis.run\n",
            "def f():\n    from crashdoc.diagnosis.crashloop import LoopState\n",
        ):
            path.write_text(code)
            assert working_state_imports(path), code
        path.write_text("from crashdoc.diagnosis.views import UnitView, RunView\n")
        assert not working_state_imports(path)
