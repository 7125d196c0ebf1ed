"""One SGLang child that checks many commands: SGLang's own argument checks, asked of SGLang itself.

The interpreter runs a small script (`CHILD`) in a throw-away child process: SGLang's `prepare_server_args`
(argparse) on the arguments, then `ServerArgs.resolve_once()` (0.5.2x: the validation and resolution pipeline,
srt/arg_groups/pipeline.py; older releases validate in `ServerArgs.__post_init__`, which `from_cli_args` runs).
The child imports SGLang once and checks each command in a forked process of its own, several at once, each
killed at its timeout (`SGLangChecker`). No GPU (CUDA_VISIBLE_DEVICES=""), no network (HF_HUB_OFFLINE=1, no
proxy, connect refused), no port bound (bind and listen do nothing), HOME, TMPDIR and the working folder in a
scratch folder removed afterwards. When the model's config cannot be read offline, the model-independent checks
are run on `--model-path dummy` (SGLang's own short-circuit) and the answer says what was not checked. crashdoc
never imports SGLang: the child prints JSON lines, parsed here with a bound on how much is read; a child that
hangs, dies, prints garbage or floods its output is killed and reported as could-not-check.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MARK = "CRASHDOC-VERIFY "
SERVE = "--crashdoc-serve"

# Runs inside the unit's interpreter (any Python >= 3.8). Two modes, one check:
# - one command: `python -c CHILD ARGS...` prints MARK + one JSON answer as its last line;
# - many: `python -c CHILD --crashdoc-serve PARALLEL TIMEOUT` imports SGLang once, then reads one JSON request per
#   line on stdin ({"id", "argv", "env", "unset"}) and checks each in a forked child of its own (stdout and stderr
#   to /dev/null, a result pipe, killed at TIMEOUT s), PARALLEL at a time; it prints MARK + {"id": ..., answer} per
#   request, after a first MARK + {"ready": true, "version": ...} line.
# In both, no port is bound and no connection made: socket bind/listen are no-ops, connect fails; the child runs
# under SCHED_IDLE where the kernel has it (CPU only when nothing else wants it) and at niceness 10 (below the
# daemon) in any case.
CHILD = r"""
import contextlib, io, json, os, select, signal, socket, sys, time
with contextlib.suppress(OSError):
    os.nice(10)  # background work: on a busy host the daemon's reading and detection come first
with contextlib.suppress(AttributeError, OSError):
    # Niceness 10 still takes a tenth of a CPU's share per child; SCHED_IDLE yields to every runnable task, so the
    # daemon's reading and detection (and the host's SGLang units) keep their latency while checks run.
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
MARK = "CRASHDOC-VERIFY "
def emit(obj):
    sys.__stdout__.write("\n" + MARK + json.dumps(obj) + "\n")
    sys.__stdout__.flush()
def guard_network():
    real_connect, real_connect_ex, real_bind = socket.socket.connect, socket.socket.connect_ex, socket.socket.bind
    inet = (socket.AF_INET, socket.AF_INET6)
    def connect(self, address):
        if self.family in inet:
            raise OSError(101, "crashdoc's check makes no connection")
        return real_connect(self, address)
    def connect_ex(self, address):
        return 101 if self.family in inet else real_connect_ex(self, address)
    def bind(self, address):
        if self.family in inet:
            return None
        return real_bind(self, address)
    def listen(self, *a):
        return None
    socket.socket.connect, socket.socket.connect_ex, socket.socket.bind = connect, connect_ex, bind
    socket.socket.listen = listen
guard_network()
try:
    import sglang
    try:
        from importlib.metadata import version
        ver = version("sglang")
    except Exception:
        ver = getattr(sglang, "__version__", "?")
except BaseException as e:
    emit(dict(status="not-importable", error="%s: %s" % (type(e).__name__, e)))
    sys.exit(0)
def build(args):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            try:
                from sglang.srt.server_args import prepare_server_args
            except ImportError as e:
                if "prepare_server_args" not in str(e):
                    raise
                prepare_server_args = None
            if prepare_server_args is not None:
                return prepare_server_args(list(args)), None
            import argparse
            from sglang.srt.server_args import ServerArgs
            parser = argparse.ArgumentParser()
            ServerArgs.add_cli_args(parser)
            return ServerArgs.from_cli_args(parser.parse_args(list(args))), None
    except SystemExit:
        lines = [l for l in err.getvalue().splitlines() if l.strip()]
        return None, ("parse", "SystemExit", lines[-1] if lines else "argparse rejected the arguments")
    except BaseException as e:
        return None, ("parse", type(e).__name__, str(e))
def resolve(record):
    if not hasattr(record, "resolve_once"):
        return None
    try:
        record.resolve_once()
        return None
    except BaseException as e:
        return ("resolve", type(e).__name__, str(e))
