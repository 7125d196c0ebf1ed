"""Does the corrected command pass SGLang's own argument checks? Asked of SGLang itself, never guessed.

The unit's own interpreter runs a small script in a throw-away child process: SGLang's `prepare_server_args`
(argparse) on the corrected arguments, then `ServerArgs.resolve_once()` (0.5.2x: the validation and resolution
pipeline, srt/arg_groups/pipeline.py; older releases validate in `ServerArgs.__post_init__`, which
`from_cli_args` runs). No GPU (CUDA_VISIBLE_DEVICES=""), no network (HF_HUB_OFFLINE=1, no proxy), a timeout.
When the model's config cannot be read offline, the model-independent checks are run on `--model-path dummy`
(SGLang's own short-circuit) and the answer says what was not checked. crashdoc never imports SGLang: the child
prints one JSON line, which is parsed here.
"""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crashdoc.events import FlagChange
from crashdoc.redact import redact
from crashdoc.remedy.commandline import LaunchCommand, Reader, find_invocation, read_text_file
from crashdoc.remedy.rewrite import apply_changes, is_environment

TIMEOUT = 90.0
MARK = "CRASHDOC-VERIFY "

# Runs inside the unit's interpreter (any Python >= 3.8); prints MARK + one JSON object as its last line.
CHILD = r"""
import contextlib, io, json, sys
MARK = "CRASHDOC-VERIFY "
def say(**kw):
    sys.stdout.write("\n" + MARK + json.dumps(kw) + "\n")
    sys.stdout.flush()
    sys.exit(0)
try:
    import sglang
    try:
        from importlib.metadata import version
        ver = version("sglang")
    except Exception:
        ver = getattr(sglang, "__version__", "?")
except BaseException as e:
    say(status="not-importable", error="%s: %s" % (type(e).__name__, e))
argv = sys.argv[1:]
if argv and not argv[0].startswith("-"):  # `sglang serve MODEL ...`, as sglang/cli/serve.py normalizes it
    argv = ["--model-path"] + argv
def build(args):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            try:
                from sglang.srt.server_args import prepare_server_args
            except ImportError:
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
unchecked = []
args = list(argv)
cpu = False
for attempt in range(3):
    record, problem = build(args)
    if problem is None:
        problem = resolve(record)
    if problem is None:
        if unchecked:
            say(status="partial", version=ver, unchecked=unchecked)
        say(status="passed", version=ver)
    stage, kind, text = problem
    low = (kind + " " + text).lower()
    if kind in ("ImportError", "ModuleNotFoundError"):  # the check's environment, not the command
        say(status="import-error", version=ver, stage=stage, error="%s: %s" % (kind, text))
    if stage == "parse":
        say(status="rejected", version=ver, stage=stage, error="%s: %s" % (kind, text))
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
say(status="cpu-rejected" if cpu else "rejected", version=ver, stage=stage, error="%s: %s" % (kind, text))
"""


@dataclass(frozen=True, slots=True)
class Verification:
    status: str  # passed | partial | rejected | not-verified
    text: str  # the line shown as `fix.verified`


Runner = Callable[..., subprocess.CompletedProcess[str]]


