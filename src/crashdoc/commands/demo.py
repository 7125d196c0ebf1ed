"""`crashdoc demo`: the built-in sandbox with crash-looping demo units.

Stopping it is part of the demo: Ctrl-C, SIGTERM or SIGHUP while it runs (`--keep-running`) stop the daemon
and the private systemd and remove the sandbox's folder and cgroups, and the exit status is 0 (it was asked
to stop). An interrupt before the diagnosis is shown cleans up the same way and exits 130. On a terminal,
`--keep-running` takes the terminal's foreground for its own process group, so that Ctrl-C reaches the demo
alone: `make run` (GNU make re-raises a SIGINT it receives itself, exiting 130) then exits 0 with it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType

from crashdoc.errors import EXIT_INTERRUPTED, EXIT_OK, UserError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(Exception):
    """SIGTERM or SIGHUP arrived: unwind like Ctrl-C, so that every `finally` cleans up."""


def main(args: argparse.Namespace) -> int:
    """Boot the built-in sandbox (a private systemd with a crash-looping SGLang prefill unit and a
    healthy decode unit), run the daemon inside it and show its diagnosis."""
    from crashdoc.sandbox.systemd import SandboxError, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        raise UserError(f"cannot boot the demo sandbox here: {reason}")
    demo = _Demo(args)
    with _stop_signals(), _terminal_foreground() if args.keep_running else contextlib.nullcontext():
        try:
            demo.run()
        except (KeyboardInterrupt, Stopped):
            print("\nstopped: the sandbox and its folder are removed.")
            return EXIT_OK if demo.shown else EXIT_INTERRUPTED
        except SandboxError as exc:
            raise UserError(f"the demo sandbox did not boot: {exc}") from exc
    return EXIT_OK


class _Demo:
    """One run of the demo; `shown` once the diagnosis is on the screen (a stop after that is the normal end)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.shown = False

    def run(self) -> None:
        import subprocess

        from crashdoc.sandbox.demo import DECODE_UNIT, PREFILL_UNIT, boot_demo

        args = self.args
        print("booting a private systemd with sglang-prefill.service (crash-looping) and sglang-decode.service ...")
        sandbox = boot_demo(python=sys.executable)
        daemon = None
        try:
            state = sandbox.workdir / "crashdoc-state"
            log_path = sandbox.workdir / "crashdoc.log"
            argv = [sys.executable, "-m", "crashdoc", "run", "--listen", args.listen, "--state-directory", str(state)]
            with open(log_path, "wb") as log:
                daemon = sandbox.popen(argv, stdout=log, stderr=subprocess.STDOUT)
            url = f"http://{args.listen}"
            print(f"crashdoc is running inside it: {url}/  {url}/metrics  {url}/diagnoses")
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                if daemon.poll() is not None:
                    raise UserError("crashdoc stopped in the sandbox:\n" + log_path.read_text(errors="replace"))
                if _demo_looping(url, PREFILL_UNIT):
                    break
                time.sleep(0.5)
            else:
                raise UserError("no crash loop was diagnosed within 90 s:\n" + log_path.read_text(errors="replace"))
            result = sandbox.run([sys.executable, "-m", "crashdoc", "diagnose", "--unit", PREFILL_UNIT], timeout=60)
            print()
            print(result.stdout, end="")
            healthy = sandbox.systemctl("is-active", DECODE_UNIT).stdout.strip()
            print(f"\n{DECODE_UNIT} beside it: {healthy}, not crash-looping.")
            print(f"On-call page: {url}/units/{PREFILL_UNIT}")
            self.shown = True
            if args.keep_running:
                print("Press Ctrl-C to stop the sandbox.", flush=True)
                while daemon.poll() is None:
                    time.sleep(1)
                raise UserError("crashdoc stopped in the sandbox:\n" + log_path.read_text(errors="replace"))
        finally:
            with _signals_held():  # a second Ctrl-C must not leave the sandbox or its folder behind
                if daemon is not None and daemon.poll() is None:
                    daemon.terminate()
                sandbox.stop()


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signal.Signals(signum).name)


@contextlib.contextmanager
def _stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind like Ctrl-C while the demo runs (Python's default would kill it on the spot,
    leaving the sandbox's folder behind). Ctrl-C itself is set too: started from a shell that ignores SIGINT (a
    background job, `nohup`), Python keeps it ignored and "Press Ctrl-C to stop" would not be true."""
    with (
        _signals_set((signal.SIGINT,), signal.default_int_handler),
        _signals_set((signal.SIGTERM, signal.SIGHUP), _raise_stopped),
    ):
        yield


def _signals_held() -> contextlib.AbstractContextManager[None]:
    """Ignore the stop signals while cleaning up; restore them after."""
    return _signals_set(STOP_SIGNALS, signal.SIG_IGN)


@contextlib.contextmanager
def _signals_set(
    signals: tuple[signal.Signals, ...], handler: signal.Handlers | Callable[[int, FrameType | None], None]
) -> Iterator[None]:
    """`handler` for `signals` inside the block, the handlers before it restored after."""
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for s, before in previous.items():
            signal.signal(s, before)


@contextlib.contextmanager
def _terminal_foreground() -> Iterator[None]:
    """On a terminal, run in a process group of our own that owns the terminal, so that Ctrl-C reaches the demo
    alone and not the program that started it (make would die of it); give the terminal back afterwards."""
    try:
        fd = sys.stdin.fileno()
        owned = os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except (OSError, ValueError):
        owned = False
    if not owned:
        yield
        return
    before = os.getpgrp()
    ttou = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group may then set the foreground
    try:
        os.setpgid(0, 0)
        os.tcsetpgrp(fd, os.getpgrp())
    except OSError:
        signal.signal(signal.SIGTTOU, ttou)
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, before)
        signal.signal(signal.SIGTTOU, ttou)


def _demo_looping(url: str, unit: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=2) as response:
            body = response.read().decode()
    except OSError:
        return False
    return f'crashdoc_unit_crashloop{{unit="{unit}"}} 1.0' in body