MODEL_WORDS = ("config.json", "huggingface", "offline", "couldn't connect", "can't load", "cannot find",
               "not a local folder", "repo id", "repo_id", "does not appear to have", "no such file",
               "model_type", "localentrynotfound", "hfvalidation", "trust_remote_code", "trust-remote-code")
GPU_WORDS = ("no accelerator", "cuda", "nvidia", "gpu", "no device", "device count", "nvml",
             "torch not compiled")
def has(args, *names):
    return any(a in names or a.split("=", 1)[0] in names for a in args)
def check(argv):
    if argv and not argv[0].startswith("-"):  # `sglang serve MODEL ...`, as sglang/cli/serve.py normalizes it
        argv = ["--model-path"] + list(argv)
    unchecked = []
    args = list(argv)
    cpu = False
    for attempt in range(3):
        record, problem = build(args)
        if problem is None:
            problem = resolve(record)
        if problem is None:
            if unchecked:
                return dict(status="partial", version=ver, unchecked=unchecked)
            return dict(status="passed", version=ver)
        stage, kind, text = problem
        low = (kind + " " + text).lower()
        if kind in ("ImportError", "ModuleNotFoundError"):  # the check's environment, not the command
            return dict(status="import-error", version=ver, stage=stage, error="%s: %s" % (kind, text))
        if stage == "parse":
            return dict(status="rejected", version=ver, stage=stage, error="%s: %s" % (kind, text))
        if not cpu and "--" not in text and any(w in low for w in GPU_WORDS) and not has(args, "--device"):
            cpu = True
            args = args + ["--device", "cpu"]
            unchecked.append("the checks that depend on the GPU (run with --device cpu, the GPU being hidden: %s)"
                             % text.splitlines()[0][:160])
            continue
        if any(w in low for w in MODEL_WORDS) and not has(args, "dummy"):
            i = next((k for k, a in enumerate(args) if a in ("--model-path", "--model")), None)
            if i is not None and i + 1 < len(args):
                args[i + 1] = "dummy"
            else:
                args = [a if not a.startswith(("--model-path=", "--model=")) else "--model-path=dummy" for a in args]
            unchecked.append("the checks that need the model's config, not readable offline here (%s: %s)"
                             % (kind, text.splitlines()[0][:160] if text else ""))
            continue
        break
    return dict(status="cpu-rejected" if cpu else "rejected", version=ver, stage=stage, error="%s: %s" % (kind, text))
def one(request, wfd):
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    for name, value in (request.get("env") or {}).items():
        os.environ[name] = value
    for name in request.get("unset") or ():
        os.environ.pop(name, None)
    try:
        answer = check(request.get("argv") or [])
    except BaseException as e:
        answer = dict(status="rejected", version=ver, stage="check", error="%s: %s" % (type(e).__name__, e))
    data = json.dumps(answer).encode()
    while data:
        data = data[os.write(wfd, data[:65536]):]
    os._exit(0)
def serve(parallel, timeout):
    try:
        build(["--help-crashdoc-warmup"])  # imports SGLang's argument module once, before any fork
    except BaseException:
        pass
    emit(dict(ready=True, version=ver))
    stdin, pending, running, buf, open_ = sys.stdin.fileno(), [], {}, b"", True
    while open_ or pending or running:
        while pending and len(running) < parallel:
            request = pending.pop(0)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                one(request, w)
            os.close(w)
            running[r] = [pid, request.get("id"), time.time() + timeout, b""]
        waits = [v[2] - time.time() for v in running.values()]
        fds = list(running) + ([stdin] if open_ else [])
        ready = select.select(fds, [], [], max(0.0, min(waits)) if waits else None)[0]
        for fd in ready:
            if fd == stdin:
                chunk = os.read(stdin, 65536)
                if not chunk:
                    open_ = False
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    try:
                        pending.append(json.loads(line.decode()))
                    except ValueError:
                        pass
                continue
            entry = running[fd]
            chunk = os.read(fd, 65536)
            entry[3] += chunk
            if chunk and len(entry[3]) < 1 << 20:
                continue
            del running[fd]
            os.close(fd)
            if chunk:
                os.kill(entry[0], signal.SIGKILL)
            status = os.waitpid(entry[0], 0)[1]
            try:
                answer = json.loads(entry[3].decode())
                if not isinstance(answer, dict):
                    raise ValueError
            except ValueError:
                code = os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                how = "killed by signal %d" % code if os.WIFSIGNALED(status) else "exit status %d" % code
                answer = dict(status="crashed", error="the check died (%s) before answering" % how)
            answer["id"] = entry[1]
            emit(answer)
        for fd, entry in list(running.items()):
            if entry[2] <= time.time():
                os.kill(entry[0], signal.SIGKILL)
                os.waitpid(entry[0], 0)
                os.close(fd)
                del running[fd]
                emit(dict(id=entry[1], status="timeout", error="no answer within %g s" % timeout))
