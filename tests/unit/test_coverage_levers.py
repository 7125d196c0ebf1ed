"""Every release's flag-naming messages get a change to a lever the message names (issue 14).

Real SGLang texts only: each message below is quoted from the release named beside it. Three kinds:
reviewed signatures whose fix follows the release's own wording (old vs new CUDA-graph advice, the
mamba pool's advice, the flag a TLS message names); checks that want a value only the operator
knows, answered with a placeholder that is shown but never applied; and the coverage measure
reading a ServerArgs field written snake_case as its flag.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from crashdoc.authoring.derive import derive_fix, placeholder_value
from crashdoc.commands.pipeline import explain_text
from crashdoc.events import Diagnosis, FlagChange
from crashdoc.matching.derived import load_shipped
from crashdoc.matching.library import builtin_signature_dirs, load_library
from crashdoc.matching.matcher import Matcher
from crashdoc.outputs.render import diagnosis_dict, diagnosis_text
from crashdoc.remedy.fix import synthesize_fix

ROOT = Path(__file__).resolve().parents[2]
UNIT = "sglang.service"
SITE = "/opt/venv/lib/python3.11/site-packages/sglang"


def traceback(path: str, line: int, function: str, exc: str, message: str, rank: bool = False) -> str:
    text = (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/{path}", line {line}, in {function}\n'
        "    raise\n"
        f"{exc}: {message}\n"
    )
    return "[2026-05-01 12:00:03 TP0] Scheduler hit an exception: " + text if rank else text


@pytest.fixture(scope="module")
def matcher() -> Matcher:
    return Matcher(load_library(builtin_signature_dirs()), load_shipped())


def diagnose(text: str, matcher: Matcher) -> Diagnosis:
    [d] = explain_text(text, matcher.library, matcher)
    return d


# --- reviewed signatures: the release's own wording decides the lever -------------------------------

CG_0_4_0 = (  # 0.4.0 srt/model_executor/cuda_graph_runner.py:195
    "Capture cuda graph failed: CUDA error: invalid argument\n"
    "Possible solutions:\n"
    "1. disable cuda graph by --disable-cuda-graph\n"
    "2. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
CG_0_5_13 = (  # 0.5.13 srt/model_executor/cuda_graph_runner.py:628, CUDA_GRAPH_CAPTURE_FAILED_MSG
    "Capture cuda graph failed: CUDA error: invalid argument\n"
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
CG_0_5_9_PIECEWISE = (  # 0.5.9 srt/model_executor/piecewise_cuda_graph_runner.py:280
    "Capture cuda graph failed: CUDA error: invalid argument\n"
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --piecewise-cuda-graph-max-tokens to a smaller value (e.g., 512)\n"
    "3. disable Piecewise CUDA graph by unset --enable-piecewise-cuda-graph\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
CG_0_5_23 = (  # 0.5.23 srt/model_executor/runner/decode_cuda_graph_runner.py:603 (runner_backend_utils)
    "Capture cuda graph failed: CUDA error: invalid argument\n"
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)


@pytest.mark.parametrize("rank", [False, True])
@pytest.mark.parametrize(
    ("message", "signature", "change"),
    [
        (CG_0_4_0, "cuda-graph-capture-failed-legacy", FlagChange("add", "--disable-cuda-graph")),
        (CG_0_5_13, "cuda-graph-capture-failed-legacy", FlagChange("add", "--disable-cuda-graph")),
        (
            CG_0_5_9_PIECEWISE,
            "piecewise-cuda-graph-capture-failed",
            FlagChange("remove", "--enable-piecewise-cuda-graph"),
        ),
        (CG_0_5_23, "cuda-graph-capture-failed", FlagChange("set", "--cuda-graph-backend-decode", "disabled")),
    ],
)
def test_cuda_graph_advice_follows_the_releases_text(matcher, message, signature, change, rank):
    d = diagnose(
        traceback("srt/model_executor/cuda_graph_runner.py", 628, "__init__", "Exception", message, rank), matcher
    )
    assert (d.signature, d.derived) == (signature, False)
    assert d.fix.changes == [change]
    assert change.flag in message  # the lever is one the message offers


def test_mamba_fix_raises_the_ratio_sglang_names(matcher):
    # 0.5.23 srt/mem_cache/memory_pool.py
    message = (
        "Not enough space for mamba cache, try to increase --mamba-full-memory-ratio or --max-mamba-cache-size. "
        "mid=None, self.mamba_pool.size=64, self.mamba_allocator.available_size()=0, len(reqs)=2"
    )
    d = diagnose(traceback("srt/mem_cache/memory_pool.py", 1598, "alloc", "AssertionError", message, True), matcher)
    assert d.signature == "mamba-cache-no-space"
    assert d.fix.changes == [FlagChange("set", "--mamba-full-memory-ratio", "1.35")]  # SGLang's default 0.9 x 1.5
    assert "--max-running-requests" in d.fix.summary  # the alternative is still said


@pytest.mark.parametrize(
    ("kind", "flag"),
    [("key", "--ssl-keyfile"), ("certificate", "--ssl-certfile"), ("CA certificates", "--ssl-ca-certs")],
)
def test_tls_fix_points_the_flag_the_message_names_at_your_file(matcher, kind, flag):
    # 0.5.23 srt/arg_groups/serving_hook.py:69,74,79 (0.5.10-0.5.18: srt/server_args.py)
    message = f"SSL {kind} file not found: '/etc/sglang/tls/x.pem'. Please check the {flag} path."
    d = diagnose(
        traceback("srt/arg_groups/serving_hook.py", 69, "handle_ssl_validation", "ValueError", message), matcher
    )
    assert d.signature == "serve-ssl-file-not-found"
    assert d.fix.changes == [FlagChange("set", flag, "<path-of-the-real-file>", placeholder=True)]


# --- placeholders: a value only the operator knows ---------------------------------------------------


def test_dist_init_addr_check_gets_a_placeholder_not_no_change(matcher):
    # 0.4.9.post3 srt/server_args.py:1988 (also 0.5.1 :2409)
    message = "please provide --dist-init-addr as host:port of head node"
    d = diagnose(traceback("srt/server_args.py", 1988, "from_server_args", "AssertionError", message, True), matcher)
    assert d.derived is True
    [change] = d.fix.changes
    assert (change.action, change.flag, change.value, change.placeholder) == (
        "set",
        "--dist-init-addr",
        "<head-node-host>:<port>",
        True,
    )
    # no command line here: the fix says what to fill in, the JSON marks the value
    assert any(w.startswith("Needs your value: `--dist-init-addr <head-node-host>:<port>`") for w in d.fix.warnings)
    assert "Needs your value" in diagnosis_text(d)
    assert diagnosis_dict(d)["fix"]["changes"] == [
        {
            "action": "set",
            "flag": "--dist-init-addr",
            "value": "<head-node-host>:<port>",
            "new_flag": None,
            "placeholder": True,
        }
    ]


def test_engine_info_port_in_use_asks_for_a_free_port_never_guesses_one(matcher):
    # 0.5.23 srt/entrypoints/engine.py:1195
    message = (
        "engine_info_bootstrap_port 6789 is already in use. When running multiple instances on the same node, "
        "each instance must use a different --engine-info-bootstrap-port."
    )
    d = diagnose(traceback("srt/entrypoints/engine.py", 1195, "_launch_subprocesses", "RuntimeError", message), matcher)
    assert d.signature == "engine-info-bootstrap-port-in-use"
    assert d.fix.changes == [FlagChange("set", "--engine-info-bootstrap-port", "<free-port>", placeholder=True)]
    assert "6790" not in json.dumps(diagnosis_dict(d))


@pytest.mark.parametrize(
    ("message", "flag", "value"),
    [
        # 0.5.23 multimodal_gen/runtime/pipelines/ltx_2_pipeline.py:697
        (
            "{} requires --spatial-upsampler-path (component_paths['spatial_upsampler']).",
            "--spatial-upsampler-path",
            "<path>",
        ),
        ("please provide --dist-init-addr as host:port of head node", "--dist-init-addr", "<head-node-host>:<port>"),
        ("UNO requires --uno-lora-path.", "--uno-lora-path", "<path>"),
    ],
)
def test_derived_placeholder_for_a_value_only_the_operator_knows(message, flag, value):
    changes, summary = derive_fix(message, "", "raise", [flag], [])
    assert changes == [FlagChange("set", flag, value, placeholder=True)]
    assert "placeholder" in summary and flag in summary


def test_placeholder_values_say_what_to_fill_in():
    assert placeholder_value("--engine-info-bootstrap-port", "must use a different --engine-info-bootstrap-port") == (
        "<free-port>"
    )
    assert placeholder_value("--ssl-keyfile", "Please check the --ssl-keyfile path") == "<path>"
    assert placeholder_value("--speculative-dspark-block-size", "set --speculative-dspark-block-size") == "<value>"


def test_a_switch_the_check_requires_is_still_added_not_a_placeholder():
    changes, _ = derive_fix("--x requires --enable-y.", "", "raise", ["--x", "--enable-y"], [])
    assert changes == [FlagChange("add", "--enable-y")]


def test_placeholder_fix_shows_the_command_and_offers_no_apply_for_a_drop_in():
    argv = ["/opt/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "m", "--nnodes", "2"]
    change = FlagChange("set", "--dist-init-addr", "<head-node-host>:<port>", placeholder=True)
    fix = synthesize_fix(UNIT, argv, [change], "set --dist-init-addr", read=lambda p: (_ for _ in ()).throw(OSError(p)))
    assert fix.command is not None and fix.command.endswith("--nnodes 2 --dist-init-addr '<head-node-host>:<port>'")
    assert '+    --dist-init-addr "<head-node-host>:<port>"' in (fix.diff or "")  # systemd's quoting
    assert fix.apply == [] and fix.rollback == []
    assert any(w.startswith("Needs your value:") and "no apply command" in w for w in fix.warnings)


def test_placeholder_is_never_written_into_the_launch_script(tmp_path):
    path = tmp_path / "serve.sh"
    original = "#!/bin/bash\nexec python -m sglang.launch_server --model-path m --ssl-keyfile /etc/tls/gone.key\n"
    path.write_text(original)
    change = FlagChange("set", "--ssl-keyfile", "<path-of-the-real-file>", placeholder=True)
    fix = synthesize_fix(UNIT, ("/bin/bash", str(path)), [change], "point --ssl-keyfile at your file")
    assert "--ssl-keyfile '<path-of-the-real-file>'" in (fix.command or "")
    assert fix.apply == [] and fix.rollback == []
    assert path.read_text() == original
    # the same change with a real value is applicable
    real = synthesize_fix(UNIT, ("/bin/bash", str(path)), [FlagChange("set", "--ssl-keyfile", "/etc/tls/k")], "s")
    assert real.apply and not any(w.startswith("Needs your value") for w in real.warnings)


# --- the measure: a ServerArgs field written snake_case is that flag ---------------------------------


def test_coverage_reads_a_snake_case_field_as_its_flag():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.coverage import snake_flags

    # 0.4.9.post3 .. 0.5.23 srt/layers/quantization/marlin_utils.py (Marlin's shape check)
    message = (
        "Weight input_size_per_partition = 8 is not divisible by min_thread_k = 128. Consider reducing "
        "tensor_parallel_size or running with --quantization gptq."
    )
    registered = frozenset({"--tensor-parallel-size", "--tp-size", "--quantization"})
    assert snake_flags(message, registered) == {"--tp-size"}  # the canonical name of SGLang's alias
    assert snake_flags(message, frozenset()) == {"--tp-size"}  # an alias crashdoc knows
    assert snake_flags("group_size = 8 is not divisible", frozenset({"--tp-size"})) == set()  # not a flag


def test_a_placeholder_fix_is_not_handed_to_sglangs_checks():
    from crashdoc.remedy.verify import verify_fix

    change = FlagChange("set", "--dist-init-addr", "<head-node-host>:<port>", placeholder=True)
    cmdline = ("/opt/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "m", "--nnodes", "2")
    answer = verify_fix(cmdline, [change])  # a check would say "cannot run /opt/venv/bin/python"
    assert answer.text == "not verified: --dist-init-addr needs your value first"
