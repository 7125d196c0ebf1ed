"""Library scale: lines per second through the real engine path with 10, 150 and 1000 signatures.

The 10 are spread over the built-in library (both kinds, line and traceback); 150 and 1000 are the
built-in library plus synthetic signatures in the real format: copies of real entries (YAML, same
schema, same regex shapes) whose first long literal word is renamed, in the pattern and in the
examples alike, so they compile like the real ones but do not fire on the real lines. The input is
the events `JournalSource.read()` returns for the generated journal, fed through `Engine.on_line` /
`on_lifecycle` exactly as `crashdoc diagnose` does.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import yaml

from bench.common import DATA, Results, fmt_rate, load_bench_library, log, median
from bench.journal_gen import JournalSet

SIZES = (10, 150, 1000)
_WORD = re.compile(r"(?<![\\\w])[A-Za-z]{5,}(?!\w)")


def _rename(pattern: str, n: int) -> tuple[str, str, str] | None:
    m = _WORD.search(pattern)
    if m is None:
        return None
    word = m.group(0)
    new = f"{word}q{n:x}z"
    return pattern[: m.start()] + new + pattern[m.end() :], word, new


def synthetic_folder(total: int) -> Path:
    """A folder holding the built-in library plus synthetic signatures, `total` in all."""
    from crashdoc.matching.library import load_library, signature_files

    real, folders, _ = load_bench_library()
    out = DATA / f"signatures-{total}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for path in signature_files(folders):
        shutil.copy(path, out / f"{path.parent.name}-{path.name}")
    need = total - len(real)
    entries = []
    for path in signature_files(folders):
        entries.extend(yaml.safe_load(path.read_text())["signatures"])
    made: list[dict] = []
    n = 0
    while len(made) < need:
        for entry in entries:
            if len(made) >= need:
                break
            match = entry["match"]
            key = "line" if "line" in match else "message" if "message" in match else None
            if key is None:
                continue
            renamed = _rename(match[key], n)
            if renamed is None:
                continue
            pattern, word, new = renamed
            clone = yaml.safe_load(yaml.safe_dump(entry))
            clone["id"] = f"synthetic-{n}-{entry['id']}"[:80].rstrip("-")
            clone["match"][key] = pattern
            for group in ("match", "no_match"):
                for ex in clone.get("examples", {}).get(group, []) or []:
                    if isinstance(ex, dict) and "text" in ex:
                        ex["text"] = ex["text"].replace(word, new)
            made.append(clone)
            n += 1
    for i in range(0, len(made), 100):
        (out / f"synthetic-{i // 100:03d}.yaml").write_text(
            yaml.safe_dump({"signatures": made[i : i + 100]}, sort_keys=False, width=200)
        )
    lib = load_library([out])
    if len(lib) != total:
        raise RuntimeError(f"synthetic library has {len(lib)} signatures, wanted {total}")
    return out


def libraries(sizes=SIZES):
    from crashdoc.matching.library import Library, load_library

    real, _, _ = load_bench_library()
    out = {}
    for size in sizes:
        if size <= len(real):
            sigs = real.signatures
            step = len(sigs) / size
            out[size] = Library(tuple(sigs[int(i * step)] for i in range(size)))
        else:
            out[size] = load_library([synthetic_folder(size)])
    return out


def load_events(js: JournalSet, limit: int) -> list:
    from crashdoc.events import WatchRule
    from crashdoc.sources.journal import JournalSource, UnitFilter

    source = JournalSource(UnitFilter((WatchRule("sglang*.service"),)), files=[str(f) for f in js.files])
    source.seek_head()
    events: list = []
    while len(events) < limit:
        batch = source.read(20_000)
        if not batch:
            break
        events.extend(batch)
    source.close()
    return events[:limit]


def feed_once(lib, events) -> tuple[float, int]:
    from crashdoc.commands.pipeline import feed
    from crashdoc.diagnosis.engine import Engine
    from crashdoc.matching.matcher import Matcher

    engine = Engine(Matcher(lib))
    started = time.perf_counter()
    feed(engine, events)
    engine.finish()
    seconds = time.perf_counter() - started
    return seconds, len(engine.diagnoses())


def run(
    js: JournalSet, results: Results, rounds: int = 3, lines: int = 200_000, sizes: tuple[int, ...] = SIZES
) -> dict[int, float]:
    from crashdoc.events import LogLine

    libs = libraries(sizes)
    events = load_events(js, lines)
    n_lines = sum(1 for e in events if isinstance(e, LogLine))
    log(f"library scale: {n_lines:,} lines, {len(events) - n_lines} PID 1 records, libraries {list(libs)}")
    times: dict[int, list[float]] = {size: [] for size in libs}
    found: dict[int, int] = {}
    feed_once(libs[sizes[0]], events[:2000])  # warm-up
    for _ in range(rounds):
        for size, lib in libs.items():
            seconds, found[size] = feed_once(lib, events)
            times[size].append(seconds)
    rate = {size: n_lines / median(t) for size, t in times.items()}
    base = rate[sizes[0]]
    results.raw["scale"] = {"lines": n_lines, "seconds": times, "rate": rate, "diagnoses": found}
    for size in libs:
        row = results.add(
            "library scale",
            f"engine path, {size} signatures",
            fmt_rate(rate[size]) + " lines",
            f"{rate[size] / base:.2f} x {sizes[0]}",
            note=f"{found[size]} diagnoses",
        )
        if size == max(libs):
            row.target = f">= 0.8 x {sizes[0]}"
            row.ok = rate[size] >= 0.8 * base
    return rate
