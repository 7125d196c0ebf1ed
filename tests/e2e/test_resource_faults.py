"""Resource faults: the state folder full or read-only, the HTTP port taken, a bad listen address.

The state folder is a tiny tmpfs mounted inside the private systemd (its own mount namespace, so the
host never sees it), filled up with dd and remounted read-only while `crashdoc run` follows a crash loop:
crashdoc warns once per fault, keeps diagnosing in memory, shows it in `crashdoc_state_writable` and
`crashdoc_state_write_errors_total`, and saves again as soon as it can.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crashdoc.sandbox.demo import package_root
from support.e2e import CRASHDOC, free_port, start_crashdoc, wait_for

PY = sys.executable
BAD = "--model-path deepseek-ai/DeepSeek-V4-Flash --tp-size 2 --enable-hierarchical-cache --hicache-size 150"
UNIT = "sglang-prefill.service"
IN_MEMORY = "diagnosing in memory only"


def _looping_unit() -> str:
    return (
        "[Unit]\nDescription=SGLang test unit\nStartLimitIntervalSec=0\n\n"
        f"[Service]\nExecStart={PY} -m crashdoc.sandbox.fake_sglang {BAD}\nRestart=always\nRestartSec=1\n"
        f"Environment=PYTHONUNBUFFERED=1 PYTHONPATH={package_root()}\n"
    )


@pytest.mark.sandbox
def test_state_folder_full_then_read_only_then_back(sandbox_factory, sandbox_workdir: Path) -> None:
    sandbox = sandbox_factory({UNIT: _looping_unit()}, workdir=sandbox_workdir, start_units=[])
    state = sandbox.workdir / "crashdoc-state"  # where start_crashdoc keeps it
    state.mkdir()
    sandbox.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(state)], check=True)
    inside = sandbox.root / str(state).lstrip("/")  # the sandbox's view: the tmpfs, not the host folder

    def saved_at() -> float:
        try:
            return float(json.loads((inside / "state.json").read_text())["saved_at"])
        except (OSError, ValueError, KeyError):
            return 0.0

    cd = start_crashdoc(sandbox)
    try:
        # full: dd fills the tmpfs to the last page; the loop is diagnosed in memory meanwhile
        sandbox.run(
            ["sh", "-c", f"dd if=/dev/zero of={state}/fill bs=64k; dd if=/dev/zero of={state}/fill2 bs=4k; true"],
            check=True,
        )
        sandbox.systemctl("start", UNIT, check=True)
        wait_for(lambda: cd.metric("crashdoc_state_writable") == 0.0, 30, "state_writable 0 (disk full)", cd)
        wait_for(lambda: cd.metric("crashdoc_unit_crashloop", unit=UNIT) == 1.0, 60, "the loop, in memory", cd)
        wait_for(lambda: (cd.metric("crashdoc_state_write_errors_total") or 0) >= 3, 30, "repeated attempts", cd)
        assert cd.log().count(IN_MEMORY) == 1, cd.log()  # once, not once per attempt
        assert "No space left on device" in cd.log()
        assert cd.diagnoses()[0]["signature"] == "dsv4-hicache-size-unsupported"

        # space comes back: the state is saved again within a couple of seconds
        sandbox.run(["rm", "-f", f"{state}/fill", f"{state}/fill2"], check=True)
        back = time.time()
        wait_for(lambda: cd.metric("crashdoc_state_writable") == 1.0, 30, "state_writable 1 again", cd)
        wait_for(lambda: saved_at() >= back - 1, 10, "a fresh state.json", cd)
        assert f"the state is saved again in {state}" in cd.log()

        # read-only: one more warning, the same recovery
        errors = cd.metric("crashdoc_state_write_errors_total") or 0
        sandbox.run(["mount", "-o", "remount,ro", str(state)], check=True)
        wait_for(lambda: cd.metric("crashdoc_state_writable") == 0.0, 30, "state_writable 0 (read-only)", cd)
        assert "Read-only file system" in cd.log() and cd.log().count(IN_MEMORY) == 2
        assert (cd.metric("crashdoc_state_write_errors_total") or 0) > errors
        assert cd.metric("crashdoc_unit_crashloop", unit=UNIT) == 1.0
        sandbox.run(["mount", "-o", "remount,rw", str(state)], check=True)
        wait_for(lambda: cd.metric("crashdoc_state_writable") == 1.0, 30, "state_writable 1 after remount", cd)
        assert cd.metric("crashdoc_internal_errors_total") == 0.0
        assert cd.proc is not None and cd.proc.poll() is None

        # SIGHUP without --config: the signature library is reloaded, and the log says there is no file
        assert cd.pid is not None
        os.kill(cd.pid, signal.SIGHUP)
        wait_for(lambda: cd.metric("crashdoc_signature_reloads_total") == 1.0, 20, "the library reload", cd)
        assert "SIGHUP: no configuration file (--config) to read again" in cd.log()
        assert cd.metric("crashdoc_config_reloads_total") == 0.0
    finally:
        cd.stop()
        sandbox.systemctl("stop", UNIT)


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CRASHDOC, "run", *args], capture_output=True, text=True, timeout=timeout)


def test_http_port_taken_is_one_clear_line_and_a_failure(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = _run("--listen", f"127.0.0.1:{port}", "--state-directory", str(tmp_path / "state"))
    assert r.returncode == 1
    assert r.stderr == f"crashdoc: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert r.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "localhost"], "crashdoc: --listen: listen address must be HOST:PORT, got 'localhost'\n"),
        (
            ["--listen", "127.0.0.1:99999"],
            "crashdoc: --listen: listen address must be HOST:PORT, got '127.0.0.1:99999'\n",
        ),
        (["--listen", "no-such-host.invalid:10247"], None),
        (
            ["--runbook-base-url", "crashdoc.example.net"],
            "crashdoc: --runbook-base-url: must be an http(s) URL, got 'crashdoc.example.net'\n",
        ),
        (["--alertmanager-url", "am:9093"], "crashdoc: --alertmanager-url: must be an http(s) URL, got 'am:9093'\n"),
    ],
    ids=["no-port", "port-range", "unknown-host", "runbook-url", "alertmanager-url"],
)
def test_bad_command_line_options_are_one_clear_line(tmp_path: Path, args: list[str], message: str | None) -> None:
    full = [*args] if "--listen" in args else [*args, "--listen", f"127.0.0.1:{free_port()}"]
    r = _run(*full, "--state-directory", str(tmp_path / "state"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    if message is None:
        assert r.stderr.startswith("crashdoc: cannot listen on no-such-host.invalid:10247: ")
        assert len(r.stderr.splitlines()) == 1, r.stderr
    else:
        assert r.stderr == message
