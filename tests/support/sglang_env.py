"""A real SGLang to check corrected commands against, for the tests of `crashdoc.remedy` and `bench/`.

SGLang's argument module imports much of SGLang (torch, transformers, its kernels' Python parts), so the
environment is a venv of its own: torch 2.13.0 CPU (this machine's local wheel: `pip install torch==2.13.0`),
SGLang's wheel with `--no-deps`, then, one at a time, the packages the import of `sglang.srt.server_args` and
`ServerArgs.resolve_once()` still miss (SGLang's own pins where its wheel has them), every install constrained
to that torch so that pip never pulls a CUDA build (a package that would need another torch is installed
without its dependencies, or left out).

It is built once per host, outside any checkout, in `$CRASHDOC_TEST_CACHE` (default
`${XDG_CACHE_HOME:-~/.cache}/crashdoc-test`), in a folder named by the release and by a hash of this recipe,
and reused by every run and every clone; a lock keeps two builds from racing, and a build is moved into place
only when SGLang's checks run in it. `$CRASHDOC_SGLANG_PYTHON` points the tests at an existing environment
instead. `python tests/support/sglang_env.py` (what `make sglang-env`, and so `make test`, runs) builds it if
needed and prints its interpreter.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RELEASE = "0.5.23"
TORCH = "torch==2.13.0"  # the CPU build on this machine's disk; never let pip choose another
WHEEL_GLOB = f"sglang-{RELEASE}-*.whl"
WHEEL_DIRS = (REPO / ".cache" / "wheels", REPO / ".cache" / "sglang-wheels")  # fetch-sglang.sh, derive-releases.py
# import name -> distribution, where they differ
_DISTRIBUTIONS = {
    "yaml": "pyyaml",
    "zmq": "pyzmq",
    "PIL": "pillow",
    "dateutil": "python-dateutil",
    "tvm_ffi": "apache-tvm-ffi",
    "google": "protobuf",
}
# SGLang's model configs import torchvision's transforms (image preprocessing) at import time. The index's
# torchvision wheels are CUDA builds: 0.28.0 (torch 2.13's) is installed without dependencies, and since its compiled
# operators cannot load beside torch CPU, its two modules that register them are emptied. Its Python code (the
# transforms) is real; argument checks call none of its operators.
TORCHVISION = "torchvision==0.28.0"
_OPERATOR_MODULES = ("_meta_registrations.py", "_autograd_registrations.py")
_NEVER = frozenset({"torchaudio"})  # pins another torch and is not imported by the checks
_PROBE_ENV = {"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def cache_root() -> Path:
    configured = os.environ.get("CRASHDOC_TEST_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "crashdoc-test"


def recipe_key() -> str:
    """What the environment is made by: the release, the torch pin, this file's recipe, the Python."""
    recipe = Path(__file__).read_bytes().split(b"FAKE_SERVER_ARGS = ")[0]
    digest = hashlib.sha256(recipe + TORCH.encode() + sys.version.split()[0].encode()).hexdigest()[:10]
    return f"sglang-{RELEASE}-venv-{digest}"


def default_venv() -> Path:
    return cache_root() / recipe_key()


