"""A private systemd booted as PID 1 of new PID, mount, cgroup and UTS namespaces.

Why: every claim that "crashdoc sees a crash loop" must be checked against a real PID 1 with a real
journald and a real D-Bus, on machines where systemd is installed but is not PID 1 (CI, containers,
firecracker VMs). ``PrivateSystemd`` boots one in about a second, runs real units in it and always
takes it down again.

How it is isolated from the host (each point fixes a real hazard; the module that does it says how):

- The host's /tmp is never touched: /run, /tmp and the journal's folder are private tmpfs, checked
  *before* systemd is exec'd, and the /tmp paths the units need are bound back on the private /tmp
  (``namespaces``); no tmpfiles unit and no host unit is on the private unit path (``units``).
- /proc/sys and /sys are read-only inside (``namespaces``); PID 1's console is a pty of its own
  (``console``).
- Each sandbox has cgroups of its own and a cgroup namespace rooted there (``cgroups``); what killed
  runs left behind is swept on start (``leftovers``).
- The launcher chain dies with the Python process, even by SIGKILL, and takes PID 1 with it
  (``namespaces``). ``stop()`` SIGKILLs exactly the private PID 1 (never anything found by name) and reaps
  the chain; an ``atexit`` hook stops every sandbox this process still runs.

Facts verified on systemd 252 (Debian 252.39) in this sandbox; tests/e2e/test_sandbox.py keeps them true:

- PID 1's records about a unit carry ``_PID=1``, ``_COMM=systemd``, ``_SYSTEMD_UNIT=init.scope``,
  ``_SYSTEMD_CGROUP=/init.scope``, ``_SYSTEMD_SLICE=-.slice``, ``UNIT=<unit>`` and
  ``INVOCATION_ID=<id of that run>`` (no underscore). They have no ``_SYSTEMD_INVOCATION_ID``.
- A unit's own stdout/stderr lines carry ``_SYSTEMD_UNIT=<unit>``, ``_SYSTEMD_INVOCATION_ID=<id>``
  (the same id as PID 1's ``INVOCATION_ID``), ``_TRANSPORT=stdout``, no ``INVOCATION_ID``, and the
  ``_PID``/``_COMM`` of the process that wrote the line: a forked or spawned child (a TP rank) is
  told apart from the launcher.
- ``MESSAGE_ID=39f53479d3a045ac8e11786248231fbf`` "Started <desc>." (``JOB_TYPE=start``,
  ``JOB_RESULT=done``).
- ``MESSAGE_ID=98e322203f7a4ed290d09fe03c09fe15`` "<unit>: Main process exited, code=killed,
  status=9/KILL" with ``EXIT_CODE=killed`` ``EXIT_STATUS=9`` (the signal *number*; the name is only in
  MESSAGE) and ``COMMAND=ExecStart``; for an exit, ``EXIT_CODE=exited`` ``EXIT_STATUS=3`` ("status=
  3/NOTIMPLEMENTED"). No such record when the main process exits 0.
- ``MESSAGE_ID=d9b373ed55a64feb8242e02dbe79a49c`` "<unit>: Failed with result 'signal'." with
  ``UNIT_RESULT=signal`` / ``exit-code`` / ``start-limit-hit``.
- ``MESSAGE_ID=5eb03494b6584870a536b337290809b3`` "<unit>: Scheduled restart job, restart counter is
  at N." with ``N_RESTARTS=N``, followed by ``9d1aaa27d60140bd96365438aad20286`` "Stopped <desc>."
  (``JOB_TYPE=restart``) and a new "Started" with a new INVOCATION_ID. ``systemctl show -p NRestarts``
  agrees with N_RESTARTS.
- Start limit: "<unit>: Start request repeated too quickly." has *no* MESSAGE_ID; then the
  unit-failed record and ``be02cf6855d2428ba40df7e9d022f03d`` "Failed to start <desc>."
  (``JOB_RESULT=failed``). ``UNIT_RESULT=start-limit-hit`` appears only when the runs before it
  succeeded (exit 0); a crash loop that hits the limit keeps the last run's result (``signal``,
  ``exit-code``) in UNIT_RESULT and in ``systemctl show -p Result``.
- Memory: on this host (cgroup v1 memory controller, "hybrid" layout) ``MemoryMax=`` *is* enforced
  (systemd writes memory.limit_in_bytes in the sandbox's own memory cgroup; ``memory_enforced``).
  The kernel's memcg OOM killer then kills the largest process of the unit, but PID 1 does not know
  why: no ``oom-kill`` result and no "A process of this unit has been killed by the OOM killer."
  record (that needs cgroup v2's memory.events). The unit only shows ``EXIT_CODE=killed
  EXIT_STATUS=9`` / ``UNIT_RESULT=signal`` if the killed process was the main process. journald
  reads the kernel ring buffer, so the journal also holds ``_TRANSPORT=kernel`` lines
  "oom-kill:constraint=CONSTRAINT_MEMCG,...,task_memcg=/<...>/<cgroup_name>/system.slice/<unit>,
  task=<comm>,pid=<host pid>,..." and "Memory cgroup out of memory: Killed process <host pid> (<comm>)";
  kernel lines carry host PIDs and include older host kernel messages (filter on ``cgroup_name``).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from crashdoc.sandbox.cgroups import CGROUP_PREFIX, SandboxCgroups
from crashdoc.sandbox.console import Console
from crashdoc.sandbox.errors import SandboxError
from crashdoc.sandbox.host import check_prerequisites, unavailable_reason
from crashdoc.sandbox.inside import CommandsInside
from crashdoc.sandbox.leftovers import MARKER, make_workdir, private_tmp_folders, sweep_stale
from crashdoc.sandbox.namespaces import default_visible_paths, start_launcher, write_boot_folder
from crashdoc.sandbox.processes import alive, children_of, comm
from crashdoc.sandbox.units import write_unit, write_unit_folder

# what callers import from here (the sandbox's face): the error, the machine check and the work folder too
__all__ = ["PrivateSystemd", "SandboxError", "make_workdir", "unavailable_reason"]


class PrivateSystemd(CommandsInside):
    """A private systemd (PID 1 of new namespaces) with journald, D-Bus and the given units.

    Use it as a context manager; ``start()`` returns once PID 1 has reached its target, journald runs
    and systemd answers on the system bus. ``run``/``popen`` execute inside (``nsenter``); the journal
    is readable from the host at ``journal_dir`` while the sandbox runs.
    """

    _serial = itertools.count(1)

    def __init__(
        self,
        units: Mapping[str, str] | None = None,
        workdir: str | os.PathLike[str] | None = None,
        *,
        start_units: Iterable[str] | None = None,
        keep_workdir: bool | None = None,
        visible: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        """``units`` maps unit names to their text; ``start_units`` (default: every given .service)
        are started once the boot is confirmed. Without ``workdir`` one is made (``make_workdir``);
        folders made that way are deleted on stop unless ``keep_workdir``, other folders are kept
        (only their ``.sandbox`` subfolder is rewritten). ``visible``: host paths under /tmp that units
        need besides the defaults (``default_visible_paths``) and the work folder."""
        super().__init__()
        self._units: dict[str, str] = dict(units or {})
        self._start_units = (
            [n for n in self._units if n.endswith(".service")] if start_units is None else list(start_units)
        )
        self._workdir = Path(workdir).resolve() if workdir is not None else None
        self._visible = [Path(p) for p in visible]
        self._own_workdir = self._workdir is None or (self._workdir / MARKER).is_file()
        self._keep_workdir = (not self._own_workdir) if keep_workdir is None else keep_workdir
        self._launcher: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._cgroups = SandboxCgroups()
        self._console = Console()
        self._boot_seconds: float | None = None
        self._stopped = False

    # --- properties ---------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        """Host PID of the private PID 1."""
        if self._pid is None:
            raise SandboxError("the private systemd is not running")
        return self._pid

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise SandboxError("the sandbox has no work folder before start()")
        return self._workdir

    @property
    def state_dir(self) -> Path:
        """The sandbox's own files in the work folder: units, boot scripts, console.log."""
        return self.workdir / ".sandbox"

    @property
    def unit_dir(self) -> Path:
        """The private SYSTEMD_UNIT_PATH (same path inside and on the host)."""
        return self.state_dir / "units"

    @property
    def root(self) -> Path:
        """The sandbox's file system as seen from the host."""
        return Path(f"/proc/{self.pid}/root")

    @property
    def journal_dir(self) -> Path:
        """journald's folder as seen from the host: ``journalctl --directory`` reads it while running."""
        return self.root / "var/log/journal"

    @property
    def running(self) -> bool:
        return self._pid is not None and not self._stopped and alive(self._pid)

    @property
    def boot_seconds(self) -> float | None:
        """Wall time of the last ``start()`` until PID 1, journald and D-Bus were all confirmed."""
        return self._boot_seconds

    @property
    def cgroup_layout(self) -> str:
        """``unified``, ``hybrid`` or ``legacy``: what PID 1 sees under /sys/fs/cgroup."""
        return self._cgroups.layout

    @property
    def cgroup_name(self) -> str:
        """The sandbox's cgroup folder name on the host (it appears in kernel OOM messages)."""
        return self._cgroups.name

    @property
    def memory_enforced(self) -> bool:
        """True when a memory controller is delegated, so ``MemoryMax=`` really limits a unit."""
        return self._cgroups.memory_enforced

    @property
    def console_output(self) -> str:
        """What PID 1 (and the boot script) printed on its console, for error messages."""
        return self._console.output

    # --- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> PrivateSystemd:
        if self._pid is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> PrivateSystemd:
        """Boot and wait until the target is reached, journald runs and systemd is on the bus.

        Call it from a thread that outlives the sandbox (normally the main thread): the launcher
        dies with the thread that started it (PR_SET_PDEATHSIG), and the sandbox with it.
        """
        if self._pid is not None:
            raise SandboxError("this sandbox was already started; make a new PrivateSystemd")
        check_prerequisites()
        began = time.monotonic()
        sweep_stale()
        self._stopped = False
        _REGISTRY.add(self)
        try:
            self._prepare_workdir()
            self._cgroups.create(f"{CGROUP_PREFIX}{os.getpid()}-{next(self._serial)}-{os.urandom(3).hex()}")
            self._console.open(self.state_dir / "console.log")
            self._launch()
            self._wait_booted(began + timeout)
            self._boot_seconds = time.monotonic() - began
            if self._start_units:
                self._check_loaded(self._start_units)
                self.systemctl("start", "--no-block", *self._start_units, check=True)
        except BaseException:
            console = self.console_output
            self.stop()
            self._console.keep(console)
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """SIGKILL exactly the private PID 1 (the kernel then kills its whole PID namespace) and reap."""
        if self._stopped:
            return
        self._stopped = True
        private_tmp = private_tmp_folders(self._cgroups.paths)  # while its processes live to say which
        self._kill_children()
        if self._pid is not None and self._launcher is not None and self._launcher.poll() is None:
            # Only signal the PID while its parent (our unshare) has not reaped it: it cannot be reused.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
        if self._launcher is not None:
            try:
                self._launcher.wait(timeout)
            except subprocess.TimeoutExpired:
                self._launcher.kill()  # unshare --kill-child then takes PID 1 with it
                self._launcher.wait(timeout)
        self._reap_children(timeout)
        self._console.close()
        self._cgroups.remove(deadline=time.monotonic() + timeout)
        for folder in private_tmp:
            shutil.rmtree(folder, ignore_errors=True)
        if self._workdir is not None and self._own_workdir and not self._keep_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
        _REGISTRY.discard(self)

    # --- units of a running sandbox ------------------------------------------------------------

    def install_unit(self, name: str, text: str, *, start: bool = False, reload: bool = True) -> Path:
        """Write (or replace) a unit in the private unit path; daemon-reload and optionally start it."""
        path = write_unit(self.unit_dir, name, text)
        self._units[name] = text
        if self.running and reload:
            self.systemctl("daemon-reload", check=True, timeout=60)
            if start:
                self._check_loaded([name])
                self.systemctl("start", "--no-block", name, check=True)
        return path

    def remove_unit(self, name: str) -> None:
        """Stop a unit and delete it from the unit path."""
        if self.running:
            self.systemctl("stop", name)
        (self.unit_dir / name).unlink(missing_ok=True)
        self._units.pop(name, None)
        if self.running:
            self.systemctl("daemon-reload", check=True, timeout=60)

    # --- boot internals ----------------------------------------------------------------------

    def _prepare_workdir(self) -> None:
        if self._workdir is None:
            self._workdir = make_workdir()
        self._workdir.mkdir(parents=True, exist_ok=True)
        state = self.state_dir
        if state.exists():
            shutil.rmtree(state)
        for sub in ("boot", "generators", "units"):
            (state / sub).mkdir(parents=True)
        write_boot_folder(state / "boot", [*default_visible_paths(), *self._visible, self.workdir])
        write_unit_folder(self.unit_dir, self._units)

    def _launch(self) -> None:
        """Start the launcher chain and find the host PID of unshare's child once it has exec'd systemd."""
        assert self._console.slave_fd is not None
        self._launcher = start_launcher(self.state_dir, self._console.tty, self._console.slave_fd, self._cgroups)
        launcher, deadline = self._launcher.pid, time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._launcher.poll() is not None:
                raise self._boot_error(f"the boot script exited with status {self._launcher.returncode}")
            for pid in children_of(launcher):
                if comm(pid) == "systemd":
                    self._pid = pid
                    return
            time.sleep(0.01)
        raise self._boot_error("systemd was not exec'd within 10 s")

    def _wait_booted(self, deadline: float) -> None:
        last = ""
        while time.monotonic() < deadline:
            if not alive(self.pid) or (self._launcher is not None and self._launcher.poll() is not None):
                raise self._boot_error("the private systemd died during boot")
            state = self.run(["systemctl", "is-system-running"], timeout=10)
            last = (state.stdout + state.stderr).strip()
            if state.stdout.strip() in ("running", "degraded"):
                bus = self.run(
                    [
                        "busctl",
                        "--system",
                        "get-property",
                        "org.freedesktop.systemd1",
                        "/org/freedesktop/systemd1",
                        "org.freedesktop.systemd1.Manager",
                        "SystemState",
                    ],
                    timeout=10,
                )
                journald = self.run(["systemctl", "is-active", "systemd-journald.service"], timeout=10)
                last = f"{last}; busctl: {(bus.stdout + bus.stderr).strip()}; journald: {journald.stdout.strip()}"
                if bus.returncode == 0 and journald.stdout.strip() == "active":
                    return
            time.sleep(0.05)
        raise self._boot_error(f"not booted within the timeout (last state: {last})")

    def _boot_error(self, what: str) -> SandboxError:
        time.sleep(0.1)  # let the console pump catch PID 1's last words
        console = self.console_output.strip() or "(nothing)"
        return SandboxError(
            f"private systemd boot failed: {what}\n--- what PID 1 and the boot script printed ---\n{console[-8000:]}"
        )


# --- the atexit cleanup registry (the module's only state) ----------------------------------

_REGISTRY: set[PrivateSystemd] = set()


def _stop_all() -> None:
    for sandbox in list(_REGISTRY):
        with contextlib.suppress(Exception):
            sandbox.stop()


atexit.register(_stop_all)
