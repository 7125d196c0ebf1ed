"""A quantization method this GPU generation cannot run: SGLang names the method and both compute capabilities.
When the unit asks for the method itself (`--quantization fp8`), dropping the flag is the change; when the
checkpoint is quantized that way, no flag helps and the summary says which checkpoint or GPU does."""

from __future__ import annotations

from collections.abc import Mapping

from crashdoc.events import FlagChange
from crashdoc.remedy.actions.common import Action, Inputs


def capability_action(inputs: Inputs, captures: Mapping[str, str]) -> Action | None:
    method, low, have = captures.get("method", ""), captures.get("min", "?"), captures.get("current", "?")
    asked = inputs.flags.get("--quantization", "")
    if not method or asked.strip("'\"") != method:
        return None  # the checkpoint's own quantization: another checkpoint or another GPU, not a flag
    why = [
        f"{method} needs compute capability {low}; this GPU has {have}.",
        f"The unit asks for it with `--quantization {method}`: without the flag SGLang loads the checkpoint as it "
        "is stored (unquantized, or the quantization its config names).",
    ]
    return Action(
        summary=f"remove `--quantization {method}`: this GPU (capability {have}) cannot run it (needs {low}); a "
        "checkpoint quantized for this GPU (AWQ/GPTQ via Marlin on Ampere) keeps the memory saving",
        changes=[FlagChange("remove", "--quantization")],
        why=why,
    )
