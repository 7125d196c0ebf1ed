"""Reading a package: a folder, a wheel or an installed package, mined file by file (in parallel when large)."""

from __future__ import annotations

import importlib.util
import os
import re
import zipfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from crashdoc.authoring.mine.base import PACKAGE, PARALLEL_BYTES, MineError
from crashdoc.authoring.mine.source import FileResult, mine_source
from crashdoc.collector import collector_paused

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
    with collector_paused():  # parsing allocates millions of nodes; syntax trees hold no cycles
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
