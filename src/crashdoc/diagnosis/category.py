"""A category for failures no signature knows, from the exception type and the module that raised it.

An unknown crash still needs an owner at 3 a.m.; the innermost SGLang frame usually says
which subsystem failed (srt/disaggregation -> disaggregation), and a few exception types
say it on their own (OutOfMemoryError -> memory).
"""

from __future__ import annotations

from crashdoc.assembly.fingerprint import frame_module
from crashdoc.events import ExceptionInfo

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
)
# (module fragment, category), most specific first
_BY_MODULE: tuple[tuple[str, str], ...] = (
    ("mem_cache.hicache", "hicache"),
    ("mem_cache.hiradix", "hicache"),
    ("mem_cache.hybrid_cache", "hicache"),
    ("hicache", "hicache"),
    ("disaggregation", "disaggregation"),
    ("speculative", "speculative"),
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
    ("model_loader", "model-load"),
    ("configs", "model-load"),
    ("hf_transformers_utils", "model-load"),
    ("transformers.models.auto", "model-load"),
    ("tokeniz", "tokenizer"),
    ("arg_groups", "flag-conflict"),
    ("server_args", "flag-conflict"),
    ("utils.network", "network"),
    ("parallel_state", "parallelism"),
)


def guess_category(exc: ExceptionInfo) -> str:
    short = exc.short_type
    for name, category in _BY_TYPE:
        if short == name:
            return category
    message = exc.message[:2000]
    for fragment, category in _BY_MESSAGE:
        if fragment in message:
            return category
    for frame in reversed(exc.frames):
        module = frame_module(frame)
        if "sglang" not in module and "transformers" not in module and "torch.distributed" not in module:
            continue
        for fragment, category in _BY_MODULE:
            if fragment in module:
                return category
    return "other"
