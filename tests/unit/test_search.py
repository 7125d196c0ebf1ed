"""Candidates and the search: from one failure to the smallest change SGLang's checks accept.

The search's logic runs against a stand-in SGLang (a tree holding `srt/server_args.py` whose checks are known,
run by this machine's Python; its argument facts read from it as from a real release); the end-to-end cases run
the real SGLang 0.5.23 (tests/support/sglang_env.py) through `crashdoc explain`.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from crashdoc.authoring.argfacts import extract
from crashdoc.authoring.mine.tree import locate
from crashdoc.cli import main
from crashdoc.events import FlagChange
from crashdoc.remedy.argfacts import ArgFacts, load_shipped
from crashdoc.remedy.candidates import candidates
from crashdoc.remedy.failing import Current, Failure
from crashdoc.remedy.pasted import command_in_paste, parse_command
from crashdoc.remedy.search import Budget, accepted_fix
from support.sglang_env import fake_sglang_tree, sglang_python, tiny_model

SGLANG, SGLANG_WHY = sglang_python()
needs_sglang = pytest.mark.skipif(SGLANG is None, reason=SGLANG_WHY)

CHECKS = """
import argparse


class ServerArgs:
    def __init__(self, ns):
        self.ns = ns

    def resolve_once(self):
        ns = self.ns
        if ns.x is None or ns.x <= 0:
            raise ValueError("--x must be positive")
        if ns.x > 0 and not ns.enable_y:
            raise ValueError("--x requires --enable-y")
        if ns.enable_y and ns.z:
            raise ValueError("--enable-y cannot be used with --z")
        if ns.algorithm not in (None, "fast", "slow"):
            raise RuntimeError("Unknown algorithm: %s" % ns.algorithm)
        if ns.always_fails:
            raise ValueError("--always-fails is never accepted")
        if ns.slow_checks:
            import time

            time.sleep(60)


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    parser.add_argument("--model-path", type=str)
    parser.add_argument("--x", type=int, default=None)
    parser.add_argument("--enable-y", action="store_true")
    parser.add_argument("--z", action="store_true")
    parser.add_argument("--algorithm", type=str, default=None)
    parser.add_argument("--mode", type=str, choices=["a", "b"], default="a")
    parser.add_argument("--always-fails", action="store_true")
    parser.add_argument("--slow-checks", action="store_true")
    return ServerArgs(parser.parse_args(argv))
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> tuple[Path, ArgFacts]:
    tree = fake_sglang_tree(tmp_path / "tree", CHECKS)
    return tree, ArgFacts("0.5.99", extract(locate(str(tree / "sglang"))))


def _search(tree: Path, facts: ArgFacts, command: str, failure: Failure, interpreter: str | None = sys.executable):
    pasted = parse_command(f"PYTHONPATH={tree} python3 -m sglang.launch_server --model-path m {command}")
    assert pasted.command is not None, pasted.problem
    return accepted_fix(failure, pasted.command, "0.5.99", facts, interpreter, Budget(seconds=120, parallel=2))


def test_one_step_short_is_searched_on_to_the_smallest_change_that_passes(stand_in: tuple[Path, ArgFacts]) -> None:
    tree, facts = stand_in
    failure = Failure("ValueError", "--x requires --enable-y", "cfg.x > 0 and not cfg.enable_y")
    result = _search(tree, facts, "--x 3 --z", failure)
    # --x must stay positive; adding --enable-y gets past this check and meets the next
    assert result.status == "passed", result
    assert sorted((c.action, c.flag) for c in result.changes) == [("add", "--enable-y"), ("remove", "--z")]
    assert result.verified.startswith("passes SGLang 0.5.99's argument checks (")
    assert (
        "tried: `add --enable-y` -> passes this check, then fails: ValueError: --enable-y cannot be used with --z"
        in (result.tried)
    )
    assert result.command is not None and "--enable-y" in result.command and "--z" not in result.command.split()