if sys.argv[1:2] == ["--crashdoc-serve"]:
    serve(int(sys.argv[2]), float(sys.argv[3]))
else:
    emit(check(sys.argv[1:]))
"""

CHECK_TIMEOUT = 30.0  # one command's check, once SGLang is imported
START_TIMEOUT = 180.0  # importing SGLang (torch, transformers): seconds on a busy host
MAX_OUTPUT = 4 << 20  # bytes a child may print before it is taken for a flood and killed
MAX_ANSWER = 64 << 10  # one answer line


@dataclass(frozen=True, slots=True)
class Request:
    """One command to check: SGLang's arguments, and the environment changes it comes with."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    unset: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Answer:
    """What SGLang's checks said of one command (`status` as the child says it, or could-not-check)."""

    status: str  # passed | partial | rejected | cpu-rejected | import-error | not-importable | could-not-check
    error: str = ""  # SGLang's words, "ValueError: ..." (or why it could not be checked)
    version: str = ""
    stage: str = ""  # parse | resolve
    unchecked: tuple[str, ...] = ()

    @property
    def passes(self) -> bool:
        return self.status in ("passed", "partial")

    @property
    def rejected(self) -> bool:
        return self.status == "rejected"

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Answer:
        status = str(data.get("status", ""))
        if status in ("timeout", "crashed"):
            return cls("could-not-check", str(data.get("error", status)))
        if status not in ("passed", "partial", "rejected", "cpu-rejected", "import-error", "not-importable"):
            return cls("could-not-check", f"unexpected answer {status[:40]!r}")
        unchecked = data.get("unchecked") or []
        return cls(
            status,
            " ".join(str(data.get("error", "")).split())[:600],
            str(data.get("version", "") or ""),
            str(data.get("stage", "") or ""),
            tuple(str(u) for u in unchecked) if isinstance(unchecked, list) else (),
        )


def scratch_environment(env: Mapping[str, str], scratch: str) -> dict[str, str]:
    """The child's environment with HOME, TMPDIR and caches in `scratch` (removed afterwards), so that nothing
    is written elsewhere; the Hugging Face cache stays readable where it was (offline: read, never written)."""
    out = dict(env)
    home = out.get("HOME") or os.path.expanduser("~")
    if "HF_HUB_CACHE" not in out and "HUGGINGFACE_HUB_CACHE" not in out:
        hf_home = out.get("HF_HOME") or os.path.join(home, ".cache", "huggingface")
        out["HF_HUB_CACHE"] = os.path.join(hf_home, "hub")
    out.update({"HOME": scratch, "TMPDIR": scratch, "XDG_CACHE_HOME": os.path.join(scratch, ".cache")})
    out.pop("HF_HOME", None)
    return out


