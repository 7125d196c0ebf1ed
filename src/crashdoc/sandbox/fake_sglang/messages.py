"""SGLang 0.5.23's texts, as the stand-in prints them: its log format, the exception types under their real
names, and every message, copied from SGLang's source. Where and when they are printed is the processes'
business (``launcher``, ``scheduler``) and the failure modes' (``failures``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import sys
from typing import Any

logger = logging.getLogger("sglang.srt")


# --- the log format, as in sglang.srt.utils.common ---------------------------------------------


def configure_logger(prefix: str = "") -> None:
    maybe_ms = ".%(msecs)03d" if os.environ.get("SGLANG_LOG_MS", "") in ("1", "true", "True") else ""
    logging.basicConfig(
        level=logging.INFO,
        format=f"[%(asctime)s{maybe_ms}{prefix}] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        force=True,
    )


def unbuffered() -> None:
    """Lines must reach journald as they are written, not when a buffer fills."""
    os.environ["PYTHONUNBUFFERED"] = "1"
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(line_buffering=True, write_through=True)  # type: ignore[union-attr]


# --- the exceptions SGLang raises, with the type names a traceback prints ------------------------


class OutOfMemoryError(RuntimeError):
    """Prints as ``torch.OutOfMemoryError`` like torch >= 2.5's CUDA OOM."""


OutOfMemoryError.__module__ = "torch"


class ZMQError(Exception):
    """pyzmq's error type, printed under its real name (pyzmq is not a dependency of the sandbox)."""


ZMQError.__module__ = "zmq.error"


# --- the launcher's flag resolution (srt/arg_groups hooks, server_args.py) ------------------------

KV_SHARDING_PREFILL_ONLY = (
    "--enable-kv-cache-sharding is only supported on PD prefill workers: a rank's pool "
    "holds only its stripe of every cached page, which is incompatible with local decode."
)
KV_SHARDING_NEEDS_CHUNKS = "--enable-kv-cache-sharding requires chunked prefill (--chunked-prefill-size > 0)."
LMCACHE_WITH_HICACHE = "--enable-lmcache and --enable-hierarchical-cache are mutually exclusive"
SSL_KEY_WITHOUT_CERT = "--ssl-keyfile requires --ssl-certfile to be specified as well."


def attention_backend_default(backend: str) -> str:
    return f"Attention backend not specified. Use {backend} backend by default."


def server_args(resolved: dict[str, Any]) -> str:
    return f"server_args={resolved}"


# --- a scheduler rank's start-up (srt/managers/scheduler.py, model_executor, mem_cache) ----------

DSV4_HICACHE_SIZE = "DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."


def load_weight_begin(avail: float) -> str:
    return f"Load weight begin. avail mem={avail:.2f} GB"


def loading_shards(done: int, shards: int, elapsed: float, left: float, rate: float) -> str:
    return (
        f"Loading safetensors checkpoint shards: {100 * done // shards:3d}% Completed | "
        f"{done}/{shards} [{_mmss(elapsed)}<{_mmss(left)}, {rate:5.2f}it/s]"
    )


def _mmss(seconds: float) -> str:
    return f"{int(seconds) // 60:02d}:{int(seconds) % 60:02d}"


def load_weight_end(elapsed: float, architecture: str, avail: float, weights: float) -> str:
    return (
        f"Load weight end. elapsed={elapsed:.2f} s, type={architecture}, "
        f"avail mem={avail:.2f} GB, mem usage={weights:.2f} GB."
    )


def cuda_graph_begin(avail: float) -> str:
    return f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem={avail:.2f} GB"


def cuda_graph_end(used: float, avail: float) -> str:
    return (
        f"Capture target decode CUDA graph end. bs={[1, 2, 4, 8, 16, 24, 32]}, elapsed=1.37 s, "
        f"mem usage={used:.2f} GB, avail mem={avail:.2f} GB."
    )


def kv_cache_allocated(num_tokens: int, kv_gb: float) -> str:
    return f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {num_tokens}, KV size: {kv_gb:.2f} GB"


def memory_pool_end(avail: float) -> str:
    return f"Memory pool end. avail mem={avail:.2f} GB"


def scheduler_limits(args: argparse.Namespace, max_total_num_tokens: int, context_len: int, avail: float) -> str:
    return (
        f"max_total_num_tokens={max_total_num_tokens}, "
        f"chunked_prefill_size={args.chunked_prefill_size or 8192}, "
        f"max_prefill_tokens={args.max_prefill_tokens}, "
        f"max_running_requests={args.max_running_requests or 2048}, "
        f"context_len={context_len}, "
        f"available_gpu_mem={avail:.2f} GB"
    )


