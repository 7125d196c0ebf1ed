"""Illegal memory access and device-side asserts: SGLang or kernel bugs; how to confirm, find and report them."""

from __future__ import annotations

import re

from crashdoc.events import FlagChange
from crashdoc.remedy.actions.common import Action, Inputs


def kernel_fault_action(inputs: Inputs, what: str) -> Action:
    tb = inputs.traceback
    frames = [f"{f.file}:{f.function}" for exc in (tb.chain if tb else ()) for f in exc.frames]
    in_graph = any(re.search(r"cuda_graph|graph_runner|replay", f) for f in frames)
    # 0.5.2x: --cuda-graph-backend-decode disabled; older releases (whose server_args has no such field): the
    # boolean --disable-cuda-graph
    old = "--disable-cuda-graph" in inputs.flags and "--cuda-graph-backend-decode" not in inputs.flags
    switch = "--disable-cuda-graph" if old else "--cuda-graph-backend-decode disabled"
    change = (
        FlagChange("add", "--disable-cuda-graph")
        if old
        else FlagChange("set", "--cuda-graph-backend-decode", "disabled")
    )
    where = "during CUDA-graph replay" if in_graph else "in a kernel"
    why = [
        f"The {what} surfaced {where}; CUDA reports it asynchronously, so the frame shown may not be the kernel "
        "that failed.",
        f"To confirm whether CUDA graphs are involved, run once with `{switch}` (slower decode): "
        "if the error goes away, the graph path is at fault.",
        "To find the kernel, run once with CUDA_LAUNCH_BLOCKING=1 (much slower): the traceback then stops at "
        "the launch that failed.",
        "Report it upstream (https://github.com/sgl-project/sglang/issues) with: the full traceback, the "
        "server_args line, `python -m sglang.check_env`, the request that triggers it if known, and "
        "`dmesg -T | grep -i xid` from the node.",
    ]
    changes = [change] if in_graph else []
    summary = (
        f"an SGLang or kernel bug ({what} {where}); to confirm and get the unit up, disable decode CUDA graphs "
        f"(`{switch}`), then rerun with CUDA_LAUNCH_BLOCKING=1 and report it upstream"
        if in_graph
        else f"an SGLang or kernel bug ({what}); rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel, try "
        f"`{switch}` to rule out graphs, and report it upstream"
    )
    return Action(summary=summary, changes=changes, why=why)