def test_a_value_the_message_quotes_is_the_culprit(stand_in: tuple[Path, ArgFacts]) -> None:
    tree, facts = stand_in
    failure = Failure("RuntimeError", "Unknown algorithm: none")
    [first, *_] = candidates(failure, Current.of([("--x", ("1",)), ("--algorithm", ("none",))], facts), facts)
    assert first.changes == (FlagChange("remove", "--algorithm"),)  # no flag named: the quoted value says which
    result = _search(tree, facts, "--x 1 --enable-y --algorithm none", failure)
    assert result.status == "passed" and result.changes == (FlagChange("remove", "--algorithm"),)


def test_a_change_sglang_rejected_with_the_same_error_is_never_presented(stand_in: tuple[Path, ArgFacts]) -> None:
    tree, facts = stand_in
    wrong = (FlagChange("set", "--mode", "b"),)
    failure = Failure("ValueError", "--always-fails is never accepted", curated=wrong, reviewed=True)
    ranked = candidates(failure, Current.of([("--x", ("1",)), ("--always-fails", ())], facts), facts)
    assert ranked[0].changes == (FlagChange("set", "--mode", "b"),)  # what crashdoc alone would say
    result = _search(tree, facts, "--x 1 --enable-y --always-fails --mode a", failure)
    assert result.status == "passed" and result.changes == (FlagChange("remove", "--always-fails"),)
    assert "tried: `set --mode b` -> still fails: ValueError: --always-fails is never accepted" in result.tried


def test_without_an_interpreter_the_facts_rank_and_it_is_said_so(stand_in: tuple[Path, ArgFacts]) -> None:
    tree, facts = stand_in
    failure = Failure("ValueError", "--x requires --enable-y", "cfg.x > 0 and not cfg.enable_y")
    result = _search(tree, facts, "--x 3", failure, interpreter=None)
    assert result.status == "ranked"
    assert result.verified.startswith("not checked against SGLang: no SGLang to ask")
    assert result.changes and result.changes[0].flag in ("--x", "--enable-y")
    # never a change that keeps the failing condition true: --z and --mode leave `x > 0 and not enable_y` as it is
    for cand in candidates(failure, Current.of([("--x", ("3",))], facts), facts):
        assert {c.flag for c in cand.changes} & {"--x", "--enable-y"}, cand


def test_a_value_outside_the_releases_choices_is_never_proposed(stand_in: tuple[Path, ArgFacts]) -> None:
    _, facts = stand_in
    failure = Failure("ValueError", "--mode must be one of c, d or a", curated=(FlagChange("set", "--mode", "c"),))
    for cand in candidates(failure, Current.of([("--mode", ("b",))], facts), facts):
        assert all(c.value in (None, "a") for c in cand.changes if c.flag == "--mode"), cand


def test_a_child_that_cannot_check_leaves_the_ranked_fix_said_so(stand_in: tuple[Path, ArgFacts], tmp_path: Path):
    _, facts = stand_in
    hangs = tmp_path / "python"
    hangs.write_text("#!/bin/sh\nexec sleep 60\n")
    hangs.chmod(0o755)
    pasted = parse_command("python3 -m sglang.launch_server --model-path m --algorithm none")
    assert pasted.command is not None
    budget = Budget(seconds=30, start_timeout=1)
    result = accepted_fix(Failure("RuntimeError", "Unknown algorithm: none"), pasted.command, "0.5.99", facts,
                          str(hangs), budget)  # fmt: skip
    assert result.status == "unchecked" and result.changes == (FlagChange("remove", "--algorithm"),)
    assert result.verified.startswith("could not check against SGLang (SGLang did not import within 1 s)")


