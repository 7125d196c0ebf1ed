"""A private systemd booted as PID 1 of new PID, mount, cgroup and UTS namespaces.

Why: every claim that "crashdoc sees a crash loop" must be checked against a real PID 1 with a real
journald and a real D-Bus, on machines where systemd is installed but is not PID 1 (CI, containers,
firecracker VMs). ``PrivateSystemd`` boots one in about a second, runs real units in it and always
takes it down again.

How it is isolated from the host (each point fixes a real hazard):

- ``unshare --pid --fork --mount --propagation private --uts --cgroup``; inside, ``proc`` on /proc and
  tmpfs on /run, /tmp and /var/log/journal (or /var/log when the host has no journal folder) are
  mounted, and checked to be tmpfs (and /tmp a different file system from the host's), *before*
  systemd is exec'd: a systemd that reaches systemd-tmpfiles otherwise empties the host's /tmp.
  No tmpfiles unit is on the unit path anyway.
- ``SYSTEMD_UNIT_PATH`` is a private folder holding only journald, dbus, a target and the test units;
  ``SYSTEMD_GENERATOR_PATH`` is an empty folder, so no generator runs.
- /proc/sys and /sys are read-only inside, so PID 1 cannot change host-wide sysctls (it tries to
  raise fs.nr_open and similar limits when it thinks it owns the machine); host values stay intact;
  the /dev/log symlink is dropped from the journald socket (it would land in the host's /dev);
  /dev/console is a pty owned by this object, so PID 1 never resets the host console and its own
  output is captured (``console_output``) for error messages.
- Each sandbox gets its own cgroup (``crashdoc-sandbox-<pid>-<n>`` under the caller's cgroup in every
  hierarchy systemd needs) and a cgroup namespace rooted there, so two sandboxes (or a host systemd)
  never see or kill each other's units. Empty ones left by killed test runs are swept on start.
- The launcher chain runs under ``setpriv --pdeathsig KILL`` and ``unshare --kill-child``: if the
  Python process dies, even by SIGKILL, the private PID 1 and with it every process inside die too.
  ``stop()`` SIGKILLs exactly the private PID 1 (never anything found by name) and reaps the chain.

A checkout, a venv or a work folder under /tmp (the most common scratch folder) stays usable: before the
tmpfs goes on /tmp, each such path the units need (``visible``; by default this Python's prefix and
interpreter, crashdoc's package and its checkout, and the work folder) is held by a bind mount under the
private /run, and bound back to the same path on top of the new tmpfs; symlinks under /tmp on the way to
them are recreated. Nothing else of the host's /tmp is visible inside, and all of it happens in the
private mount namespace only. The work folder defaults to ``/var/tmp/crashdoc-sandbox-<pid>-XXXX``.

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
import errno
import itertools
import os
import pty
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

T = TypeVar("T")

TARGET = "crashdoc-sandbox.target"
CGROUP_PREFIX = "crashdoc-sandbox-"
WORKDIR_PARENT = Path("/var/tmp")
_MARKER = ".crashdoc-sandbox"

# The only units copied from the host: journald and its sockets, and the socket-activated bus.
_HOST_UNITS = (
    "systemd-journald.socket",
    "systemd-journald-dev-log.socket",
    "systemd-journald.service",
    "dbus.socket",
    "dbus.service",
)
_HOST_UNIT_DIRS = (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"), Path("/etc/systemd/system"))
_SYSTEMD_BINARIES = (Path("/usr/lib/systemd/systemd"), Path("/lib/systemd/systemd"))
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
_CONSOLE_LIMIT = 256 * 1024

# Launcher: moves itself into the sandbox cgroups, then becomes unshare. $@ = cgroup.procs files.
_OUTER_SH = r"""set -eu
for procs in "$@"; do echo $$ > "$procs"; done
exec unshare --pid --fork --kill-child=SIGKILL --mount --propagation private --uts --cgroup \
    /bin/sh "$SB_STATE/boot/inner.sh"
