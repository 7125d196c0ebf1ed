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
import threading
from pathlib import Path
from typing import Any

import pytest

from crashdoc.cli import main
from crashdoc.events import FlagChange
from crashdoc.remedy.checker import child_environment
from crashdoc.remedy.commandline import parse_argv
from crashdoc.remedy.interpreter import interpreter_of, unsafe_to_run
from crashdoc.remedy.verify import verify_argv, verify_fix
from support.journal_files import EXITED, FAILED, line, needs_journal_remote, pid1, write_journal
from support.sglang_env import answering_interpreter, fake_sglang_tree, requests_seen, sglang_python, tiny_model

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
    assert result.text == "not verified: SGLang did not import within 0.5 s"


def _fake(tmp_path: Path, args: list[str], server_args: str | None = None) -> str:
    tree = fake_sglang_tree(tmp_path / "tree", *([server_args] if server_args is not None else []))
    env = child_environment([("PYTHONPATH", str(tree))])
    return verify_argv(sys.executable, args, env=env).text


def test_the_check_reports_each_answer_of_sglangs_entry_points(tmp_path: Path) -> None:
    """SGLang's entry points stood in by a tree holding only srt/server_args.py: the child's logic, anywhere."""
    gpu = "the checks that depend on the GPU"
    assert _fake(tmp_path, ["--model-path", "m", "--device", "cpu"]) == (
        "the corrected command passes SGLang 0.5.99's argument checks"
    )
    assert gpu in _fake(tmp_path, ["--model-path", "m"])  # hidden GPU: rerun with --device cpu, said so
    assert _fake(tmp_path, ["--model-path", "m", "--device", "cpu", "--ssl-keyfile", "/k"]) == (
        "rejected by SGLang 0.5.99's argument checks: "
        "ValueError: --ssl-keyfile requires --ssl-certfile to be specified as well."
    )
    assert "unrecognized arguments: --frobnicate" in _fake(tmp_path, ["--model-path", "m", "--frobnicate"])
    assert _fake(tmp_path, ["m", "--device", "cpu"]).startswith("the corrected command passes")  # `sglang serve M`
    broken = _fake(tmp_path, ["--model-path", "m"], "import not_installed_dependency\n")
    assert broken == (
        "not verified: SGLang 0.5.99's checks could not import what they need here "
        "(ModuleNotFoundError: No module named 'not_installed_dependency')"
    )


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
    from crashdoc.events import Diagnosis, Fix, FixTarget, RootCause
    from crashdoc.remedy.stage import RemedyStage
    from crashdoc.runtime.remedies import RemedyWorker

    worker = RemedyWorker(RemedyStage(), on_checked=lambda unit, text: answers.append((unit, text)))
    cause = RootCause("ValueError", "x", "ValueError: x")
    target = FixTarget(cmdline=argv, exec_start=argv)
    fix, unit = Fix("s", change), "sglang.service"
    d = Diagnosis(unit, None, "t", "memory", "critical", cause, [], fix, "f", target=target, kind="resource")
    worker.request(d, check=True)
    assert worker.published(d).fix.verified is not None  # pending at once, never blocking the caller
    worker.stop()
    assert answers and answers[0][0] == "sglang.service" and "passes SGLang" in answers[0][1]
    assert worker.published(d).fix.verified == answers[0][1]


def test_verification_never_imports_sglang_into_crashdoc() -> None:
    code = "import crashdoc.remedy.verify, sys; print('sglang' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@needs_journal_remote
def test_diagnose_never_runs_a_command_line_read_from_journal_files(tmp_path: Path) -> None:
    """A journal file's _CMDLINE is whatever the unit's process made of its argv (or whoever wrote the file):
    `diagnose --file` computes the fix but runs nothing from it; only systemd's ExecStart (D-Bus) is run."""
    marker = tmp_path / "ran"
    evil = tmp_path / "python"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\n")
    evil.chmod(0o755)
    argv = f"{evil} -m sglang.launch_server --model-path m --mem-fraction-static 0.9"
    log = (FIXTURES / "memory-lines.log").read_text() + (FIXTURES / "workspace-oom.log").read_text()
    entries = [line(text, _CMDLINE=argv) if i == 0 else line(text) for i, text in enumerate(log.splitlines())]
    entries += [
        pid1(EXITED, "Main process exited", EXIT_CODE="exited", EXIT_STATUS="1"),
        pid1(FAILED, "Failed with result 'exit-code'.", UNIT_RESULT="exit-code"),
    ]
    journal = write_journal(tmp_path, entries)
    [d] = _diagnose(["--file", str(journal)])
    assert [c["flag"] for c in d["fix"]["changes"]] == ["--mem-fraction-static"]
    assert d["fix"]["verified"].startswith("not verified: systemd did not report the unit's ExecStart")
    assert not marker.exists()
    [quiet] = _diagnose(["--file", str(journal), "--no-verify"])
    assert quiet["fix"]["verified"] is None