def test_candidates_whose_checks_never_answer_are_no_verdict_not_a_rejection(stand_in: tuple[Path, ArgFacts]):
    """A check starved of CPU (its children run only when the host has a CPU to spare) or hung is no verdict:
    the fix shown is the best-ranked one, said to be unchecked, never "no candidate passes"."""
    tree, facts = stand_in
    pasted = parse_command(f"PYTHONPATH={tree} python3 -m sglang.launch_server --model-path m --x 1 --enable-y "
                           "--algorithm none --slow-checks")  # fmt: skip
    assert pasted.command is not None
    budget = Budget(seconds=60, parallel=2, check_timeout=1)
    result = accepted_fix(Failure("RuntimeError", "Unknown algorithm: none"), pasted.command, "0.5.99", facts,
                          sys.executable, budget)  # fmt: skip
    assert result.status == "unchecked", result
    assert result.verified.startswith("SGLang's argument checks gave no verdict on any candidate ("), result.verified
    assert "no answer within 1 s" in result.verified and result.verified.endswith("shown, not checked")
    assert result.changes == (FlagChange("remove", "--algorithm"),)
    assert all(" -> could not check: no answer within 1 s" in t for t in result.tried), result.tried


@pytest.mark.parametrize(
    "paste",
    [
        "$ python -m sglang.launch_server --model-path m --tp 2\nTraceback ...",
        "python3 -m sglang.launch_server --model-path m --tp 2",
        "CUDA_VISIBLE_DEVICES=0,1 python3 -m sglang.launch_server --model-path m --tp 2",
        "(venv) user@gpu-01:~$ sglang serve --model-path m --tp 2",
        "$ docker run --gpus all --shm-size 32g lmsys/sglang:v0.5.23 python3 -m sglang.launch_server "
        "--model-path m --tp 2",
        "# torchrun --nproc_per_node 2 -m sglang.launch_server --model-path m --tp 2",
        "$ python3 -m sglang.launch_server \\\n    --model-path m \\\n    --tp 2\n[2026-01-01 00:00:00] starting",
    ],
)
def test_the_command_is_read_from_the_paste_however_it_was_run(paste: str) -> None:
    found = command_in_paste(paste + "\nValueError: x\n")
    assert found.command is not None, found.problem
    assert found.command.sglang_args == ("--model-path", "m", "--tp", "2")


def test_sglangs_own_prose_is_not_a_command() -> None:
    log = "  Example: sglang serve --model-path <model> [options]\n  warnings.warn(\nValueError: x\n"
    assert command_in_paste(log).command is None


def _explain(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["explain", "--json", *args])
    doc = dict(json.loads(out.getvalue()))
    assert status == (1 if doc["diagnoses"] else 0)  # 1: a failure found
    return doc


def test_a_command_that_cannot_be_parsed_is_said_so_and_the_diagnosis_stands(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("RuntimeError: Unknown diffusion LLM algorithm: none\n")
    args = ("--sglang-version", "0.5.23", "--command", "python3 -m sglang.launch_server --model-path 'm", str(log))
    [d] = _explain(*args)["diagnoses"]
    assert d["title"] == "RuntimeError: Unknown diffusion LLM algorithm: none"
    assert any(w.startswith("crashdoc could not read the launch command (") for w in d["fix"]["warnings"])


LAUNCH = "python3 -m sglang.launch_server --model-path {model} --device cpu {extra}"


@needs_sglang
@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ("--dllm-algorithm none", "RuntimeError: Unknown diffusion LLM algorithm: none"),
        ("--ssl-keyfile /k.pem", "ValueError: --ssl-keyfile requires --ssl-certfile to be specified as well."),
    ],
)
def test_explain_presents_a_fix_that_sglang_0_5_23_accepts(tmp_path: Path, extra: str, error: str) -> None:
    model = tiny_model(tmp_path / "model")
    command = LAUNCH.format(model=model, extra=extra)
    log = tmp_path / "launch.log"
    frame = '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/arg_groups/pipeline.py", line 342, in run\n'
    log.write_text(f"$ {command}\nTraceback (most recent call last):\n{frame}{error}\n")
    alone = _explain("--sglang-version", "0.5.23", str(log))["diagnoses"][0]["fix"]
    assert alone["verified"].startswith("not checked against SGLang")
    assert alone["command"] and alone["command"] != command
    checked = _explain("--sglang-version", "0.5.23", "--sglang-python", str(SGLANG), str(log))["diagnoses"][0]["fix"]
    assert checked["verified"].startswith("passes SGLang 0.5.23's argument checks ("), checked
    fixed = parse_command(checked["command"]).command
    assert fixed is not None and fixed.sglang_args != parse_command(command).command.sglang_args  # type: ignore[union-attr]