def sglang_python() -> tuple[str | None, str]:
    """The interpreter of a venv where SGLang imports, and its release; or None and why not (the skip reason)."""
    configured = os.environ.get("CRASHDOC_SGLANG_PYTHON")
    python = Path(configured) if configured else default_venv() / "bin" / "python"
    if not python.exists():
        return None, f"no SGLang environment at {python} (`make sglang-env` builds it; CRASHDOC_SGLANG_PYTHON=PATH)"
    probe = subprocess.run(
        [str(python), "-c", "import sglang.srt.server_args, importlib.metadata as m; print(m.version('sglang'))"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": os.environ.get("PATH", ""), **_PROBE_ENV},
        check=False,
    )
    if probe.returncode != 0:
        tail = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"SGLang does not import in {python}: {tail}"
    return str(python), probe.stdout.strip()


def tiny_model(folder: Path) -> Path:
    """A local model folder holding only a Llama config.json: enough for SGLang's model-dependent checks."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def _pins(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    pins = {}
    for line in text.splitlines():
        m = re.match(r"Requires-Dist: ([\w.-]+)(?:\[[^\]]*\])?\s*(==[^;\s]+)?(?:;(.*))?$", line)
        if m and "extra ==" not in (m.group(3) or ""):
            pins[m.group(1).lower().replace("_", "-")] = m.group(1) + (m.group(2) or "")
    return pins


def find_wheel(download_to: Path) -> Path:
    """SGLang's wheel: one the checkout already has, else `pip download --no-deps` into the cache."""
    for folder in (*WHEEL_DIRS, download_to):
        found = sorted(folder.glob(WHEEL_GLOB)) if folder.is_dir() else []
        if found:
            return found[-1]
    download_to.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={RELEASE}", "-d", str(download_to)]
    subprocess.run(pip, check=True)
    return sorted(download_to.glob(WHEEL_GLOB))[-1]


def _say(text: str) -> None:
    print(f"sglang-env: {text}", file=sys.stderr, flush=True)


def build_sglang_venv(venv: Path, wheel: Path, rounds: int = 60) -> None:
    """torch CPU + SGLang (`--no-deps`) + whatever its argument checks still import, in `venv`."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    constraints = venv / "crashdoc-constraints.txt"
    constraints.write_text(TORCH + "\n")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", str(constraints)]
    subprocess.run([*pip, TORCH], check=True)
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True)
    pins = _pins(wheel)
    model = tiny_model(venv / "tiny-model")
    probe = (
        "from sglang.srt.server_args import prepare_server_args as p\n"
        f"p(['--model-path', {str(model)!r}, '--device', 'cpu']).resolve_once()\n"
    )
    tried: set[str] = set()
    for _ in range(rounds):
        done = subprocess.run(
            [python, "-c", probe],
            capture_output=True,
            text=True,
            env={"PATH": os.environ.get("PATH", ""), **_PROBE_ENV},
            cwd=venv,
            check=False,
        )
        missing = re.findall(r"No module named '([^'.]+)", done.stderr)
        if done.returncode == 0:
            return
        if not missing:
            tail = (done.stderr.strip().splitlines() or ["?"])[-1]
            raise RuntimeError(f"SGLang's checks do not run in {venv}: {tail}")
        name = _DISTRIBUTIONS.get(missing[-1], missing[-1])
        if name in _NEVER or name in tried:
            raise RuntimeError(f"SGLang's checks need {name}, which this test environment cannot install")
        tried.add(name)
        if name == "torchvision":
            _install_torchvision(python, pip)
            continue
        spec = pins.get(name.lower().replace("_", "-"), name)
        _say(f"installing {spec}")
        if subprocess.run([*pip, spec], check=False).returncode != 0:  # it wants another torch: without its deps
            subprocess.run([*pip, "--no-deps", spec], check=True)
    raise RuntimeError(f"SGLang's checks still miss modules after {rounds} installs")


def _install_torchvision(python: str, pip: list[str]) -> None:
    _say(f"installing {TORCHVISION} (no dependencies; its operator registrations emptied, see TORCHVISION)")
    subprocess.run([*pip, "--no-deps", TORCHVISION], check=True)
    where = subprocess.run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('torchvision').submodule_search_locations[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for name in _OPERATOR_MODULES:
        (Path(where) / name).write_text(
            f'"""Emptied by crashdoc\'s test environment: {TORCHVISION}\'s operators need CUDA."""\n'
        )


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def folder_bytes(folder: Path) -> int:
    total = 0
    for base, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_size
    return total


