"""Which SGLang an interpreter would import, read from files: never by running the interpreter or importing SGLang.

A unit's Python may be a venv, a conda env, Debian's system Python or a source checkout installed in editable
mode; crashdoc must not run it (a unit's interpreter may be broken, slow to start, or import CUDA on start) and
must not trust what the package index says. So the import path is rebuilt the way `site` builds it:
PYTHONPATH first, then the venv's (or the prefix's) site-packages and their `.pth` files, then Debian's
dist-packages. The first directory holding `sglang/` (or an editable install's mapping to one) is what runs;
its release is read from `sglang/_version.py` (`version.py` before 0.5) and from the `sglang-*.dist-info`
beside it. A mismatch of the two (an upgrade that left one behind) is reported, not guessed away.
Nothing here raises for a missing, unreadable or broken file: it becomes one of `problems`.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote, urlparse

# systemd's default PATH for services (systemd.exec(5)): where a bare `python3` in ExecStart is found
DEFAULT_PATH: tuple[str, ...] = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
MAX_READ = 64 * 1024  # METADATA headers, _version.py, pyvenv.cfg, .pth files: all small; more is not ours
MAX_PTH_LINES = 200
_PYTHON_NAME = re.compile(r"(?:python|pypy)(\d+(?:\.\d+)?)?")
_PYTHON_DIR = re.compile(r"python(\d+\.\d+)$")
# `__version__ = version = '0.5.23'` (_version.py, setuptools-scm) or `__version__ = "0.4.0"` (version.py before
# 0.5); only at the start of a line: 0.5.23's version.py has indented fallbacks such as "0.0.0.dev0"
_VERSION_ASSIGNMENT = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"\n]{1,64})['"]""", re.M)
_EDITABLE_MAPPING = re.compile(r"""['"]sglang['"]\s*:\s*['"]([^'"\n]+)['"]""")
_DIST_INFO = re.compile(r"sglang-([^-]+)\.dist-info$", re.I)


@dataclass(frozen=True, slots=True)
class SglangInstall:
    """The SGLang an interpreter imports, and how crashdoc knows."""

    interpreter: str  # as resolved on disk ("" when the command named none crashdoc could find)
    version: str = ""  # "" when no file says
    source: str = ""  # the `sglang/` package directory that would be imported
    dist_info: str = ""  # the `sglang-X.dist-info` directory of that install
    site: str = ""  # the import-path entry it was found in
    editable: bool = False  # an editable install (`pip install -e`): the source is a checkout
    read_from: str = ""  # the file the version was read from
    problems: tuple[str, ...] = field(default=())

    @property
    def origin(self) -> str:
        """Where the version was read, in words for evidence and pages: "/opt/venv/bin/python: .../METADATA"."""
        if not self.version:
            return ""
        what = "editable install, " if self.editable else ""
        return f"{self.interpreter or 'the source'}: {what}{self.read_from or self.site}"


@dataclass(frozen=True, slots=True)
class _Paths:
    entries: list[str]
    problems: list[str]


def read_small(path: str) -> str:
    """A small text file, bounded; OSError and UnicodeError go to the caller."""
    with open(path, "rb") as f:
        return f.read(MAX_READ).decode("utf-8", "replace")


def which(program: str, path: Sequence[str] = DEFAULT_PATH) -> str | None:
    """Where `program` is found on `path` (as a shell would look it up), or None."""
    if "/" in program:
        return program if os.path.isfile(program) else None
    for folder in path:
        candidate = posixpath.join(folder, program)
        if os.path.isfile(candidate):
            return candidate
    return None


def shebang_interpreter(script: str) -> str | None:
    """The interpreter a console script (`/opt/venv/bin/sglang`) names on its first line, or None."""
    try:
        with open(script, "rb") as f:
            first = f.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if not words:
        return None
    if posixpath.basename(words[0]) == "env" and len(words) > 1:  # `#!/usr/bin/env python3`
        return next((w for w in words[1:] if not w.startswith("-")), None)
    return words[0]


def _pyvenv_cfg(interpreter: str) -> tuple[str, dict[str, str]] | None:
    """(venv directory, its pyvenv.cfg) when the interpreter belongs to a venv (PEP 405: the file is next to the
    executable or one level up). The link itself is looked at, not its target: a venv's python is a symlink
    to the base interpreter."""
    bindir = posixpath.dirname(interpreter)
    for folder in (bindir, posixpath.dirname(bindir)):
        cfg = posixpath.join(folder, "pyvenv.cfg")
        try:
            text = read_small(cfg)
        except OSError:
            continue
        values = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip().lower()] = value.strip()
        return folder, values
    return None


