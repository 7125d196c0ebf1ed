"""Judgment on real-log shapes, round 3: a second authored set written apart from the first (tests/fixtures/
authored2, 59 logs in the shapes of real SGLang threads), and what it showed: warning-level line failures of a
serving server are warnings, a failure line's root cause is its message without the writer's stamp, more outer
columns of a paste, subsystems from where the failure happened, and computed flag changes for more families.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crashdoc.diagnosis.category import guess_category
from crashdoc.events import ExceptionInfo, Frame
from crashdoc.sources.textlog import parse_text
from support.explaining import explain, first
from support.scoring import score_folder

AUTHORED2 = Path(__file__).parents[1] / "fixtures" / "authored2"
SITE = "/opt/venv/lib/python3.11/site-packages"


def log(name: str) -> str:
    return (AUTHORED2 / name).read_text(encoding="utf-8")


def changes(d: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    return {c["flag"]: (c["action"], c["value"]) for c in d["fix"]["changes"]}


def test_the_second_authored_set_scores_above_the_targets() -> None:
    score = score_folder(AUTHORED2)
    assert score.share(score.category) >= 0.95, score.misses
    assert score.share(score.root_cause) >= 0.95, score.misses
    assert score.share(score.flags) >= 0.90, score.misses
    assert score.healthy[0] == 0, score.misses
    assert score.healthy[1] >= 10 and score.category[1] >= 60


# --- a non-critical line failure of a server that keeps serving -------------------------------------------------


def test_a_kv_transfer_failure_the_decode_server_survived_is_a_warning_not_a_diagnosis(tmp_path: Path) -> None:
    doc = explain(tmp_path, log("healthy-pd-decode-kv-transfer-failures.log"))
    assert doc["diagnoses"] == []
    signatures = {w["signature"] for w in doc["warnings"]}
    assert "pd-kv-prefill-reported-failure" in signatures
    warning = next(w for w in doc["warnings"] if w["signature"] == "pd-kv-prefill-reported-failure")
    assert warning["severity"] == "warning"
    assert warning["handled"] == "SGLang logged this failure and the process went on running"
    text = explain(tmp_path, log("healthy-pd-decode-kv-transfer-failures.log"), as_json=False)
    assert text.startswith("No failure found.\n")
    assert "error(s) that SGLang survived (no crash, no alert)" in text


def test_a_router_health_check_a_worker_recovered_from_is_a_warning(tmp_path: Path) -> None:
    doc = explain(tmp_path, log("healthy-router-transient-worker.log"))
    assert doc["diagnoses"] == []
    [w] = doc["warnings"]
    assert w["signature"] == "router-worker-health-check-failed" and w["crashes"] == 2


def test_a_warning_line_before_a_crash_stays_a_warning_beside_the_crash(tmp_path: Path) -> None:
    text = (
        "[2026-05-01 12:00:01 TP0] Decode transfer failed for request rank=0 decode_req.req.rid='a' "
        "decode_req.req.bootstrap_room=7 with exception KVTransferError(bootstrap_room=7): Failed to get kvcache "
        "from prefill instance, it might be dead\n" + log("pd-decode-page-size-mismatch.log")
    )
    doc = explain(tmp_path, text)
    assert [d["signature"] for d in doc["diagnoses"]] == ["pd-page-size-mismatch"]
    [w] = [w for w in doc["warnings"] if w["signature"] == "pd-kv-prefill-reported-failure"]
    assert w["handled"] == "SGLang logged this failure and went on; it is not what ended the run"


# --- the root-cause line of a failure line ----------------------------------------------------------------------


def test_a_failure_lines_root_cause_is_its_message_without_sglangs_prefix(tmp_path: Path) -> None:
    d = first(tmp_path, log("network-uvicorn-port-in-use.log"))
    assert d["root_cause"]["line"] == (
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use"
    )
    assert any(e.startswith("[2025-09-14 10:01:53] ERROR:") for e in d["evidence"]), "the evidence keeps the line"


def test_a_routers_cause_comes_before_its_symptom_and_without_the_record_stamp(tmp_path: Path) -> None:
    doc = explain(tmp_path, log("router-json-add-worker-failed.log"))
    signatures = [d["signature"] for d in doc["diagnoses"]]
    assert signatures == ["router-worker-registration-failed", "router-no-available-pd-workers"]
    assert doc["diagnoses"][0]["root_cause"]["line"].startswith("failed job: type=AddWorker, worker=http://10.2.3.5")


# --- outer columns of a paste -----------------------------------------------------------------------------------

TRACEBACK = [
    "[2026-04-11 14:23:12 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 3311, in run_scheduler_process',
    "    scheduler = Scheduler(",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
]


@pytest.mark.parametrize(
    ("column", "note"),
    [
        ("2026-04-11 14:23:12.540 | ", "removed the log viewer's timestamp column"),
        ("[2026-01-09T10:42:17+08:00] worker-3 >> ", "removed the bracketed timestamp column"),
        ("[2026-01-09T10:42:17Z] ", "removed the bracketed timestamp column"),
        ("[80746] ", "removed the per-process prefix"),
        ("[default0]:", "removed the per-process prefix"),
    ],
)
def test_an_outer_column_on_every_line_is_removed(tmp_path: Path, column: str, note: str) -> None:
    parsed = parse_text("\n".join(column + line for line in TRACEBACK) + "\n")
    assert note in parsed.notes
    assert parsed.lines[0].text == TRACEBACK[0]
    d = first(tmp_path, "\n".join(column + line for line in TRACEBACK) + "\n")
    assert d["root_cause"]["line"] == TRACEBACK[-1]


def test_ray_actor_prefixes_behind_a_bracketed_timestamp_and_host_are_removed(tmp_path: Path) -> None:
    d = first(tmp_path, log("memory-logits-oom-ray-rl-prefixes.log"))
    assert d["root_cause"]["line"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.27 GiB")
    assert d["category"] == "memory"


# --- where it happened ------------------------------------------------------------------------------------------


def frame(module: str, function: str = "f", code: str = "") -> Frame:
    return Frame(f"{SITE}/{module.replace('.', '/')}.py", 10, function, code)


@pytest.mark.parametrize(
    ("exc", "category"),
    [
        (  # a generic error in HiCache's host pool, called from the radix cache: hicache, not memory
            ExceptionInfo(
                "TypeError",
                "expected Tensor as element 1 in argument 0, but got NoneType",
                (frame("sglang.srt.mem_cache.hiradix_cache"), frame("sglang.srt.mem_cache.pool_host.base", "free")),
            ),
            "hicache",
        ),
        (  # HiCache's storage backends (the L3 tier) are hicache too
            ExceptionInfo(
                "ValueError",
                "Either the environment variable 'X' or 'Y' is not set.",
                (frame("sglang.srt.mem_cache.storage.mooncake_store.mooncake_store"),),
            ),
            "hicache",
        ),
        (  # a bare assert's line names the TP size
            ExceptionInfo(
                "AssertionError",
                "",
                (frame("sglang.srt.models.llama", "__init__", "assert self.total_num_heads % tp_size == 0"),),
            ),
            "parallelism",
        ),
        (  # a launcher check naming tp_size
            ExceptionInfo(
                "AssertionError", "tp_size must be divisible by number of nodes", (frame("sglang.srt.server_args"),)
            ),
            "parallelism",
        ),
        (  # an import at a module's top: the importer (fp8_kernel) did not fail, the imported package did
            ExceptionInfo(
                "ImportError",
                "cannot load common_ops",
                (
                    frame("sglang.srt.layers.quantization.fp8_kernel", "<module>"),
                    frame("sgl_kernel.load_utils", "_load"),
                ),
            ),
            "other",
        ),
    ],
)
def test_the_subsystem_is_where_it_happened(exc: ExceptionInfo, category: str) -> None:
    assert guess_category(exc) == category


def test_a_bare_assertion_says_the_condition_its_frame_asserted(tmp_path: Path) -> None:
    d = first(tmp_path, log("parallel-heads-not-divisible-tp3-044.log"))
    assert d["root_cause"]["line"] == "AssertionError"
    assert d["root_cause"]["message"] == "assert self.total_num_heads % tp_size == 0"
    assert (d["signature"], d["category"]) == ("tp-size-does-not-divide", "parallelism")
    assert changes(d) == {"--tp-size": ("set", "2")}


def test_a_graph_capture_oom_is_the_cuda_graph_subsystem_of_kind_resource(tmp_path: Path) -> None:
    d = first(tmp_path, log("cudagraph-capture-oom-049.log"))
    assert (d["signature"], d["category"], d["kind"]) == ("cuda-graph-capture-oom", "cuda-graph", "resource")


def test_flashinfers_jit_without_nvcc_is_the_attention_backend_even_inside_a_capture(tmp_path: Path) -> None:
    d = first(tmp_path, log("attn-flashinfer-jit-no-nvcc.log"))
    assert (d["signature"], d["category"], d["kind"]) == ("flashinfer-jit-no-nvcc", "attention-backend", "environment")
    assert "CUDA_HOME" in changes(d)


# --- computed flag changes --------------------------------------------------------------------------------------


def test_tp_size_that_divides_the_numbers_of_the_message(tmp_path: Path) -> None:
    text = (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/sglang/srt/distributed/utils.py", line 70, in ensure_divisibility\n'
        '    assert numerator % denominator == 0, "{} is not divisible by {}".format(\n'
        "AssertionError: 40 is not divisible by 16\n"
    )
    d = first(tmp_path, text)
    assert d["signature"] == "tp-size-does-not-divide"
    assert changes(d) == {"--tp-size": ("set", "8")}  # divisors of 40 below 16: 10, 8, 5, 4, 2, 1; 8 a power of two
    assert any("10, 8, 5, 4, 2, 1" in w for w in d["fix"]["why"])


@pytest.mark.parametrize(
    ("value", "choices", "expected"),
    [
        ("fp8e4m3", "auto, fp8_e5m2, fp8_e4m3, bfloat16", ("set", "fp8_e4m3")),  # clearly the one meant
        ("'flash_attn'", "fa3, flashinfer, flashmla, flex_attention, triton", None),  # as near flashmla as flashinfer
    ],
)
def test_an_invalid_choice_takes_the_clearly_closest_accepted_value(
    tmp_path: Path, value: str, choices: str, expected: tuple[str, str] | None
) -> None:
    flag = "--kv-cache-dtype" if "fp8" in value else "--attention-backend"
    d = first(tmp_path, f"sglang serve: error: argument {flag}: invalid choice: {value} (choose from {choices})\n")
    [change] = d["fix"]["changes"]
    assert change["flag"] == flag
    if expected is None:
        assert change.get("placeholder") and change["value"] == f"<one of: {choices}>"
    else:
        assert (change["action"], change["value"]) == expected and not change.get("placeholder")


def test_a_capture_that_failed_under_torch_compile_drops_the_compile(tmp_path: Path) -> None:
    d = first(tmp_path, log("cudagraph-torch-compile-capture.log"))
    assert d["signature"] == "cuda-graph-capture-failed-legacy"
    assert changes(d) == {"--enable-torch-compile": ("remove", None)}
    without = log("cudagraph-torch-compile-capture.log").replace(
        "enable_torch_compile=True", "enable_torch_compile=False"
    )
    assert changes(first(tmp_path, without)) == {"--disable-cuda-graph": ("add", None)}, "the signature's fallback"


def test_a_quantization_the_gpu_cannot_run_is_dropped_only_when_the_unit_asks_for_it(tmp_path: Path) -> None:
    d = first(tmp_path, log("quant-fp8-capability-3090.log"))
    assert changes(d) == {"--quantization": ("remove", None)}
    checkpoint = log("quant-fp8-capability-3090.log").replace("quantization='fp8', ", "")
    assert changes(first(tmp_path, checkpoint)) == {}, "an FP8 checkpoint: no flag makes this GPU run it"


# --- a stop is no crash; another logger's record ends a traceback ----------------------------------------------

CTRL_C = f"""[2025-10-02 09:00:01] The server is fired up and ready to roll!
[2025-10-02 09:01:12] INFO:     127.0.0.1:40100 - "POST /generate HTTP/1.1" 200 OK
^C[2025-10-02 09:05:40] INFO:     Shutting down
[2025-10-02 09:05:40] INFO:     Finished server process [20011]
Traceback (most recent call last):
  File "{SITE}/sglang/launch_server.py", line 14, in <module>
    launch_server(server_args)
  File "/usr/lib/python3.10/asyncio/base_events.py", line 636, in run_until_complete
    self.run_forever()