def test_an_invalid_choice_whose_fix_crashdoc_computed_is_still_searched(tmp_path: Path) -> None:
    """argparse's `invalid choice` gets a computed fix (the closest choice, or a placeholder naming them); the
    search still runs on it (it is a failure of the arguments), so the command comes out corrected."""
    command = "python3 -m sglang.launch_server --model-path m --device cpu --tokenizer-backend default"
    usage = "sglang serve: error: argument --tokenizer-backend: invalid choice: 'default' (choose from 'huggingface', "
    log = tmp_path / "launch.log"
    log.write_text(f"$ {command}\nusage: sglang serve [-h] [--model-path MODEL_PATH]\n{usage}'fastokens')\n")
    [d] = _explain("--sglang-version", "0.5.23", str(log))["diagnoses"]
    fix = d["fix"]
    assert d["signature"] == "argparse-invalid-choice"
    assert fix["verified"].startswith("not checked against SGLang"), fix
    assert fix["command"] and "--tokenizer-backend default" not in fix["command"], fix
    assert not any(c.get("placeholder") for c in fix["changes"]), fix
    assert any("accepts huggingface, fastokens" in w for w in fix["why"]), fix


def test_the_shipped_facts_name_the_fields_messages_use() -> None:
    facts = load_shipped().get("0.5.23")
    assert facts is not None
    message, condition = "tp_size must be divisible by moe_dp_size", "cfg.tp_size % cfg.moe_dp_size == 0"
    failure = Failure("AssertionError", message, condition, kind="assert")
    ranked = candidates(failure, Current.of([("--tp-size", ("3",)), ("--moe-dp-size", ("2",))], facts), facts)
    assert ranked and all(c.resolves for c in ranked[:3])
    assert {c.flag for cand in ranked for c in cand.changes} <= {"--tp-size", "--moe-dp-size"}


def test_diagnose_searches_on_the_units_own_command_and_shows_the_unit_fix(tmp_path: Path) -> None:
    """`diagnose` (synchronous): the remedy stage's check searches on the unit's ExecStart (D-Bus: the
    diagnosis's FixTarget), its interpreter the judge; the fix found is applied to the unit as any fix is (a
    drop-in, its diff and apply commands)."""
    from crashdoc.events import Diagnosis, Fix, FixTarget, RootCause
    from crashdoc.remedy.stage import RemedyStage
    from support.sglang_env import answering_interpreter, requests_seen

    error = "RuntimeError: Unknown diffusion LLM algorithm: none"
    python = answering_interpreter(tmp_path / "venv" / "bin", rejects=("--dllm-algorithm", error))
    argv = (str(python), "-m", "sglang.launch_server", "--model-path", "m", "--dllm-algorithm", "none")
    unit = "sglang.service"
    cause = RootCause("RuntimeError", "Unknown diffusion LLM algorithm: none", "RuntimeError: Unknown ...: none")
    found = Diagnosis(unit, None, "t", "flag-conflict", "critical", cause, [], Fix("s"), "f", kind="config",
                      sglang_release="0.5.23", target=FixTarget(cmdline=argv, exec_start=argv))  # fmt: skip
    [d] = RemedyStage().remedy_all([found])
    assert d.fix.changes == [FlagChange("remove", "--dllm-algorithm")]
    assert d.fix.verified is not None and d.fix.verified.startswith("passes SGLang 0.5.23's argument checks (")
    assert d.fix.diff and "/etc/systemd/system/sglang.service.d/crashdoc-fix.conf" in d.fix.diff
    assert "--dllm-algorithm" not in (d.fix.command or "")
    seen = [r["argv"] for r in requests_seen(python.parent)]
    assert seen[0] == ["--model-path", "m", "--dllm-algorithm", "none"]  # the command as it is, then candidates
    assert ["--model-path", "m"] in seen
    [unchecked] = RemedyStage().remedy_all([found], check=False)
    assert unchecked.fix.verified is not None and unchecked.fix.verified.startswith("not checked against SGLang")
    assert "--no-verify" in unchecked.fix.verified and unchecked.fix.diff
    assert len(requests_seen(python.parent)) == len(seen)  # --no-verify: nothing more was run


