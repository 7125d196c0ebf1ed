"""Which change started the loop: the flag difference between the last good run and the failing one.

Most crash loops follow an edit (a launch script, a drop-in, an environment file). Saying
"the loop began 12 s after /opt/sglang/prefill.sh changed: + --hicache-size 150" turns a
diagnosis into a rollback plan. The last good command line is the one of the last run that
lived through the recovery window; the change is the newest edit of the unit's files between
that run's start and the loop's first crash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str
    at: float  # when it changed (watch event, or the file's mtime)


@dataclass(slots=True)
class ConfigChange:
    path: str
    changed_at: float
    loop_started_at: float
    added: list[str] = field(default_factory=list)  # "--hicache-size 150"
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # "--tp-size 4 -> 8"

    @property
    def lead_seconds(self) -> float:
        return max(0.0, self.loop_started_at - self.changed_at)

    def summary(self) -> str:
        parts = [f"+ {a}" for a in self.added] + [f"- {r}" for r in self.removed] + [f"~ {c}" for c in self.changed]
        diff = ", ".join(parts) if parts else "no SGLang flag changed (look at the rest of the file)"
        return f"crash loop began {self.lead_seconds:.0f} s after {self.path} changed: {diff}"

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "changed_at": self.changed_at,
            "seconds_before_loop": round(self.lead_seconds, 1),
            "added": list(self.added),
            "removed": list(self.removed),
            "changed": list(self.changed),
        }


def _flag_text(flag: str, value: str) -> str:
    return f"{flag} {value}".rstrip()


def flag_diff(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(added, removed, changed) between two flag sets, in the new command's order."""
    added = [_flag_text(f, v) for f, v in new.items() if f not in old]
    removed = [_flag_text(f, v) for f, v in old.items() if f not in new]
    changed = [f"{f} {old[f]} -> {v}".rstrip() for f, v in new.items() if f in old and old[f] != v]
    return added, removed, changed


def correlate(
    changes: Sequence[FileChange],
    loop_started_at: float,
    last_good_started_at: float | None,
    old_flags: Mapping[str, str] | None,
    new_flags: Mapping[str, str],
    horizon: float = 3600.0,
) -> ConfigChange | None:
    """The newest edit before the loop began (and after the last good run started, when known)."""
    earliest = last_good_started_at if last_good_started_at is not None else loop_started_at - horizon
    candidates = [c for c in changes if earliest <= c.at <= loop_started_at + 1.0]
    if not candidates:
        return None
    latest = max(candidates, key=lambda c: c.at)
    result = ConfigChange(latest.path, latest.at, loop_started_at)
    if old_flags is not None:
        result.added, result.removed, result.changed = flag_diff(old_flags, new_flags)
    return result
