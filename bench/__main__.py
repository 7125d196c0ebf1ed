"""`python -m bench` (or `make bench`): every benchmark, one table.

    python -m bench                      # everything: 2M entries, 50 crashes, 60 s flood (~25 min)
    python -m bench --entries 200000     # a quicker run on a smaller journal
    python -m bench --only throughput,scale --rounds 1

Data (the generated journals, the synthetic libraries) goes to bench/data/ (git-ignored); the
table and the raw numbers of the last run go to bench/results/last.{txt,json}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from bench.common import ROOT, Results, log

SECTIONS = ("startup", "paste", "throughput", "catchup", "hotpath", "scale", "profile", "latency", "memory")


def table(results: Results) -> str:
    headers = ("section", "case", "value", "ratio", "target", "ok", "note")
    rows = [
        (r.section, r.case, r.value, r.ratio, r.target, "" if r.ok is None else ("yes" if r.ok else "NO"), r.note)
        for r in results.rows
    ]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    if results.notes:
        lines.append("")
        lines += [f"- {n}" for n in results.notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description="crashdoc benchmarks")
    p.add_argument("--entries", type=int, default=2_000_000, help="journal entries to generate (default 2M)")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the throughput cases")
    p.add_argument("--crashes", type=int, default=50, help="crashes for the latency bench")
    p.add_argument(
        "--latency-load", type=int, default=0, help="also measure latency while N CPU-heavy children run (e.g. 20)"
    )
    p.add_argument("--flood-seconds", type=float, default=60.0)
    p.add_argument("--flood-rate", type=float, default=10_000)
    p.add_argument("--only", default=",".join(SECTIONS), help="comma-separated: " + ", ".join(SECTIONS))
    p.add_argument("--before-src", help="also time `diagnose` with this crashdoc source tree (before/after)")
    p.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    a = p.parse_args(argv)
    only = [s.strip() for s in a.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        p.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    results = Results()
    started = time.monotonic()
    js = None
    if {"throughput", "hotpath", "scale", "profile", "memory"} & set(only):
        from bench.journal_gen import build

        js = build(a.entries)

    def section(name: str, step) -> None:
        if name not in only:
            return
        log(f"{name} ...")
        try:
            step()
        except Exception as exc:  # one broken section must not cost the others' numbers
            traceback.print_exc()
            results.add(name, "error", type(exc).__name__, ok=False, note=str(exc)[:300])
        a.results.mkdir(parents=True, exist_ok=True)
        (a.results / "partial.txt").write_text(table(results) + "\n")

    from bench import catchup, hotpath, latency, memory, paste, profile, scale, startup, throughput

    section("startup", lambda: startup.run(results))
    section("paste", lambda: paste.run(results))
    section("throughput", lambda: throughput.run(js, results, rounds=a.rounds, before_src=a.before_src))
    section("catchup", lambda: catchup.run(a.entries, results, rounds=a.rounds + 1, before_src=a.before_src))
    if a.before_src:
        section("hotpath", lambda: hotpath.run(js, results, a.before_src))
    section("scale", lambda: scale.run(js, results, rounds=3, lines=min(200_000, a.entries)))
    section("profile", lambda: profile.run(js, results))
    section("latency", lambda: latency.run(results, crashes=a.crashes, load=a.latency_load))
    section("memory", lambda: memory.run(js, results, flood_seconds=a.flood_seconds, rate=a.flood_rate))
    text = table(results)
    elapsed = time.monotonic() - started
    header = f"crashdoc bench, {time.strftime('%Y-%m-%d %H:%M')}, {a.entries:,} entries, {elapsed / 60:.1f} min\n"
    print(header + text)
    a.results.mkdir(parents=True, exist_ok=True)
    (a.results / "last.txt").write_text(header + text + "\n")
    (a.results / "last.json").write_text(
        json.dumps(
            {
                "args": vars(a) | {"results": str(a.results)},
                "rows": [r.__dict__ for r in results.rows],
                "notes": results.notes,
                "raw": results.raw,
            },
            indent=1,
            default=str,
        )
    )
    failed = [r for r in results.rows if r.ok is False]
    if failed:
        log(f"{len(failed)} target(s) missed: " + "; ".join(f"{r.section}: {r.case}" for r in failed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