def _python_version(interpreter: str, prefix: str, cfg: dict[str, str] | None) -> list[str]:
    """The X.Y of the interpreter, read from pyvenv.cfg, its name or its symlink target; else every
    `lib/pythonX.Y` under the prefix (newest first)."""
    if cfg:
        for key in ("version_info", "version"):
            m = re.match(r"(\d+\.\d+)", cfg.get(key, ""))
            if m:
                return [m.group(1)]
    for name in (interpreter, os.path.realpath(interpreter)):
        m = _PYTHON_NAME.fullmatch(posixpath.basename(name))
        if m and m.group(1) and "." in m.group(1):
            return [m.group(1)]
    found: list[str] = []
    for lib in ("lib", "lib64"):
        try:
            names = os.listdir(posixpath.join(prefix, lib))
        except OSError:
            continue
        found.extend(m.group(1) for n in names if (m := _PYTHON_DIR.match(n)))
    return sorted(set(found), key=lambda v: tuple(int(p) for p in v.split(".")), reverse=True)


def import_path(interpreter: str, pythonpath: Sequence[str] = ()) -> _Paths:
    """The directories `interpreter` would import from, in `site`'s order (stdlib left out)."""
    entries: list[str] = [p for p in pythonpath if p]
    problems: list[str] = []
    venv = _pyvenv_cfg(interpreter)
    prefixes: list[tuple[str, dict[str, str] | None]] = []
    if venv is not None:
        folder, cfg = venv
        prefixes.append((folder, cfg))
        if cfg.get("include-system-site-packages", "false").lower() == "true":
            home = cfg.get("home", "")
            if home:
                prefixes.append((posixpath.dirname(home.rstrip("/")), None))
    else:
        real = os.path.realpath(interpreter)
        prefixes.append((posixpath.dirname(posixpath.dirname(real)), None))
    for prefix, prefix_cfg in prefixes:
        versions = _python_version(interpreter, prefix, prefix_cfg)
        if not versions:
            problems.append(f"{prefix}: no lib/pythonX.Y folder says which Python this is")
        for xy in versions:
            entries.append(posixpath.join(prefix, "lib", f"python{xy}", "site-packages"))
            entries.append(posixpath.join(prefix, "lib64", f"python{xy}", "site-packages"))
            if prefix in ("/usr", "/usr/local"):
                # Debian's Python: pip installs to /usr/local/.../dist-packages, apt to /usr/lib/python3/dist-packages
                entries.append(f"/usr/local/lib/python{xy}/dist-packages")
                entries.append("/usr/lib/python3/dist-packages")
                entries.append(f"/usr/lib/python{xy}/dist-packages")
    return _Paths(list(dict.fromkeys(entries)), problems)


def read_version_file(source: str) -> tuple[str, str]:
    """(release, file) an `sglang/` directory says it is: `_version.py` (0.5 on), `version.py` (before);
    ("", "") when neither says."""
    for name in ("_version.py", "version.py"):
        path = posixpath.join(source, name)
        try:
            text = read_small(path)
        except OSError:
            continue
        m = _VERSION_ASSIGNMENT.search(text)
        if m:
            return m.group(1).strip(), path
    return "", ""


def read_metadata_version(dist_info: str) -> str:
    """`Version:` of a dist-info's METADATA (the headers end at the first blank line); "" when absent."""
    text = read_small(posixpath.join(dist_info, "METADATA"))
    for line in text.splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "version":
            return value.strip()
    return ""


def _listdir(folder: str, problems: list[str]) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        return []
    except OSError as exc:
        problems.append(f"cannot read {folder}: {exc.strerror or exc}")
        return []


def _editable_source(site: str, names: Sequence[str], dist_info: str, problems: list[str]) -> str:
    """Where an editable install's `sglang/` is: direct_url.json, the `__editable__` finder or a `.pth` line."""
    if dist_info:
        try:
            info = json.loads(read_small(posixpath.join(dist_info, "direct_url.json")))
        except (OSError, ValueError):
            info = None
        if isinstance(info, dict) and isinstance(info.get("url"), str) and info["url"].startswith("file:"):
            root = unquote(urlparse(info["url"]).path)
            for candidate in (posixpath.join(root, "sglang"), posixpath.join(root, "python", "sglang")):
                if os.path.isdir(candidate):
                    return candidate
    for name in names:
        if name.startswith("__editable__") and "sglang" in name and name.endswith("_finder.py"):
            try:
                m = _EDITABLE_MAPPING.search(read_small(posixpath.join(site, name)))
            except OSError as exc:
                problems.append(f"cannot read {posixpath.join(site, name)}: {exc.strerror or exc}")
                continue
            if m and os.path.isdir(m.group(1)):
                return m.group(1)
    return ""


