"""Parallel layouts that do not fit: more ranks than GPUs, quantization blocks split across ranks, prefill and
decode of different TP sizes. The TP size to set follows from the numbers in the message, the ranks the log
shows, the unit's flags and, for PD, the other unit's flags."""

from __future__ import annotations

import re
from collections.abc import Mapping

from crashdoc.events import FlagChange
from crashdoc.remedy.actions.common import Action, Inputs, as_int

_VISIBLE = re.compile(r"CUDA_VISIBLE_DEVICES'?\)?\s*[=:]\s*['\"]?(?P<ids>[\d,\s]+)")


def _power_of_two_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def tp_above_gpus_action(inputs: Inputs) -> Action:
    """--tp-size x --pp-size x --dp-size ranks, fewer GPUs: the ranks that got a GPU say how many there are."""
    tp, tp_text = inputs.tp_size()
    pp = inputs.int_flag("--pp-size", 1)
    dp = inputs.int_flag("--dp-size", 1)
    nnodes = inputs.int_flag("--nnodes", 1)
    why: list[str] = []
    ranks = sorted(inputs.rank_numbers())
    failed = sorted({int(n) for tb in _failing(inputs) for n in re.findall(r"\bTP(\d+)\b", tb)})
    visible = None
    for m in inputs.markers:
        found = _VISIBLE.search(m.text)
        if found:
            visible = len([x for x in found.group("ids").split(",") if x.strip()])
            why.append(f"The log shows CUDA_VISIBLE_DEVICES with {visible} GPU(s).")
            break
    if visible is None and failed:
        visible = min(failed)  # ranks 0 .. first failing - 1 got their GPUs
        ok = [r for r in ranks if r < visible]
        shown = f"TP0-TP{visible - 1} got theirs" if ok else f"no rank below TP{visible} failed"
        why.append(
            f"TP{failed[0]} failed in set_device (invalid device ordinal) while {shown}: the unit sees {visible} GPU(s)"
            + (f" per node ({nnodes} nodes)" if nnodes > 1 else "")
            + "."
        )
    ranks_needed = tp * pp * dp // max(nnodes, 1)
    why.append(
        f"{tp_text} x --pp-size {pp} x --dp-size {dp}"
        + (f" / --nnodes {nnodes}" if nnodes > 1 else "")
        + f" = {ranks_needed} rank(s) per node, each on a GPU of its own."
    )
    if not visible and tp_text.startswith("no --tp-size"):
        why.append("Neither the command nor the log says how many ranks or GPUs: count the unit's GPUs.")
        return Action(
            summary="set `--tp-size` (x --pp-size x --dp-size) to at most the GPUs visible to the unit "
            "(`nvidia-smi -L`, CUDA_VISIBLE_DEVICES)",
            changes=[FlagChange("set", "--tp-size", "<GPUs visible to the unit>", placeholder=True)],
            why=why,
        )
    if not visible:
        new = max(tp // 2, 1)
        why.append(f"How many GPUs the unit sees is not in the log: halving --tp-size to {new}.")
    else:
        new = max(_power_of_two_at_most(max(visible * max(nnodes, 1) // (pp * dp), 1)), 1)
        why.append(
            f"The largest power of two with {new} x {pp} x {dp}"
            + (f" / {nnodes}" if nnodes > 1 else "")
            + f" <= {visible} GPU(s) is --tp-size {new}."
        )
    warnings = [f"--tp-size {new} gives each GPU {tp // new}x the weights it had: check the model still fits."]
    if new >= tp:
        return Action(summary=None, changes=[], why=why)
    return Action(
        summary=f"lower `--tp-size` from {tp} to {new}: the unit sees fewer GPUs than it starts ranks "
        "(or make more GPUs visible to it)",
        changes=[FlagChange("set", "--tp-size", str(new))],
        why=why,
        warnings=warnings,
    )


def _failing(inputs: Inputs) -> list[str]:
    """The rank prefixes of the run's tracebacks with the same failure as the root cause."""
    run, tb = inputs.run, inputs.traceback
    if run is None or tb is None:
        return [tb.rank] if tb is not None else []
    line = tb.final.line
    return [t.rank for t in run.tracebacks if t.final.line == line] or [tb.rank]


def _tp_sizes(limit: int) -> list[int]:
    return [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= limit]


def fp8_block_action(inputs: Inputs, captures: Mapping[str, str]) -> Action | None:
    """A rank's slice of a block-quantized weight is `size` wide, not a multiple of `block`: the full width is
    size x tp, and the TP sizes that keep whole blocks on every rank follow."""
    size, block = as_int(captures.get("size")), as_int(captures.get("block"))
    if not size or not block:
        return None
    tp, tp_text = inputs.tp_size()
    full = size * tp
    why = [
        f"Each rank got {size} of the weight with {tp_text}, so it is {size} x {tp} = {full} wide in all; "
        f"{size} is not a multiple of the {block}-wide quantization block ({size} / {block} = {size / block:.2f})."
    ]
    fits = [t for t in _tp_sizes(max(tp, 1) * 8) if full % t == 0 and (full // t) % block == 0]
    if fits:
        why.append(
            "TP sizes that keep whole blocks on every rank: "
            + ", ".join(f"{t} ({full} / {t} = {full // t} = {full // t // block} x {block})" for t in fits)
            + "."
        )
    lower = [t for t in fits if t < tp]
    moe = "gate's and up's" in inputs.finding.message or "down's" in inputs.finding.message
    if moe:
        why.append(f"For MoE weights, --ep-size {tp} keeps whole experts on each rank instead (no block is split).")
    if not lower:
        if moe:
            return Action(
                summary=f"no smaller TP size keeps whole {block}-wide blocks; use expert parallelism, `--ep-size {tp}`",
                changes=[FlagChange("set", "--ep-size", str(tp))],
                why=why,
            )
        return Action(summary=None, changes=[], why=why)
    new = lower[-1]
    return Action(
        summary=f"use `--tp-size {new}` (now {tp}): at {new} each rank holds {full // new}, "
        f"{full // new // block} whole {block}-wide blocks" + (f"; or `--ep-size {tp}` for MoE weights" if moe else ""),
        changes=[FlagChange("set", "--tp-size", str(new))],
        why=why,
        warnings=[f"--tp-size {new} puts {tp // new}x the weights on each GPU: check they still fit."],
    )


def moe_block_action(inputs: Inputs, captures: Mapping[str, str]) -> Action | None:
    """(moe_intermediate_size / moe_tp_size) % weight_block_size_n != 0: the moe TP sizes that divide it."""
    inter, moe_tp, block = (as_int(captures.get(k)) for k in ("inter", "moe_tp", "block"))
    if not inter or not moe_tp or not block:
        return None
    tp, _ = inputs.tp_size()
    fits = [t for t in _tp_sizes(max(moe_tp, tp)) if inter % t == 0 and (inter // t) % block == 0]
    why = [
        f"Each rank would hold {inter} / {moe_tp} = {inter / moe_tp:g} of every expert's intermediate size, "
        f"not a multiple of the {block}-wide block."
    ]
    if fits:
        why.append(
            "moe_tp_size (= tp / ep) values that keep whole blocks: "
            + ", ".join(f"{t} ({inter} / {t} = {inter // t})" for t in fits)
            + "."
        )
    ep = max(moe_tp // (fits[-1] if fits else 1), 1)
    why.append(
        f"With --ep-size {moe_tp} each rank holds whole experts (moe_tp_size 1); "
        + (f"--ep-size {ep} gives moe_tp_size {moe_tp // ep}." if fits and ep != moe_tp else "")
    )
    return Action(
        summary=f"use expert parallelism so experts are not split: `--ep-size {moe_tp}` "
        f"(moe_tp_size = {moe_tp} / {moe_tp} = 1)",
        changes=[FlagChange("set", "--ep-size", str(moe_tp))],
        why=why,
    )


def pd_tp_action(inputs: Inputs, captures: Mapping[str, str]) -> Action | None:
    """Prefill and decode must have equal (attention) TP sizes: the other side's size, from the message or the
    other PD unit's flags."""
    mode = inputs.flags.get("--disaggregation-mode", "")
    own_tp, own_text = inputs.tp_size()
    prefill, decode = as_int(captures.get("prefill")), as_int(captures.get("decode"))
    other_role = "prefill" if mode != "prefill" else "decode"
    said = decode if other_role == "prefill" else prefill  # this unit's own size, as the message gives it
    if said and "--tp-size" not in inputs.flags:
        own_tp, own_text = said, f"{'decode' if other_role == 'prefill' else 'prefill'}={said} (the message)"
    other = prefill if other_role == "prefill" else decode
    source = f"the message says {other_role}={other}" if other else ""
    if not other:
        for unit, flags in inputs.peers:
            if flags.get("--disaggregation-mode") == other_role and as_int(flags.get("--tp-size")):
                other = as_int(flags.get("--tp-size"))
                source = f"{unit} ({other_role}) runs --tp-size {other}"
                break
    if not other:
        return Action(
            summary=f"give this unit the same `--tp-size` as the {other_role} unit (this one runs {own_tp}); the log "
            f"does not show the {other_role}'s",
            changes=[FlagChange("set", "--tp-size", f"<the {other_role} unit's --tp-size>", placeholder=True)],
            why=[f"This model's KV transfer needs equal attention TP on both sides; this unit runs {own_text}."],
        )
    if other == own_tp:
        return None
    dp_attention = "--enable-dp-attention" in inputs.flags
    attn_dp = inputs.int_flag("--attn-dp-size", inputs.int_flag("--dp-size", 1) if dp_attention else 1)
    new = other * attn_dp
    why = [
        f"{source}; this unit runs {own_text}"
        + (f" with attention DP {attn_dp} (attention TP = tp / attn-dp)" if attn_dp > 1 else "")
        + ".",
        f"This model's KV transfer needs equal attention TP on both sides: --tp-size {other}"
        + (f" x {attn_dp} = {new}" if attn_dp > 1 else "")
        + ".",
    ]
    return Action(
        summary=f"give this {mode or 'decode'} unit the {other_role}'s TP size: `--tp-size {new}` (now {own_tp}); "
        f"or change the {other_role} unit to --tp-size {own_tp // max(attn_dp, 1)}",
        changes=[FlagChange("set", "--tp-size", str(new))],
        why=why,
    )


def tp_divides_action(inputs: Inputs, captures: Mapping[str, str]) -> Action | None:
    """A dimension split over the TP ranks does not divide by --tp-size: the message's own numbers (`40 is not
    divisible by 16`) give the TP sizes that divide it; a bare `assert total_num_heads % tp_size == 0` gives none,
    and the largest power of two below the current size divides the heads of almost every model."""
    size, said_tp = as_int(captures.get("size")), as_int(captures.get("tp"))
    tp, tp_text = inputs.tp_size()
    if said_tp and "--tp-size" not in inputs.flags:
        tp, tp_text = said_tp, f"TP {said_tp} (the message)"
    if tp <= 1:
        return None
    if size:
        fits = [t for t in range(tp - 1, 0, -1) if size % t == 0]
        powers = [t for t in fits if t & (t - 1) == 0]
        new = (powers or fits)[0]
        why = [
            f"{size} does not divide by {tp_text} ({size} / {tp} = {size / tp:.2f}).",
            f"TP sizes below {tp} that divide {size}: {', '.join(str(t) for t in fits)}; "
            f"the largest power of two among them is {new}.",
        ]
    else:
        what = captures.get("what", "the heads")
        new = _power_of_two_at_most(tp - 1)
        why = [
            f"The model asserts `{what} % tp_size == 0` and fails with {tp_text}.",
            f"Head counts are multiples of a power of two for almost every model: the largest power of two below "
            f"{tp} is {new}; check `num_attention_heads` and `num_key_value_heads` in the model's config.json.",
        ]
    return Action(
        summary=f"use `--tp-size {new}` (now {tp}): the model's split across TP ranks must divide evenly",
        changes=[FlagChange("set", "--tp-size", str(new))],
        why=why,
        warnings=[f"--tp-size {new} puts {tp / new:.2g}x the weights on each GPU: check the model still fits."],
    )
