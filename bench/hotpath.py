"""The hot path in pieces, for before/after: `JournalSource.read()` alone, then the engine alone.

`python -m bench.hotpath FILE...` imports crashdoc from the source tree put first on PYTHONPATH by
the caller and prints {"read": s, "engine": s, "lines": n}: the seconds to read the given journal
files (`files=`, as `diagnose --file` does) into events, and to feed those events through
`Engine` as `diagnose` does. Rates are per entry *in the files*, so a reader that skips
unwatched entries is credited for it. `run()` alternates two source trees round by round and
keeps each one's fastest round (the VM is shared: the minimum is the least disturbed measurement).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from bench.common import PYTHON, ROOT, Results, library_folders, log
from bench.journal_gen import JournalSet


def worker(files: list[str]) -> dict[str, float]:
    from crashdoc.diagnosis.engine import Engine
    from crashdoc.events import LogLine
    from crashdoc.matching.library import load_library
    from crashdoc.matching.matcher import Matcher
    from crashdoc.sources.journal import JournalSource, UnitFilter

    try:
        from crashdoc.commands.pipeline import feed
        from crashdoc.events import WatchRule
    except ImportError:  # a tree from before the one-way layers (the `--before-src` of a before/after run)
        from crashdoc.commands import feed  # type: ignore[no-redef]
        from crashdoc.sources.journal import WatchRule  # type: ignore[no-redef,attr-defined]

    matcher = Matcher(load_library(os.environ["CRASHDOC_BENCH_SIGNATURES"].split(os.pathsep)))
    source = JournalSource(UnitFilter((WatchRule("sglang*.service"),)), files=files)
    source.seek_head()
    events: list = []
    started = time.perf_counter()
    while True:
        stepped = source.stats.entries
        batch = source.read(20_000)
        events.extend(batch)
        if source.stats.entries == stepped:
            break
    read = time.perf_counter() - started
    engine = Engine(matcher)
    started = time.perf_counter()
    feed(engine, events)
    engine.finish()
    fed = time.perf_counter() - started
    return {
        "read": read,
        "engine": fed,
        "lines": sum(1 for e in events if isinstance(e, LogLine)),
        "entries": source.stats.entries,
    }


def _once(src: str, files: list[str]) -> dict[str, float]:
    folders, _ = library_folders()  # this tree's library, for both trees
    env = {"PYTHONPATH": f"{ROOT}:{src}", "CRASHDOC_BENCH_SIGNATURES": os.pathsep.join(str(f) for f in folders)}
    out = subprocess.run(
        [PYTHON, "-m", "bench.hotpath", *files], capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env}
    )
    if out.returncode != 0:
        raise RuntimeError(f"bench.hotpath with {src} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def _count(files: list[str]) -> int:
    from systemd import journal

    r = journal.Reader(files=files)
    n = 0
    while r._next():
        n += 1
    r.close()
    return n


def run(
    js: JournalSet, results: Results, before_src: str, n_files: int = 2, rounds: int = 5, after_src: str | None = None
) -> None:
    files = [str(f) for f in sorted(js.files)[:n_files]]
    entries = _count(files)
    trees = {"before": before_src, "after": after_src or str(ROOT / "src")}
    best: dict[str, dict[str, float]] = {}
    for r in range(rounds):
        for name, src in trees.items():
            doc = _once(src, files)
            log(f"  hot path round {r + 1}/{rounds} {name}: read {doc['read']:.2f} s, engine {doc['engine']:.2f} s")
            for key in ("read", "engine"):
                best.setdefault(name, {})[key] = min(best.get(name, {}).get(key, 1e9), doc[key])
            best[name]["lines"] = doc["lines"]
            best[name]["stepped"] = doc["entries"]
    results.raw["hotpath"] = best
    if best["before"]["lines"] != best["after"]["lines"]:
        results.notes.append(f"hot path: before read {best['before']['lines']} lines, after {best['after']['lines']}")
    n = entries
    lines = best["after"]["lines"]
    for key, what, per in (("read", "JournalSource.read()", n), ("engine", "Engine (on_line/on_lifecycle)", lines)):
        b, a = best["before"][key], best["after"][key]
        results.add(
            "hot path",
            f"{what}, before -> after",
            f"{b / per * 1e6:.2f} -> {a / per * 1e6:.2f} us/{'entry' if key == 'read' else 'line'}",
            f"{b / a:.2f} x faster",
            note=f"fastest of {rounds} alternating rounds; {len(files)} files, {n:,} entries, {lines:,} "
            f"watched lines; read() stepped {best['before']['stepped']:,.0f} -> "
            f"{best['after']['stepped']:,.0f}",
        )


if __name__ == "__main__":
    doc = worker(sys.argv[1:])
    print(json.dumps(doc))
