"""A scheduler rank (srt/managers/scheduler.py): one spawned process per TP rank that loads the weights, sizes
the KV cache and the HiCache host pool, then serves batches; it fails where SGLang fails, in the same order,
with a real Python frame raised in this process, and reports it as SGLang does (``Scheduler hit an
exception: Traceback ...``, then a SIGQUIT to the launcher). The detokenizer beside it only waits."""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import sys
import time
import traceback
from typing import Any

from crashdoc.sandbox.fake_sglang import failures, messages
from crashdoc.sandbox.fake_sglang.messages import OutOfMemoryError, ZMQError, logger
from crashdoc.sandbox.fake_sglang.process_control import kill_itself_when_parent_died, set_process_title
from crashdoc.sandbox.fake_sglang.server_args import architecture, is_dsv4

_GB = 1 << 30


def _open_pub_socket(endpoint: str) -> None:
    raise ZMQError(messages.address_in_use(endpoint))


class Scheduler:
    """Just enough of Scheduler.__init__ to fail where SGLang fails, in the same order."""

    def __init__(self, args: argparse.Namespace, tp_rank: int, barrier: Any, serving: Any) -> None:
        self.args = args
        self.serving = serving
        self.tp_rank = tp_rank
        self.gpu_id = args.base_gpu_id + tp_rank
        self.barrier = barrier
        self.avail_mem = 79.19 - random.uniform(0.3, 0.9)
        self.dsv4 = is_dsv4(args)
        self.init_model_worker()
        self.init_load_publisher()
        self.init_cache_with_memory_pool()
        self.max_total_num_tokens = self.num_tokens
        context_len = args.context_length or (1048576 if self.dsv4 else 131072)
        if tp_rank == 0:
            logger.info(messages.scheduler_limits(args, self.max_total_num_tokens, context_len, self.avail_mem))

    def sync_ranks(self) -> None:
        """All ranks meet here like at a collective; then each is a little late in its own way."""
        with contextlib.suppress(Exception):
            self.barrier.wait(timeout=30)
        time.sleep(self.tp_rank * random.uniform(0.05, 0.5))

    def init_model_worker(self) -> None:
        args = self.args
        logger.info(messages.load_weight_begin(self.avail_mem))
        load = failures.load_seconds()
        shards, began = 64 if self.dsv4 else 8, time.monotonic()
        steps = max(1, min(shards, int(load / 2) + 1))
        for i in range(1, steps + 1):
            time.sleep(load / steps)
            if self.tp_rank == 0 and load >= 2:
                done = shards * i // steps
                elapsed = time.monotonic() - began
                rate = done / elapsed if elapsed else 0.0
                left = (shards - done) / rate if rate else 0.0
                print(messages.loading_shards(done, shards, elapsed, left, rate), file=sys.stderr)
        weights = (96.4 if self.dsv4 else 30.6) / max(1, args.tp_size)
        self.avail_mem -= weights
        logger.info(messages.load_weight_end(time.monotonic() - began, architecture(args), self.avail_mem, weights))
        self.init_memory_pool()
        if not args.disable_cuda_graph:
            logger.info(messages.cuda_graph_begin(self.avail_mem))
            used = 0.42
            self.avail_mem -= used
            logger.info(messages.cuda_graph_end(used, self.avail_mem))

    def init_memory_pool(self) -> None:
        fraction = self.args.mem_fraction_static if self.args.mem_fraction_static is not None else 0.835
        kv_gb = max(0.5, 79.19 * fraction - (79.19 - self.avail_mem))
        self.num_tokens = int(kv_gb * _GB / (70272 if self.dsv4 else 131072))
        if failures.cuda_oom_selected(fraction):
            self.sync_ranks()
            if self.tp_rank == self.args.tp_size - 1:  # the GPU that another process shares
                self._create_buffers(kv_gb)
        logger.info(messages.kv_cache_allocated(self.num_tokens, kv_gb))
        self.avail_mem -= kv_gb
        logger.info(messages.memory_pool_end(self.avail_mem))

    def _create_buffers(self, kv_gb: float) -> None:
        raise OutOfMemoryError(messages.cuda_oom(kv_gb, self.gpu_id))

    def init_load_publisher(self) -> None:
        """scheduler_components/load_publisher.py: a bind failure must not take down startup."""
        if not failures.load_publisher_fails() or self.tp_rank != 0:
            return
        endpoint = f"tcp://127.0.0.1:{5757 + self.tp_rank}"
        try:
            _open_pub_socket(endpoint)
        except Exception:
            logger.warning(messages.load_publisher_disabled(endpoint), exc_info=True)

    def init_cache_with_memory_pool(self) -> None:
        if self.args.enable_hierarchical_cache:
            self.init_hicache()

    def init_hicache(self) -> None:
        if self.dsv4:
            self.build_deepseek_v4_hicache_stack()
        if failures.host_oom_selected():
            self.allocate_host_pool()

    def build_deepseek_v4_hicache_stack(self) -> None:
        if self.args.hicache_size > 0:
            self.sync_ranks()
        self._deepseek_v4_num_host_pages()

    def _deepseek_v4_num_host_pages(self) -> tuple[int, int]:
        if self.args.hicache_size > 0:
            raise ValueError(messages.DSV4_HICACHE_SIZE)
        pages = int(self.num_tokens / 256 * self.args.hicache_ratio)
        return pages, pages // 4

    def allocate_host_pool(self) -> None:
        """Really takes host memory, page by page, so a cgroup limit gets this process OOM-killed."""
        limit_mb = failures.host_oom_mb()
        pages = limit_mb * (1 << 20) // (61 * 656 * 64)
        logger.info(messages.host_pool_allocating(limit_mb, pages, self.args.hicache_mem_layout))
        self.host_pool: list[bytearray] = []
        for _ in range(limit_mb // 16):
            chunk = bytearray(16 << 20)
            for off in range(0, len(chunk), 4096):
                chunk[off] = 1
            self.host_pool.append(chunk)

    def run_event_loop(self) -> None:
        while not self.serving.wait(timeout=1.0):  # no requests (and no batch lines) before the server is up
            pass
        interval = failures.batch_interval()
        crash_after = failures.runtime_crash_after()
        deadline = time.monotonic() + crash_after if crash_after is not None else None
        forward = 0
        while True:
            time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))
            if deadline is not None and time.monotonic() >= deadline:
                time.sleep(self.tp_rank * random.uniform(0.05, 0.5))
                self.alloc_for_decode(running=int(self.max_total_num_tokens > 0) * 96)
            forward += 1
            if self.tp_rank == 0:
                logger.info(
                    messages.batch_line(self.args.disaggregation_mode, self.dsv4, forward, self.max_total_num_tokens)
                )

    def alloc_for_decode(self, running: int) -> None:
        error_msg = messages.decode_oom(running, random.randint(16, 128))
        logger.error(error_msg)
        raise RuntimeError(error_msg)


def run_scheduler_process(args: argparse.Namespace, tp_rank: int, pipe_writer: Any, barrier: Any, serving: Any) -> None:
    messages.unbuffered()
    kill_itself_when_parent_died()
    prefix = f" TP{tp_rank}" if args.tp_size > 1 else ""
    set_process_title(f"sglang::scheduler{prefix.replace(' ', '_')}")
    messages.configure_logger(prefix)
    parent = os.getppid()
    try:
        scheduler = Scheduler(args, tp_rank, barrier, serving)
        pipe_writer.send({"status": "ready", "max_total_num_tokens": scheduler.max_total_num_tokens})
        scheduler.run_event_loop()
    except Exception:
        tb = "".join(traceback.format_exception(*sys.exc_info()))
        logger.error(messages.scheduler_exception(tb))
        os.kill(parent, signal.SIGQUIT)


def run_detokenizer_process(args: argparse.Namespace) -> None:
    kill_itself_when_parent_died()
    set_process_title("sglang::detokenizer")
    messages.configure_logger()
    while True:
        time.sleep(3600)
