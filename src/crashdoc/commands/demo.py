"""`crashdoc demo`: the built-in sandbox with crash-looping demo units."""

from __future__ import annotations

import argparse
import sys
import time

from crashdoc.errors import UserError


def main(args: argparse.Namespace) -> int:
    """Boot the built-in sandbox (a private systemd with a crash-looping SGLang prefill unit and a
    healthy decode unit), run the daemon inside it and show its diagnosis."""
    import subprocess

    from crashdoc.sandbox.demo import DECODE_UNIT, PREFILL_UNIT, boot_demo
    from crashdoc.sandbox.systemd import SandboxError, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        raise UserError(f"cannot boot the demo sandbox here: {reason}")
    print("booting a private systemd with sglang-prefill.service (crash-looping) and sglang-decode.service ...")
    try:
        sandbox = boot_demo(python=sys.executable)
    except SandboxError as exc:
        raise UserError(f"the demo sandbox did not boot: {exc}") from exc
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
        if args.keep_running:
            print("Press Ctrl-C to stop the sandbox.")
            while daemon.poll() is None:
                time.sleep(1)
        return 0
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.terminate()
        sandbox.stop()


def _demo_looping(url: str, unit: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=2) as response:
            body = response.read().decode()
    except OSError:
        return False
    return f'crashdoc_unit_crashloop{{unit="{unit}"}} 1.0' in body
