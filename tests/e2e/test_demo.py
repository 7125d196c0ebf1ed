"""The first ten minutes (issue 22): the demo as `make run` starts it, from a checkout in any folder (/tmp too),
stopped with Ctrl-C or SIGTERM, leaving nothing behind; and the README's sample output, which is its real
output. Each test boots the demo's private systemd: about ten seconds on an idle 2-CPU host."""

from __future__ import annotations

import fcntl
import os
import pty
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import termios
import threading
from pathlib import Path

import pytest

from crashdoc.sandbox.leftovers import traces_of
from support.demo_output import EXCERPT_MARK, FULL_MARK, check_one_ratio, mask, readme_block
from support.e2e import PATIENCE, free_port, wait_for
from support.terminal import read_pty

pytestmark = pytest.mark.sandbox

ROOT = Path(__file__).resolve().parents[2]
DIAGNOSIS = "sglang-prefill.service: DeepSeek V4 HiCache rejects --hicache-size"
PROMPT = "Press Ctrl-C to stop the sandbox."


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Demo:
    """`crashdoc demo --keep-running` in a session of its own, its output collected as it comes."""

    def __init__(self, python: str = sys.executable, cwd: Path | None = None, sigint_ignored: bool = False) -> None:
        """`sigint_ignored`: started as a background job or under nohup is (SIGINT ignored, which exec keeps)."""
        self.port = free_port()
        argv = [python, "-m", "crashdoc", "demo", "--keep-running", "--listen", f"127.0.0.1:{self.port}"]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_ignore_sigint if sigint_ignored else None,
        )
        self._chunks: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._chunks.append(line)

    @property
    def output(self) -> str:
        return "".join(self._chunks)

    def wait_for_prompt(self) -> str:
        wait_for(
            lambda: PROMPT in self.output or self.proc.poll() is not None,
            120,
            "the demo's diagnosis",
            seen=lambda: self.output[-3000:],
        )
        assert PROMPT in self.output, self.output
        return self.output

    def stop(self, sig: int) -> int:
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(60 * PATIENCE)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(10)
        return code


def test_the_demo_prints_the_readme_output_and_ctrl_c_stops_it_leaving_nothing() -> None:
    demo = Demo()
    try:
        out = demo.wait_for_prompt()
        assert DIAGNOSIS in out
        ratio = check_one_ratio(out)  # one truth: summary, command, diff, sed line and warning agree
        assert traces_of(demo.proc.pid), "the running demo's sandbox folder and cgroups should exist"
    finally:
        code = demo.stop(signal.SIGINT)
    assert code == 0, demo.output
    assert demo.output.endswith("\nstopped: the sandbox and its folder are removed.\n"), demo.output[-500:]
    assert traces_of(demo.proc.pid) == []
    # the README shows this output (masked: paths, port, ids, counts and this host's HiCache arithmetic)
    if ratio is None:
        pytest.skip("no HiCache ratio fits this host's memory: the demo turns HiCache off, the README shows a ratio")
    ran = mask(demo.output)
    assert mask(readme_block(FULL_MARK)) == ran
    excerpt = mask(readme_block(EXCERPT_MARK)).splitlines()
    assert _in_order(excerpt, ran.splitlines()), (excerpt, ran)


@pytest.mark.parametrize(
    ("signum", "sigint_ignored"),
    [(signal.SIGTERM, False), (signal.SIGINT, True)],
    ids=["sigterm", "ctrl-c-started-with-sigint-ignored"],
)
def test_a_signal_stops_the_demo_with_0_and_leaves_nothing(signum: signal.Signals, sigint_ignored: bool) -> None:
    """SIGTERM (systemd, kill) and Ctrl-C stop the demo cleanly. A shell's background job (or nohup) starts it with
    SIGINT ignored, which Python keeps: the demo sets Ctrl-C's handler itself, so its "Press Ctrl-C to stop" holds
    there too."""
    demo = Demo(sigint_ignored=sigint_ignored)
    try:
        demo.wait_for_prompt()
    finally:
        code = demo.stop(signum)
    assert code == 0 and "stopped: the sandbox and its folder are removed." in demo.output, demo.output[-2000:]
    assert traces_of(demo.proc.pid) == []


