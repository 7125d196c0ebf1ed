"""`crashdoc signatures list|test|lint|mine|derive`: the signature library and its tools."""

from __future__ import annotations

import argparse
import json

from crashdoc.commands.pipeline import load_library_or_fail
from crashdoc.errors import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, UserError


def main(args: argparse.Namespace) -> int:
    from crashdoc.authoring.selftest import lint_library, test_library
    from crashdoc.matching.matcher import Matcher

    if args.action == "mine":
        return mine(args)
    if args.action == "derive":
        return derive(args)
    library = load_library_or_fail(args.dirs or None)
    if args.action == "list":
        rows = [
            {
                "id": s.id,
                "category": s.category,
                "severity": s.severity,
                "flags": list(s.flags),
                "source": s.origin,
                "kind": s.kind,
            }
            for s in library.signatures
        ]
        if args.json:
            print(json.dumps(rows, indent=1))
        else:
            width = max(len(r["id"]) for r in rows)
            for r in rows:
                print(f"{r['id']:<{width}}  {r['category']:<17} {r['severity']:<8} {' '.join(r['flags'])}")
            print(f"{len(rows)} signatures")
        return EXIT_OK
    matcher = Matcher(library)
    if args.action == "test":
        count, failures = test_library(library, matcher)
        for failure in failures:
            print(failure)
        print(f"{count} examples in {len(library)} signatures: {len(failures)} failed")
        return EXIT_PROBLEM if failures else EXIT_OK
    if args.action == "lint":
        count, failures = test_library(library, matcher)
        problems = [*failures, *lint_library(library, matcher)]
        for problem in problems:
            print(problem)
        print(f"{len(library)} signatures: {len(problems)} problem(s)")
        return EXIT_PROBLEM if problems else EXIT_OK
    return EXIT_USAGE


def mine(args: argparse.Namespace) -> int:
    """Candidate signatures from SGLang's source, and how much of it the library covers."""
    from crashdoc.authoring.mine import MineError, run

    library = load_library_or_fail(args.signatures)
    try:
        return run(args.path, library, out=args.out, as_json=args.json)
    except MineError as exc:
        raise UserError(str(exc)) from exc
    except OSError as exc:
        raise UserError(f"{exc.filename or args.out}: {exc.strerror or exc}") from exc


def derive(args: argparse.Namespace) -> int:
    """Derived signatures of one SGLang tree: a summary, every signature as JSON, or the data file."""
    from collections import Counter
    from pathlib import Path

    from crashdoc.authoring.derive import DeriveError, derive_source
    from crashdoc.matching.derived import dumps, to_dict

    try:
        library = derive_source(Path(args.source))
    except DeriveError as exc:
        raise UserError(str(exc)) from exc
    if args.out:
        try:
            Path(args.out).write_bytes(dumps(library))
        except OSError as exc:
            raise UserError(f"{args.out}: {exc.strerror or exc}") from exc
    signatures = list(library.signatures())
    if args.json:
        print(json.dumps([to_dict(s) for s in signatures], indent=1, ensure_ascii=False))
        return EXIT_OK
    actions = Counter(s.fix[0].action if s.fix else "none" for s in signatures)
    release = ", ".join(library.releases)
    print(f"SGLang {release}: {len(signatures)} derived signatures (one per exception type and message template)")
    for action, n in sorted(actions.items(), key=lambda kv: -kv[1]):
        print(f"  fix {action:<8} {n:>5}")
    if args.out:
        print(f"wrote {args.out}")
    return EXIT_OK