"""

# PID 1 of the new namespaces until it execs systemd. Every mount is checked: exec'ing systemd with
# the host's /tmp visible is the one mistake that destroys data on the host.
_INNER_SH = r"""set -eu
fail() { echo "crashdoc-sandbox: $*" >&2; exit 97; }
mount -t proc -o nosuid,nodev,noexec proc /proc || fail "cannot mount /proc"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run || fail "cannot mount tmpfs on /run"
# Paths under /tmp that the units need (boot/keep: one per line) are held under /run while the tmpfs goes on.
hold=/run/crashdoc-sandbox-keep
mkdir -m 0700 "$hold"
cp "$SB_STATE/boot/keep" "$SB_STATE/boot/links" "$hold/" || fail "cannot read the list of /tmp paths to keep"
n=0
while IFS= read -r path; do
    n=$((n + 1))
    if [ -d "$path" ]; then mkdir "$hold/$n"; else : > "$hold/$n"; fi
    mount --bind "$path" "$hold/$n" || fail "cannot hold $path"
done < "$hold/keep"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp || fail "cannot mount tmpfs on /tmp"
n=0
while IFS= read -r path; do
    n=$((n + 1))
    if [ -d "$hold/$n" ]; then mkdir -p "$path"; else mkdir -p "$(dirname "$path")" && : > "$path"; fi
    mount --move "$hold/$n" "$path" || fail "cannot bind $path back on the private /tmp"
    rm -rf "$hold/$n"
done < "$hold/keep"
while IFS= read -r link && IFS= read -r target; do
    [ -e "$link" ] || [ -L "$link" ] || { mkdir -p "$(dirname "$link")" && ln -s "$target" "$link"; } \
        || fail "cannot recreate the symlink $link"
done < "$hold/links"
rm -rf "$hold"
if [ -d /var/log/journal ]; then
    mount -t tmpfs -o mode=2755,nosuid,nodev tmpfs /var/log/journal || fail "cannot mount /var/log/journal"
else
    mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /var/log || fail "cannot mount tmpfs on /var/log"
    mkdir -m 2755 /var/log/journal
fi
for d in /run /tmp /var/log/journal; do
    [ "$(stat -f -c %T "$d")" = tmpfs ] || fail "$d is not a private tmpfs; refusing to boot"
done
[ "$(stat -c %d:%i /tmp)" != "$SB_HOST_TMP" ] || fail "the host /tmp is still visible; refusing to boot"
mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys
if [ -e /proc/sysrq-trigger ]; then
    mount --bind /proc/sysrq-trigger /proc/sysrq-trigger && mount -o remount,bind,ro /proc/sysrq-trigger
fi
mount --bind /sys /sys && mount -o remount,bind,ro,nosuid,nodev,noexec /sys
mount -t tmpfs -o mode=0755,nosuid,nodev,noexec tmpfs /sys/fs/cgroup || fail "cannot mount /sys/fs/cgroup"
case "$SB_CGROUP_LAYOUT" in
unified)
    mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup || fail "cannot mount cgroup2" ;;
hybrid|legacy)
    if [ "$SB_CGROUP_LAYOUT" = hybrid ]; then
        mkdir /sys/fs/cgroup/unified
        mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup/unified || fail "cannot mount cgroup2"
    fi
    for opts in $SB_CGROUP_V1; do
        dir=${opts#none,name=}; dir=${dir#none,}
        mkdir -p "/sys/fs/cgroup/$dir"
        mount -t cgroup -o "nosuid,nodev,noexec,$opts" cgroup "/sys/fs/cgroup/$dir" \
            || fail "cannot mount the cgroup v1 hierarchy $opts"
    done ;;
*) fail "unsupported cgroup layout $SB_CGROUP_LAYOUT" ;;
esac
mount --bind "$SB_PTY" /dev/console || fail "cannot bind the console pty"
# journald writes to /var/log/journal from the start (no systemd-journal-flush.service here).
mkdir -p /run/systemd/journal && : > /run/systemd/journal/flushed
cd /
exec env -i container=unshare LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SYSTEMD_UNIT_PATH="$SB_STATE/units" SYSTEMD_GENERATOR_PATH="$SB_STATE/generators" \
    SYSTEMD_ENVIRONMENT_GENERATOR_PATH="$SB_STATE/generators" \
    "$SB_SYSTEMD" --unit="$SB_TARGET" --show-status=no
