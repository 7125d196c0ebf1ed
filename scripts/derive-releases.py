#!/usr/bin/env python3
"""Build the shipped derived signatures: every SGLang release in signatures/derived-releases.txt.

Each release's wheel is taken from the cache folder (downloaded there with
`pip download --no-deps sglang==X` when missing), read as files (never installed nor
imported), derived, and the releases merged into one deduplicated record per message
template, written to src/crashdoc/matching/data/derived/ (matching/derived_store.py: an index of
what matching reads, and the rest of the records in chunks by release range).

    PYTHONPATH=src python scripts/derive-releases.py [--wheels DIR] [--jobs N] [VERSION ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ROOT / "signatures" / "derived-releases.txt"
OUT = ROOT / "src" / "crashdoc" / "matching" / "data" / "derived"


def wheel_for(version: str, cache: Path) -> Path:
    found = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[-1]
    print(f"downloading sglang=={version} into {cache}", file=sys.stderr)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={version}", "-d", str(cache)],
        check=True,
    )
    found = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip downloaded no wheel for sglang=={version} (a source-only release?)")
    return found[-1]


def release_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """The options both derive scripts take: the releases (default: signatures/derived-releases.txt), the wheels."""
    parser.add_argument("versions", nargs="*", help=f"releases to {what} (default: signatures/derived-releases.txt)")
    parser.add_argument("--wheels", default=str(ROOT / ".cache" / "sglang-wheels"), help="wheel cache folder")


def releases_and_cache(args: argparse.Namespace) -> tuple[list[str], Path]:
    """The releases asked for (else the list file's, without comments) and the wheel cache folder, made."""
    versions = args.versions or [
        v.strip() for v in RELEASES.read_text().splitlines() if v.strip() and not v.startswith("#")
    ]
    cache = Path(args.wheels)
    cache.mkdir(parents=True, exist_ok=True)
    return versions, cache


def derive_one(version: str, wheel: str) -> tuple[str, bytes, float]:
    from crashdoc.authoring.derive import derive_source
    from crashdoc.matching.derived import dumps

    start = time.monotonic()
    library = derive_source(Path(wheel), workers=1, release=version)
    return version, dumps(library), time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    release_arguments(parser, "derive")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default=str(OUT), help="the folder of the shipped layout")
    args = parser.parse_args()

    from crashdoc.matching.derived import DerivedLibrary, loads, release_key, stored_rows
    from crashdoc.matching.derived_store import write_shipped

    versions, cache = releases_and_cache(args)
    wheels = {v: str(wheel_for(v, cache)) for v in versions}
    merged = DerivedLibrary([], ())
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(derive_one, v, wheels[v]) for v in sorted(versions, key=release_key)]
        for future in futures:
            version, raw, seconds = future.result()
            one = loads(raw)
            print(f"{version:<14} {len(one):>5} signatures  {seconds:5.1f} s", file=sys.stderr)
            merged = merged.merged(one)
    written = write_shipped(stored_rows(merged), merged.releases, Path(args.out))
    size = sum(p.stat().st_size for p in written)
    files = f"{len(written)} files, {size / 1e6:.2f} MB"
    print(f"{len(merged)} signatures over {len(merged.releases)} releases -> {args.out} ({files})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
