"""crashdoc installed from deploy/systemd/crashdoc.service inside a private systemd, as an SRE would.

Installing a unit that has its own user and a StateDirectory= touches /etc (systemd-sysusers) and
/var/lib (systemd creates /var/lib/crashdoc). The private systemd shares the host's /etc and /var/lib,
so both are overlaid inside its mount namespace first, on a tmpfs under its private /run: the host
never sees the user or the state folder, and both vanish with the sandbox.

The sandbox also skips systemd-tmpfiles, which on a real host gives /var/log/journal to the
systemd-journal group (tmpfiles.d/systemd.conf). Without that rule the journal files are root:root
0640 and a `SupplementaryGroups=systemd-journal` reader sees an empty journal without any error, so it
is applied here.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import crashdoc
from crashdoc.matching.library import builtin_signature_dirs
from crashdoc.sandbox.systemd import PrivateSystemd
from support.e2e import Crashdoc, free_port

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
UNIT_FILE = DEPLOY / "systemd" / "crashdoc.service"
SYSUSERS_FILE = DEPLOY / "systemd" / "crashdoc.sysusers"
UNIT = "crashdoc.service"
SHIPPED_EXEC_START = "ExecStart=/usr/local/bin/crashdoc run --config /etc/crashdoc/config.yaml"
STATE_DIRECTORY = "/var/lib/crashdoc"
# Not /tmp or /var/tmp: the unit has PrivateTmp=yes, so it could not see launch scripts or its config there
WORKDIR_PARENT = Path("/opt")
WORKDIR_PREFIX = "crashdoc-deploy-e2e-"
NOBODY = "65534"


class NotRunnable(Exception):
    """No crashdoc an unprivileged user can execute on this machine."""


def unit_property(text: str, key: str) -> list[str]:
    """Every value of `key=` in a unit file's text (systemd allows repeats)."""
    return [m.group(1).strip() for m in re.finditer(rf"^{re.escape(key)}=(.*)$", text, re.M)]


def installed_unit_text(crashdoc: Path, config: Path) -> str:
    """The shipped unit with only ExecStart's program and --config path rewritten."""
    text = UNIT_FILE.read_text()
    assert text.count(SHIPPED_EXEC_START) == 1, f"{UNIT_FILE} no longer has {SHIPPED_EXEC_START!r}"
    return text.replace(SHIPPED_EXEC_START, f"ExecStart={crashdoc} run --config {config}")


@contextlib.contextmanager
def deploy_workdir() -> Iterator[Path]:
    """A world-readable work folder under /opt (like /opt/sglang), removed afterwards; folders left by
    killed runs are swept first."""
    with contextlib.suppress(OSError):
        for entry in WORKDIR_PARENT.glob(f"{WORKDIR_PREFIX}*"):
            m = re.match(re.escape(WORKDIR_PREFIX) + r"(\d+)-", entry.name)
            if m and not Path(f"/proc/{m.group(1)}").exists():
                shutil.rmtree(entry, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-", dir=WORKDIR_PARENT))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _runs_unprivileged(python: Path) -> bool:
    r = subprocess.run(
        # exec'd by an unprivileged shell: setpriv's own exec still reaches into /root
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "--",
            "/bin/sh",
            "-c",
            'exec "$0" -c "import crashdoc.runtime.daemon, systemd.daemon, pystemd.dbuslib"',
            str(python),
        ],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
    )
    return r.returncode == 0


