#!/usr/bin/env python3
"""Build the shipped argument facts: every option of every SGLang release in signatures/derived-releases.txt.

Each release's wheel is taken from the cache folder (downloaded there with `pip download --no-deps sglang==X`
when missing, as scripts/derive-releases.py does), its `srt/server_args.py` and `srt/arg_groups/` read as files
with `ast` (never installed nor imported), and the releases merged into one deduplicated record per distinct
option declaration, written to src/crashdoc/remedy/data/argfacts.json.gz.

    PYTHONPATH=src python scripts/derive-argfacts.py [--wheels DIR] [VERSION ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "crashdoc" / "remedy" / "data" / "argfacts.json.gz"


def _derive_releases():  # the one downloader and release list, shared with derive-releases.py
    spec = importlib.util.spec_from_file_location("derive_releases", ROOT / "scripts" / "derive-releases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    shared = _derive_releases()
    shared.release_arguments(parser, "read")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()

    from crashdoc.authoring.argfacts import facts_of
    from crashdoc.authoring.mine.tree import locate
    from crashdoc.matching.derived import release_key
    from crashdoc.remedy.argfacts import dumps, merge

    versions, cache = shared.releases_and_cache(args)
    wheel_for = shared.wheel_for
    per_release = []
    for version in sorted(versions, key=release_key):
        started = time.monotonic()
        facts = facts_of(locate(str(wheel_for(version, cache))), version)
        per_release.append(facts)
        print(f"{version:<14} {len(facts):>4} options  {time.monotonic() - started:4.1f} s", file=sys.stderr)
    library = merge(per_release, release_key)
    data = dumps(library)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(out)
    records, releases = len(library.rows), len(library.releases)
    print(f"{records} option records over {releases} releases -> {out} ({len(data) / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
