"""A stand-in for ``python -m sglang.launch_server`` (SGLang 0.5.23) with its process shape and messages.

Why: crashdoc has to be proven against what SGLang really does under systemd (a launcher, one spawned
scheduler process per TP rank, a detokenizer, whole tracebacks in one log record, a SIGQUIT to the
launcher and a self-SIGKILL), and GPUs are not available in tests. Every message below is copied from
SGLang 0.5.23's source; the failing frames are real Python frames raised in the right process.
Standard library only, unbuffered output.

Run it as ``python -m crashdoc.sandbox.fake_sglang --model-path M --tp-size 2 ...``. What happens
follows from the flags, like the real server:

- ``--enable-hierarchical-cache --hicache-size N`` (N > 0) with a DeepSeek-V4 model path: every
  scheduler rank raises ``ValueError: DeepSeek V4 HiCache currently does not support --hicache-size;
  use --hicache-ratio instead.`` while building the host pool; each logs ``Scheduler hit an
  exception: Traceback ...``, SIGQUITs the launcher, which logs ``Received sigquit from a child
  process. It usually means the child failed.``, SIGKILLs its descendants and then itself
  (systemd: ``code=killed, status=9/KILL``). With ``--hicache-ratio R`` instead it starts.
- ``--enable-kv-cache-sharding`` without ``--disaggregation-mode prefill`` (or with
  ``--chunked-prefill-size`` <= 0), ``--enable-lmcache`` with ``--enable-hierarchical-cache``,
  ``--ssl-keyfile`` without ``--ssl-certfile``: the launcher's flag resolution raises ValueError
  before any child exists; a plain uncaught traceback, exit status 1.
- ``--mem-fraction-static`` >= 0.95: ``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate
  ...`` in the last TP rank while allocating the KV cache (then the SIGQUIT path above).
- An unknown flag: argparse's usage and ``sglang serve: error: ...``, exit status 2.
- Otherwise it loads, logs ``The server is fired up and ready to roll!`` and keeps printing
  ``Prefill batch, ...`` / ``Decode batch, ...`` lines from TP0.

Environment variables for what flags cannot express:

- ``FAKE_SGLANG_LOAD_SECONDS`` (default 0.5): how long "loading weights" takes (a slow start).
- ``FAKE_SGLANG_CRASH_AFTER=N``: after N seconds of healthy running every rank raises SGLang's
  ``RuntimeError: Decode out of memory. Try to lower your batch size. ...`` (a runtime crash; the
  launcher's running-phase handler logs ``SIGQUIT received. signum=None, frame=None. ...``).
- ``FAKE_SGLANG_FAILURE``: force a failure the flags do not select: ``cuda-oom``, ``runtime`` (with
  FAKE_SGLANG_CRASH_AFTER, default 3 s), ``host-oom`` (each rank really allocates host memory for its
  HiCache pool, ``FAKE_SGLANG_HOST_OOM_MB`` per rank, default 1024, so that a unit's ``MemoryMax=``
  gets it OOM-killed; the launcher then raises ``Rank N scheduler died during initialization (exit
  code: -9) ...`` and exits 1), or ``none``.
- ``FAKE_SGLANG_RAISE="ValueError: <message>"``: the launcher's flag resolution raises that (a check of
  another release, taken from its source by the test), a plain uncaught traceback, exit status 1.
- ``FAKE_SGLANG_BATCH_INTERVAL`` (default 2.0): seconds between batch lines.
- ``FAKE_SGLANG_KILL_GRACE`` (default 1 s + 0.5 s per extra rank): how long the launcher's SIGQUIT
  handler lets sibling ranks finish their own traceback before the kill (real ranks fail within
  milliseconds of each other; the fake's ranks are staggered by up to half a second per rank so that
  they report fractions of a second apart, as seen in real logs).
- ``SGLANG_LOG_MS=1``: milliseconds in timestamps, as in SGLang.
- ``FAKE_SGLANG_HANDLED=load-publisher``: TP0's load publisher cannot bind its socket and SGLang logs
  ``load-publisher disabled: failed to bind the load socket at ...`` with the ``zmq.error.ZMQError``
  traceback (scheduler_components/load_publisher.py:188, ``exc_info=True``), then starts and serves:
  a handled traceback in a healthy server.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import multiprocessing as mp
import os
import random
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger("sglang.srt")

_GB = 1 << 30
_READY_POLL_SECONDS = 5.0  # engine.py _wait_for_scheduler_ready polls the init pipes every 5 s


# --- the exceptions SGLang raises, with the type names a traceback prints ------------------------


class OutOfMemoryError(RuntimeError):
    """Prints as ``torch.OutOfMemoryError`` like torch >= 2.5's CUDA OOM."""


