"""HiCache's host pool did not fit in host memory: the ratio (or size per rank) that does, from the numbers in
SGLang's error, the ranks of the unit and its flags. The daemon's safety check (`hicache-host-memory`) then
compares the new ratio with the host's memory and its NUMA binding."""

from __future__ import annotations

import math
from collections.abc import Mapping

from crashdoc.events import FlagChange
from crashdoc.remedy.actions.common import Action, Inputs, as_float

HEADROOM = 0.9  # leave a tenth of what was free
DEFAULT_RATIO = 2.0  # SGLang's --hicache-ratio default


def host_pool_action(inputs: Inputs, captures: Mapping[str, str]) -> Action | None:
    requested, available = as_float(captures.get("requested")), as_float(captures.get("available"))
    if not requested or available is None:
        return None
    tp, tp_text = inputs.tp_size()
    ranks = tp * inputs.int_flag("--pp-size", 1) // max(inputs.int_flag("--nnodes", 1), 1) or 1
    per_rank = available * HEADROOM / ranks
    why = [
        f"A rank asked for {requested:g} GB of pinned host memory and {available:g} GB were free.",
        f"Each of the {ranks} rank(s) on this host ({tp_text}) allocates its own pool: {HEADROOM:.0%} of "
        f"{available:g} GB / {ranks} = {per_rank:.1f} GB per rank at most.",
    ]
    size = as_float(inputs.flags.get("--hicache-size"))
    if size:
        new_size = math.floor(per_rank)
        if new_size < 1:
            return Action(summary=None, changes=[], why=[*why, "Not even 1 GB per rank is free: free host memory."])
        why.append(f"--hicache-size {size:g} GB per rank -> {new_size} GB.")
        return Action(
            summary=f"lower `--hicache-size` from {size:g} to {new_size} (GB per rank) so every rank's host pool fits",
            changes=[FlagChange("set", "--hicache-size", str(new_size))],
            why=why,
        )
    ratio = as_float(inputs.flags.get("--hicache-ratio")) or DEFAULT_RATIO
    source = "" if inputs.flags.get("--hicache-ratio") else " (SGLang's default)"
    new = math.floor(ratio * per_rank / requested * 10) / 10
    why.append(
        f"--hicache-ratio {ratio:g}{source} gave {requested:g} GB per rank, so {per_rank:.1f} GB is ratio "
        f"{ratio:g} x {per_rank:.1f} / {requested:g} = {ratio * per_rank / requested:.2f}, rounded down: {new:.1f}."
    )
    warnings = []
    if new < 1.0:
        warnings.append(
            f"At --hicache-ratio {new:.1f} the host pool is smaller than the device pool and HiCache gains little: "
            "free host memory, or bind the unit to more NUMA nodes, or drop --enable-hierarchical-cache."
        )
    if new <= 0:
        return Action(summary=None, changes=[], why=why, warnings=warnings)
    return Action(
        summary=f"lower `--hicache-ratio` from {ratio:g} to {new:.1f} so every rank's host pool fits in host memory",
        changes=[FlagChange("set", "--hicache-ratio", f"{new:.1f}")],
        why=why,
        warnings=warnings,
    )
