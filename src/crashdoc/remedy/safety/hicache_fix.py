"""The HiCache fix the safety check proposes: the ratio the corrected command runs with, checked against the
host; when the host cannot take it, the changes carry the largest ratio that fits, or turn HiCache off."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from crashdoc.events import FlagChange, LogLine
from crashdoc.remedy.commandline import LaunchCommand
from crashdoc.remedy.safety.hicache_check import (
    AUTO_SIZE_FRACTION,
    AUTO_SIZE_SLACK,
    DEFAULT_HEADROOM,
    DEFAULT_RATIO,
    SGLANG_HOST_RESERVE,
    auto_ratio,
    auto_sizes,
    check_hicache_ratio,
    gib,
    hicache_host_memory,
    rank_count,
    ratio_text,
)
from crashdoc.remedy.safety.host_memory import HostMemory, host_memory, numa_binding
from crashdoc.remedy.safety.kv_pool import KvPool, kv_pool_from_log


def ratio_from_changes(changes: Sequence[FlagChange]) -> float | None:
    """The --hicache-ratio a fix sets (`replace ... -> --hicache-ratio 2.0`, `set`, `add`), or None."""
    ratio = None
    for c in changes:
        if _sets_ratio(c) and c.value is not None:
            try:
                ratio = float(c.value)
            except ValueError:
                continue
    return ratio


def _sets_ratio(c: FlagChange) -> bool:
    """Whether the change puts `--hicache-ratio` in the command: sets or adds it, or replaces a flag by it."""
    target = c.new_flag if c.action == "replace" and c.new_flag else c.flag
    return target == "--hicache-ratio" and c.action in ("replace", "set", "add")


@dataclass(frozen=True, slots=True)
class SafeFix:
    """What the safety check made of a fix: the changes to apply (a value the check accepts, or none that the
    host cannot take), the sentences for `Fix.warnings`, and a summary to show instead of the signature's."""

    changes: tuple[FlagChange, ...]
    sentences: tuple[str, ...]
    summary: str = ""  # "" keeps the signature's


def hicache_fix(
    changes: Sequence[FlagChange],
    summary: str,
    lines: Iterable[str | LogLine],
    inv: LaunchCommand | None,
    *,
    release: str = "",
    numa_policy: str = "",
    numa_mask: str = "",
    cpu_affinity: str = "",
    memory_max: int | None = None,
    root: Path = Path("/"),
) -> SafeFix:
    """One truth per fix: the ratio the corrected command runs with (the fix's, the command's, SGLang's
    auto-sized one on a release that has it, else the default 2.0) is checked; when the host cannot take it,
    the changes carry the largest ratio that fits, or turn HiCache off when none does, with the arithmetic."""
    changes = list(changes)
    explicit = _corrected_ratio(changes, inv)
    auto = explicit is None and auto_sizes(release) is True
    ratio = explicit if explicit is not None else DEFAULT_RATIO
    lines = list(lines)
    pool = kv_pool_from_log(lines)
    binding = numa_binding(inv, numa_policy=numa_policy, numa_mask=numa_mask, cpu_affinity=cpu_affinity, root=root)
    memory = host_memory(root, binding, memory_max)
    if pool is None or memory is None:  # said plainly by the check of the ratio as given
        sentences = hicache_host_memory(
            ratio,
            lines,
            inv,
            numa_policy=numa_policy,
            numa_mask=numa_mask,
            cpu_affinity=cpu_affinity,
            memory_max=memory_max,
            root=root,
        )
        return SafeFix(tuple(changes), tuple(sentences))
    ranks, notes = rank_count(inv, pool)
    ranks = max(ranks, pool.ranks_logged, 1)
    intro: list[str] = []
    if auto:
        seen = host_memory(root, None, memory_max) or memory  # SGLang's own view: the host, cgroup-bounded
        ratio = auto_ratio(pool, ranks, seen)
        intro.append(_auto_sentence(release, ratio, pool, ranks, seen, memory))
    check = check_hicache_ratio(ratio, pool, ranks, memory) if ratio > 0 else None
    if check is not None and check.fits:
        return SafeFix(tuple(changes), (*intro, *check.sentences, *notes))
    max_ratio = (
        check.max_ratio if check is not None else check_hicache_ratio(DEFAULT_RATIO, pool, ranks, memory).max_ratio
    )
    said = check.sentences if check is not None else ()
    verdict, rest = list(said[:1]), [s for s in said[1:] if not s.startswith(("The largest ratio", "No ratio fits"))]
    usable = max(memory.available - SGLANG_HOST_RESERVE, 0)
    if max_ratio > 0:
        value = f"{max_ratio:.1f}"
        changes, summary = _with_ratio(changes, summary, value)
        chosen = (
            f"The corrected command uses --hicache-ratio {value}, the largest that fits keeping SGLang's "
            f"{gib(SGLANG_HOST_RESERVE)} reserve and {DEFAULT_HEADROOM:.0%} headroom: {value} x "
            f"{gib(pool.bytes_per_rank)} x {ranks} = {gib(max_ratio * pool.bytes_per_rank * ranks)}, within the "
            f"{gib(usable)} left on {memory.scope} after the reserve."
        )
        off = ["An explicit ratio turns SGLang's auto-sizing off."] if auto else []
        return SafeFix(tuple(changes), (*intro, *verdict, chosen, *off, *rest, *notes), summary)
    none_fits = (
        f"No --hicache-ratio fits: {memory.scope} has {gib(memory.available)} available, {gib(usable)} after "
        f"SGLang's {gib(SGLANG_HOST_RESERVE)} reserve, {gib(usable * (1 - DEFAULT_HEADROOM))} with "
        f"{DEFAULT_HEADROOM:.0%} headroom, and even --hicache-ratio 0.1 would pin 0.1 x {gib(pool.bytes_per_rank)} "
        f"x {ranks} = {gib(0.1 * pool.bytes_per_rank * ranks)}. The corrected command turns HiCache off (no "
        "--enable-hierarchical-cache); turn it on again once the unit may use more memory (more NUMA nodes, a "
        "larger MemoryMax=, fewer ranks per host) or its device KV pool is smaller (a lower --mem-fraction-static)."
    )
    return SafeFix(
        tuple(_hicache_off(changes)),
        (*intro, *verdict, none_fits, *notes),
        "no --hicache-ratio fits this host: turn HiCache off (remove `--enable-hierarchical-cache`)",
    )


