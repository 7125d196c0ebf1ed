"""Shared helpers: paths, the signature library the bench uses, process memory, result rows."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the bench measures the crashdoc of its own tree (a worktree's, not the one a venv has installed): the
# sections that run it in this process, and the sandboxes that run `package_root()` of it
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))
DATA = Path(os.environ.get("CRASHDOC_BENCH_DATA", ROOT / "bench" / "data"))
PYTHON = sys.executable
CRASHDOC = [PYTHON, "-m", "crashdoc"]
JOURNAL_REMOTE = next(
    (p for p in ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote") if Path(p).exists()),
    None,
)


def bytecode_env(env: dict[str, str]) -> dict[str, str]:
    """`env` for a timed crashdoc process that uses compiled bytecode, as an installed package does
    (pip compiles it): a shell with PYTHONDONTWRITEBYTECODE would otherwise recompile every module of
    the source tree on every start (~50 ms). The bytecode goes to bench/data, not into src/."""
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.setdefault("PYTHONPYCACHEPREFIX", str(DATA / "pycache"))
    return env


@dataclass
class Row:
    """One line of the final table."""

    section: str
    case: str
    value: str
    ratio: str = ""
    target: str = ""
    ok: bool | None = None  # None: informational
    note: str = ""


@dataclass
class Results:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict[str, object] = field(default_factory=dict)

    def add(self, *args: object, **kwargs: object) -> Row:
        row = Row(*args, **kwargs)  # type: ignore[arg-type]
        self.rows.append(row)
        return row


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@functools.cache
def library_folders() -> tuple[list[Path], str]:
    """The built-in library, or (when the working tree's library does not load, e.g. two files
    define one id while someone edits them) a copy of its files without the ones that clash.

    Returns the folders to load and a note for the report ("" when the built-in library loads)."""
    from crashdoc.matching.library import LibraryError, builtin_signature_dirs, load_file, load_library, signature_files

    folders = builtin_signature_dirs()
    try:
        load_library(folders)
        return folders, ""
    except LibraryError as exc:
        problem = str(exc.problems[0])
    snapshot = DATA / "signatures-loadable"
    shutil.rmtree(snapshot, ignore_errors=True)
    snapshot.mkdir(parents=True)
    seen: set[str] = set()
    skipped: list[str] = []
    for path in signature_files(folders):
        sigs, problems = load_file(path)
        ids = {s.id for s in sigs}
        if problems or ids & seen:
            skipped.append(path.name)
            continue
        seen |= ids
        rel = path.relative_to(folders[0]) if folders and path.is_relative_to(folders[0]) else Path(path.name)
        (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, snapshot / rel)
    return [snapshot], f"the built-in library does not load ({problem}); used it without {', '.join(skipped)}"


@functools.cache
def load_bench_library():
    from crashdoc.matching.library import load_library

    folders, note = library_folders()
    return load_library(folders), folders, note


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, ... in KiB from /proc/PID/status ({} when the process is gone)."""
    out: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.startswith("Vm") or key.startswith("Rss"):
            parts = value.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0])
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its reaped children), from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(x) for x in fields[11:15]) / ticks


def bare_python_rss_kib() -> int:
    """Baseline: VmHWM of a bare Python that imports everything the daemon imports."""
    code = (
        "import crashdoc.runtime.daemon, crashdoc.cli, crashdoc.commands.pipeline\n"
        "print(open('/proc/self/status').read())\n"
    )
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def fmt_rate(value: float) -> str:
    return f"{value:,.0f}/s"


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    if not n:
        return float("nan")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    s = sorted(values)
    if not s:
        return float("nan")
    import math

    rank = max(1, math.ceil(q / 100 * len(s)))
    return s[rank - 1]
