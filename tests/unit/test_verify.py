"""`fix.verified`: the corrected command through SGLang's own argument checks, in a child process.

The tests that need SGLang run the real 0.5.23 wheel in a throw-away venv (tests/support/sglang_env.py) and skip
with the reason when it is absent; the others use interpreters that are always there.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from crashdoc.cli import main
from crashdoc.events import FlagChange
from crashdoc.remedy.commandline import parse_argv
from crashdoc.remedy.verify import FixVerifier, child_environment, interpreter_of, verify_argv, verify_fix
from support.journal_files import EXITED, FAILED, line, needs_journal_remote, pid1, write_journal
from support.sglang_env import sglang_python, tiny_model

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "families"

SGLANG, SGLANG_WHY = sglang_python()
needs_sglang = pytest.mark.skipif(SGLANG is None, reason=SGLANG_WHY)


def test_an_interpreter_without_sglang_is_not_verified() -> None:
    result = verify_argv(sys.executable, ["--model-path", "x"], env=child_environment({"PYTHONPATH": ""}.items()))
    assert result.status == "not-verified"
    assert result.text.startswith(f"not verified: SGLang is not importable by {sys.executable}")


def test_a_missing_interpreter_is_not_verified(tmp_path: Path) -> None:
    result = verify_argv(str(tmp_path / "nope" / "python"), ["--model-path", "x"])
    assert result.text.startswith("not verified: cannot run")


def test_a_check_that_hangs_is_cut_off(tmp_path: Path) -> None:
    slow = tmp_path / "python"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    result = verify_argv(str(slow), ["--model-path", "x"], timeout=0.5)
    assert result.text == "not verified: SGLang's argument checks did not answer within 0.5 s"


def test_the_child_sees_no_gpu_and_no_network() -> None:
    env = child_environment([("PYTHONPATH", "/opt/sglang/python")], base={"PATH": "/bin", "HTTPS_PROXY": "http://p"})
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["HF_HUB_OFFLINE"] == "1"
    assert "HTTPS_PROXY" not in env and env["PYTHONPATH"] == "/opt/sglang/python"


def test_the_interpreter_of_an_entry_point_is_its_shebang(tmp_path: Path) -> None:
    script = tmp_path / "bin" / "sglang"
    script.parent.mkdir()
    script.write_text("#!/opt/venv/bin/python3.11\nfrom sglang.cli.main import main\nmain()\n")
    inv = parse_argv([str(script), "serve", "--model-path", "m"])
    assert inv is not None
    assert interpreter_of(inv, lambda p: Path(p).read_text()) == ("/opt/venv/bin/python3.11", "")
    docker = parse_argv(["/usr/bin/docker", "run", "img", "python3", "-m", "sglang.launch_server", "--model-path", "m"])
    assert docker is not None and interpreter_of(docker)[0] is None


def test_a_fix_without_flag_changes_is_not_verified() -> None:
    assert verify_fix(("python3", "-m", "sglang.launch_server"), []).text == "not verified: the fix changes no flag"


@needs_sglang
def test_the_corrected_command_passes_sglangs_checks_and_says_what_was_not_checked(tmp_path: Path) -> None:
    model = tiny_model(tmp_path / "model")
    result = verify_argv(str(SGLANG), ["--model-path", str(model), "--mem-fraction-static", "0.961"])
    assert result.status == "partial"
    assert result.text.startswith(f"the corrected command passes SGLang {SGLANG_WHY}'s argument checks")
    assert "the checks that depend on the GPU" in result.text  # hidden: run with --device cpu


@needs_sglang
def test_a_hub_model_that_is_not_cached_is_checked_without_its_config() -> None:
    result = verify_argv(str(SGLANG), ["--model-path", "example-org/not-cached-model", "--tp-size", "2"])
    assert result.status == "partial"
    assert "the checks that need the model's config" in result.text


@needs_sglang
def test_what_sglang_rejects_is_said_in_its_words(tmp_path: Path) -> None:
    model = tiny_model(tmp_path / "model")
    rejected = verify_argv(str(SGLANG), ["--model-path", str(model), "--ssl-keyfile", "/k.pem"])
    assert rejected.status == "rejected"
    assert rejected.text == (
        f"rejected by SGLang {SGLANG_WHY}'s argument checks: "
        "ValueError: --ssl-keyfile requires --ssl-certfile to be specified as well."
    )
    unknown = verify_argv(str(SGLANG), ["--model-path", str(model), "--cuda-graph-max-bs", "80"])
    # 0.5.23 renamed it --cuda-graph-max-bs-decode: the old spelling no longer parses
    assert unknown.status == "rejected" and "ambiguous option: --cuda-graph-max-bs" in unknown.text


@needs_sglang
def test_a_units_fix_is_applied_in_memory_and_checked_by_the_units_interpreter(tmp_path: Path) -> None:
    model = tiny_model(tmp_path / "model")
    argv = (str(SGLANG), "-m", "sglang.launch_server", "--model-path", str(model), "--ssl-keyfile", "/k.pem")
    assert verify_fix(argv, [FlagChange("set", "--mem-fraction-static", "0.9")]).status == "rejected"
    fixed = verify_fix(argv, [FlagChange("remove", "--ssl-keyfile")])
    assert fixed.status == "partial" and "passes SGLang" in fixed.text


@needs_sglang
def test_the_daemons_verifier_answers_off_its_caller_thread(tmp_path: Path) -> None:
    model = tiny_model(tmp_path / "model")
    argv = (str(SGLANG), "-m", "sglang.launch_server", "--model-path", str(model))
    change = [FlagChange("set", "--mem-fraction-static", "0.9")]
    answers: list[tuple[str, str]] = []
    verifier = FixVerifier(on_done=lambda unit, text: answers.append((unit, text)))
    verifier.request("sglang.service", argv, change)
    assert verifier.verified(argv, change) is not None  # pending at once, never blocking the caller
    verifier.stop()
    assert answers and answers[0][0] == "sglang.service" and "passes SGLang" in answers[0][1]
    assert verifier.verified(argv, change) == answers[0][1]


def test_verification_never_imports_sglang_into_crashdoc() -> None:
    code = "import crashdoc.remedy.verify, sys; print('sglang' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@needs_sglang
@needs_journal_remote
def test_diagnose_shows_what_sglang_said_of_the_corrected_command(tmp_path: Path) -> None:
    """A journal holding a run of SGLang (its _CMDLINE) that ran out of memory for a workspace after the KV pool:
    `diagnose` lowers --mem-fraction-static and the unit's own SGLang checks the corrected command."""
    model = tiny_model(tmp_path / "model")
    argv = f"{SGLANG} -m sglang.launch_server --model-path {model} --mem-fraction-static 0.985"
    log = (FIXTURES / "memory-lines.log").read_text() + (FIXTURES / "workspace-oom.log").read_text()
    entries = [line(text, _CMDLINE=argv) if i == 0 else line(text) for i, text in enumerate(log.splitlines())]
    entries += [
        pid1(EXITED, "Main process exited", EXIT_CODE="exited", EXIT_STATUS="1"),
        pid1(FAILED, "Failed with result 'exit-code'.", UNIT_RESULT="exit-code"),
    ]
    journal = write_journal(tmp_path, entries)
    [d] = _diagnose(["--file", str(journal)])
    assert [c["flag"] for c in d["fix"]["changes"]] == ["--mem-fraction-static"]
    assert d["fix"]["verified"].startswith(f"the corrected command passes SGLang {SGLANG_WHY}'s argument checks")
    [quiet] = _diagnose(["--file", str(journal), "--no-verify"])
    assert quiet["fix"]["verified"] is None


def _diagnose(args: list[str]) -> list[dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["diagnose", *args, "--json"]) == 0
    return list(json.loads(out.getvalue())["diagnoses"])