def _auto_sentence(release: str, ratio: float, pool: KvPool, ranks: int, seen: HostMemory, memory: HostMemory) -> str:
    """The arithmetic of SGLang's own auto-sizing, and what it does not see."""
    text = (
        f"SGLang {release} sizes the HiCache host pool itself when no ratio is given: min({ratio_text(DEFAULT_RATIO)}, "
        f"({gib(seen.available)} available on the host - {gib(SGLANG_HOST_RESERVE)} reserve) / {ranks} "
        f"rank{'s' if ranks > 1 else ''} x {AUTO_SIZE_FRACTION:g} x {1 - AUTO_SIZE_SLACK:g} / "
        f"{gib(pool.bytes_per_rank)} device KV pool per rank) = {ratio:.3f}"
    )
    if ratio <= 0:
        return text + '; SGLang refuses to start ("No host memory is left for HiCache after the 10 GiB reserve").'
    if memory.scope != seen.scope:
        return text + f"; it reads the host's memory, not that of {memory.scope} ({memory.source})."
    return text + "."


def _corrected_ratio(changes: Sequence[FlagChange], inv: LaunchCommand | None) -> float | None:
    """The --hicache-ratio the corrected command passes: the fix's, else the command's unless the fix removes it;
    None when it passes none (or one that is not a literal number)."""
    ratio = ratio_from_changes(changes)
    if ratio is not None:
        return ratio
    if any(c.flag == "--hicache-ratio" and c.action in ("remove", "replace") for c in changes):
        return None
    current = inv.value("--hicache-ratio") if inv is not None else None
    try:
        return float(current) if current else None
    except ValueError:
        return None


def _with_ratio(changes: list[FlagChange], summary: str, value: str) -> tuple[list[FlagChange], str]:
    """The changes with `value` as the ratio they set (added as a `set` when they set none), and the summary
    saying it."""
    out: list[FlagChange] = []
    old = None
    for c in changes:
        if _sets_ratio(c) and c.value is not None:
            old = c.value
            c = FlagChange(c.action, c.flag, value, c.new_flag, c.placeholder)
        out.append(c)
    if old is None:
        out.append(FlagChange("set", "--hicache-ratio", value))
        return out, f"{summary}; set `--hicache-ratio {value}` (the largest ratio that fits this host)"
    said = f"--hicache-ratio {old}"
    if said in summary:
        return out, summary.replace(said, f"--hicache-ratio {value}") + (
            f" (the largest ratio that fits this host; {old} does not)"
        )
    return out, f"{summary} (with --hicache-ratio {value}: the largest ratio that fits this host)"


def _hicache_off(changes: list[FlagChange]) -> list[FlagChange]:
    """The changes without any ratio, with HiCache turned off: a flag the fix replaced by a ratio is removed."""
    out: list[FlagChange] = []
    for c in changes:
        if _sets_ratio(c):
            if c.action == "replace" and c.flag != "--hicache-ratio":
                out.append(FlagChange("remove", c.flag))
            continue
        out.append(c)
    out.append(FlagChange("remove", "--enable-hierarchical-cache"))
    return out