def test_an_interpreter_others_may_change_is_not_run(tmp_path: Path) -> None:
    shared = tmp_path / "shared" / "bin"
    shared.mkdir(parents=True)
    python = shared / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    shared.chmod(0o777)
    assert "may be changed by another user" in unsafe_to_run(str(python))
    shared.chmod(0o755)
    assert unsafe_to_run(str(python)) == ""
    assert "not an absolute path" in unsafe_to_run("python3")


def test_the_daemon_serves_the_verification_its_thread_found(tmp_path: Path) -> None:
    """The daemon's wiring: a loop's diagnosis goes to the remedy stage's threads (applied, then checked), and
    /diagnoses shows what they found (HttpView); the child is stubbed with SGLang's answer format, the ExecStart
    comes from D-Bus (UnitState)."""
    from crashdoc.commands.pipeline import build_engine, load_library_or_fail
    from crashdoc.diagnosis.engine import feed
    from crashdoc.events import Lifecycle, LifecycleRecord, LogLine, UnitState
    from crashdoc.matching.matcher import Matcher
    from crashdoc.outputs.metrics import Health
    from crashdoc.remedy.launch import LaunchReader
    from crashdoc.remedy.stage import RemedyStage
    from crashdoc.runtime.remedies import RemedyWorker
    from crashdoc.runtime.view import HttpView

    unit = "sglang-decode.service"
    python = answering_interpreter(tmp_path / "venv" / "bin")
    exec_start = (str(python), "-m", "sglang.launch_server", "--model-path", "m", "--mem-fraction-static", "0.9")

    engine = build_engine(Matcher(load_library_or_fail(None)))
    feed(engine, LaunchReader().prepare([UnitState(unit, active_state="activating", exec_start=exec_start)]))
    log = (FIXTURES / "memory-lines.log").read_text() + (FIXTURES / "workspace-oom.log").read_text()
    for run in ("1" * 32, "2" * 32):
        engine.on_lifecycle(LifecycleRecord(unit, Lifecycle.STARTED, invocation=run))
        for text in log.splitlines():
            engine.on_line(LogLine(unit, 4242, text, invocation=run))
        engine.on_lifecycle(
            LifecycleRecord(unit, Lifecycle.EXITED, invocation=run, exit_code="exited", exit_status="1")
        )
        engine.on_lifecycle(LifecycleRecord(unit, Lifecycle.FAILED, invocation=run, result="exit-code"))
        engine.on_lifecycle(LifecycleRecord(unit, Lifecycle.RESTART_SCHEDULED, invocation=run, n_restarts=1))
    worker = RemedyWorker(RemedyStage())
    [started] = [e for e in engine.events() if e.kind == "loop-started"]
    assert started.diagnosis is not None
    worker.request(started.diagnosis, check=True)  # what the daemon's loop does with a loop's event
    worker.stop()
    [request] = requests_seen(python.parent)  # the unit's own interpreter was asked, with the corrected command
    assert "--mem-fraction-static" in request["argv"]
    view = HttpView(engine, None, threading.Lock(), Health(), None, None, None, remedies=worker)  # type: ignore[arg-type]
    [d] = json.loads(view.diagnoses_json(unit))["diagnoses"]
    assert d["fix"]["verified"] == "the corrected command passes SGLang 0.5.23's argument checks"
    assert d["fix"]["command"] and "--mem-fraction-static" in d["fix"]["command"]
    own = engine.units()[unit].diagnosis
    assert own is not None and own.fix.verified is None and own.fix.command is None  # the engine's is left alone


def _diagnose(args: list[str]) -> list[dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["diagnose", *args, "--json"])
    diagnoses = list(json.loads(out.getvalue())["diagnoses"])
    assert status == (1 if diagnoses else 0)
    return diagnoses


def test_diagnose_checks_each_distinct_corrected_command_once(tmp_path: Path) -> None:
    from crashdoc.events import Diagnosis, Fix, FixTarget, RootCause
    from crashdoc.remedy.stage import RemedyStage

    python = answering_interpreter(tmp_path / "venv" / "bin")
    argv = (str(python), "-m", "sglang.launch_server", "--model-path", "m")
    change = [FlagChange("set", "--mem-fraction-static", "0.8")]

    def diagnosis(unit: str, changes: list[FlagChange]) -> Diagnosis:
        cause = RootCause("ValueError", "x", "ValueError: x")
        target = FixTarget(cmdline=argv, exec_start=argv)
        fix = Fix("s", list(changes))  # a resource failure: its computed fix is checked as it is, not searched
        return Diagnosis(unit, None, "t", "memory", "critical", cause, [], fix, "f", target=target, kind="resource")

    found = [diagnosis("a.service", change), diagnosis("b.service", change), diagnosis("a.service", [])]
    checked = RemedyStage().remedy_all(found)
    assert len(requests_seen(python.parent)) == 1  # the same command, the same change: one check
    assert [d.fix.verified for d in checked] == [
        "the corrected command passes SGLang 0.5.23's argument checks",
        "the corrected command passes SGLang 0.5.23's argument checks",
        None,
    ]
    assert [d.fix.verified for d in found] == [None, None, None]  # copies: the engine's records stay as they were