"""

_TARGET_TEXT = """[Unit]
Description=crashdoc private systemd
Wants=systemd-journald.socket systemd-journald-dev-log.socket systemd-journald.service
Wants=dbus.socket dbus.service
After=systemd-journald.service dbus.service
AllowIsolate=yes
"""


class SandboxError(RuntimeError):
    """The private systemd cannot be booted or used; the message says why and what PID 1 printed."""


class PrivateSystemd:
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
        self._units: dict[str, str] = dict(units or {})
        self._start_units = (
            [n for n in self._units if n.endswith(".service")] if start_units is None else list(start_units)
        )
        self._workdir = Path(workdir).resolve() if workdir is not None else None
        self._visible = [Path(p) for p in visible]
        self._own_workdir = self._workdir is None or (self._workdir / _MARKER).is_file()
        self._keep_workdir = (not self._own_workdir) if keep_workdir is None else keep_workdir
        self._launcher: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._cgroups: list[Path] = []
        self._cgroup_layout = "none"
        self._cgroup_name = ""
        self._cgroup_v1 = ""
        self._memory_enforced = False
        self._master_fd: int | None = None
        self._slave_fd: int | None = None
        self._console = bytearray()
        self._console_lock = threading.Lock()
        self._console_thread: threading.Thread | None = None
        self._children: list[subprocess.Popen[Any]] = []
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
        return self._pid is not None and not self._stopped and _alive(self._pid)

    @property
    def boot_seconds(self) -> float | None:
        """Wall time of the last ``start()`` until PID 1, journald and D-Bus were all confirmed."""
        return self._boot_seconds

    @property
    def cgroup_layout(self) -> str:
        """``unified``, ``hybrid`` or ``legacy``: what PID 1 sees under /sys/fs/cgroup."""
        return self._cgroup_layout

    @property
    def cgroup_name(self) -> str:
        """The sandbox's cgroup folder name on the host (it appears in kernel OOM messages)."""
        return self._cgroup_name

    @property
    def memory_enforced(self) -> bool:
        """True when a memory controller is delegated, so ``MemoryMax=`` really limits a unit."""
        return self._memory_enforced

    @property
    def console_output(self) -> str:
        """What PID 1 (and the boot script) printed on its console, for error messages."""
        with self._console_lock:
            text = self._console.decode("utf-8", "replace")
        return text.replace("\r\n", "\n").replace("\r", "")  # the pty turns \n into \r\n

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
        _sweep_stale()
        self._stopped = False
        _REGISTRY.add(self)
        try:
            self._prepare_workdir()
            self._prepare_cgroups()
            self._open_console()
            self._launch()
            self._wait_booted(began + timeout)
            self._boot_seconds = time.monotonic() - began
            self._start_test_units()
        except BaseException:
            console = self.console_output
            self.stop()
            self._console[:] = console.encode()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """SIGKILL exactly the private PID 1 (the kernel then kills its whole PID namespace) and reap."""
        if self._stopped:
            return
        self._stopped = True
        for child in self._children:
            _kill_group(child)
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
        for child in self._children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout)
        self._close_console()
        _remove_cgroups(self._cgroups, deadline=time.monotonic() + timeout)
        if self._workdir is not None and self._own_workdir and not self._keep_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
        _REGISTRY.discard(self)

    # --- running things inside ---------------------------------------------------------------

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
            _kill_group(proc)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(list(argv), timeout or 0.0, out, err) from None
        except BaseException:
            _kill_group(proc)
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

    def install_unit(self, name: str, text: str, *, start: bool = False, reload: bool = True) -> Path:
        """Write (or replace) a unit in the private unit path; daemon-reload and optionally start it."""
        path = _write_unit(self.unit_dir, name, text)
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
        units = self.unit_dir
        (state / "boot" / "outer.sh").write_text(_OUTER_SH)
        (state / "boot" / "inner.sh").write_text(_INNER_SH)
        binds, links = tmp_mounts([*default_visible_paths(), *self._visible, self.workdir])
        (state / "boot" / "keep").write_text("".join(f"{b}\n" for b in binds))
        (state / "boot" / "links").write_text("".join(f"{link}\n{target}\n" for link, target in links))
        for name in _HOST_UNITS:
            (units / name).write_text(_adapt_host_unit(name, _host_unit_text(name)))
        (units / TARGET).write_text(_TARGET_TEXT)
        for name, text in self._units.items():
            _write_unit(units, name, text)

    def _prepare_cgroups(self) -> None:
        layout, v1, v2 = _host_cgroups()
        self._cgroup_layout = layout
        self._cgroups, self._memory_enforced = [], False
        name = f"{CGROUP_PREFIX}{os.getpid()}-{next(self._serial)}-{os.urandom(3).hex()}"
        self._cgroup_name = name
        mounts: list[str] = []
        if v2 is not None:
            self._cgroups.append(_make_cgroup(v2, name))
            if layout == "unified":
                self._memory_enforced = _delegate_v2_memory(self._cgroups[-1])
        for opts, (mountpoint, own) in v1.items():
            if opts not in ("none,name=systemd", "memory"):
                continue
            try:
                self._cgroups.append(_make_cgroup((mountpoint, own), name))
            except OSError:
                if opts == "memory":
                    continue  # no memory limits then; tracking works without it
                raise
            mounts.append(opts)
            if opts == "memory":
                self._memory_enforced = True
        if layout in ("hybrid", "legacy") and "none,name=systemd" not in mounts:
            raise SandboxError("the host has cgroup v1 without a name=systemd hierarchy; systemd cannot run")
        self._cgroup_v1 = " ".join(mounts)

    def _open_console(self) -> None:
        master, slave = pty.openpty()
        self._master_fd, self._slave_fd = master, slave
        self._pty_path = os.ttyname(slave)
        log = self.state_dir / "console.log"
        self._console_thread = threading.Thread(
            target=self._pump_console, args=(master, log), name="crashdoc-sandbox-console", daemon=True
        )
        self._console_thread.start()

    def _pump_console(self, fd: int, log: Path) -> None:
        """Drain the console pty for as long as it lives: PID 1 blocks when its console is full."""
        with open(log, "ab") as sink:
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                sink.write(chunk)
                sink.flush()
                with self._console_lock:
                    self._console += chunk
                    if len(self._console) > _CONSOLE_LIMIT:
                        del self._console[: len(self._console) - _CONSOLE_LIMIT]

    def _close_console(self) -> None:
        for attr in ("_slave_fd", "_master_fd"):
            fd = getattr(self, attr)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, attr, None)
        if self._console_thread is not None:
            self._console_thread.join(2)

    def _launch(self) -> None:
        host_tmp = os.stat("/tmp")
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "LANG": "C.UTF-8",
            "SB_STATE": str(self.state_dir),
            "SB_PTY": self._pty_path,
            "SB_SYSTEMD": str(_systemd_binary()),
            "SB_TARGET": TARGET,
            "SB_CGROUP_LAYOUT": self._cgroup_layout,
            "SB_CGROUP_V1": self._cgroup_v1,
            "SB_HOST_TMP": f"{host_tmp.st_dev}:{host_tmp.st_ino}",  # inside, /tmp must differ
        }
        argv = ["/bin/sh", str(self.state_dir / "boot" / "outer.sh"), *(str(c / "cgroup.procs") for c in self._cgroups)]
        if shutil.which("setpriv"):
            argv = ["setpriv", "--pdeathsig", "KILL", *argv]
        self._launcher = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._slave_fd,
            stderr=self._slave_fd,
            env=env,
            cwd="/",
            start_new_session=True,
        )
        self._pid = self._find_init(time.monotonic() + 10)

    def _find_init(self, deadline: float) -> int:
        """The host PID of unshare's child once it has exec'd systemd."""
        assert self._launcher is not None
        launcher = self._launcher.pid
        while time.monotonic() < deadline:
            if self._launcher.poll() is not None:
                raise self._boot_error(f"the boot script exited with status {self._launcher.returncode}")
            for pid in _children_of(launcher):
                if _comm(pid) == "systemd":
                    return pid
            time.sleep(0.01)
        raise self._boot_error("systemd was not exec'd within 10 s")

    def _wait_booted(self, deadline: float) -> None:
        last = ""
        while time.monotonic() < deadline:
            if not _alive(self.pid) or (self._launcher is not None and self._launcher.poll() is not None):
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

    def _start_test_units(self) -> None:
        if not self._start_units:
            return
        self._check_loaded(self._start_units)
        self.systemctl("start", "--no-block", *self._start_units, check=True)

    def _check_loaded(self, names: Iterable[str]) -> None:
        for name in names:
            props = self.show(name, "LoadState", "LoadError")
            if props.get("LoadState") != "loaded":
                status = self.systemctl("status", name).stdout
                raise SandboxError(
                    f"unit {name} did not load in the sandbox: {props.get('LoadState')} "
                    f"{props.get('LoadError', '')}\n{status}"
                )

    def _boot_error(self, what: str) -> SandboxError:
        time.sleep(0.1)  # let the console pump catch PID 1's last words
        console = self.console_output.strip() or "(nothing)"
        return SandboxError(
            f"private systemd boot failed: {what}\n--- what PID 1 and the boot script printed ---\n{console[-8000:]}"
        )


