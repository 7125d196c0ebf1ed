"""A CUDA-graph capture that failed on something else than memory. With `--enable-torch-compile` on, the compiled
forward is what runs inside the capture (SGLang's own list of solutions names it): turning the compile off keeps
the graphs, which costs far less than `--disable-cuda-graph`, the signature's fallback. A capture that failed
while SGLang's custom all-reduce registered the graphs' buffers (its frames on the stack) is that kernel's
failure: the all-reduce goes back to NCCL and the graphs stay on."""

from __future__ import annotations

from crashdoc.events import FlagChange
from crashdoc.remedy.actions.common import Action, Inputs

_OFF = ("false", "0", "none", "no")  # server_args' `enable_torch_compile=False`; a bare flag reads ""


def compile_in_capture_action(inputs: Inputs) -> Action | None:
    """Drop `--enable-torch-compile` when the unit runs with it, else the custom all-reduce when its frames failed;
    None (the signature's fix) otherwise."""
    value = inputs.flags.get("--enable-torch-compile")
    if value is None or value.strip().lower() in _OFF:
        return custom_all_reduce_in_capture_action(inputs)
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


def custom_all_reduce_in_capture_action(inputs: Inputs) -> Action | None:
    """`--disable-custom-all-reduce` when a frame of SGLang's custom all-reduce is on the failed capture's stack."""
    failed = [f for f in inputs.frames() if "custom_all_reduce" in f.file]
    if not failed:
        return None
    where = failed[-1]
    return Action(
        summary="add `--disable-custom-all-reduce`: the capture failed inside SGLang's custom all-reduce; NCCL takes "
        "its place and the CUDA graphs stay on",
        changes=[FlagChange("add", "--disable-custom-all-reduce")],
        why=[
            f"The failed capture's stack runs through the custom all-reduce ({where.file.rsplit('/', 1)[-1]}, "
            f"in {where.function}): it registers the graphs' buffers across the GPUs (P2P / IPC handles).",
            "Without it the all-reduce goes through NCCL, which captures in CUDA graphs too; --disable-cuda-graph "
            "(the last resort) would cost far more.",
        ],
    )
