"""Concrete actions for runtime failures whose message names no flag, computed from the run's own numbers.

A CUDA OOM says how much was asked for and how much was free; SGLang says, per rank, how much memory was free
before the weights, after them, after the KV pool and before graph capture; PyTorch's watchdog says how far each
rank got; SGLang's wheels say which versions they pin. Each family's module turns these into the flag to change,
to what value and why (`memory`, `collective`, `faults`, `environment`).

`refine` is a `diagnosis.report.FixRefiner`: pure, fed with the run's markers, line hits and flags.
"""

from __future__ import annotations

from collections.abc import Mapping

from crashdoc.diagnosis.report import UnitContext
from crashdoc.diagnosis.rootcause import Finding
from crashdoc.events import Fix
from crashdoc.remedy.actions.choices import invalid_choice_action
from crashdoc.remedy.actions.collective import collective_timeout_action, gloo_timeout_action
from crashdoc.remedy.actions.common import Action, Inputs
from crashdoc.remedy.actions.environment import missing_package_action, version_action
from crashdoc.remedy.actions.faults import kernel_fault_action
from crashdoc.remedy.actions.graphs import compile_in_capture_action
from crashdoc.remedy.actions.hicache import host_pool_action
from crashdoc.remedy.actions.memory import (
    graph_capture_action,
    memory_fraction_action,
    memory_of,
    parse_oom,
    weight_load_action,
)
from crashdoc.remedy.actions.parallel import (
    fp8_block_action,
    moe_block_action,
    pd_tp_action,
    tp_above_gpus_action,
    tp_divides_action,
)
from crashdoc.remedy.actions.pools import fraction_up_action, req_slots_action, token_pool_action
from crashdoc.remedy.actions.quant import capability_action

__all__ = ["Action", "Inputs", "apply_action", "compute", "refine"]

_MEMORY_PHASES = {
    "torch-oom-after-kv-pool": "the attention workspace",
    "torch-oom-kv-pool-alloc": "the KV pool allocation",
    "cuda-error-out-of-memory": "CUDA's own allocations",
    "torch-oom-generic": "the allocation",
}
_GRAPH = ("torch-oom-cuda-graph-capture", "cuda-graph-capture-oom", "cuda-graph-eagle-draft-capture-failed")
_WEIGHT_LOAD = {"torch-oom-weight-load": False, "torch-oom-transformers-fallback": True}
_CAPTURE_FAILED = (
    "cuda-graph-capture-failed",
    "cuda-graph-capture-failed-legacy",
    "cuda-graph-eagle-draft-capture-failed",
    "piecewise-cuda-graph-capture-failed",
)
_COLLECTIVE = ("nccl-collective-timeout", "nccl-watchdog-terminated", "nccl-dist-backend-abort")
_KERNEL_FAULTS = {
    "cuda-illegal-memory-access": "illegal memory access",
    "cuda-device-side-assert": "device-side assert",
}
_MISSING = ("optional-package-missing", "python-module-missing", "hicache-storage-backend-missing")
_VERSIONS = (
    "native-extension-abi-mismatch",
    "transformers-import-name-missing",
    "transformers-api-incompatible",
    "transformers-unknown-model-type",
    "package-version-too-old",
)


def compute(inputs: Inputs, signature: str | None, captures: Mapping[str, str]) -> Action | None:
    """The action for this failure, or None to keep the signature's own fix."""
    if signature is None:
        return None
    message = inputs.finding.message
    if signature in _GRAPH or signature in _MEMORY_PHASES or signature in _WEIGHT_LOAD:
        oom = parse_oom(message)
        if oom is None:
            return None
        if signature in _GRAPH:
            return graph_capture_action(inputs, oom)
        if signature in _WEIGHT_LOAD:
            return weight_load_action(inputs, oom, _WEIGHT_LOAD[signature])
        if signature == "torch-oom-generic" and memory_of(inputs).after_pool is None:
            return None  # no KV pool yet: nothing says the fraction is what to move
        return memory_fraction_action(
            inputs, oom, _MEMORY_PHASES[signature], pool=signature == "torch-oom-kv-pool-alloc"
        )
    if signature in _CAPTURE_FAILED and parse_oom(message) is None:
        return compile_in_capture_action(inputs)
    if signature == "nccl-watchdog-terminated":
        reason = captures.get("reason", "")
        for text, what in (
            ("illegal memory access", "illegal memory access"),
            ("device-side assert", "device-side assert"),
        ):
            if text in reason:
                return kernel_fault_action(inputs, what)
    if signature in _COLLECTIVE:
        return collective_timeout_action(inputs)
    if signature == "gloo-collective-timeout":
        return gloo_timeout_action(inputs, captures)
    if signature in _KERNEL_FAULTS:
        return kernel_fault_action(inputs, _KERNEL_FAULTS[signature])
    if signature in _MISSING:
        return missing_package_action(inputs, captures)
    if signature in _VERSIONS:
        return version_action(inputs, captures)
    return _runtime(inputs, signature, captures)


_TOKEN_POOLS = ("runtime-decode-oom", "runtime-token-slots-oom", "runtime-prefill-oom")
_PD_TP = ("pd-tp-size-mismatch", "pd-attn-tp-mismatch")


def _runtime(inputs: Inputs, signature: str, captures: Mapping[str, str]) -> Action | None:
    """The runtime families of parallel layouts, pools and host memory (parallel, pools, hicache)."""
    if signature == "tp-size-above-visible-gpus":
        return tp_above_gpus_action(inputs)
    if signature == "argparse-invalid-choice":
        return invalid_choice_action(inputs, captures)
    if signature == "tp-size-does-not-divide":
        return tp_divides_action(inputs, captures)
    if signature == "fp8-block-size-vs-tp":
        return fp8_block_action(inputs, captures)
    if signature == "quant-moe-block-size-vs-tp-ep":
        return moe_block_action(inputs, captures)
    if signature in _PD_TP:
        both = {
            "prefill": captures.get("prefill") or captures.get("prefill2", ""),
            "decode": captures.get("decode") or captures.get("decode2", ""),
        }
        return pd_tp_action(inputs, both)
    if signature in _TOKEN_POOLS:
        return token_pool_action(inputs, signature)
    if signature == "runtime-req-slots-oom":
        return req_slots_action(inputs)
    if signature == "hicache-host-memory-short":
        return host_pool_action(inputs, captures)
    if signature == "quant-gpu-capability-too-low":
        return capability_action(inputs, captures)
    if signature == "kv-pool-not-enough-memory":
        return fraction_up_action(inputs, dict(captures))
    return None


def refine(finding: Finding, ctx: UnitContext, fix: Fix) -> None:
    """`diagnosis.report.FixRefiner`: replace the signature's template fix with the computed one."""
    inputs = Inputs(finding, ctx.facts.flags, ctx.run, ctx.peers, ctx.unit, ctx.sglang_release)
    captures = finding.match.captures if finding.match else {}
    action = compute(inputs, finding.signature_id, captures)
    if action is None:
        return
    apply_action(fix, action)


def apply_action(fix: Fix, action: Action) -> None:
    replaced = {c.new_flag or c.flag for c in fix.changes} | {c.flag for c in action.changes}
    if action.summary is not None:
        fix.summary = action.summary
    fix.changes = list(action.changes)
    fix.why = list(action.why)
    # the template's "depends on something not in the log" warnings are answered by the computed values
    fix.warnings = [w for w in fix.warnings if not any(w.startswith(f"the value for {f} ") for f in replaced)]
    fix.warnings.extend(action.warnings)