def test_a_command_line_from_the_journal_is_searched_but_never_run(tmp_path: Path) -> None:
    """Without systemd's ExecStart (journal files read elsewhere), the run's logged argv is the command the fix
    is searched on; its interpreter is never run: the candidates are ranked, and the fix says why."""
    from crashdoc.events import Diagnosis, Fix, FixTarget, RootCause
    from crashdoc.remedy.stage import RemedyStage
    from support.sglang_env import answering_interpreter, requests_seen

    error = "RuntimeError: Unknown diffusion LLM algorithm: none"
    python = answering_interpreter(tmp_path / "venv" / "bin", rejects=("--dllm-algorithm", error))
    argv = (str(python), "-m", "sglang.launch_server", "--model-path", "m", "--dllm-algorithm", "none")
    cause = RootCause("RuntimeError", "Unknown diffusion LLM algorithm: none", error)
    found = Diagnosis("sglang.service", None, "t", "flag-conflict", "critical", cause, [], Fix("s"), "f",
                      kind="config", sglang_release="0.5.23", target=FixTarget(cmdline=argv))  # fmt: skip
    [d] = RemedyStage().remedy_all([found])
    assert d.fix.changes == [FlagChange("remove", "--dllm-algorithm")]
    assert d.fix.verified is not None and "systemd did not report the unit's ExecStart" in d.fix.verified
    assert requests_seen(python.parent) == []


@pytest.mark.parametrize(
    ("command", "kind", "message", "change"),
    [
        # real launch failures of 0.5.23 (bench/launch_failures/set): the message names a value or says it in words
        ("--dllm-algorithm none", "RuntimeError", "Unknown diffusion LLM algorithm: none", "remove --dllm-algorithm"),
        ("--speculative-algorithm '{\"A\": 1}'", "ValueError", 'Unknown speculative algorithm name: {"A": 1}',
         "remove --speculative-algorithm"),
        ("--watermark-config /tmp/x", "WatermarkConfigError", "failed to read watermark config JSON",
         "remove --watermark-config"),
        ("--json-model-override-args default", "JSONDecodeError", "Expecting value: line 1 column 1 (char 0)",
         "remove --json-model-override-args"),
        ("--attention-backend trtllm_mla", "ValueError",
         "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). Please use a different backend.",
         "remove --attention-backend"),
        ("--cuda-graph-config /tmp/x", "SystemExit",
         "argument --cuda-graph-config: --cuda-graph-config must be JSON: Expecting value: line 1 column 1 (char 0)",
         "remove --cuda-graph-config"),
        ("--rl-on-policy-target fsdp", "ValueError",
         "Currently only ['ascend', 'fa3', 'fa4', 'flashinfer', 'intel_xpu', 'triton'] attention backends are "
         "supported for deterministic inference, but you explicitly specified 'intel_amx'.",
         "set --attention-backend fa3"),
    ],
)  # fmt: skip
def test_the_culprit_is_found_when_the_message_names_no_flag(command: str, kind: str, message: str, change: str):
    from crashdoc.remedy.fix import describe

    facts = load_shipped().get("0.5.23")
    assert facts is not None
    pasted = parse_command(f"python3 -m sglang.launch_server --model-path m --device cpu --tp-size 2 {command}")
    assert pasted.command is not None
    current = Current.of([(f.name, f.values) for f in pasted.command.flags], facts)
    stage = "parse" if kind == "SystemExit" else ""
    [best, *_] = candidates(Failure(kind, message, stage=stage), current, facts)
    assert "; ".join(describe(c) for c in best.changes) == change


