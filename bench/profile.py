"""Where `crashdoc diagnose` spends its time: py-spy samples of the real CLI on the generated journal.

py-spy is not a dependency of crashdoc (`pip install py-spy`, or the `bench` extra); without it
this section is skipped. Prints self and inclusive shares for the functions of the hot path.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

from bench.common import DATA, ROOT, Results, library_folders, log
from bench.journal_gen import JournalSet
from bench.throughput import _env, diagnose_argv

# (label, how the frame is named in py-spy's output: "function (file.py:line)")
HOT = (
    ("JournalSource.read (sources/journal.py)", "read (crashdoc/sources/journal.py"),
    ("  line_of: a LogLine per line (called from the C batch reader)", "line_of (crashdoc/sources/journal_batch.py"),
    ("  _other_entry: first lines, PID 1, core dumps, kernel lines", "_other_entry (crashdoc/sources/journal.py"),
    ("  release_journal_pages + mapped_bytes", "(crashdoc/sources/journal_pages.py"),
    ("Engine.on_line (diagnosis/engine.py)", "on_line (crashdoc/diagnosis/engine.py"),
    ("  TracebackAssembler.feed", "feed (crashdoc/assembly/traceback.py"),
    ("  Matcher.scan_line (one RE2 Set pass: markers + line signatures)", "scan_line (crashdoc/matching/matcher.py"),
    ("  find_marker (on a marker literal only)", "find_marker (crashdoc/assembly/markers.py"),
    ("  Engine.watch", "watch (crashdoc/diagnosis/engine.py"),
    ("  Engine._run_for", "_run_for (crashdoc/diagnosis/engine.py"),
    ("  Run.add_line", "add_line (crashdoc/diagnosis/run.py"),
    ("  Engine.matcher (property, per line)", "matcher (crashdoc/diagnosis/engine.py"),
    ("Engine.on_lifecycle + settle (root cause, fix)", "on_lifecycle (crashdoc/diagnosis/engine.py"),
    ("signature library load (compiled cache, or YAML + schema)", "load_library (crashdoc/matching/library.py"),
    ("imports", "_find_and_load (<frozen importlib._bootstrap>"),
)


def py_spy() -> str | None:
    local = Path(ROOT / ".venv" / "bin" / "py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


def profile(js: JournalSet, rate: int = 200) -> tuple[Counter[str], Counter[str], int]:
    tool = py_spy()
    if tool is None:
        raise FileNotFoundError("py-spy")
    folders, note = library_folders()
    argv = diagnose_argv([str(f) for f in js.files], [str(f) for f in folders] if note else [])
    out = DATA / "profile.txt"
    subprocess.run(
        [tool, "record", "--format", "raw", "--rate", str(rate), "--output", str(out), "--nonblocking", "--", *argv],
        check=True,
        capture_output=True,
        env=_env(),
        cwd=ROOT,
    )
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        for label, needle in HOT:
            if any(needle in f for f in frames):
                inclusive[label] += n
        own[_short(frames[-1])] += n
    return inclusive, own, total


def _short(frame: str) -> str:
    if not frame.strip(" ()"):
        return "(no Python frame: start-up, native code)"
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path = where.rpartition(":")[0]
    parts = Path(path).parts
    short = "/".join(parts[-2:]) if parts else path
    return f"{name} ({short})"


def run(js: JournalSet, results: Results) -> dict[str, object]:
    try:
        inclusive, own, total = profile(js)
    except FileNotFoundError:
        results.add("profile", "py-spy", "skipped", note="py-spy is not installed (pip install py-spy)")
        return {}
    log(f"profile: {total} samples")
    for label, _ in HOT:
        results.add("profile", label, f"{100 * inclusive[label] / total:.1f}% of samples", note="inclusive")
    top = own.most_common(12)
    for name, n in top:
        results.add("profile", f"self: {name}", f"{100 * n / total:.1f}%")
    doc = {"samples": total, "inclusive": dict(inclusive), "self_top": top}
    results.raw["profile"] = doc
    return doc