class SGLangChecker:
    """One SGLang child that checks many commands: it imports SGLang once, then forks a throw-away process per
    command, `parallel` at a time, each with `timeout` seconds. Use as a context manager; `check` may be called
    several times (a search asks again with what the last answers taught it)."""

    def __init__(
        self,
        interpreter: str,
        env: Mapping[str, str] | None = None,
        *,
        parallel: int = 2,
        timeout: float = CHECK_TIMEOUT,
        start_timeout: float = START_TIMEOUT,
        max_output: int = MAX_OUTPUT,
    ) -> None:
        self.interpreter = interpreter
        self._env = dict(env) if env is not None else child_environment()
        self.parallel, self.timeout, self.start_timeout, self.max_output = parallel, timeout, start_timeout, max_output
        self._proc: subprocess.Popen[bytes] | None = None
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self._buffers: dict[int, bytearray] = {}
        self._read = 0
        self._next = 0
        self._answers: dict[int, Answer] = {}
        self._stderr_tail = b""
        self.version = ""
        self.failure: Answer | None = None  # set once the child is gone: every later check gets it

    def __enter__(self) -> SGLangChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, deadline: float) -> None:
        if self._proc is not None or self.failure is not None:
            return
        self._scratch = tempfile.TemporaryDirectory(prefix="crashdoc-check-")
        command = [self.interpreter, "-c", CHILD, SERVE, str(max(1, self.parallel)), f"{self.timeout:g}"]
        try:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self._scratch.name,
                env=scratch_environment(self._env, self._scratch.name),
                start_new_session=True,
            )
        except OSError as exc:
            self._fail(f"cannot run {self.interpreter}: {exc.strerror or exc}")
            return
        for stream in (self._proc.stdout, self._proc.stderr):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            self._buffers[stream.fileno()] = bytearray()
        self._pump(lambda: bool(self.version), min(deadline, time.monotonic() + self.start_timeout), "start")

    def check(self, requests: Sequence[Request], *, deadline: float | None = None) -> list[Answer]:
        """Each request's answer, in order; those not answered by the deadline are could-not-check."""
        if not requests:
            return []
        now = time.monotonic()
        rounds = -(-len(requests) // max(1, self.parallel))
        own = now + self.start_timeout * (self._proc is None) + self.timeout * rounds + 5.0
        deadline = own if deadline is None else min(deadline, own)
        self._start(deadline)
        ids = list(range(self._next, self._next + len(requests)))
        self._next += len(requests)
        if self.failure is None:
            assert self._proc is not None and self._proc.stdin is not None
            lines = b"".join(
                json.dumps({"id": i, "argv": list(r.argv), "env": dict(r.env), "unset": list(r.unset)}).encode() + b"\n"
                for i, r in zip(ids, requests, strict=True)
            )
            try:
                self._proc.stdin.write(lines)
                self._proc.stdin.flush()
            except OSError:
                self._fail("the SGLang child stopped reading its requests")
            self._pump(lambda: all(i in self._answers for i in ids), deadline, "check")
        out = []
        for i in ids:
            answer = self._answers.pop(i, None)
            if answer is None:
                answer = self.failure or Answer("could-not-check", "SGLang's checks did not answer in time")
            out.append(answer)
        return out

    def _pump(self, done: Callable[[], bool], deadline: float, phase: str) -> None:
        """Read the child's output until `done()`, the deadline, the child's end or a flood."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None and proc.stderr is not None
        out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        with selectors.DefaultSelector() as sel:
            for fd in self._buffers:
                sel.register(fd, selectors.EVENT_READ)
            while not done() and self.failure is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    if phase == "start":
                        self._fail(f"SGLang did not import within {self.start_timeout:g} s")
                    else:  # the child may still answer later requests: only these are given up
                        return
                    return
                if not sel.get_map():
                    self._fail(self._exit_text())
                    return
                for key, _ in sel.select(min(left, 1.0)):
                    fd = int(key.fd)
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                        continue
                    self._read += len(chunk)
                    if self._read > self.max_output:
                        self._fail(f"it printed more than {self.max_output >> 20} MB (flooding its output)")
                        return
                    if fd == err_fd:
                        self._stderr_tail = (self._stderr_tail + chunk)[-2000:]
                        continue
                    self._lines(self._buffers[out_fd], chunk)
                    if self.failure is not None:
                        return

    def _lines(self, buffer: bytearray, chunk: bytes) -> None:
        buffer += chunk
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                if len(buffer) > MAX_ANSWER:  # a line without end: not an answer
                    del buffer[:]
                return
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            if not line.startswith(MARK.encode()):
                continue
            try:
                data = json.loads(line[len(MARK) :].decode("utf-8", "replace"))
            except ValueError:
                self._fail("it printed an answer that is not JSON")
                return
            if not isinstance(data, dict):
                self._fail("it printed an answer that is not a JSON object")
                return
            if data.get("ready"):
                self.version = str(data.get("version") or "?")
            elif isinstance(data.get("id"), int) and not isinstance(data.get("id"), bool):
                self._answers[data["id"]] = Answer.of(data)
            else:  # the whole child's answer: SGLang does not import here
                self._fail_with(Answer.of(data))

    def _exit_text(self) -> str:
        assert self._proc is not None
        try:
            code = self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "the SGLang child closed its output"
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        tail = self._stderr_tail.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        return f"the SGLang child ended ({how}) before answering: {tail[0][:200]}"

    def _fail(self, why: str) -> None:
        self._fail_with(Answer("could-not-check", why))

    def _fail_with(self, answer: Answer) -> None:
        if self.failure is None:
            self.failure = answer
        self._kill()

    def _kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    def close(self) -> None:
        """Stop the child and everything it started; remove the scratch folder."""
        self._kill()
        if self.failure is None:
            self.failure = Answer("could-not-check", "the checker is closed")
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None


def child_environment(
    command_env: Sequence[tuple[str, str]] = (), base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """No GPU, no network, no crashdoc paths; the unit's own command-line assignments (PYTHONPATH) kept."""
    base = os.environ if base is None else base
    env = {k: base[k] for k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "HF_HOME", "HF_HUB_CACHE") if k in base}
    env.update({k: v for k, v in command_env if not v.startswith("$")})
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": "",
            "HIP_VISIBLE_DEVICES": "",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "NO_PROXY": "*",
            "no_proxy": "*",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(key, None)
    return env
