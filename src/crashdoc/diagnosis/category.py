"""A category for failures no signature knows, from the exception type and the module that raised it.

An unknown crash still needs an owner at 3 a.m.; the innermost SGLang frame usually says
which subsystem failed (srt/disaggregation -> disaggregation), and a few exception types
say it on their own (OutOfMemoryError -> memory).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from crashdoc.assembly.fingerprint import frame_module
from crashdoc.assembly.traceback import FATAL_TYPE
from crashdoc.events import ExceptionInfo
from crashdoc.matching.library import Signature
from crashdoc.text import LazyPattern

if TYPE_CHECKING:
    from crashdoc.diagnosis.rootcause import Finding

_BY_TYPE: tuple[tuple[str, str], ...] = (
    ("OutOfMemoryError", "memory"),
    ("MemoryError", "memory"),
    ("DistBackendError", "distributed"),
    ("DistStoreError", "distributed"),
    ("DistNetworkError", "network"),
    ("NcclError", "distributed"),
    ("ConnectionRefusedError", "network"),
    ("ConnectionResetError", "network"),
    ("TimeoutError", "network"),
    ("gaierror", "network"),
    ("KVTransferError", "disaggregation"),
    ("CompilationError", "attention-backend"),
)
_BY_MESSAGE: tuple[tuple[str, str], ...] = (
    ("out of memory", "memory"),
    ("NCCL", "distributed"),
    ("Address already in use", "network"),
    ("hicache", "hicache"),
    ("tokenizer", "tokenizer"),
    ("cuda graph", "cuda-graph"),
    ("CUDA graph", "cuda-graph"),
    ("quantiz", "quantization"),
    ("speculative", "speculative"),
    ("disaggregation", "disaggregation"),
    # a parallel size that does not fit the model or the machines (`tp_size must be divisible by number of nodes`,
    # `assert self.total_num_heads % tp_size == 0`): after the subsystems above, which name a TP size in passing
    ("tp_size", "parallelism"),
    ("tensor parallel", "parallelism"),
    ("tensor_parallel", "parallelism"),
    ("pipeline parallel", "parallelism"),
    ("pp_size", "parallelism"),
    ("ep_size", "parallelism"),
)
# (module fragment, category), most specific first
_BY_MODULE: tuple[tuple[str, str], ...] = (
    ("mem_cache.hicache", "hicache"),
    ("mem_cache.hiradix", "hicache"),
    ("mem_cache.hybrid_cache", "hicache"),
    ("hicache", "hicache"),
    # HiCache's host pools (mem_cache/pool_host/, 0.4.x memory_pool_host.py), its storage backends (the L3 tier:
    # mem_cache/storage/) and its controller (managers/cache_controller.py) before the generic mem_cache
    ("mem_cache.pool_host", "hicache"),
    ("memory_pool_host", "hicache"),
    ("mem_cache.storage", "hicache"),
    ("cache_controller", "hicache"),
    ("disaggregation", "disaggregation"),
    ("speculative", "speculative"),
    ("eagle", "speculative"),
    ("nextn", "speculative"),
    ("draft", "speculative"),
    ("layers.quantization", "quantization"),
    ("quantization", "quantization"),
    ("marlin", "quantization"),
    ("layers.attention", "attention-backend"),
    ("attention", "attention-backend"),
    ("cuda_graph", "cuda-graph"),
    ("graph_runner", "cuda-graph"),
    ("mem_cache", "memory"),
    ("distributed", "distributed"),
    ("torch.distributed", "distributed"),
    ("tokeniz", "tokenizer"),
    ("model_loader", "model-load"),
    ("configs", "model-load"),
    ("hf_transformers_utils", "model-load"),
    ("transformers.models.auto", "model-load"),
    ("arg_groups", "flag-conflict"),
    ("server_args", "flag-conflict"),
    ("utils.network", "network"),
    ("parallel_state", "parallelism"),
)


# Compiled extensions and the source folders of their kernels, as native errors name them (a `.so` that fails to
# load, the `.cu` file of a failed assertion or CUDA check): (fragment of the path, lower-cased; category).
_NATIVE: tuple[tuple[str, str], ...] = (
    ("deep_ep", "parallelism"),
    ("deepep", "parallelism"),
    ("uccl", "parallelism"),
    ("pplx", "parallelism"),
    ("mori", "parallelism"),
    ("custom_all_reduce", "distributed"),
    ("allreduce", "distributed"),
    ("all_reduce", "distributed"),
    ("nccl", "distributed"),
    ("mooncake", "disaggregation"),
    ("nixl", "disaggregation"),
    ("transfer_engine", "disaggregation"),
    ("kvcacheio", "hicache"),
    ("hicache", "hicache"),
    ("flash-attention", "attention-backend"),
    ("flash_attn", "attention-backend"),
    ("flashattention", "attention-backend"),
    ("flash_mla", "attention-backend"),
    ("flashmla", "attention-backend"),
    ("flashinfer", "attention-backend"),
    ("/attention/", "attention-backend"),
    ("cutlass_mla", "attention-backend"),
    ("deep_gemm", "quantization"),
    ("deepgemm", "quantization"),
    ("marlin", "quantization"),
    ("/gemm/", "quantization"),
    ("fp8", "quantization"),
    ("fp4", "quantization"),
    ("/quantization/", "quantization"),
    ("speculative", "speculative"),
    ("eagle", "speculative"),
    ("cuda_graph", "cuda-graph"),
)
_NATIVE_PATH = LazyPattern(
    r"[\w./+-]*[/\w-]\.(?:cu|cuh|cpp|cc|c|h|hpp|inl)\b|[\w./+-]+\.so\b[\w.]*|[\w./+-]*/(?:csrc|kernels)/[\w./+-]+"
)
# Messages that name two flags and say they do not go together: a conflict of flags, whatever the subsystem
_CONFLICT = LazyPattern(
    r"(?:mutually exclusive|incompatible with|not compatible with|cannot be (?:used|enabled|combined) "
    r"(?:together|with)|conflicts with|is not supported (?:together )?with|does not support --)",
    re.IGNORECASE,
)
_FLAG_NAMES = LazyPattern(r"(?<![\w-])--[a-z][a-z0-9-]+")


def native_subsystem(text: str) -> str | None:
    """The subsystem a native error names through its extension and file: `/sgl-workspace/DeepEP/csrc/...cu`
    is parallelism, `flash_attn_2_cuda...so` attention-backend, `custom_all_reduce.cuh` distributed."""
    for m in _NATIVE_PATH.finditer(text[:2000]):
        path = m.group(0).lower()
        for fragment, category in _NATIVE:
            if fragment in path:
                return category
    return None


_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError")


def guess_category(exc: ExceptionInfo) -> str:
    short = exc.short_type
    for name, category in _BY_TYPE:
        if short == name:
            return category
    message = exc.message[:2000]
    if not message.strip() and exc.frames and exc.frames[-1].code:
        message = exc.frames[-1].code  # a bare `assert self.total_num_heads % tp_size == 0`: its line says what
    if len(set(_FLAG_NAMES.findall(message))) >= 2 and _CONFLICT.search(message):
        return "flag-conflict"
    native = native_subsystem(message)
    if native is not None:
        return native
    low = message.lower()
    for fragment, category in _BY_MESSAGE:
        if fragment in message or (fragment.islower() and fragment in low):
            return category
    importing = short in _IMPORT_ERRORS
    for frame in reversed(exc.frames):
        if importing and frame.function == "<module>":
            continue  # `from sgl_kernel import ...` at a module's top: the importer is not what failed
        module = frame_module(frame)
        if "sglang" not in module and "transformers" not in module and "torch.distributed" not in module:
            continue
        for fragment, category in _BY_MODULE:
            if fragment in module:
                return category
    return "other"


# --- the second axis: what kind of failure -------------------------------------------------------------
#
# A subsystem says who owns a failure; the kind says what to do about it: change the configuration
# (config), give it more of something (resource), fix the installation (environment), report it upstream
# (bug), or look at the machines and the network between them (hardware-network).

_KIND_BY_TYPE: tuple[tuple[str, str], ...] = (
    ("OutOfMemoryError", "resource"),
    ("MemoryError", "resource"),
    ("ModuleNotFoundError", "environment"),
    ("ImportError", "environment"),
    ("FileNotFoundError", "environment"),
    ("PermissionError", "environment"),
    ("DistNetworkError", "hardware-network"),
    ("DistStoreError", "hardware-network"),
    ("ConnectionRefusedError", "hardware-network"),
    ("ConnectionResetError", "hardware-network"),
    ("ConnectionError", "hardware-network"),
    ("TimeoutError", "hardware-network"),
    ("gaierror", "hardware-network"),
    ("KVTransferError", "hardware-network"),
    (FATAL_TYPE, "bug"),
    ("NotImplementedError", "bug"),
    ("IndexError", "bug"),
    ("KeyError", "bug"),
    ("AttributeError", "bug"),
    ("UnboundLocalError", "bug"),
    ("ZeroDivisionError", "bug"),
)
# (fragment of the message, kind), first hit wins; lower-cased
_KIND_BY_MESSAGE: tuple[tuple[str, str], ...] = (
    ("out of memory", "resource"),
    ("not enough memory", "resource"),
    ("cannot allocate memory", "resource"),
    ("no space left", "resource"),
    ("too many open files", "resource"),
    ("illegal memory access", "bug"),
    ("device-side assert", "bug"),
    ("misaligned address", "bug"),
    ("segmentation fault", "bug"),
    ("uncorrectable ecc", "hardware-network"),
    ("xid", "hardware-network"),
    ("nvlink", "hardware-network"),
    ("watchdog caught collective operation timeout", "hardware-network"),
    ("timed out", "hardware-network"),
    ("timeout", "hardware-network"),
    ("connection refused", "hardware-network"),
    ("connection reset", "hardware-network"),
    ("connection closed", "hardware-network"),
    ("unreachable", "hardware-network"),
    ("nccl error", "hardware-network"),
    ("ibv_", "hardware-network"),
    ("rdma", "hardware-network"),
    ("address already in use", "environment"),
    ("eaddrinuse", "environment"),
    ("already in use", "environment"),
    ("is not available in", "environment"),  # a port another process holds
    ("cannot assign requested address", "config"),
    ("no kernel image", "environment"),
    ("invalid device function", "environment"),
    ("no cuda gpus are available", "environment"),
    ("no module named", "environment"),
    ("pip install", "environment"),
    ("is not installed", "environment"),
    ("not installed", "environment"),
    ("undefined symbol", "environment"),
    ("glibc", "environment"),
    ("cuda driver", "environment"),
    ("driver version", "environment"),
    ("compute capability", "environment"),
    ("version", "environment"),
    ("no such file", "environment"),
    ("does not appear to have", "environment"),
    ("model type", "environment"),
    ("trust_remote_code", "environment"),
    ("mismatch", "config"),  # prefill and decode (or TP and PP) configured apart
    ("disagree", "config"),
    ("is not equal to", "config"),
    ("does not support different", "config"),
    ("should not be none. do not send requests directly", "config"),
    ("not found. available", "environment"),
)
_KIND_BY_CATEGORY: dict[str, str] = {
    "flag-conflict": "config",
    "memory": "resource",
    "hicache": "config",
    "disaggregation": "hardware-network",
    "distributed": "hardware-network",
    "network": "hardware-network",
    "model-load": "environment",
    "quantization": "config",
    "attention-backend": "config",
    "cuda-graph": "resource",
    "tokenizer": "environment",
    "speculative": "config",
    "parallelism": "config",
    "other": "bug",
}
_GROUP_NAME = LazyPattern(r"\(\?P<\w+>")
_FLAG = LazyPattern(r"(?<![\w-])--[a-z][a-z0-9-]+|\bSGLANG_[A-Z0-9_]+")


def _type_kind(exc_type: str) -> str | None:
    short = exc_type if exc_type == FATAL_TYPE else exc_type.rsplit(".", 1)[-1]
    return next((kind for name, kind in _KIND_BY_TYPE if short == name), None)


def guess_kind(exc_type: str, message: str, category: str) -> str:
    """The kind of a failure from what it says: its exception type, then its message, then its subsystem.

    An error whose message names a flag is the configuration's (SGLang's checks name the flag they
    reject), unless the type or the words say otherwise first (an OOM naming --mem-fraction-static is
    still a resource problem).
    """
    kind = _type_kind(exc_type)
    if kind is not None:
        return kind
    low = message[:2000].lower()
    for fragment, kind in _KIND_BY_MESSAGE:
        if fragment in low:
            return kind
    short = exc_type.rsplit(".", 1)[-1]
    if _FLAG.search(message[:2000]) or (short in ("ValueError", "AssertionError") and category != "other"):
        return "config"
    return _KIND_BY_CATEGORY.get(category, "bug")


def signature_kind(sig: Signature) -> str:
    """A signature's kind: its own `kind:` when it has one, else a rule: SGLang's argument checks
    (signatures/sglang/validation/, derived signatures) and flag conflicts are configuration, an exit
    by the OOM killer is a resource, and the others are read like an unknown error from their
    exception types, pattern and category."""
    if sig.failure_kind:
        return sig.failure_kind
    if "/validation/" in sig.origin.replace("\\", "/") or sig.category == "flag-conflict":
        return "config"
    if sig.origin == "derived":  # derived from SGLang's checks whose message names a flag or SGLANG_ variable
        return "config"
    if sig.exit:
        return "resource" if "oom-kill" in sig.exit.get("result", ()) or sig.category == "memory" else "bug"
    for exc_type in sig.exception_types:
        kind = _type_kind(exc_type)
        if kind is not None:
            return kind
    pattern = _GROUP_NAME.sub("(", sig.message or sig.line or "").replace("\\", "")  # (?P<timeout>...) says nothing
    return guess_kind("", pattern, sig.category)


def failure_kind(finding: Finding, sig: Signature | None) -> str:
    """The kind of a diagnosed failure: its signature's, else guessed from what it says."""
    if sig is not None:
        return signature_kind(sig)
    if finding.kind == "exit":
        return "resource" if finding.category_guess == "memory" else "bug"
    return guess_kind(finding.type, finding.message, finding.category_guess)