KeyboardInterrupt
[rank0]:[W1002 09:05:41.123456789 ProcessGroupNCCL.cpp:1479] Warning: WARNING: destroy_process_group() was not called \
before program exit, which can leak resources.
"""


def test_a_server_stopped_with_ctrl_c_is_no_failure(tmp_path: Path) -> None:
    assert explain(tmp_path, CTRL_C) == {"diagnoses": [], "warnings": []}


def test_another_loggers_record_ends_the_message_of_a_traceback(tmp_path: Path) -> None:
    text = CTRL_C.replace("KeyboardInterrupt\n", "ValueError: boom\n")
    d = first(tmp_path, text)
    assert d["root_cause"]["message"] == "boom", "torch's [rank0]:[W...] record is no part of the message"


# --- the second batch of authored2: what it showed --------------------------------------------------------------


def test_a_capture_that_failed_in_the_custom_all_reduce_turns_that_off_not_the_graphs(tmp_path: Path) -> None:
    d = first(tmp_path, log("cudagraph-capture-invalid-argument-0523.log"))
    assert (d["signature"], d["category"]) == ("cuda-graph-capture-failed", "cuda-graph")
    assert changes(d) == {"--disable-custom-all-reduce": ("add", None)}
    assert any("register_graph_buffers" in why for why in d["fix"]["why"])
    # the same capture failure with no custom all-reduce frame keeps the signature's own fix
    text = log("cudagraph-capture-invalid-argument-0523.log").replace("custom_all_reduce", "cuda_graph_runner")
    assert "--disable-custom-all-reduce" not in changes(first(tmp_path, text))


def test_a_dtype_the_quantization_method_does_not_support_is_set_to_the_first_it_does(tmp_path: Path) -> None:
    d = first(tmp_path, log("quant-awq-float32-dtype.log"))
    assert changes(d) == {"--dtype": ("set", "float16")}
    other = log("quant-awq-float32-dtype.log").replace(
        "Supported dtypes: [torch.float16]", "Supported dtypes: [torch.bfloat16, torch.float16]"
    )
    assert changes(first(tmp_path, other)) == {"--dtype": ("set", "bfloat16")}


def test_huggingface_hubs_gated_repo_error_is_model_load_with_the_line_that_says_why(tmp_path: Path) -> None:
    d = first(tmp_path, log("modelload-hf-gated-repo.log"))
    assert (d["signature"], d["category"]) == ("hf-gated-repo", "model-load")
    assert d["root_cause"]["line"].startswith("Cannot access gated repo for url https://huggingface.co/")
    assert "HF_TOKEN" in changes(d)
    assert d["fix"]["changes"][0]["placeholder"] is True


@pytest.mark.parametrize(
    ("line", "signature"),
    [
        ("RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered", "cuda-illegal-memory-access"),
        ("RuntimeError: Triton Error [CUDA]: device-side assert triggered", "cuda-device-side-assert"),
    ],
)
def test_a_cuda_fault_that_triton_reports_is_the_same_fault(tmp_path: Path, line: str, signature: str) -> None:
    d = first(tmp_path, line + "\n")
    assert (d["signature"], d["root_cause"]["line"]) == (signature, line)
