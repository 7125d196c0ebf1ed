"""A real SGLang to check corrected commands against, for tests of `crashdoc.remedy.verify`.

SGLang's argument module imports much of SGLang (torch, transformers, its kernels' Python parts), so the
environment is a throw-away venv: torch CPU, SGLang's wheel with `--no-deps`, then, one at a time, the packages
the import of `sglang.srt.server_args` and `ServerArgs.resolve_once()` still miss (SGLang's own pins where its
wheel has them). `build_sglang_venv` makes it (minutes, from the local package index); tests find it through
`$CRASHDOC_SGLANG_PYTHON` or the default path and skip with the reason when it is not there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO / ".cache" / "sglang-venv"  # `make sglang-env` builds it
WHEEL_GLOB = "sglang-0.5.23-*.whl"
WHEELS = REPO / ".cache" / "sglang-wheels"  # scripts/derive-releases.py downloads the wheels here
# import name -> distribution, where they differ
_DISTRIBUTIONS = {
    "yaml": "pyyaml",
    "zmq": "pyzmq",
    "PIL": "pillow",
    "dateutil": "python-dateutil",
    "tvm_ffi": "apache-tvm-ffi",
    "google": "protobuf",
}


def sglang_python() -> tuple[str | None, str]:
    """The interpreter of a venv where SGLang imports, or None and why not (the skip reason)."""
    configured = os.environ.get("CRASHDOC_SGLANG_PYTHON")
    python = Path(configured) if configured else DEFAULT_VENV / "bin" / "python"
    if not python.exists():
        return None, f"no SGLang environment at {python} (build one with tests/support/sglang_env.py VENV)"
    probe = subprocess.run(
        [str(python), "-c", "import sglang.srt.server_args, importlib.metadata as m; print(m.version('sglang'))"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": os.environ.get("PATH", ""), "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"},
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


def build_sglang_venv(venv: Path, wheels: Path = WHEELS, rounds: int = 40) -> None:
    """torch CPU + SGLang 0.5.23 (`--no-deps`) + whatever its argument checks still import."""
    wheel = next(wheels.glob(WHEEL_GLOB))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True)
    pins = _pins(wheel)
    model = tiny_model(venv / "tiny-model")
    probe = (
        "from sglang.srt.server_args import prepare_server_args as p\n"
        f"p(['--model-path', {str(model)!r}, '--device', 'cpu']).resolve_once()\n"
    )
    for _ in range(rounds):
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-c", probe],
            capture_output=True,
            text=True,
            env={"PATH": os.environ.get("PATH", ""), "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"},
            check=False,
        )
        missing = re.findall(r"No module named '([^'.]+)", done.stderr)
        if not missing:
            return
        name = _DISTRIBUTIONS.get(missing[-1], missing[-1])
        subprocess.run([*pip, pins.get(name.lower().replace("_", "-"), name)], check=True)


if __name__ == "__main__":
    build_sglang_venv(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_VENV)


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
