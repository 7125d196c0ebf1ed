"""Running commands inside a booted sandbox: ``nsenter`` into its namespaces with a clean environment.

Why a class of its own: what the tests and the demo do with a sandbox (``run``, ``popen``, ``systemctl``,
``journalctl``, ``show``, ``wait_until``) needs only the PID of its PID 1 and its folders, not how it was
booted. ``PrivateSystemd`` is the one sandbox; it says where its namespaces are (``pid``, ``workdir``,
``unit_dir``, ``running``). Every process started here runs in a session of its own, so a timeout or
``stop()`` kills it and its child inside the namespaces, and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from crashdoc.sandbox.errors import SandboxError
from crashdoc.sandbox.processes import kill_group

T = TypeVar("T")

# Variables that would point a process inside at the wrong bus, journal stream or service manager.
_ENV_DROP = (
    "NOTIFY_SOCKET",
    "INVOCATION_ID",
    "JOURNAL_STREAM",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "DBUS_SYSTEM_BUS_ADDRESS",
    "DBUS_SESSION_BUS_ADDRESS",
    "XDG_RUNTIME_DIR",
    "TMPDIR",
    "MANAGERPID",
    "SYSTEMD_EXEC_PID",
)


class CommandsInside:
    """Commands run inside a sandbox's namespaces; the sandbox says where they are."""

    def __init__(self) -> None:
        self._children: list[subprocess.Popen[Any]] = []

    @property
    def pid(self) -> int:
        """Host PID of the private PID 1."""
        raise NotImplementedError

    @property
    def workdir(self) -> Path:
        raise NotImplementedError

    @property
    def unit_dir(self) -> Path:
        """The private SYSTEMD_UNIT_PATH (same path inside and on the host)."""
        raise NotImplementedError

    @property
    def running(self) -> bool:
        raise NotImplementedError

    def nsenter_argv(self, argv: Sequence[str], cwd: str | os.PathLike[str] | None = None) -> list[str]:
        """The host argv that runs ``argv`` inside the sandbox's namespaces."""
        wd = str(cwd) if cwd is not None else str(self.workdir)
        return ["nsenter", "-t", str(self.pid), "-m", "-p", "-u", "-C", f"--wd={wd}", "--", *argv]

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for processes inside: the caller's, minus host service-manager variables."""
        env = {k: v for k, v in os.environ.items() if k not in _ENV_DROP}
        env.update(
            SYSTEMD_PAGER="cat",
            PAGER="cat",
            SYSTEMD_COLORS="0",
            SYSTEMD_UNIT_PATH=str(self.unit_dir),
            PYTHONUNBUFFERED="1",
        )
        env.update(extra or {})
        return env

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = False,
        timeout: float | None = 30.0,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside and capture its output (text). On timeout the whole process group dies."""
        if not self.running:
            raise SandboxError(f"cannot run {argv[0]!r}: the private systemd is not running")
        full = self.nsenter_argv(argv, cwd)
        proc = subprocess.Popen(
            full,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(env),
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(list(argv), timeout or 0.0, out, err) from None
        except BaseException:
            kill_group(proc)
            proc.wait()
            raise
        result = subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
        if check and result.returncode != 0:
            raise SandboxError(
                f"{shlex.join(argv)} failed inside the sandbox (exit {result.returncode}):\n"
                f"{result.stdout}{result.stderr}"
            )
        return result

    def popen(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stdin: int | IO[Any] | None = subprocess.DEVNULL,
        stdout: int | IO[Any] | None = subprocess.PIPE,
        stderr: int | IO[Any] | None = subprocess.STDOUT,
        text: bool = True,
    ) -> subprocess.Popen[Any]:
        """Start a long-running process inside (e.g. the crashdoc daemon); ``stop()`` kills it."""
        if not self.running:
            raise SandboxError(f"cannot start {argv[0]!r}: the private systemd is not running")
        proc = subprocess.Popen(
            self.nsenter_argv(argv, cwd),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            text=text,
            env=self.env(env),
            start_new_session=True,
        )
        self._children.append(proc)
        return proc

    def systemctl(self, *args: str, check: bool = False, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return self.run(["systemctl", "--no-pager", *args], check=check, timeout=timeout)

    def journalctl(self, *args: str, check: bool = False, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return self.run(["journalctl", "--no-pager", *args], check=check, timeout=timeout)

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        """``systemctl show`` as a dict (asks PID 1 over D-Bus)."""
        argv = ["show", unit] + [f"--property={p}" for p in properties]
        out = self.systemctl(*argv, check=True).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def wait_until(
        self,
        predicate: Callable[[], T],
        timeout: float = 30.0,
        interval: float = 0.1,
        message: str = "",
    ) -> T:
        """Poll ``predicate`` until it returns something truthy, and return that; fail on timeout or
        when the private systemd died meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if not self.running:
                raise SandboxError(f"the private systemd died while waiting for {message or predicate!r}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {message or predicate!r}")
            time.sleep(interval)

    def _check_loaded(self, names: Iterable[str]) -> None:
        for name in names:
            props = self.show(name, "LoadState", "LoadError")
            if props.get("LoadState") != "loaded":
                status = self.systemctl("status", name).stdout
                raise SandboxError(
                    f"unit {name} did not load in the sandbox: {props.get('LoadState')} "
                    f"{props.get('LoadError', '')}\n{status}"
                )

    def _kill_children(self) -> None:
        """SIGKILL the sessions of the long-running processes ``popen`` started."""
        for child in self._children:
            kill_group(child)

    def _reap_children(self, timeout: float) -> None:
        for child in self._children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout)