def test_make_run_ends_with_0_when_ctrl_c_is_pressed_at_its_terminal() -> None:
    """The README's `make run`, on a terminal: Ctrl-C reaches the demo alone (it owns the terminal's foreground
    while it runs), so make, which re-raises a SIGINT it receives itself, exits 0 with it."""
    if Path("/proc/1/comm").read_text().strip() == "systemd":
        pytest.skip("PID 1 is systemd here: `make run` runs the daemon, not the demo")
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    if subprocess.run(["make", "-q", "-C", str(ROOT), ".venv/.installed-run"], capture_output=True).returncode != 0:
        pytest.skip(f"{ROOT}/.venv is not set up by `make setup` (tests run from another venv)")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "-C", str(ROOT), "run", f"ARGS=--listen 127.0.0.1:{free_port()}"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        preexec_fn=_terminal_of_its_own,
    )
    os.close(slave)
    seen = read_pty(master, proc, PROMPT, 180 * PATIENCE)
    try:
        assert PROMPT in seen, seen
        [demo] = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()  # make's child: the demo
        assert traces_of(int(demo)), "the running demo's sandbox folder and cgroups should exist"
        os.write(master, b"\x03")  # Ctrl-C, as the terminal's line discipline sends it
        seen += read_pty(master, proc, None, 180 * PATIENCE)
        code = proc.wait(60 * PATIENCE)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert code == 0, seen[-3000:]
    assert "stopped: the sandbox and its folder are removed." in seen and "make: ***" not in seen, seen[-3000:]
    assert traces_of(int(demo)) == []


def test_the_demo_boots_from_a_checkout_under_tmp() -> None:
    """A copy of this checkout in a /tmp folder of its own, with a venv in it: the private systemd mounts a tmpfs
    on /tmp, yet the units and the daemon run from the copy's interpreter and package (bound back on it)."""
    clone = Path(tempfile.mkdtemp(prefix="crashdoc-tmp-clone-", dir="/tmp"))
    try:
        _copy_checkout(ROOT, clone)
        python = _venv_importing(clone)
        port = free_port()
        r = subprocess.run(
            [str(python), "-m", "crashdoc", "demo", "--listen", f"127.0.0.1:{port}"],
            cwd=clone,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180 * PATIENCE,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert DIAGNOSIS in r.stdout and "which the sandbox hides" not in r.stdout + r.stderr
        assert f"raised at {clone}/src/crashdoc/sandbox/fake_sglang/scheduler.py:" in r.stdout  # the copy ran, not ROOT
        check_one_ratio(r.stdout)
    finally:
        shutil.rmtree(clone, ignore_errors=True)


# --- helpers ----------------------------------------------------------------------------------------------


def _in_order(needles: list[str], haystack: list[str]) -> bool:
    rest = iter(haystack)
    return all(any(line == needle for line in rest) for needle in needles)


def _terminal_of_its_own() -> None:
    """In the child: a new session whose controlling terminal is the pty on stdin (make is its foreground)."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _copy_checkout(root: Path, dest: Path) -> None:
    """The files of the checkout (tracked and new ones, as git lists them), or its source folders without git."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
    )
    names = [n for n in listed.stdout.decode().split("\0") if n] if listed.returncode == 0 else []
    if not names:
        for part in ("src", "signatures", "pyproject.toml"):
            source = root / part
            if source.is_dir():
                shutil.copytree(source, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, dest / part)
        return
    for name in names:
        source = root / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def _venv_importing(clone: Path) -> Path:
    """A venv in the copy whose interpreter imports the copy's crashdoc, with this test venv's dependencies."""
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = venv / "lib" / version / "site-packages"
    packages = sysconfig.get_paths()["purelib"]
    (site / "crashdoc-tmp-clone.pth").write_text(
        f"import sys, site; sys.path.insert(0, {str(clone / 'src')!r}); site.addsitedir({packages!r})\n"
    )
    python = venv / "bin" / "python"
    found = subprocess.run(
        [str(python), "-c", "import crashdoc; print(crashdoc.__file__)"], capture_output=True, text=True, cwd="/"
    )
    assert found.stdout.strip() == str(clone / "src" / "crashdoc" / "__init__.py"), found
    return python
