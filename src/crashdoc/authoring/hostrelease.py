"""The host's own SGLang: which release each unit runs, and derived signatures for a release the package lacks.

The package ships derived signatures for every release on PyPI up to its build; a host may run a newer one,
a post-release, or a patched checkout. When a unit's release is not shipped, its installed source is derived
(`authoring.derive.derive_source`) in a child process (the miner's peak memory stays out of the daemon), and
the result is cached in `<state>/cache/` as JSON keyed by release and a hash of the tree's `.py` files, so a
restart or a second unit on the same install reads it back instead of deriving again. A tree that cannot be
read or derived is a warning (logged, on /healthz), never a crash: the shipped signatures still answer.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from crashdoc.lean import sha256
from crashdoc.matching.derived import DerivedLibrary, dumps, loads
from crashdoc.remedy.commandline import Reader, read_text_file
from crashdoc.remedy.release import unit_install
from crashdoc.sources.sglang_install import SglangInstall, from_source

CACHE_SCHEMA = "crashdoc-derived-tree"
CACHE_VERSION = 1
MAX_TREE_FILES = 50_000  # SGLang 0.5.23 has ~4,700 .py files; a folder far larger is not an SGLang tree
DERIVE_TIMEOUT = 900.0  # seconds for a child deriving one tree (0.5.23: about 6 s on one core)
MAX_WARNINGS = 20
_TREE_PROBLEMS = ("broken ", "mixed install", "cannot read")
_SAFE = re.compile(r"[^A-Za-z0-9._+-]")

Deriver = Callable[[Path, str, Path], DerivedLibrary]  # (sglang dir, release, cache file) -> the library


def tree_digest(source: Path) -> str:
    """sha256 over the tree's `.py` files (relative path and bytes): a patched install is another tree.
    A wheel is hashed whole."""
    from crashdoc.authoring.derive import DeriveError  # the miner is imported only to derive

    h = sha256()
    if source.is_file():
        with source.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    count = 0
    for folder, dirs, files in os.walk(source):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            count += 1
            if count > MAX_TREE_FILES:
                raise DeriveError(f"{source}: more than {MAX_TREE_FILES} .py files; not an SGLang tree")
            path = Path(folder, name)
            h.update(str(path.relative_to(source)).encode("utf-8", "surrogateescape") + b"\0")
            h.update(path.read_bytes())
            h.update(b"\0")
    if count == 0:
        raise DeriveError(f"{source}: no Python files to derive from")
    return h.hexdigest()


def cache_file(folder: Path, release: str, digest: str) -> Path:
    return folder / f"derived-{_SAFE.sub('_', release)}-{digest[:16]}.json"


def write_cache(path: Path, library: DerivedLibrary, release: str, digest: str, source: str) -> None:
    """Atomically: a reader never sees half a file."""
    body = {
        "schema": CACHE_SCHEMA,
        "version": CACHE_VERSION,
        "release": release,
        "digest": digest,
        "source": source,
        "derived": json.loads(gzip.decompress(dumps(library))),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(body, separators=(",", ":"), ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def read_cache(path: Path, release: str, digest: str) -> DerivedLibrary | None:
    """The cached library, or None when there is none, or it was written by another schema or for another tree."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(body, dict) or body.get("schema") != CACHE_SCHEMA or body.get("version") != CACHE_VERSION:
        return None
    if body.get("release") != release or body.get("digest") != digest:
        return None
    try:
        return loads(json.dumps(body.get("derived")).encode("utf-8"))
    except (ValueError, KeyError, TypeError):
        return None


def derive_in_process(source: Path, release: str, out: Path) -> DerivedLibrary:
    from crashdoc.authoring.derive import derive_source

    return derive_source(source, release=release)


