"""A CUDA-graph capture that failed on something else than memory. With `--enable-torch-compile` on, the compiled
forward is what runs inside the capture (SGLang's own list of solutions names it): turning the compile off keeps
the graphs, which costs far less than `--disable-cuda-graph`, the signature's fallback."""

from __future__ import annotations

from crashdoc.events import FlagChange
from crashdoc.remedy.actions.common import Action, Inputs

_OFF = ("false", "0", "none", "no")  # server_args' `enable_torch_compile=False`; a bare flag reads ""


def compile_in_capture_action(inputs: Inputs) -> Action | None:
    """Drop `--enable-torch-compile` when the unit runs with it; None (the signature's fix) otherwise."""
    value = inputs.flags.get("--enable-torch-compile")
    if value is None or value.strip().lower() in _OFF:
        return None
    frames = {f.file for f in inputs.frames()}
    compiled = any("_dynamo" in f or "_inductor" in f for f in frames)
    why = [
        "The unit runs with --enable-torch-compile: the torch.compile'd forward is what runs inside the capture"
        + (" (torch._dynamo frames are on the stack)." if compiled else "."),
        "SGLang's own list of solutions for a failed capture: disable torch compile by not using "
        "--enable-torch-compile; CUDA graphs stay on, so decode keeps most of its speed (--disable-cuda-graph, "
        "the last resort, loses it).",
    ]
    return Action(
        summary="remove `--enable-torch-compile`: the compiled forward failed inside CUDA-graph capture; the graphs "
        "stay on without it",
        changes=[FlagChange("remove", "--enable-torch-compile")],
        why=why,
    )