# --- prerequisites and host inspection ------------------------------------------------------


def make_workdir() -> Path:
    """A fresh work folder outside /tmp (``/var/tmp/crashdoc-sandbox-<pid>-XXXX``), marked as ours so
    the sandbox deletes it on stop and a later run sweeps it if this process is killed first."""
    WORKDIR_PARENT.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{CGROUP_PREFIX}{os.getpid()}-", dir=WORKDIR_PARENT)).resolve()
    path.chmod(0o755)
    (path / _MARKER).write_text(f"{os.getpid()}\n")
    return path


def check_prerequisites() -> None:
    """Raise SandboxError saying exactly what is missing to boot a private systemd here."""
    reason = unavailable_reason()
    if reason:
        raise SandboxError(reason)


def unavailable_reason() -> str | None:
    """Why a private systemd cannot be booted on this machine, or None (tests skip with this)."""
    if os.geteuid() != 0:
        return "the private systemd needs root (PID, mount and cgroup namespaces, cgroup writes)"
    for tool in ("unshare", "nsenter", "systemctl", "journalctl", "busctl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (util-linux / systemd)"
    if _systemd_binary() is None:
        return "systemd is not installed (no /usr/lib/systemd/systemd)"
    if not Path("/usr/bin/dbus-daemon").exists() and shutil.which("dbus-daemon") is None:
        return "dbus-daemon is not installed"
    for name in _HOST_UNITS:
        if _find_host_unit(name) is None:
            return f"the host has no {name} to copy into the sandbox"
    if not Path("/proc/self/ns/cgroup").exists():
        return "the kernel has no cgroup namespaces"
    return None


def _systemd_binary() -> Path | None:
    return next((p for p in _SYSTEMD_BINARIES if p.exists()), None)


def _find_host_unit(name: str) -> Path | None:
    return next((d / name for d in _HOST_UNIT_DIRS if (d / name).is_file()), None)


def _host_unit_text(name: str) -> str:
    path = _find_host_unit(name)
    if path is None:
        raise SandboxError(f"the host has no {name}")
    return path.read_text()


def _adapt_host_unit(name: str, text: str) -> str:
    """Copies of host units: no /dev/log symlink on the host, no default dependencies."""
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith("Symlinks=")]
    return _with_default_deps_off("\n".join(lines) + "\n")


