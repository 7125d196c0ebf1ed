"""Scores `crashdoc explain --json` against labelled logs: category, root-cause line, flags, healthy logs.

A labelled folder holds logs and a `labels.jsonl`, one object per log: `file`, `category` (None for a
healthy log, or `healthy: true`), `key_message` (the root-cause line a right answer names; None when
the label does not say), `flags` (the flags or variables the fix must change; [] when no flag change is
expected). The real corpus (`../shared/corpus/real`) has the same fields except `flags`.

- category: the first diagnosis's category is the label's;
- root cause: the first diagnosis's root-cause line is the label's key message (spaces at the ends aside);
- flags: every labelled flag is changed by the first diagnosis's fix (`flag` or `new_flag` of a change);
- healthy: a healthy log gives no diagnosis at all (warnings are fine: handled errors).

    PYTHONPATH=src:tests python -m support.scoring tests/fixtures/authored ../shared/corpus/real
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.explaining import explain_each


@dataclass
class Score:
    """One labelled folder's figures, with what was missed."""

    name: str
    category: list[int] = field(default_factory=lambda: [0, 0])  # right, asked
    root_cause: list[int] = field(default_factory=lambda: [0, 0])
    flags: list[int] = field(default_factory=lambda: [0, 0])
    healthy: list[int] = field(default_factory=lambda: [0, 0])  # diagnosed (wrong), healthy logs
    misses: list[str] = field(default_factory=list)

    @staticmethod
    def share(pair: list[int]) -> float:
        return pair[0] / pair[1] if pair[1] else 1.0

    def lines(self) -> list[str]:
        def fmt(label: str, pair: list[int]) -> str:
            return f"  {label:<12} {pair[0]:>3}/{pair[1]:<3} {100 * self.share(pair):5.1f} %"

        return [
            f"{self.name}:",
            fmt("category", self.category),
            fmt("root cause", self.root_cause),
            fmt("flags", self.flags),
            f"  {'healthy':<12} {self.healthy[0]:>3}/{self.healthy[1]:<3} diagnosed",
        ]


def labels(folder: Path) -> list[dict[str, Any]]:
    text = (folder / "labels.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def explain_json(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """`crashdoc explain --json` over the logs through the real entry point: {file name: its document}."""
    status, docs = explain_each(paths)
    if status not in (0, 1):  # 1: a failure found in some log; 3 (a log not read) or 4 (no library) is wrong here
        raise RuntimeError(f"crashdoc explain exited {status}")
    return docs


def changed_flags(diagnosis: dict[str, Any]) -> set[str]:
    """The flags and variables a diagnosis's fix changes."""
    out: set[str] = set()
    for change in diagnosis["fix"]["changes"]:
        out.add(change["flag"])
        if change.get("new_flag"):
            out.add(change["new_flag"])
    return out


def score_folder(folder: Path, name: str = "") -> Score:
    rows = labels(folder)
    docs = explain_json([folder / r["file"] for r in rows])
    score = Score(name or folder.name)
    for row in rows:
        diagnoses = docs[row["file"]]["diagnoses"]
        if row.get("healthy") or row.get("category") is None:
            score.healthy[1] += 1
            if diagnoses:
                score.healthy[0] += 1
                score.misses.append(f"{row['file']}: healthy, diagnosed {diagnoses[0]['signature']}")
            continue
        first = diagnoses[0] if diagnoses else None
        score.category[1] += 1
        if first is not None and first["category"] == row["category"]:
            score.category[0] += 1
        else:
            got = first["category"] if first else "no diagnosis"
            score.misses.append(f"{row['file']}: category {got}, want {row['category']}")
        if row.get("key_message"):
            score.root_cause[1] += 1
            line = first["root_cause"]["line"].strip() if first else ""
            if line == row["key_message"].strip():
                score.root_cause[0] += 1
            else:
                score.misses.append(f"{row['file']}: root cause {line[:120]!r}")
        wanted = row.get("flags") or []
        if wanted:
            score.flags[1] += 1
            have = changed_flags(first) if first else set()
            if set(wanted) <= have:
                score.flags[0] += 1
            else:
                score.misses.append(f"{row['file']}: fix changes {sorted(have)}, want {wanted}")
    return score


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m support.scoring", description=__doc__.split("\n", 1)[0])
    p.add_argument("folders", nargs="+", type=Path, help="folders with logs and a labels.jsonl")
    p.add_argument("--misses", action="store_true", help="list what each folder missed")
    a = p.parse_args(argv)
    for folder in a.folders:
        if not (folder / "labels.jsonl").is_file():
            print(f"{folder}: no labels.jsonl, skipped", file=sys.stderr)
            continue
        score = score_folder(folder)
        print("\n".join(score.lines()))
        if a.misses:
            print("\n".join(f"    {m}" for m in score.misses))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
