"""Helpers for end-to-end tests: crashdoc running inside a private systemd, read from outside.

The sandbox shares the host's network namespace, so the test reads crashdoc's HTTP view
on loopback directly; the journal is read with journalctl inside the sandbox.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from crashdoc.sandbox.systemd import PrivateSystemd

PYTHON = sys.executable
CRASHDOC = [PYTHON, "-m", "crashdoc"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Crashdoc:
    """A `crashdoc run` inside a sandbox."""

    sandbox: PrivateSystemd
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    config_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    ca_file: Path | None = None  # crashdoc serves TLS (a web configuration): the CA that signed its certificate
    auth: tuple[str, str] | None = None  # basic-auth user and password

    @property
    def base(self) -> str:
        return f"{'https' if self.ca_file is not None else 'http'}://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        request = urllib.request.Request(self.base + path)
        if self.auth is not None:
            request.add_header("Authorization", "Basic " + base64.b64encode(":".join(self.auth).encode()).decode())
        context = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file is not None else None
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """{(sample name, sorted labels): value}; empty while crashdoc is not answering."""
        try:
            status, body = self.get("/metrics", timeout=2)
        except OSError:
            return {}
        if status != 200:
            return {}
        out = {}
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return out

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics().get((name, tuple(sorted(labels.items()))))

    def diagnoses(self) -> list[dict[str, Any]]:
        status, body = self.get("/diagnoses")
        assert status == 200, body
        return json.loads(body)["diagnoses"]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def pid(self) -> int | None:
        """crashdoc's own PID (host view): nsenter forks it to enter the PID namespace."""
        if self.proc is None:
            return None
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Signal crashdoc itself and wait; returns its exit status (nsenter passes it on)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            inner = self.pid
            with contextlib.suppress(ProcessLookupError):
                if inner is not None:
                    os.kill(inner, sig)
                else:
                    os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode


def start_crashdoc(
    sandbox: PrivateSystemd,
    *,
    config: str | None = None,
    args: list[str] | None = None,
    port: int | None = None,
    env: dict[str, str] | None = None,
    name: str = "crashdoc",
    ca_file: Path | None = None,
    auth: tuple[str, str] | None = None,
) -> Crashdoc:
    """Run `crashdoc run` inside the sandbox with its state in the sandbox's work folder."""
    port = port or free_port()
    state = sandbox.workdir / f"{name}-state"
    log_path = sandbox.workdir / f"{name}.log"
    argv = [*CRASHDOC, "run"]
    cd = Crashdoc(sandbox, port, log_path, ca_file=ca_file, auth=auth)
    if config is not None:
        cd.config_path = sandbox.workdir / f"{name}.yaml"
        cd.config_path.write_text(config)
        argv += ["--config", str(cd.config_path)]
    if args is None:
        argv += ["--listen", f"127.0.0.1:{port}", "--state-directory", str(state)]
    else:
        argv += args
    cd.env = {"PYTHONUNBUFFERED": "1", **(env or {})}
    cd.argv = argv
    return restart_crashdoc(cd)


def restart_crashdoc(cd: Crashdoc, *, wait: bool = True) -> Crashdoc:
    """(Re)start `cd`'s `crashdoc run` with the same arguments, state folder, port and log (after a
    stop or a kill -9); with `wait`, return once it answers on /metrics."""
    assert cd.proc is None or cd.proc.poll() is not None, "crashdoc is still running"
    with open(cd.log_path, "ab") as log:
        cd.proc = cd.sandbox.popen(cd.argv, stdout=log, stderr=subprocess.STDOUT, env=cd.env)
    if wait:
        wait_for(lambda: cd.metrics() != {} or cd.proc.poll() is not None, 30, "crashdoc to answer", cd)
        assert cd.proc.poll() is None, f"crashdoc exited early:\n{cd.log()}"
    return cd


# A wait ends as soon as its condition holds, so a generous bound costs an idle host nothing and turns a loaded one
# (CI, two CPUs shared with other work) into a slow pass instead of a failure. Every bound is scaled by this.
PATIENCE = float(os.environ.get("CRASHDOC_TEST_PATIENCE", "3"))


def wait_for(
    predicate: Callable[[], object],
    timeout: float,
    what: str,
    cd: Crashdoc | None = None,
    interval: float = 0.1,
    seen: Callable[[], object] | None = None,
) -> object:
    """Poll `predicate` until it returns something truthy (returned), for `timeout` x PATIENCE seconds; on a
    timeout, say what was last seen (`seen()`, else the predicate's last value) and crashdoc's log."""
    bound = timeout * PATIENCE
    began = time.monotonic()
    value: object = None
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() - began >= bound:
            break
        time.sleep(interval)
    last = seen() if seen is not None else value
    detail = f"\ncrashdoc log:\n{cd.log()[-4000:]}" if cd is not None else ""
    raise AssertionError(f"timed out after {bound:.0f}s waiting for {what}; last seen: {last!r}{detail}")


def checked_hicache_ratio(fix: dict[str, Any]) -> str | None:
    """The --hicache-ratio a HiCache fix (JSON) carries, once it is checked to be one truth: the summary and the
    corrected command say that value, and the host-memory check accepted it (it fits, it is the largest that
    does, or the check could not run). None when no ratio fits and the fix turns HiCache off instead.
    The value depends on this machine's memory, so tests read it rather than expect 2.0."""
    warning = " ".join(fix["warnings"])
    ratios = [
        c["value"]
        for c in fix["changes"]
        if (c.get("new_flag") or c["flag"]) == "--hicache-ratio" and c["action"] != "remove"
    ]
    command = fix["command"] or ""
    if "No --hicache-ratio fits" in warning:
        assert not ratios and "--enable-hierarchical-cache" not in command, fix
        assert fix["summary"].startswith("no --hicache-ratio fits this host"), fix
        return None
    [value] = ratios
    accepted = (
        f"--hicache-ratio {value} fits",
        f"The corrected command uses --hicache-ratio {value}, the largest that fits",
        f"could not check that --hicache-ratio {value} fits",
    )
    assert any(a in warning for a in accepted), fix
    assert f"--hicache-ratio {value}" in fix["summary"], fix
    assert not command or f"--hicache-ratio {value}" in command, fix
    return str(value)


def journal_json(sandbox: PrivateSystemd, *args: str) -> list[dict[str, Any]]:
    r = sandbox.journalctl("-o", "json", "--no-pager", *args)
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def pid1_records(sandbox: PrivateSystemd, unit: str, message_id: str) -> list[dict[str, Any]]:
    """PID 1's records about `unit` with `message_id`: the ground truth crashdoc is compared with."""
    return [e for e in journal_json(sandbox, f"MESSAGE_ID={message_id}", f"UNIT={unit}") if e.get("_PID") == "1"]


RESTART_SCHEDULED = "5eb03494b6584870a536b337290809b3"
PROCESS_EXITED = "98e322203f7a4ed290d09fe03c09fe15"
