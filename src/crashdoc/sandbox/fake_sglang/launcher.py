"""The launcher process (srt/entrypoints/engine.py, http_server.py, launch_server.py): it resolves the flags,
spawns one scheduler per TP rank and a detokenizer, waits for the ranks to report ready, then serves and
watches its children. A child's SIGQUIT makes it log SGLang's line, let the other ranks print their own
traceback, and SIGKILL its whole process tree, itself included (systemd: ``code=killed, status=9/KILL``)."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Sequence
from typing import Any

from crashdoc.sandbox.fake_sglang import failures, messages
from crashdoc.sandbox.fake_sglang.messages import logger
from crashdoc.sandbox.fake_sglang.process_control import kill_process_tree
from crashdoc.sandbox.fake_sglang.scheduler import run_detokenizer_process, run_scheduler_process
from crashdoc.sandbox.fake_sglang.server_args import make_parser, resolve_once, resolved_dict

_READY_POLL_SECONDS = 5.0  # engine.py _wait_for_scheduler_ready polls the init pipes every 5 s


class Launcher:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.procs: list[Any] = []
        self.names: list[str] = []
        self.quitting = False

    def launch_phase_sigquit_handler(self, signum: int, frame: Any) -> None:
        self._quit(messages.CHILD_FAILED)

    def running_phase_sigquit_handler(self, signum: int, frame: Any) -> None:
        self._quit(messages.RUNNING_CHILD_FAILED)

    def _quit(self, said: str) -> None:
        """Once: say why, let the other ranks finish their tracebacks, then SIGKILL the tree, this process last."""
        if self.quitting:
            return
        self.quitting = True
        logger.error(said)
        self._grace()
        kill_process_tree(os.getpid())

    def _grace(self) -> None:
        """Let the other ranks print their own traceback before everything dies (see ``failures``)."""
        deadline = time.monotonic() + failures.kill_grace(self.args.tp_size)
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
                        raise RuntimeError(messages.INITIALIZATION_FAILED)
                    break
                for j in range(len(readers)):
                    if not self.procs[j].is_alive():
                        raise self._scheduler_died_error(j)

    def _scheduler_died_error(self, rank: int) -> RuntimeError:
        proc = self.procs[rank]
        proc.join(timeout=10)
        return RuntimeError(messages.scheduler_died(rank, proc.exitcode))

    def serve(self) -> None:
        args = self.args
        for line in messages.server_started(os.getpid(), args.host, args.port):
            logger.info(line)
        logger.info(messages.READY)
        self.serving.set()
        while True:  # SubprocessWatchdog (srt/utils/watchdog.py): poll the children every second
            time.sleep(1.0)
            for proc, name in zip(self.procs, self.names, strict=True):
                code = proc.exitcode
                if code not in (None, 0):
                    logger.error(messages.subprocess_crashed(name, proc.pid, code))
                    os.kill(os.getpid(), signal.SIGQUIT)


def launch_server(args: argparse.Namespace) -> None:
    messages.configure_logger()
    logger.info(messages.server_args(resolved_dict(args)))
    Launcher(args).launch()


def run_server(args: argparse.Namespace) -> None:
    resolve_once(args)
    try:
        launch_server(args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


def main(argv: Sequence[str] | None = None) -> None:
    messages.unbuffered()
    messages.configure_logger()
    args = make_parser().parse_args(argv)
    run_server(args)