def derive_in_child(source: Path, release: str, out: Path) -> DerivedLibrary:
    """Derive in a child Python (this crashdoc), which writes a scratch file: the miner's memory goes with the
    child, and the caller caches the result (`out` is where it will). Its failure is a DeriveError here, with
    the child's last line."""
    from crashdoc.authoring.derive import DeriveError

    with tempfile.TemporaryDirectory(prefix="crashdoc-derive-") as scratch:
        target = Path(scratch, "derived.json")
        cmd = [sys.executable, "-m", "crashdoc.authoring.hostrelease", str(source), release, str(target)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")) if p
        )
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=DERIVE_TIMEOUT, env=env, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DeriveError(f"deriving {source} failed: {exc}") from exc
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise DeriveError(
                said[-1].removeprefix("crashdoc: ") if said else f"deriving {source} failed (exit {done.returncode})"
            )
        try:
            body = json.loads(target.read_text(encoding="utf-8"))
            return loads(json.dumps(body["derived"]).encode("utf-8"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DeriveError(f"deriving {source}: the child wrote no usable {target} ({exc})") from exc


def derived_for(
    source: Path, release: str, folder: Path | None, derive: Deriver = derive_in_process
) -> tuple[DerivedLibrary, bool]:
    """(the tree's derived library, whether it came from the cache). Raises DeriveError for a bad tree."""
    from crashdoc.authoring.derive import DeriveError

    try:
        digest = tree_digest(source)
    except OSError as exc:
        raise DeriveError(f"cannot read {exc.filename or source}: {exc.strerror or exc}") from exc
    path = cache_file(folder, release, digest) if folder is not None else None
    if path is not None:
        cached = read_cache(path, release, digest)
        if cached is not None:
            return cached, True
    scratch = path or Path(os.devnull)
    library = derive(source, release, scratch)
    if path is not None:
        try:
            write_cache(path, library, release, digest, str(source))
        except OSError:
            pass  # a read-only or full state folder: the library still serves this process
    return library, False


@dataclass(frozen=True, slots=True)
class TreeState:
    release: str
    source: str
    status: str  # deriving | derived | cached | failed
    signatures: int = 0
    problem: str = ""


class HostReleases:
    """Which release each command line runs, and the derived library: the shipped one plus host trees'.

    `sglang_release` is what the launch reader calls before a run begins (files only, no process started);
    an unshipped release starts a derivation (in a thread when `background`), and `on_change` receives
    the merged library when it is ready. Problems are kept (bounded) for /healthz and logged once.
    """

    def __init__(
        self,
        shipped: DerivedLibrary,
        cache: Path | None,
        *,
        read: Reader = read_text_file,
        derive: Deriver = derive_in_process,
        background: bool = False,
        on_change: Callable[[DerivedLibrary], None] = lambda library: None,
        log: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.shipped = shipped
        self.cache = cache
        self._read = read
        self._derive = derive
        self._background = background
        self._on_change = on_change
        self._log = log
        self._lock = threading.Lock()
        self._library = shipped
        self.trees: dict[tuple[str, str], TreeState] = {}
        self.warnings: list[str] = []
        self._threads: list[threading.Thread] = []
        self._one_at_a_time = threading.Lock()  # one child at a time: each holds a whole tree's AST for seconds

    @property
    def library(self) -> DerivedLibrary:
        with self._lock:
            return self._library

    def warn(self, message: str, *, log: bool = True) -> None:
        """Keep a problem for /healthz (bounded, each once); log it unless it is only informative."""
        with self._lock:
            if message in self.warnings:
                return
            self.warnings.append(message)
            del self.warnings[:-MAX_WARNINGS]
        if log:
            self._log(message)

    def sglang_release(self, cmdline: tuple[str, ...]) -> tuple[str, str] | None:
        """(release, where it was read) for a unit's command line, or None; starts deriving an unshipped tree."""
        try:
            install = unit_install(cmdline, self._read)
        except (OSError, ValueError, RecursionError) as exc:  # a bug here must not cost the diagnosis
            self.warn(f"cannot tell which SGLang {' '.join(cmdline[:3])} runs: {exc}")
            return None
        if install is None:
            return None
        for problem in install.problems:  # a broken or unreadable install is logged; "no sglang here" is not
            self.warn(problem, log=problem.startswith(_TREE_PROBLEMS))
        if not install.version:
            return None
        self.ensure(install)
        return install.version, install.origin

    def ensure(self, install: SglangInstall) -> None:
        """Derive the install's tree unless its release is shipped (or already derived or failed)."""
        release, source = install.version, install.source
        if not source or release in self.shipped.releases:
            return
        key = (release, source)
        with self._lock:
            if key in self.trees:
                return
            self.trees[key] = TreeState(release, source, "deriving")
        if self._background:
            thread = threading.Thread(target=self._derive_tree, args=(key,), name="crashdoc-derive", daemon=True)
            self._threads.append(thread)
            thread.start()
        else:
            self._derive_tree(key)

    def wait(self, timeout: float | None = None) -> None:
        """Join the derivations started so far (one-shot commands and tests)."""
        for thread in list(self._threads):
            thread.join(timeout)

    def _derive_tree(self, key: tuple[str, str]) -> None:
        from crashdoc.authoring.derive import DeriveError

        release, source = key
        try:
            with self._one_at_a_time:
                library, cached = derived_for(Path(source), release, self.cache, self._derive)
        except DeriveError as exc:
            with self._lock:
                self.trees[key] = TreeState(release, source, "failed", problem=str(exc))
            self.warn(f"cannot derive signatures from SGLang {release} at {source}: {exc}")
            return
        except Exception as exc:  # a tree that breaks the miner must not stop the daemon
            with self._lock:
                self.trees[key] = TreeState(release, source, "failed", problem=repr(exc))
            self.warn(f"deriving signatures from SGLang {release} at {source} failed: {exc!r}")
            return
        self._merge(key, library, cached)
        self._log(
            f"derived signatures for SGLang {release} ({source}): {len(library)} "
            + ("(from the cache)" if cached else "(derived now)")
        )

    def _merge(self, key: tuple[str, str], library: DerivedLibrary, cached: bool) -> None:
        # under the lock, on_change included: two trees finishing together must not hand over out of order
        with self._lock:
            self._library = self._library.merged(library)
            self.trees[key] = TreeState(key[0], key[1], "cached" if cached else "derived", len(library))
            self._on_change(self._library)

    def tree_states(self) -> list[TreeState]:
        with self._lock:
            return list(self.trees.values())

    def warning_list(self) -> list[str]:
        with self._lock:
            return list(self.warnings)


def source_release(path: Path) -> str:
    """The release a `--sglang-source` names: a wheel's file name, a tree's `_version.py` or dist-info; ""."""
    if path.is_file():
        m = re.match(r"sglang-([^-]+)-", path.name)
        return m.group(1) if m else ""
    for package in (path, path / "sglang", path / "python" / "sglang"):
        if (package / "__init__.py").is_file() or (package / "_version.py").is_file():
            return from_source(str(package)).version
    return ""


def derive_option(path: Path, version: str | None, cache: Path | None) -> tuple[DerivedLibrary, str]:
    """`--sglang-source DIR|WHEEL` (and `--sglang-version`, which names its release): (its library, release).
    DeriveError says what is wrong with it."""
    from crashdoc.authoring.derive import DeriveError, derive_source

    if not path.exists():
        raise DeriveError(f"--sglang-source {path}: no such file or folder")
    release = version or source_release(path)
    if not release:
        library = derive_source(path)  # it reads the release itself, or says why it cannot
        return library, library.releases[-1] if library.releases else ""
    library, _ = derived_for(path, release, cache)
    return library, release


def _main(argv: Sequence[str]) -> int:
    """`python -m crashdoc.authoring.hostrelease SGLANG_DIR RELEASE OUT`: the child of `derive_in_child`."""
    if len(argv) != 3:
        print("usage: python -m crashdoc.authoring.hostrelease SGLANG_DIR RELEASE OUT", file=sys.stderr)
        return 2
    from crashdoc.authoring.derive import DeriveError, derive_source

    source, release, out = Path(argv[0]), argv[1], Path(argv[2])
    try:
        library = derive_source(source, release=release)
        write_cache(out, library, release, tree_digest(source), str(source))
    except DeriveError as exc:
        print(f"crashdoc: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"crashdoc: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