OutOfMemoryError.__module__ = "torch"


# --- process plumbing, as in sglang.srt.utils.common -------------------------------------------


def _prctl(option: int, arg: int | bytes) -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, arg, 0, 0, 0)


def kill_itself_when_parent_died() -> None:
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def set_process_title(title: str) -> None:
    """setproctitle also renames the thread, so journald's _COMM shows the first 15 bytes."""
    _prctl(15, title.encode()[:15])  # PR_SET_NAME


def configure_logger(prefix: str = "") -> None:
    maybe_ms = ".%(msecs)03d" if os.environ.get("SGLANG_LOG_MS", "") in ("1", "true", "True") else ""
    logging.basicConfig(
        level=logging.INFO,
        format=f"[%(asctime)s{maybe_ms}{prefix}] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        force=True,
    )


def _unbuffered() -> None:
    """Lines must reach journald as they are written, not when a buffer fills."""
    os.environ["PYTHONUNBUFFERED"] = "1"
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(line_buffering=True, write_through=True)  # type: ignore[union-attr]


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_process_tree(parent_pid: int, include_parent: bool = True) -> None:
    """SIGKILL every descendant, then (include_parent) the process itself: SGLang's exit path."""
    logger.info(
        f"kill_process_tree called: parent_pid={parent_pid}, include_parent={include_parent}, pid={os.getpid()}"
    )
    for child in _descendants(parent_pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    if include_parent:
        if parent_pid == os.getpid():
            os.kill(parent_pid, signal.SIGKILL)
            sys.exit(0)
        with contextlib.suppress(ProcessLookupError):
            os.kill(parent_pid, signal.SIGKILL)


# --- arguments ---------------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang serve")
    add = p.add_argument
    add("--model-path", "--model", required=True)
    add("--tokenizer-path")
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--tp-size", "--tensor-parallel-size", type=int, default=1)
    add("--dp-size", "--data-parallel-size", type=int, default=1)
    add("--pp-size", "--pipeline-parallel-size", type=int, default=1)
    add("--ep-size", "--ep", type=int, default=1)
    add("--nnodes", type=int, default=1)
    add("--node-rank", type=int, default=0)
    add("--dist-init-addr")
    add("--base-gpu-id", type=int, default=0)
    add("--mem-fraction-static", type=float)
    add("--max-running-requests", type=int)
    add("--max-prefill-tokens", type=int, default=16384)
    add("--chunked-prefill-size", type=int)
    add("--context-length", type=int)
    add("--page-size", type=int)
    add("--kv-cache-dtype", default="auto")
    add("--dtype", default="auto")
    add("--quantization")
    add("--attention-backend")
    add("--trust-remote-code", action="store_true")
    add("--served-model-name")
    add("--api-key")
    add("--log-level", default="info")
    add("--watchdog-timeout", type=float, default=300)
    add("--random-seed", type=int)
    add("--enable-metrics", action="store_true")
    add("--cuda-graph-max-bs", type=int)
    add("--disable-cuda-graph", action="store_true")
    add("--disable-radix-cache", action="store_true")
    add("--enable-dp-attention", action="store_true")
    add("--moe-a2a-backend")
    add("--speculative-algorithm")
    add("--disaggregation-mode", choices=["null", "prefill", "decode"], default="null")
    add("--disaggregation-transfer-backend", default="mooncake")
    add("--disaggregation-bootstrap-port", type=int, default=8998)
    add("--disaggregation-ib-device")
    add("--enable-hierarchical-cache", action="store_true")
    add("--hicache-ratio", type=float, default=2.0)
    add("--hicache-size", type=int, default=0)
    add("--hicache-mem-layout", default="layer_first")
    add("--hicache-storage-backend")
    add("--enable-lmcache", action="store_true")
    add("--enable-kv-cache-sharding", action="store_true")
    add("--ssl-keyfile")
    add("--ssl-certfile")
    return p


def _is_dsv4(args: argparse.Namespace) -> bool:
    name = args.model_path.lower().replace("_", "-")
    return "deepseek-v4" in name or "deepseekv4" in name


def _architecture(args: argparse.Namespace) -> str:
    name = args.model_path.lower()
    if _is_dsv4(args):
        return "DeepseekV4ForCausalLM"
    for key, arch in (
        ("deepseek", "DeepseekV3ForCausalLM"),
        ("qwen", "Qwen3ForCausalLM"),
        ("mistral", "MistralForCausalLM"),
        ("gemma", "Gemma3ForCausalLM"),
    ):
        if key in name:
            return arch
    return "LlamaForCausalLM"


def _failure() -> str:
    return os.environ.get("FAKE_SGLANG_FAILURE", "").strip().lower()


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


# --- the launcher's flag resolution (srt/arg_groups hooks; runs before any child) ---------------


def kv_shard_hook(args: argparse.Namespace) -> None:
    if not args.enable_kv_cache_sharding:
        return
    if args.disaggregation_mode != "prefill":
        raise ValueError(
            "--enable-kv-cache-sharding is only supported on PD prefill workers: a rank's pool "
            "holds only its stripe of every cached page, which is incompatible with local decode."
        )
    if args.chunked_prefill_size is not None and args.chunked_prefill_size <= 0:
        raise ValueError("--enable-kv-cache-sharding requires chunked prefill (--chunked-prefill-size > 0).")


def kv_cache_hook(args: argparse.Namespace) -> None:
    if args.enable_lmcache and args.enable_hierarchical_cache:
        raise ValueError("--enable-lmcache and --enable-hierarchical-cache are mutually exclusive")


def serving_hook(args: argparse.Namespace) -> None:
    if args.ssl_keyfile and not args.ssl_certfile:
        raise ValueError("--ssl-keyfile requires --ssl-certfile to be specified as well.")


def validation_hook(args: argparse.Namespace) -> None:
    """FAKE_SGLANG_RAISE="ValueError: <message>": a check of another SGLang release, raised as SGLang's hooks do
    (the message must come from that release's source: tests take it from the tree they install)."""
    forced = os.environ.get("FAKE_SGLANG_RAISE", "")
    kind, sep, message = forced.partition(": ")
    if sep and kind in ("ValueError", "AssertionError", "RuntimeError"):
        raise {"ValueError": ValueError, "AssertionError": AssertionError, "RuntimeError": RuntimeError}[kind](message)


def run_resolution_pipeline(args: argparse.Namespace) -> None:
    for hook in (serving_hook, kv_cache_hook, kv_shard_hook, validation_hook):
        hook(args)


def resolve_once(args: argparse.Namespace) -> None:
    if args.attention_backend is None:
        backend = "flashmla" if _is_dsv4(args) else "fa3"
        logger.info(f"Attention backend not specified. Use {backend} backend by default.")
    run_resolution_pipeline(args)


def resolved_dict(args: argparse.Namespace) -> dict[str, Any]:
    """What engine.py logs as ``server_args={...}``: every field, api_key included (not redacted)."""
    out: dict[str, Any] = {"model_path": args.model_path, "tokenizer_path": args.tokenizer_path or args.model_path}
    out.update({k: v for k, v in vars(args).items() if k not in out})
    out["served_model_name"] = args.served_model_name or args.model_path
    out["mem_fraction_static"] = args.mem_fraction_static if args.mem_fraction_static is not None else 0.835
    out["chunked_prefill_size"] = args.chunked_prefill_size if args.chunked_prefill_size is not None else 8192
    out["random_seed"] = args.random_seed if args.random_seed is not None else 951344417
    return out


# --- scheduler process (srt/managers/scheduler.py) ----------------------------------------------


class ZMQError(Exception):
    """pyzmq's error type, printed under its real name (pyzmq is not a dependency of the sandbox)."""


ZMQError.__module__ = "zmq.error"


def _open_pub_socket(endpoint: str) -> None:
    raise ZMQError(f"Address already in use (addr={endpoint!r})")


class Scheduler:
    """Just enough of Scheduler.__init__ to fail where SGLang fails, in the same order."""

    def __init__(self, args: argparse.Namespace, tp_rank: int, barrier: Any, serving: Any) -> None:
        self.args = args
        self.serving = serving
        self.tp_rank = tp_rank
        self.gpu_id = args.base_gpu_id + tp_rank
        self.barrier = barrier
        self.avail_mem = 79.19 - random.uniform(0.3, 0.9)
        self.dsv4 = _is_dsv4(args)
        self.init_model_worker()
        self.init_load_publisher()
        self.init_cache_with_memory_pool()
        self.max_total_num_tokens = self.num_tokens
        context_len = args.context_length or (1048576 if self.dsv4 else 131072)
        if tp_rank == 0:
            logger.info(
                f"max_total_num_tokens={self.max_total_num_tokens}, "
                f"chunked_prefill_size={args.chunked_prefill_size or 8192}, "
                f"max_prefill_tokens={args.max_prefill_tokens}, "
                f"max_running_requests={args.max_running_requests or 2048}, "
                f"context_len={context_len}, "
                f"available_gpu_mem={self.avail_mem:.2f} GB"
            )

    def sync_ranks(self) -> None:
        """All ranks meet here like at a collective; then each is a little late in its own way."""
        with contextlib.suppress(Exception):
            self.barrier.wait(timeout=30)
        time.sleep(self.tp_rank * random.uniform(0.05, 0.5))

    def init_model_worker(self) -> None:
        args = self.args
        logger.info(f"Load weight begin. avail mem={self.avail_mem:.2f} GB")
        load = max(0.0, _env_float("FAKE_SGLANG_LOAD_SECONDS", 0.5))
        shards, began = 64 if self.dsv4 else 8, time.monotonic()
        steps = max(1, min(shards, int(load / 2) + 1))
        for i in range(1, steps + 1):
            time.sleep(load / steps)
            if self.tp_rank == 0 and load >= 2:
                done = shards * i // steps
                elapsed = time.monotonic() - began
                rate = done / elapsed if elapsed else 0.0
                left = (shards - done) / rate if rate else 0.0
                print(
                    f"Loading safetensors checkpoint shards: {100 * done // shards:3d}% Completed | "
                    f"{done}/{shards} [{_mmss(elapsed)}<{_mmss(left)}, {rate:5.2f}it/s]",
                    file=sys.stderr,
                )
        weights = (96.4 if self.dsv4 else 30.6) / max(1, args.tp_size)
        self.avail_mem -= weights
        logger.info(
            f"Load weight end. elapsed={time.monotonic() - began:.2f} s, type={_architecture(args)}, "
            f"avail mem={self.avail_mem:.2f} GB, mem usage={weights:.2f} GB."
        )
        self.init_memory_pool()
        if not args.disable_cuda_graph:
            logger.info(
                f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
                f"avail mem={self.avail_mem:.2f} GB"
            )
            used = 0.42
            self.avail_mem -= used
            logger.info(
                f"Capture target decode CUDA graph end. bs={[1, 2, 4, 8, 16, 24, 32]}, elapsed=1.37 s, "
                f"mem usage={used:.2f} GB, avail mem={self.avail_mem:.2f} GB."
            )

    def init_memory_pool(self) -> None:
        fraction = self.args.mem_fraction_static if self.args.mem_fraction_static is not None else 0.835
        kv_gb = max(0.5, 79.19 * fraction - (79.19 - self.avail_mem))
        self.num_tokens = int(kv_gb * _GB / (70272 if self.dsv4 else 131072))
        if fraction >= 0.95 or _failure() == "cuda-oom":
            self.sync_ranks()
            if self.tp_rank == self.args.tp_size - 1:  # the GPU that another process shares
                self._create_buffers(kv_gb)
        logger.info(
            f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {self.num_tokens}, KV size: {kv_gb:.2f} GB"
        )
        self.avail_mem -= kv_gb
        logger.info(f"Memory pool end. avail mem={self.avail_mem:.2f} GB")

    def _create_buffers(self, kv_gb: float) -> None:
        free = random.uniform(0.8, 3.0)
        other = 18.0 + random.uniform(0.0, 6.0)  # another process holds part of this GPU
        in_use = 79.19 - free - other
        raise OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {kv_gb:.2f} GiB. GPU {self.gpu_id} has a total capacity "
            f"of 79.19 GiB of which {free:.2f} GiB is free. Process {random.randint(2000, 90000)} has "
            f"{other:.2f} GiB memory in use. Including non-PyTorch memory, this process has {in_use:.2f} GiB "
            f"memory in use. Of the allocated memory {in_use - 0.61:.2f} GiB is allocated by PyTorch, and "
            "395.12 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
            "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            "documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )

    def init_load_publisher(self) -> None:
        """scheduler_components/load_publisher.py: a bind failure must not take down startup."""
        if os.environ.get("FAKE_SGLANG_HANDLED") != "load-publisher" or self.tp_rank != 0:
            return
        endpoint = f"tcp://127.0.0.1:{5757 + self.tp_rank}"
        try:
            _open_pub_socket(endpoint)
        except Exception:
            logger.warning(
                "load-publisher disabled: failed to bind the load socket at "
                "%r; /server_info advertises this range but nothing is "
                "listening on it",
                endpoint,
                exc_info=True,
            )

    def init_cache_with_memory_pool(self) -> None:
        if self.args.enable_hierarchical_cache:
            self.init_hicache()

    def init_hicache(self) -> None:
        if self.dsv4:
            self.build_deepseek_v4_hicache_stack()
        if _failure() == "host-oom":
            self.allocate_host_pool()

    def build_deepseek_v4_hicache_stack(self) -> None:
        if self.args.hicache_size > 0:
            self.sync_ranks()
        self._deepseek_v4_num_host_pages()

    def _deepseek_v4_num_host_pages(self) -> tuple[int, int]:
        if self.args.hicache_size > 0:
            raise ValueError(
                "DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."
            )
        pages = int(self.num_tokens / 256 * self.args.hicache_ratio)
        return pages, pages // 4

    def allocate_host_pool(self) -> None:
        """Really takes host memory, page by page, so a cgroup limit gets this process OOM-killed."""
        limit_mb = int(_env_float("FAKE_SGLANG_HOST_OOM_MB", 1024))
        pages = limit_mb * (1 << 20) // (61 * 656 * 64)
        logger.info(
            "Allocating %.2f GB host memory for V4 paged pool '%s' (layers=%d, pages=%d, item_bytes=%d, layout=%s).",
            limit_mb * (1 << 20) / 1e9,
            "full",
            61,
            pages,
            656 * 64,
            self.args.hicache_mem_layout,
        )
        self.host_pool: list[bytearray] = []
        for _ in range(limit_mb // 16):
            chunk = bytearray(16 << 20)
            for off in range(0, len(chunk), 4096):
                chunk[off] = 1
            self.host_pool.append(chunk)

    def run_event_loop(self) -> None:
        while not self.serving.wait(timeout=1.0):  # no requests (and no batch lines) before the server is up
            pass
        interval = max(0.2, _env_float("FAKE_SGLANG_BATCH_INTERVAL", 2.0))
        crash_after = os.environ.get("FAKE_SGLANG_CRASH_AFTER")
        if crash_after is None and _failure() == "runtime":
            crash_after = "3"
        deadline = time.monotonic() + float(crash_after) if crash_after else None
        forward = 0
        while True:
            time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))
            if deadline is not None and time.monotonic() >= deadline:
                time.sleep(self.tp_rank * random.uniform(0.05, 0.5))
                self.alloc_for_decode(running=int(self.max_total_num_tokens > 0) * 96)
            forward += 1
            if self.tp_rank == 0:
                self.log_stats(forward)

    def alloc_for_decode(self, running: int) -> None:
        available = random.randint(16, 128)
        error_msg = (
            f"Decode out of memory. Try to lower your batch size.\n"
            f"Try to allocate {running} tokens.\n"
            f"Available tokens: {available} (available_size={available} + evictable_size=0)\n"
        )
        logger.error(error_msg)
        raise RuntimeError(error_msg)

    def log_stats(self, forward: int) -> None:
        mode = self.args.disaggregation_mode
        usage = random.uniform(0.05, 0.4)
        used = int(self.max_total_num_tokens * usage)
        running = random.randint(8, 64)
        if mode == "prefill" or (mode == "null" and forward % 2):
            parts = (
                f"full token usage: {usage:.2f}, swa token usage: {usage * 0.6:.2f}, "
                if self.dsv4
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
            if self.dsv4:
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
        logger.info(msg)


def _mmss(seconds: float) -> str:
    return f"{int(seconds) // 60:02d}:{int(seconds) % 60:02d}"


def run_scheduler_process(args: argparse.Namespace, tp_rank: int, pipe_writer: Any, barrier: Any, serving: Any) -> None:
    _unbuffered()
    kill_itself_when_parent_died()
    prefix = f" TP{tp_rank}" if args.tp_size > 1 else ""
    set_process_title(f"sglang::scheduler{prefix.replace(' ', '_')}")
    configure_logger(prefix)
    parent = os.getppid()
    try:
        scheduler = Scheduler(args, tp_rank, barrier, serving)
        pipe_writer.send({"status": "ready", "max_total_num_tokens": scheduler.max_total_num_tokens})
        scheduler.run_event_loop()
    except Exception:
        tb = "".join(traceback.format_exception(*sys.exc_info()))
        logger.error(f"Scheduler hit an exception: {tb}")
        os.kill(parent, signal.SIGQUIT)


def run_detokenizer_process(args: argparse.Namespace) -> None:
    kill_itself_when_parent_died()
    set_process_title("sglang::detokenizer")
    configure_logger()
    while True:
        time.sleep(3600)


# --- launcher (srt/entrypoints/engine.py, http_server.py, launch_server.py) ---------------------


class Launcher:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.procs: list[Any] = []
        self.names: list[str] = []
        self.quitting = False

    def launch_phase_sigquit_handler(self, signum: int, frame: Any) -> None:
        if self.quitting:
            return
        self.quitting = True
        logger.error("Received sigquit from a child process. It usually means the child failed.")
        self._grace()
        kill_process_tree(os.getpid())

    def running_phase_sigquit_handler(self, signum: int, frame: Any) -> None:
        if self.quitting:
            return
        self.quitting = True
        logger.error(f"SIGQUIT received. signum={None}, frame={None}. It usually means one child failed.")
        self._grace()
        kill_process_tree(os.getpid())

    def _grace(self) -> None:
        """Let the other ranks print their own traceback before everything dies (see module doc)."""
        grace = _env_float("FAKE_SGLANG_KILL_GRACE", 0.5 * (self.args.tp_size - 1) + 1.0)
        deadline = time.monotonic() + grace
        schedulers = [p for p, n in zip(self.procs, self.names, strict=True) if n.startswith("scheduler")]
        while time.monotonic() < deadline and any(p.is_alive() for p in schedulers):
            time.sleep(0.02)

    def launch(self) -> None:
        args = self.args
        ctx = mp.get_context("spawn")
        signal.signal(signal.SIGQUIT, self.launch_phase_sigquit_handler)
        readers = []
        barrier = ctx.Barrier(args.tp_size)
        self.serving = ctx.Event()
        for rank in range(args.tp_size):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=run_scheduler_process, args=(args, rank, writer, barrier, self.serving))
            proc.start()
            readers.append(reader)
            self.procs.append(proc)
            self.names.append(f"scheduler_{rank}")
        detok = ctx.Process(target=run_detokenizer_process, args=(args,))
        detok.start()
        self.procs.append(detok)
        self.names.append("detokenizer")
        self._wait_for_scheduler_ready(readers)
        signal.signal(signal.SIGQUIT, self.running_phase_sigquit_handler)
        self.serve()

    def _wait_for_scheduler_ready(self, readers: Sequence[Any]) -> None:
        for i, reader in enumerate(readers):
            while True:
                if reader.poll(timeout=_READY_POLL_SECONDS):
                    try:
                        data = reader.recv()
                    except EOFError:
                        raise self._scheduler_died_error(i) from None
                    if data["status"] != "ready":
                        raise RuntimeError("Initialization failed. Please see the error messages above.")
                    break
                for j in range(len(readers)):
                    if not self.procs[j].is_alive():
                        raise self._scheduler_died_error(j)

    def _scheduler_died_error(self, rank: int) -> RuntimeError:
        proc = self.procs[rank]
        proc.join(timeout=10)
        return RuntimeError(
            f"Rank {rank} scheduler died during initialization "
            f"(exit code: {proc.exitcode}). "
            f"If exit code is -9 (SIGKILL), a common cause is the OS OOM killer. "
            f"Run `dmesg -T | grep -i oom` to check."
        )

    def serve(self) -> None:
        args = self.args
        logger.info(f"INFO:     Started server process [{os.getpid()}]")
        logger.info("INFO:     Waiting for application startup.")
        logger.info("INFO:     Application startup complete.")
        logger.info(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
        port = random.randint(30000, 60000)
        logger.info(f'INFO:     127.0.0.1:{port} - "GET /model_info HTTP/1.1" 200 OK')
        logger.info(f'INFO:     127.0.0.1:{port + 2} - "POST /generate HTTP/1.1" 200 OK')
        logger.info("The server is fired up and ready to roll!")
        self.serving.set()
        while True:  # SubprocessWatchdog (srt/utils/watchdog.py): poll the children every second
            time.sleep(1.0)
            for proc, name in zip(self.procs, self.names, strict=True):
                code = proc.exitcode
                if code not in (None, 0):
                    logger.error(
                        f"Subprocess {name} (pid={proc.pid}) crashed with exit code {code}. "
                        "Triggering SIGQUIT for cleanup..."
                    )
                    os.kill(os.getpid(), signal.SIGQUIT)


def launch_server(args: argparse.Namespace) -> None:
    configure_logger()
    logger.info(f"server_args={resolved_dict(args)}")
    Launcher(args).launch()


def run_server(args: argparse.Namespace) -> None:
    resolve_once(args)
    try:
        launch_server(args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


def main(argv: Sequence[str] | None = None) -> None:
    _unbuffered()
    configure_logger()
    args = make_parser().parse_args(argv)
    run_server(args)


if __name__ == "__main__":
    main()