def _imported_by(python: Path) -> Path | None:
    """The crashdoc package `python` imports without this process's PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(
        [str(python), "-c", "import crashdoc; print(crashdoc.__file__)"],
        capture_output=True,
        text=True,
        cwd="/",
        env=env,
        timeout=60,
    )
    return Path(r.stdout.strip()).resolve().parent if r.returncode == 0 else None


def _hidden_by_private_tmp(path: Path) -> bool:
    real = path.resolve()
    return any(real == Path(d) or Path(d) in real.parents for d in ("/tmp", "/var/tmp"))


def unprivileged_crashdoc(workdir: Path) -> Path:
    """A `crashdoc` executable the unit's user can run.

    The test venv's own entry point when its interpreter is readable by others. A venv made from a
    Python under /root (pyenv) is not, so then a thin venv is made from the system Python of the same
    version, importing the test venv's packages (same ABI): an installation as a real host has it.
    """
    venv_bin = Path(sys.executable).parent
    packages = Path(sysconfig.get_paths()["purelib"])
    source = Path(crashdoc.__file__).resolve().parent
    hidden = _hidden_by_private_tmp(packages) or _hidden_by_private_tmp(source)
    # tests run from a worktree (PYTHONPATH=<worktree>/src) import another crashdoc than the venv's
    # entry point, which the unit runs without PYTHONPATH: the unit must run the one under test
    foreign = _imported_by(Path(sys.executable)) != source
    if not hidden and not foreign and _runs_unprivileged(Path(sys.executable)) and (venv_bin / "crashdoc").is_file():
        return venv_bin / "crashdoc"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    system_python = Path(f"/usr/bin/python{version}")
    if not system_python.is_file():
        raise NotRunnable(f"{sys.executable} is not executable by other users and there is no {system_python}")
    venv = workdir / "venv"
    subprocess.run([str(system_python), "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    site = venv / "lib" / f"python{version}" / "site-packages"
    first = ""
    if hidden:
        # a checkout under /tmp or /var/tmp (CI may clone there) is invisible to the unit (PrivateTmp=yes):
        # give it copies, as an installation on a real host would be
        copy = workdir / "pylib"
        shutil.copytree(packages, copy / "site", ignore=shutil.ignore_patterns("__editable__*crashdoc*", "__pycache__"))
        shutil.copytree(source, copy / "src" / "crashdoc", ignore=shutil.ignore_patterns("__pycache__"))
        library = builtin_signature_dirs()[0]
        if not (copy / "src" / "crashdoc" / "signatures").exists():
            shutil.copytree(library, copy / "src" / "crashdoc" / "signatures")
        packages, first = copy / "site", str(copy / "src")
    elif foreign:
        first = str(source.parent)
    # an `import` line in a .pth runs: addsitedir also honours the editable install's own .pth
    prepend = f"sys.path.insert(0, {first!r}); " if first else ""
    (site / "crashdoc-test-venv.pth").write_text(f"import site, sys; {prepend}site.addsitedir({str(packages)!r})\n")
    entry = venv / "bin" / "crashdoc"
    entry.write_text(f"#!{venv}/bin/python3\nimport sys\nfrom crashdoc.cli import main\nsys.exit(main())\n")
    entry.chmod(0o755)
    if not _runs_unprivileged(venv / "bin" / "python3"):
        raise NotRunnable(f"neither {sys.executable} nor a venv from {system_python} can import crashdoc as nobody")
    return entry


def prepare_host_view(sandbox: PrivateSystemd) -> None:
    """Copy-on-write /etc and /var/lib, journal files readable by systemd-journal, crashdoc's user."""
    # systemd makes / shared at boot on a host (mount_setup), but not as a container (container=unshare):
    # then the credentials a unit gets with LoadCredential= are mounted where the unit never sees them
    # (an empty, root-only $CREDENTIALS_DIRECTORY). Shared within the sandbox only: its namespace was
    # made private from the host's when it was created.
    script = r"""set -eu
mount --make-rshared /
base=/run/crashdoc-deploy-overlay
for dir in etc var/lib; do
    name=$(echo "$dir" | tr / -)
    mkdir -p "$base/$name/upper" "$base/$name/work"
    mount -t overlay overlay -o "lowerdir=/$dir,upperdir=$base/$name/upper,workdir=$base/$name/work" "/$dir"
done
chgrp -R systemd-journal /var/log/journal
mkdir -p /etc/sysusers.d
cp "$1" /etc/sysusers.d/crashdoc.conf
systemd-sysusers /etc/sysusers.d/crashdoc.conf
"""
    sandbox.run(["sh", "-c", script, "sh", str(SYSUSERS_FILE)], check=True)


@dataclass
class CrashdocUnit(Crashdoc):
    """crashdoc running as crashdoc.service in the sandbox; its log is the unit's journal."""

    def log(self) -> str:
        return self.sandbox.journalctl("-u", UNIT, "-o", "short-precise").stdout

    def show(self, *properties: str) -> dict[str, str]:
        return self.sandbox.show(UNIT, *properties)

    @property
    def main_pid(self) -> int:
        return int(self.show("MainPID")["MainPID"])

    def proc_status(self, pid: int | None = None) -> dict[str, str]:
        """/proc/<pid>/status of crashdoc (inside the sandbox's PID namespace)."""
        text = self.sandbox.run(["cat", f"/proc/{pid or self.main_pid}/status"], check=True).stdout
        return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def install_crashdoc_unit(
    sandbox: PrivateSystemd,
    workdir: Path,
    config: str,
    *,
    port: int | None = None,
) -> tuple[CrashdocUnit, str]:
    """Install the shipped unit (ExecStart rewritten) with `config` (`{listen}`, `{port}` are filled in);
    not started.

    Returns the handle and the unit text as installed.
    """
    port = port or free_port()
    crashdoc = unprivileged_crashdoc(workdir)
    config_path = workdir / "crashdoc.yaml"
    config_path.write_text(config.format(listen=f"127.0.0.1:{port}", port=port))
    config_path.chmod(0o644)
    prepare_host_view(sandbox)
    text = installed_unit_text(crashdoc, config_path)
    sandbox.install_unit(UNIT, text)
    unit = CrashdocUnit(sandbox, port, workdir / "crashdoc.log")
    unit.config_path = config_path
    return unit, text


TLS_DROPIN = DEPLOY / "systemd" / "crashdoc.service.d" / "tls.conf"


def install_tls_dropin(sandbox: PrivateSystemd, sources: dict[str, Path]) -> str:
    """Install the shipped deploy/systemd/crashdoc.service.d/tls.conf with only the credentials' source
    files moved (credential name -> file); a commented-out credential that is named is turned on.
    Returns the drop-in as installed."""
    text = TLS_DROPIN.read_text()
    for name, path in sources.items():
        pattern = rf"^#?LoadCredential={re.escape(name)}:\S+$"
        assert re.search(pattern, text, re.M), f"{TLS_DROPIN} has no LoadCredential={name}:"
        text = re.sub(pattern, f"LoadCredential={name}:{path}", text, flags=re.M)
    folder = sandbox.unit_dir / f"{UNIT}.d"
    folder.mkdir(exist_ok=True)
    (folder / TLS_DROPIN.name).write_text(text)
    sandbox.systemctl("daemon-reload", check=True, timeout=60)
    return text