def child_environment(
    command_env: Sequence[tuple[str, str]] = (), base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """No GPU, no network, no crashdoc paths; the unit's own command-line assignments (PYTHONPATH) kept."""
    base = os.environ if base is None else base
    env = {k: base[k] for k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR") if k in base}
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


def interpreter_of(inv: LaunchCommand, read: Reader = read_text_file) -> tuple[str | None, str]:
    """The Python that runs SGLang for this command, or None and why not."""
    if inv.container:
        return None, f"SGLang runs inside a container ({inv.container}); its Python is not on this host"
    words = inv.argv
    word = words[inv.launcher]
    if posixpath.basename(word) == "sglang":  # an entry-point script: its shebang names the interpreter
        try:
            first = read(word).split("\n", 1)[0]
        except (OSError, UnicodeError, ValueError):
            return None, f"cannot read {word} to find its interpreter"
        if not first.startswith("#!"):
            return None, f"{word} has no #! line"
        parts = first[2:].split()
        if parts and posixpath.basename(parts[0]) == "env" and len(parts) > 1:
            return parts[1], ""
        return (parts[0], "") if parts else (None, f"{word} has an empty #! line")
    if "$" in word:
        return None, f"the interpreter is a variable ({word})"
    return word, ""


def unsafe_to_run(interpreter: str, *, uid: int | None = None) -> str:
    """Why crashdoc will not run this interpreter ("" when it may): it, its folder and the folder above (a
    venv's root) must belong to root or to crashdoc's own user and be writable by no one else, so that running
    the check gives no other user a way to run code as crashdoc."""
    me = os.geteuid() if uid is None else uid
    path = interpreter
    if not posixpath.isabs(path):
        return f"the interpreter {interpreter} is not an absolute path"
    try:
        folder = posixpath.dirname(posixpath.normpath(path))
        real = os.path.realpath(path)
        for p in dict.fromkeys((real, posixpath.dirname(real), folder, posixpath.dirname(folder))):
            st = os.stat(p)
            if st.st_uid not in (0, me) or st.st_mode & 0o022:
                mode = f"{st.st_mode & 0o777:o}"
                return f"{p} may be changed by another user (uid {st.st_uid}, mode {mode}); crashdoc does not run it"
    except OSError as exc:
        return f"cannot run {interpreter}: {exc.strerror or exc}"
    return ""


def verify_argv(
    interpreter: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
    run: Runner = subprocess.run,
) -> Verification:
    """Run SGLang's argument checks on `args` with `interpreter`, in a child process working in a throw-away
    folder (whatever it writes there is removed)."""
    try:
        with tempfile.TemporaryDirectory(prefix="crashdoc-verify-") as scratch:
            done = run(
                [interpreter, "-c", CHILD, *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=dict(env) if env is not None else child_environment(),
                cwd=scratch,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                check=False,
            )
    except subprocess.TimeoutExpired:
        return Verification(
            "not-verified", f"not verified: SGLang's argument checks did not answer within {timeout:g} s"
        )
    except OSError as exc:
        return Verification("not-verified", f"not verified: cannot run {interpreter}: {exc.strerror or exc}")
    answer = _answer(done.stdout)
    if answer is None:
        tail = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or ["no output"]
        return Verification("not-verified", f"not verified: {interpreter} gave no answer ({tail[0][:200]})")
    return describe(answer, interpreter)


def _answer(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                data = json.loads(line[len(MARK) :])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def describe(answer: Mapping[str, Any], interpreter: str) -> Verification:
    status = str(answer.get("status", ""))
    version = str(answer.get("version", "?"))
    error = " ".join(str(answer.get("error", "")).split())[:300]
    if status == "passed":
        return Verification("passed", f"the corrected command passes SGLang {version}'s argument checks")
    if status == "partial":
        return Verification(
            "partial",
            f"the corrected command passes SGLang {version}'s argument checks, except (not checked): "
            + "; ".join(" ".join(u.split())[:240] for u in answer.get("unchecked", [])),
        )
    if status == "not-importable":
        return Verification("not-verified", f"not verified: SGLang is not importable by {interpreter} ({error})")
    if status == "import-error":
        return Verification(
            "not-verified", f"not verified: SGLang {version}'s checks could not import what they need here ({error})"
        )
    if status == "cpu-rejected":
        return Verification(
            "not-verified",
            f"not verified: SGLang {version}'s argument checks, run with --device cpu because the GPU is hidden, "
            f"raised {error}; this may be a limit of the CPU check rather than of the command",
        )
    if status == "rejected":
        stage = "argument parsing" if answer.get("stage") == "parse" else "argument checks"
        return Verification("rejected", f"rejected by SGLang {version}'s {stage}: {error}")
    return Verification("not-verified", f"not verified: unexpected answer {status!r}")


def verify_fix(
    cmdline: Sequence[str],
    changes: Sequence[FlagChange],
    *,
    read: Reader = read_text_file,
    run: Runner = subprocess.run,
    timeout: float = TIMEOUT,
) -> Verification:
    """The unit's ExecStart with the fix applied (in memory), checked by the unit's own SGLang."""
    if not changes:
        return Verification("not-verified", "not verified: the fix changes no flag")
    waiting = [c.flag for c in changes if c.placeholder]
    if waiting:  # SGLang would check the placeholder, not the operator's value
        return Verification("not-verified", f"not verified: {', '.join(waiting)} needs your value first")
    if not cmdline:
        return Verification(
            "not-verified",
            "not verified: systemd did not report the unit's ExecStart here (no D-Bus), and crashdoc runs no "
            "command line read from the journal",
        )
    located = find_invocation(tuple(cmdline), read)
    inv = located.invocation
    if inv is None:
        return Verification("not-verified", "not verified: crashdoc did not find SGLang's command in the unit")
    after = apply_changes(inv, [c for c in changes if not is_environment(c.flag)]).after
    interpreter, why = interpreter_of(after, read)
    if interpreter is None:
        return Verification("not-verified", f"not verified: {why}")
    unsafe = unsafe_to_run(interpreter)
    if unsafe:
        return Verification("not-verified", f"not verified: {unsafe}")
    if after.expansions:
        return Verification(
            "not-verified",
            f"not verified: the command passes {', '.join(after.expansions)}, which only the shell expands",
        )
    result = verify_argv(
        interpreter, after.sglang_args, env=child_environment(after.environment), run=run, timeout=timeout
    )
    return Verification(result.status, redact(result.text))
