"""The units ``crashdoc demo`` boots: a PD pair where the prefill server crash-loops and decode is fine.

Why this pair: it is the incident crashdoc was written for. The prefill server of a DeepSeek-V4
disaggregated deployment was given ``--hicache-size`` (whose help text says it overrides
``--hicache-ratio``), every TP rank raises SGLang's "DeepSeek V4 HiCache currently does not support
--hicache-size; use --hicache-ratio instead.", the launcher SIGKILLs itself and systemd restarts it
every few seconds, while the decode server next to it stays up. The prefill command line lives in a
launch script, as it usually does, and carries an API key that no crashdoc output may show.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

import crashdoc
from crashdoc.sandbox.leftovers import make_workdir
from crashdoc.sandbox.systemd import PrivateSystemd

PREFILL_UNIT = "sglang-prefill.service"
DECODE_UNIT = "sglang-decode.service"
MODEL = "deepseek-ai/DeepSeek-V4-Flash"
# A fake secret in the shape of a real key; tests assert it never reaches crashdoc's outputs.
DEMO_API_KEY = "sk-demo-7f3a9c2e5b8d4f1a0c6e9b2d4a7f1c3e"
FAKE_MODULE = "crashdoc.sandbox.fake_sglang"


def package_root() -> Path:
    """The folder that holds the ``crashdoc`` package, for PYTHONPATH in the units."""
    return Path(crashdoc.__file__).resolve().parent.parent


def _server_argv(python: str, port: str, mode: str) -> list[str]:
    """The flags both demo servers share: one DeepSeek-V4 model, disaggregated over mlx5_0, TP 2."""
    return [
        python,
        "-m",
        FAKE_MODULE,
        "--model-path",
        MODEL,
        "--trust-remote-code",
        "--host",
        "0.0.0.0",
        "--port",
        port,
        "--disaggregation-mode",
        mode,
        "--disaggregation-ib-device",
        "mlx5_0",
        "--tp-size",
        "2",
    ]


def prefill_argv(python: str) -> list[str]:
    """The broken prefill command line: ``--hicache-size`` with DeepSeek-V4 (the fix: --hicache-ratio)."""
    return [
        *_server_argv(python, "30000", "prefill"),
        "--mem-fraction-static",
        "0.82",
        "--chunked-prefill-size",
        "8192",
        "--enable-hierarchical-cache",
        "--hicache-size",
        "150",
        "--api-key",
        DEMO_API_KEY,
    ]


def decode_argv(python: str) -> list[str]:
    """The healthy decode neighbour, with the HiCache setting the prefill server should have."""
    return [
        *_server_argv(python, "30001", "decode"),
        "--mem-fraction-static",
        "0.85",
        "--enable-hierarchical-cache",
        "--hicache-ratio",
        "2.0",
        "--api-key",
        DEMO_API_KEY,
    ]


def launch_script(python: str) -> str:
    """The prefill launch script; it ``exec``s the server so systemd sees SGLang's own SIGKILL."""
    argv = prefill_argv(python)
    head = " ".join(shlex.quote(a) for a in argv[:3])
    rest = [shlex.quote(a) for a in argv[3:]]
    pairs: list[str] = []
    i = 0
    while i < len(rest):  # one flag (and its value) per line, as people write these scripts
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            pairs.append(f"{rest[i]} {rest[i + 1]}")
            i += 2
        else:
            pairs.append(rest[i])
            i += 1
    body = " \\\n    ".join([head, *pairs])
    return (
        "#!/bin/bash\n"
        "# SGLang prefill server (PD disaggregation), DeepSeek-V4-Flash on 2 GPUs.\n"
        "set -euo pipefail\n"
        "export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600\n"
        f"exec {body}\n"
    )


def sglang_unit(
    description: str,
    exec_start: str,
    *,
    workdir: Path | None = None,
    env: dict[str, str] | None = None,
    restart_sec: float = 1,
) -> str:
    """A ``Restart=always`` service for a fake SGLang server, importable from this checkout."""
    directory = f"WorkingDirectory={workdir}\n" if workdir is not None else ""
    environment = "".join(f"Environment={k}={v}\n" for k, v in (env or {}).items())
    return (
        "[Unit]\n"
        f"Description={description}\n"
        "DefaultDependencies=no\n"
        "StartLimitIntervalSec=0\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"{directory}"
        "Environment=PYTHONUNBUFFERED=1\n"
        f"Environment=PYTHONPATH={package_root()}\n"
        f"{environment}"
        f"ExecStart={exec_start}\n"
        "Restart=always\n"
        f"RestartSec={restart_sec}\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def write_launch_script(workdir: Path, python: str = sys.executable) -> Path:
    """Write the prefill launch script into ``workdir`` (which must be visible inside the sandbox)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "sglang-prefill.sh"
    path.write_text(launch_script(python))
    path.chmod(0o755)
    return path


def prefill_unit(script: Path, workdir: Path) -> str:
    return sglang_unit("SGLang prefill server (DeepSeek-V4-Flash, TP2)", str(script), workdir=workdir)


def decode_unit(python: str, workdir: Path) -> str:
    return sglang_unit(
        "SGLang decode server (DeepSeek-V4-Flash, TP2)",
        " ".join(shlex.quote(a) for a in decode_argv(python)),
        workdir=workdir,
    )


def demo_units(workdir: Path, python: str = sys.executable) -> dict[str, str]:
    """Write the launch script and return ``{unit name: unit text}`` for PrivateSystemd (which keeps the
    interpreter and this package visible inside, under /tmp too)."""
    script = write_launch_script(workdir, python)
    return {PREFILL_UNIT: prefill_unit(script, workdir), DECODE_UNIT: decode_unit(python, workdir)}


def boot_demo(python: str = sys.executable, timeout: float = 30.0) -> PrivateSystemd:
    """Boot a private systemd running the demo pair; the caller stops it (``with boot_demo() as sb``)."""
    workdir = make_workdir()
    try:  # the sandbox removes the folder it was given when its boot fails; before that, it is ours to remove
        sandbox = PrivateSystemd(demo_units(workdir, python), workdir, visible=[python])
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    sandbox.start(timeout=timeout)
    return sandbox
