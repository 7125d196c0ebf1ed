"""Request and token pools exhausted under load: the scheduler could not find KV slots (decode, prefill) or
request slots for what it had admitted. The values come from the log: how many requests were running (the
last "Decode batch" line), how many tokens were asked for and available (the message), the unit's flags."""

from __future__ import annotations

import re

from crashdoc.events import FlagChange
from crashdoc.remedy.actions.common import Action, Inputs, as_float, as_int

_RUNNING = re.compile(r"#running-req: (?P<n>\d+)")
_TOKENS = re.compile(r"#token: (?P<n>\d+), token usage: (?P<usage>[\d.]+)")
_ASKED = re.compile(r"Try to allocate (?P<n>\d+) tokens")
_AVAILABLE = re.compile(r"Available tokens: (?P<n>\d+)")
_REQ_SLOTS = re.compile(r"available_size\(\)=(?P<available>\d+), num_reqs=(?P<num>\d+)")
SHARE = 0.75  # keep a quarter of the pool free for the running requests' growth


def _round_down(value: int, step: int = 8) -> int:
    return max(step, value // step * step) if value >= step else max(value, 1)


def running_requests(inputs: Inputs) -> tuple[int | None, str]:
    """How many requests were running when it failed (the last batch line), and the line's words."""
    batch = inputs.run.last_batch if inputs.run is not None else ""
    m = _RUNNING.search(batch)
    if m is None:
        return None, ""
    tokens = _TOKENS.search(batch)
    usage = f", {tokens.group('n')} tokens at {float(tokens.group('usage')):.0%} of the pool" if tokens else ""
    return int(m.group("n")), f"{m.group('n')} requests were running{usage} (the last batch line)"


def max_running_action(inputs: Inputs, what: str) -> Action | None:
    """Fewer concurrent requests: --max-running-requests at SHARE of what was running (or of its value)."""
    running, said = running_requests(inputs)
    current = as_int(inputs.flags.get("--max-running-requests"))
    base = min(x for x in (running, current) if x) if (running or current) else None
    if base is None:
        return None
    new = _round_down(int(base * SHARE))
    why = []
    if said:
        why.append(f"{said}; {what}.")
    else:
        why.append(f"{what}.")
    if current:
        why.append(f"--max-running-requests is {current}.")
    why.append(
        f"{SHARE:.0%} of {base} = {base * SHARE:g}, rounded down to a multiple of 8: {new} concurrent requests leave "
        "the pool room for the running ones to grow."
    )
    return Action(
        summary=f"lower `--max-running-requests` to {new}"
        + (f" (now {current})" if current else f" ({base} were running)")
        + " so fewer requests compete for the pool",
        changes=[FlagChange("set", "--max-running-requests", str(new))],
        why=why,
    )


def token_pool_action(inputs: Inputs, signature: str) -> Action | None:
    message = inputs.finding.message
    asked, available = _ASKED.search(message), _AVAILABLE.search(message)
    detail = ""
    if asked and available:
        detail = f"a step asked for {asked.group('n')} token slots with {available.group('n')} available"
    if signature == "runtime-prefill-oom":
        return chunked_prefill_action(inputs, asked, available)
    return max_running_action(inputs, detail or "the decode step found no free KV slots")


def chunked_prefill_action(
    inputs: Inputs, asked: re.Match[str] | None, available: re.Match[str] | None
) -> Action | None:
    """A prefill chunk did not fit: a chunk size the available slots hold (a power of two, below the current)."""
    current = as_int(inputs.flags.get("--chunked-prefill-size")) or (int(asked.group("n")) if asked else None)
    if not current or current <= 0:
        return None
    free = int(available.group("n")) if available else current // 2
    new = 1
    while new * 2 <= min(free, current - 1):
        new *= 2
    new = max(new, 512)
    why = []
    if asked and available:
        why.append(f"The prefill step asked for {asked.group('n')} token slots and {free} were available.")
    why.append(
        f"--chunked-prefill-size {current}: the largest power of two below it that the {free} free slots hold is {new}."
    )
    return Action(
        summary=f"lower `--chunked-prefill-size` from {current} to {new} so each prefill step fits the free KV slots",
        changes=[FlagChange("set", "--chunked-prefill-size", str(new))],
        why=why,
    )


def req_slots_action(inputs: Inputs) -> Action | None:
    m = _REQ_SLOTS.search(inputs.finding.message)
    what = (
        f"the request table had {m.group('available')} free rows for {m.group('num')} new requests"
        if m
        else "the request table had no free row"
    )
    return max_running_action(inputs, what)


def fraction_up_action(inputs: Inputs, captures: dict[str, str] | None = None) -> Action | None:
    """The KV pool got no memory after the weights: raise --mem-fraction-static by 0.05, from the value the
    message gives (0.5.x) or the unit's own (older releases print no value)."""
    if captures and captures.get("current"):
        return None  # the signature's template computes it from the message
    current = as_float(inputs.flags.get("--mem-fraction-static"))
    if current is None:
        return Action(
            summary="raise `--mem-fraction-static` by 0.05 from its current value (the log does not show it) so the "
            "KV cache gets memory after the weights",
            changes=[FlagChange("set", "--mem-fraction-static", "<current value + 0.05>", placeholder=True)],
            why=["SGLang's message (this release's) names the flag but not its value; the command does not say it."],
        )
    new = min(round(current + 0.05, 2), 0.95)
    return Action(
        summary=f"raise `--mem-fraction-static` from {current:g} to {new:g} so the KV cache gets memory after the "
        "weights",
        changes=[FlagChange("set", "--mem-fraction-static", f"{new:g}")],
        why=[f"--mem-fraction-static {current:g} + 0.05 = {new:g} (at most 0.95)."],
    )