def ensure_sglang_venv(venv: Path | None = None) -> Path:
    """The cached environment's interpreter, built first when it is not there (minutes, once per host)."""
    venv = venv or default_venv()
    python = venv / "bin" / "python"
    if (venv / "crashdoc-built.json").exists():
        return python
    with _locked(venv.parent):
        if (venv / "crashdoc-built.json").exists():  # another run built it while this one waited
            return python
        wheel = find_wheel(venv.parent / "wheels")
        _say(f"building SGLang {RELEASE}'s environment in {venv} (once per host; minutes)")
        started = time.monotonic()
        scratch = Path(tempfile.mkdtemp(prefix=venv.name + ".building-", dir=venv.parent))
        try:
            build_sglang_venv(scratch, wheel)
            shutil.rmtree(venv, ignore_errors=True)
            scratch.rename(venv)  # `bin/python` finds its site-packages from where it is: the move is safe
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        seconds = time.monotonic() - started
        size = folder_bytes(venv)
        marker = {"release": RELEASE, "torch": TORCH, "seconds": round(seconds, 1), "bytes": size}
        (venv / "crashdoc-built.json").write_text(json.dumps(marker) + "\n")
        _say(f"built in {seconds:.0f} s, {size / 1e9:.2f} GB: {venv}")
    return python


def main(argv: list[str]) -> int:
    if os.environ.get("CRASHDOC_SGLANG_PYTHON"):
        print(os.environ["CRASHDOC_SGLANG_PYTHON"])
        return 0
    try:
        python = ensure_sglang_venv(Path(argv[0]) if argv else None)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        _say(f"could not build SGLang's environment ({exc}); the tests that need it will be skipped")
        return 0
    print(python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


FAKE_SERVER_ARGS = """
import argparse


class ServerArgs:
    def __init__(self, ns):
        self.ns = ns

    def resolve_once(self):
        ns = self.ns
        if ns.device is None and ns.model_path != "dummy":
            raise RuntimeError("No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available.")
        if ns.ssl_keyfile and not ns.ssl_certfile:
            raise ValueError("--ssl-keyfile requires --ssl-certfile to be specified as well.")


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    parser.add_argument("--model-path")
    parser.add_argument("--device")
    parser.add_argument("--ssl-keyfile")
    parser.add_argument("--ssl-certfile")
    parser.add_argument("--mem-fraction-static", type=float)
    return ServerArgs(parser.parse_args(argv))
"""


def fake_sglang_tree(folder: Path, server_args: str = FAKE_SERVER_ARGS, version: str = "0.5.99") -> Path:
    """A stand-in `sglang` package holding only `srt/server_args.py` (SGLang's entry points, a few of its real
    messages): the parts of the check that do not need SGLang itself run anywhere against it."""
    package = folder / "sglang"
    (package / "srt").mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (package / "srt" / "__init__.py").write_text("")
    (package / "srt" / "server_args.py").write_text(server_args)
    return folder


def answering_interpreter(
    folder: Path, answer: str = '"status": "passed", "version": "0.5.23"', rejects: tuple[str, str] = ("", "")
) -> Path:
    """A stand-in interpreter that speaks the checker's protocol: it says it is ready, records each request
    line in `folder/requests`, and answers each with `answer` (the JSON body, without the id); a request whose
    line holds `rejects[0]` is rejected with the error `rejects[1]`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "python"
    quoted = answer.replace(chr(34), chr(92) + chr(34))
    rejected = f'"status": "rejected", "version": "0.5.23", "stage": "resolve", "error": "{rejects[1]}"'
    rejected = rejected.replace(chr(34), chr(92) + chr(34))
    script.write_text(
        "#!/bin/sh\n"
        'echo \'CRASHDOC-VERIFY {"ready": true, "version": "0.5.23"}\'\n'
        "while IFS= read -r line; do\n"
        f"  printf '%s\\n' \"$line\" >> {folder / 'requests'}\n"
        "  id=$(printf '%s' \"$line\" | sed 's/^{\"id\": \\([0-9]*\\).*/\\1/')\n"
        f'  case "$line" in\n'
        f'    *\'{rejects[0] or chr(1)}\'*) echo "CRASHDOC-VERIFY {{\\"id\\": $id, {rejected}}}" ;;\n'
        f'    *) echo "CRASHDOC-VERIFY {{\\"id\\": $id, {quoted}}}" ;;\n'
        "  esac\n"
        "done\n"
    )
    script.chmod(0o755)
    return script


def requests_seen(folder: Path) -> list[dict[str, object]]:
    """What an `answering_interpreter` was asked to check."""
    path = folder / "requests"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