def test_the_daemons_remedy_worker_searches_off_its_callers_thread(tmp_path: Path) -> None:
    """The daemon's remedy stage: `request` only queues (the engine's thread never waits on SGLang), the search
    runs on the worker's check thread, `published` serves the answer (pending at first, then the fix found),
    `take_checked` hands it to the loop once for its journal record; the engine's diagnosis is left alone."""
    from crashdoc.events import Diagnosis, Fix, FixTarget, RootCause
    from crashdoc.remedy.stage import RemedyStage
    from crashdoc.runtime.remedies import SEARCHING, RemedyWorker
    from support.sglang_env import answering_interpreter

    error = "RuntimeError: Unknown diffusion LLM algorithm: none"
    python = answering_interpreter(tmp_path / "venv" / "bin", rejects=("--dllm-algorithm", error))
    argv = (str(python), "-m", "sglang.launch_server", "--model-path", "m", "--dllm-algorithm", "none")
    unit = "sglang.service"
    cause = RootCause("RuntimeError", "Unknown diffusion LLM algorithm: none", error)
    d = Diagnosis(unit, None, "t", "flag-conflict", "critical", cause, [], Fix("s"), "fp", kind="config",
                  sglang_release="0.5.23", target=FixTarget(cmdline=argv, exec_start=argv))  # fmt: skip
    said: list[tuple[str, str]] = []
    worker = RemedyWorker(RemedyStage(), on_checked=lambda unit, text: said.append((unit, text)))
    worker.request(d, check=True)
    assert worker.published(d).fix.verified == SEARCHING  # at once, never waiting for SGLang
    worker.stop(wait=120)
    found = worker.published(d)
    assert found.fix.changes == [FlagChange("remove", "--dllm-algorithm")]
    assert found.fix.verified is not None and found.fix.verified.startswith("passes SGLang 0.5.23's argument checks")
    assert found.fix.diff and "--dllm-algorithm" not in (found.fix.command or "")
    assert said == [(unit, found.fix.verified)]
    assert worker.take_checked() == [found] and worker.take_checked() == []
    assert d.fix.changes == [] and d.fix.verified is None


@needs_sglang
def test_the_release_named_is_the_one_sglang_python_imports(tmp_path: Path) -> None:
    """Only `--sglang-python`: the diagnosis names that interpreter's release (read from its files), the same one
    whose checks passed, and no "release is unknown" warning."""
    command = LAUNCH.format(model=tiny_model(tmp_path / "model"), extra="--ssl-keyfile /k.pem")
    log = tmp_path / "launch.log"
    error = "ValueError: --ssl-keyfile requires --ssl-certfile to be specified as well."
    log.write_text(f"$ {command}\nTraceback (most recent call last):\n{error}\n")
    [d] = _explain("--sglang-python", str(SGLANG), str(log))["diagnoses"]
    assert d["sglang_version"] == "0.5.23", d
    assert d["sglang_version_from"].startswith(str(SGLANG) + ": "), d
    assert d["fix"]["verified"].startswith("passes SGLang 0.5.23's argument checks (1 candidate, "), d["fix"]
    assert not any("release is unknown" in w for w in d["fix"]["warnings"]), d["fix"]