def _with_default_deps_off(text: str) -> str:
    """Add DefaultDependencies=no unless the unit says otherwise: the sandbox has no sysinit.target,
    basic.target or shutdown.target, so default dependencies would make every job fail."""
    if re.search(r"^\s*DefaultDependencies\s*=", text, re.M):
        return text
    if re.search(r"^\[Unit\]\s*$", text, re.M):
        return re.sub(r"^\[Unit\]\s*$", "[Unit]\nDefaultDependencies=no", text, count=1, flags=re.M)
    return "[Unit]\nDefaultDependencies=no\n\n" + text


def _write_unit(unit_dir: Path, name: str, text: str) -> Path:
    """Write one unit into the private unit path; the name is checked so it cannot escape it."""
    if not re.fullmatch(r"[\w@:.\\-]+\.(service|socket|target|timer|path|slice|mount)", name) or name.startswith("."):
        raise SandboxError(f"not a unit file name: {name!r}")
    path = unit_dir / name
    path.write_text(_with_default_deps_off(text) if path.suffix in (".service", ".socket", ".timer", ".path") else text)
    return path


def default_visible_paths() -> list[Path]:
    """What a unit or the daemon inside runs from: this Python (its prefix, its interpreter, the folders on its
    import path), the folder that holds the ``crashdoc`` package and, for a source checkout (``src/`` layout),
    the checkout."""
    package_root = Path(__file__).resolve().parents[2]
    paths = [Path(sys.prefix), Path(sys.executable), package_root, *(Path(p) for p in sys.path if p)]
    if (package_root.parent / "pyproject.toml").is_file():
        paths.append(package_root.parent)
    return paths


