"""Checks that a proposed fix does not trade one crash loop for another: "will `--hicache-ratio 2.0` fit?".

A signature names its check (`fix.safety`); the only one is `hicache-host-memory`. Its parts: the device KV
pool read from SGLang's start-up lines (`kv_pool`), the memory the unit may use, host or NUMA nodes
(`host_memory`), whether a ratio fits and which would (`hicache_check`), and the fix it proposes
(`hicache_fix`).
"""

from __future__ import annotations

from collections.abc import Sequence

from crashdoc.events import FlagChange
from crashdoc.remedy.safety.hicache_check import hicache_host_memory
from crashdoc.remedy.safety.hicache_fix import SafeFix, hicache_fix

__all__ = ["SafeFix", "safe_fix", "safety_warnings"]


def safety_warnings(name: str | None, **inputs: object) -> list[str]:
    """Run the safety check a signature names (`fix.safety`) on a given ratio; [] for none or an unknown name."""
    if name == "hicache-host-memory":
        return hicache_host_memory(**inputs)  # type: ignore[arg-type]
    return []


def safe_fix(name: str | None, changes: Sequence[FlagChange], summary: str, **inputs: object) -> SafeFix:
    """The fix as the safety check a signature names (`fix.safety`) leaves it; unchanged for none or unknown."""
    if name == "hicache-host-memory":
        return hicache_fix(changes, summary, **inputs)  # type: ignore[arg-type]
    return SafeFix(tuple(changes), ())