def cuda_oom(kv_gb: float, gpu_id: int) -> str:
    """torch's CUDA OOM on a GPU that another process shares."""
    free = random.uniform(0.8, 3.0)
    other = 18.0 + random.uniform(0.0, 6.0)  # another process holds part of this GPU
    in_use = 79.19 - free - other
    return (
        f"CUDA out of memory. Tried to allocate {kv_gb:.2f} GiB. GPU {gpu_id} has a total capacity "
        f"of 79.19 GiB of which {free:.2f} GiB is free. Process {random.randint(2000, 90000)} has "
        f"{other:.2f} GiB memory in use. Including non-PyTorch memory, this process has {in_use:.2f} GiB "
        f"memory in use. Of the allocated memory {in_use - 0.61:.2f} GiB is allocated by PyTorch, and "
        "395.12 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
        "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def address_in_use(endpoint: str) -> str:
    return f"Address already in use (addr={endpoint!r})"


def load_publisher_disabled(endpoint: str) -> str:
    """scheduler_components/load_publisher.py, logged with the traceback (``exc_info=True``)."""
    return (
        f"load-publisher disabled: failed to bind the load socket at {endpoint!r}; "
        "/server_info advertises this range but nothing is listening on it"
    )


def host_pool_allocating(limit_mb: int, pages: int, layout: str) -> str:
    return (
        f"Allocating {limit_mb * (1 << 20) / 1e9:.2f} GB host memory for V4 paged pool 'full' "
        f"(layers=61, pages={pages}, item_bytes={656 * 64}, layout={layout})."
    )


def scheduler_exception(tb: str) -> str:
    return f"Scheduler hit an exception: {tb}"


# --- a scheduler rank at work ------------------------------------------------------------------


def decode_oom(running: int, available: int) -> str:
    return (
        f"Decode out of memory. Try to lower your batch size.\n"
        f"Try to allocate {running} tokens.\n"
        f"Available tokens: {available} (available_size={available} + evictable_size=0)\n"
    )


def batch_line(mode: str, dsv4: bool, forward: int, max_total_num_tokens: int) -> str:
    """TP0's ``Prefill batch, ...`` / ``Decode batch, ...`` line (scheduler_metrics_mixin.py), as the
    disaggregation mode and the model (DeepSeek V4's full and sliding-window pools) shape it."""
    usage = random.uniform(0.05, 0.4)
    used = int(max_total_num_tokens * usage)
    running = random.randint(8, 64)
    if mode == "prefill" or (mode == "null" and forward % 2):
        parts = (
            f"full token usage: {usage:.2f}, swa token usage: {usage * 0.6:.2f}, "
            if dsv4
            else f"token usage: {usage:.2f}, "
        )
        msg = (
            f"Prefill batch, #new-seq: {random.randint(1, 8)}, #new-token: {random.choice([2048, 4096, 8192])}, "
            f"#cached-token: {random.randint(0, 4096)}, {parts}#running-req: {running}, #queue-req: 0, "
            f"#pending-token: 0, "
        )
        if mode == "prefill":
            msg += "#bootstrap-req: 0, #inflight-req: 0, #optimistic-req: 0, "
        msg += f"cuda graph: False, input throughput (token/s): {random.uniform(8000, 30000):.2f}"
    else:
        if dsv4:
            parts = (
                f"#full token: {used}, full token usage: {usage:.2f}, #swa token: {used // 3}, "
                f"swa token usage: {usage * 0.6:.2f}, "
            )
        else:
            parts = f"#token: {used}, token usage: {usage:.2f}, "
        msg = f"Decode batch, #running-req: {running}, {parts}"
        if mode == "decode":
            msg += "pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, "
        msg += f"cuda graph: True, gen throughput (token/s): {random.uniform(900, 2400):.2f}, #queue-req: 0"
    return msg


# --- the launcher (srt/entrypoints/engine.py, http_server.py, srt/utils/watchdog.py) ------------

CHILD_FAILED = "Received sigquit from a child process. It usually means the child failed."
RUNNING_CHILD_FAILED = f"SIGQUIT received. signum={None}, frame={None}. It usually means one child failed."
INITIALIZATION_FAILED = "Initialization failed. Please see the error messages above."
READY = "The server is fired up and ready to roll!"


def scheduler_died(rank: int, exitcode: int | None) -> str:
    return (
        f"Rank {rank} scheduler died during initialization "
        f"(exit code: {exitcode}). "
        f"If exit code is -9 (SIGKILL), a common cause is the OS OOM killer. "
        f"Run `dmesg -T | grep -i oom` to check."
    )


def server_started(pid: int, host: str, port: int) -> list[str]:
    """uvicorn's start-up lines and the first requests, before SGLang's ready line."""
    client = random.randint(30000, 60000)
    return [
        f"INFO:     Started server process [{pid}]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
        f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)",
        f'INFO:     127.0.0.1:{client} - "GET /model_info HTTP/1.1" 200 OK',
        f'INFO:     127.0.0.1:{client + 2} - "POST /generate HTTP/1.1" 200 OK',
    ]


def subprocess_crashed(name: str, pid: int | None, code: int) -> str:
    return f"Subprocess {name} (pid={pid}) crashed with exit code {code}. Triggering SIGQUIT for cleanup..."


def kill_process_tree_called(parent_pid: int, include_parent: bool, pid: int) -> str:
    return f"kill_process_tree called: parent_pid={parent_pid}, include_parent={include_parent}, pid={pid}"