def tmp_mounts(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """What must be bound back on the sandbox's private /tmp for ``paths`` to work inside: the real
    folders or files under /tmp they lead to (outermost only), and the symlinks under /tmp on the way
    there (link, target) that no bound folder already holds. Paths that do not exist are skipped."""
    tmp = Path("/tmp")
    binds: set[Path] = set()
    links: dict[Path, str] = {}
    for given in paths:
        real = _walk(Path(os.path.abspath(given)), links)
        if real is not None and tmp in real.parents:
            binds.add(real)
    outer = sorted(b for b in binds if not any(o in b.parents for o in binds))
    kept = [(link, target) for link, target in links.items() if tmp in link.parents]
    kept = [(link, target) for link, target in kept if not any(o in link.parents for o in outer)]
    for path in [*outer, *(link for link, _ in kept), *(Path(t) for _, t in kept)]:
        if "\n" in str(path):
            raise SandboxError(f"cannot keep {str(path)!r} visible in the sandbox: its name holds a newline")
    return outer, sorted(kept)


def _walk(path: Path, links: dict[Path, str]) -> Path | None:
    """Resolve ``path`` one component at a time, noting each symlink met (link -> its target as written);
    None when it does not exist or loops."""
    current, rest = Path("/"), list(path.parts[1:])
    for _ in range(256):
        if not rest:
            return current
        part = rest.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        nxt = current / part
        if nxt.is_symlink():
            try:
                target = os.readlink(nxt)
            except OSError:
                return None
            links[nxt] = target
            base = Path(target) if os.path.isabs(target) else current / target
            current, rest = Path("/"), [*base.parts[1:], *rest]
        elif nxt.exists():
            current = nxt
        else:
            return None
    return None


def _host_cgroups() -> tuple[str, dict[str, tuple[Path, str]], tuple[Path, str] | None]:
    """The host's cgroup layout and, per hierarchy, (mount point, this process's cgroup in it)."""
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, controllers, path = line.split(":", 2)
        own["" if hid == "0" else controllers] = path
    v1: dict[str, tuple[Path, str]] = {}
    v2: tuple[Path, str] | None = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(rfields) < 3 or fields[3] != "/":
            continue
        fstype, mountpoint, superopts = rfields[0], Path(fields[4]), rfields[2].split(",")
        if fstype == "cgroup2" and v2 is None and "" in own:
            v2 = (mountpoint, own[""])
        elif fstype == "cgroup":
            names = [o for o in superopts if o.startswith("name=")]
            ctrls = [
                o
                for o in superopts
                if o
                in (
                    "memory",
                    "pids",
                    "cpu",
                    "cpuacct",
                    "cpuset",
                    "devices",
                    "freezer",
                    "blkio",
                    "net_cls",
                    "net_prio",
                    "perf_event",
                    "hugetlb",
                    "rdma",
                    "misc",
                )
            ]
            key = ",".join(ctrls + names)
            if key in own and key not in v1:
                opts = f"none,{names[0]}" if names and not ctrls else ",".join(ctrls + names)
                v1[opts] = (mountpoint, own[key])
    if v2 is not None and not v1:
        return "unified", v1, v2
    if v1:
        return ("hybrid" if v2 is not None else "legacy"), v1, v2
    raise SandboxError("no cgroup file system is mounted under /sys/fs/cgroup; systemd cannot run")


def _make_cgroup(hierarchy: tuple[Path, str], name: str) -> Path:
    mountpoint, own = hierarchy
    path = mountpoint / own.lstrip("/") / name
    path.mkdir()
    return path


def _delegate_v2_memory(cgroup: Path) -> bool:
    """Best effort on a cgroup v2 host: the memory controller reaches the sandbox only if the parent
    may enable it for its children (it may not while processes sit in the parent itself)."""
    parent = cgroup.parent
    try:
        if "memory" not in (parent / "cgroup.controllers").read_text().split():
            return False
        if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
            (parent / "cgroup.subtree_control").write_text("+memory")
        return "memory" in (cgroup / "cgroup.controllers").read_text().split()
    except OSError:
        return False


def _remove_cgroups(cgroups: Iterable[Path], deadline: float) -> None:
    """rmdir each sandbox cgroup bottom-up, waiting for the killed processes to leave them."""
    for top in cgroups:
        while top.exists():
            for dirpath, _dirs, _files in os.walk(top, topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(dirpath)
            if not top.exists() or time.monotonic() > deadline:
                break
            time.sleep(0.05)


def _sweep_stale() -> None:
    """Remove sandbox cgroups and auto work folders whose launching process is gone (a killed test run)."""
    for pid, path, is_cgroup in list(_traces()):
        if _alive(pid):
            continue
        if is_cgroup:
            _remove_cgroups([path], deadline=0)
        else:
            shutil.rmtree(path, ignore_errors=True)


def traces_of(pid: int) -> list[Path]:
    """The cgroups and auto work folders of sandboxes that process `pid` launched and that still exist: none
    once they are stopped (what a test of a clean stop looks for)."""
    return [path for owner, path, _ in _traces() if owner == pid]


def _traces() -> Iterator[tuple[int, Path, bool]]:
    """(launching PID, path, is a cgroup) of every sandbox cgroup and auto work folder on this host."""
    pattern = re.compile(re.escape(CGROUP_PREFIX) + r"(\d+)-")
    try:
        _, v1, v2 = _host_cgroups()
    except (SandboxError, OSError):
        v1, v2 = {}, None
    for mountpoint, own in [*v1.values(), *([v2] if v2 else [])]:
        parent = mountpoint / own.lstrip("/")
        with contextlib.suppress(OSError):
            for entry in list(parent.iterdir()):
                m = pattern.match(entry.name)
                if m and entry.is_dir():
                    yield int(m.group(1)), entry, True
    with contextlib.suppress(OSError):
        for entry in list(WORKDIR_PARENT.iterdir()):
            m = pattern.match(entry.name)
            if m and (entry / _MARKER).is_file():
                yield int(m.group(1)), entry, False


def _children_of(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(p) for p in text.split()]
    except OSError:
        pass
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the session we started ``proc`` in (nsenter and its child inside the namespaces)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                with contextlib.suppress(OSError):
                    proc.kill()


# --- the atexit cleanup registry (the module's only state) ----------------------------------

_REGISTRY: set[PrivateSystemd] = set()


def _stop_all() -> None:
    for sandbox in list(_REGISTRY):
        with contextlib.suppress(Exception):
            sandbox.stop()


atexit.register(_stop_all)