def _pth_entries(site: str, names: Sequence[str], problems: list[str]) -> list[str]:
    """Directories the site's `.pth` files add to the import path (lines that are not `import ...`)."""
    out: list[str] = []
    for name in names:
        if not name.endswith(".pth"):
            continue
        try:
            text = read_small(posixpath.join(site, name))
        except OSError as exc:
            problems.append(f"cannot read {posixpath.join(site, name)}: {exc.strerror or exc}")
            continue
        for line in text.splitlines()[:MAX_PTH_LINES]:
            line = line.strip()
            if line and not line.startswith(("#", "import ", "import\t")):
                out.append(line if line.startswith("/") else posixpath.join(site, line))
    return out


def _dist_info_in(site: str, names: Sequence[str]) -> str:
    found = [n for n in names if _DIST_INFO.match(n)]
    return posixpath.join(site, found[-1]) if found else ""


def find_sglang(
    interpreter: str, *, pythonpath: Sequence[str] = (), path: Sequence[str] = DEFAULT_PATH
) -> SglangInstall:
    """The SGLang `interpreter` (a path, or a name looked up on `path`) would import, read as files."""
    found = which(interpreter, path)
    if found is None:
        where = "" if "/" in interpreter else f" on PATH {':'.join(path)}"
        return SglangInstall(interpreter, problems=(f"interpreter {interpreter} not found{where}",))
    paths = import_path(found, pythonpath)
    problems = list(paths.problems)
    queue = list(paths.entries)
    seen: set[str] = set()
    while queue:
        site = queue.pop(0)
        if site in seen:
            continue
        seen.add(site)
        names = _listdir(site, problems)
        if not names:
            continue
        dist_info = _dist_info_in(site, names)
        source = posixpath.join(site, "sglang") if "sglang" in names else ""
        editable = False
        if source and not os.path.isdir(source):
            source = ""
        if not source and dist_info:
            source = _editable_source(site, names, dist_info, problems)
            editable = bool(source)
        if not source and not dist_info:
            # a `.pth` line (a checkout on the path) is searched right after its site directory, as `site` does
            queue[0:0] = [e for e in _pth_entries(site, names, problems) if e not in seen]
            continue
        return _read_install(found, site, source, dist_info, editable, problems)
    problems.append(f"no sglang package on {found}'s import path ({', '.join(paths.entries[:4])}...)")
    return SglangInstall(found, problems=tuple(problems))


def from_source(source: str) -> SglangInstall:
    """The install a `sglang/` directory given directly is (`python /src/sglang/launch_server.py`, --sglang-source)."""
    site = posixpath.dirname(source.rstrip("/"))
    problems: list[str] = []
    return _read_install("", site, source, _dist_info_in(site, _listdir(site, problems)), False, problems)


def _read_install(
    interpreter: str, site: str, source: str, dist_info: str, editable: bool, problems: list[str]
) -> SglangInstall:
    from_file, version_file = read_version_file(source) if source else ("", "")
    from_meta = ""
    if dist_info:
        try:
            from_meta = read_metadata_version(dist_info)
        except OSError as exc:
            problems.append(f"broken {dist_info}: cannot read METADATA ({exc.strerror or exc})")
        else:
            if not from_meta:
                problems.append(f"broken {dist_info}: METADATA has no Version")
    name_version = m.group(1) if dist_info and (m := _DIST_INFO.search(dist_info)) else ""
    if source and not from_file and not os.access(source, os.R_OK | os.X_OK):
        problems.append(f"cannot read {source}: permission denied")
    if from_file and from_meta and from_file != from_meta and not editable:
        problems.append(
            f"mixed install: {posixpath.basename(dist_info)} says {from_meta}, {source} says {from_file} "
            "(an upgrade or a copy left one behind)"
        )
    version = from_file or from_meta or name_version
    read_from = version_file if from_file else (posixpath.join(dist_info, "METADATA") if from_meta else dist_info)
    if not version:
        problems.append(f"no file under {site} says which SGLang release this is")
    return SglangInstall(
        interpreter,
        version=version,
        source=source,
        dist_info=dist_info,
        site=site,
        editable=editable,
        read_from=read_from if version else "",
        problems=tuple(problems),
    )
