"""Judgment on real-log shapes, round 2: lone lines, native errors, router logs, request-level errors, runtime
families with computed flags, combined paste shapes, and the whole root cause in the text.

The logs are in tests/fixtures/authored (written from SGLang's and the router's source texts; labels.jsonl
says what each one is) and built here from them; `support.scoring` scores the whole set.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from crashdoc.diagnosis.engine import Engine
from crashdoc.events import BAD_REQUEST, KINDS, Lifecycle, LifecycleRecord, LogLine
from crashdoc.matching.derived import load_shipped
from crashdoc.matching.library import builtin_signature_dirs, load_library
from crashdoc.matching.matcher import Matcher
from crashdoc.sources.routerlog import parse_router_line, worker_urls
from crashdoc.sources.textlog import parse_text
from support.explaining import explain, first
from support.scoring import score_folder

AUTHORED = Path(__file__).parents[1] / "fixtures" / "authored"
SO = "/opt/venv/lib/python3.11/site-packages/sgl_kernel/common_ops.abi3.so"


def log(name: str) -> str:
    return (AUTHORED / name).read_text(encoding="utf-8")


def changes(d: dict[str, Any]) -> dict[str, str | None]:
    return {c["flag"]: c["value"] for c in d["fix"]["changes"]}


# --- the authored set as a whole ----------------------------------------------------------------------------


def test_the_authored_set_of_every_kind_scores_above_the_targets() -> None:
    score = score_folder(AUTHORED)
    assert score.share(score.category) >= 0.95, score.misses
    assert score.share(score.root_cause) >= 0.95, score.misses
    assert score.share(score.flags) >= 0.90, score.misses
    assert score.healthy[1] >= 6 and score.healthy[0] == 0, score.misses
    assert score.category[1] >= 45


# --- lone lines ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "signature", "line"),
    [
        (  # a reviewed signature's message, no type, no traceback (pool_configurator.py:99)
            "Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.7\n",
            "kv-pool-not-enough-memory",
            "Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.7",
        ),
        (  # the scheduler's OOM record with its continuation lines (allocation.py:613)
            "[2026-01-01 00:00:00 TP0] Decode out of memory. Try to lower your batch size.\n"
            "Try to allocate 64 tokens.\nAvailable tokens: 0 (available_size=0 + evictable_size=0)\n",
            "runtime-decode-oom",
            "Decode out of memory. Try to lower your batch size.",
        ),
        (  # an ImportError's text without its type
            f"{SO}: undefined symbol: _ZN3c104cuda9SetDeviceEi\n",
            "native-extension-abi-mismatch",
            f"{SO}: undefined symbol: _ZN3c104cuda9SetDeviceEi",
        ),
    ],
)
def test_a_lone_message_line_is_the_failure_it_states(tmp_path: Path, text: str, signature: str, line: str) -> None:
    d = first(tmp_path, text)
    assert (d["signature"], d["root_cause"]["line"]) == (signature, line)
    assert "no traceback given, matched on the message alone" in d["evidence"]


def test_a_derived_check_matches_as_a_bare_line(tmp_path: Path) -> None:
    # srt/arg_groups/kv_cache_hook.py:445, known only to the derived signatures and a reviewed one
    d = first(tmp_path, "--enable-lmcache requires radix cache to be enabled\n")
    assert d["root_cause"]["line"] == "--enable-lmcache requires radix cache to be enabled"
    assert d["flags"]


def test_a_lone_failure_line_the_server_went_on_from_is_no_failure(tmp_path: Path) -> None:
    text = (
        "[2026-01-01 00:00:00 TP0] Decode out of memory. Try to lower your batch size.\n"
        "Try to allocate 64 tokens.\n"
        "[2026-01-01 00:00:01 TP0] Decode batch, #running-req: 3, #token: 812, token usage: 0.01, #queue-req: 0,\n"
    )
    assert explain(tmp_path, text)["diagnoses"] == []


def test_request_errors_and_warnings_in_lone_lines_are_no_failure(tmp_path: Path) -> None:
    text = (
        "[2026-01-01 00:00:00] [http_server] Error: The input (40112 tokens) is longer than the model's context "
        "length (32768 tokens).\n"
        "[2026-01-01 00:00:01] The argument --enable-dp-attention is deprecated. Please use --attn-dp-size instead.\n"
    )
    assert explain(tmp_path, text) == {"diagnoses": [], "warnings": []}


def test_the_daemon_never_reads_a_lone_line() -> None:
    engine = Engine(Matcher(load_library(builtin_signature_dirs()), load_shipped()))
    engine.on_lifecycle(LifecycleRecord("sglang.service", Lifecycle.STARTED, 1.0, invocation="a"))
    engine.on_line(LogLine("sglang.service", 10, "Decode out of memory. Try to lower your batch size.", 2.0, "a"))
    engine.on_lifecycle(
        LifecycleRecord("sglang.service", Lifecycle.EXITED, 3.0, invocation="a", exit_code="killed", exit_status="KILL")
    )
    engine.on_lifecycle(LifecycleRecord("sglang.service", Lifecycle.FAILED, 3.0, invocation="a", result="signal"))
    engine.finish()
    [d] = engine.diagnoses()
    assert d.signature != "runtime-decode-oom"  # the journal's crash is judged by what it logged as failures


# --- native errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "signature", "subsystem", "kind"),
    [
        ("native-deepep-internode-assert.log", "native-device-assert", "parallelism", "bug"),
        ("native-flash-attn-glibc-assert.log", "native-c-assert", "attention-backend", "bug"),
        ("native-custom-allreduce-cuda-error.log", "custom-all-reduce-cuda-error", "distributed", "hardware-network"),
        ("native-flash-attn-undefined-symbol.log", "native-extension-abi-mismatch", "attention-backend", "environment"),
        ("lone-sgl-kernel-undefined-symbol.log", "native-extension-abi-mismatch", "other", "environment"),
    ],
)
def test_a_native_error_is_a_failure_of_the_extension_it_names(
    tmp_path: Path, name: str, signature: str, subsystem: str, kind: str
) -> None:
    d = first(tmp_path, log(name))
    assert (d["signature"], d["subsystem"], d["kind"], d["severity"]) == (signature, subsystem, kind, "critical")


def test_the_native_line_not_the_dump_or_the_launcher_is_the_root_cause(tmp_path: Path) -> None:
    d = first(tmp_path, log("native-custom-allreduce-cuda-error.log"))
    assert d["root_cause"]["line"].startswith("CUDA error (/sgl-workspace/sgl-kernel/csrc/allreduce/")
    assert changes(d) == {"--disable-custom-all-reduce": None}
    d = first(tmp_path, log("native-flash-attn-glibc-assert.log"))
    assert "Assertion `params.page_size % kBlockN == 0' failed." in d["root_cause"]["line"]


def test_an_undefined_symbol_says_which_packages_must_match(tmp_path: Path) -> None:
    d = first(tmp_path, log("lone-sgl-kernel-undefined-symbol.log"))
    why = " ".join(d["fix"]["why"])
    assert "sglang-kernel" in why and "torch==" in why  # the kernel package and the torch it was built for


# --- router and gateway logs ---------------------------------------------------------------------------------

ROUTER_TEXT = log("router-no-available-workers.log")


def _as_json_records(text: str) -> str:
    """The same records as the router prints them with --log-json (tracing's JSON layer, flattened)."""
    out = []
    for line in text.splitlines():
        record = parse_router_line(line)
        assert record is not None
        level, target = record.level, record.target
        file_line, _, message = record.text.split(f"{target}: ", 1)[1].partition(": ")
        path, _, number = file_line.partition(":")
        out.append(
            json.dumps(
                {
                    "timestamp": line[:19].replace(" ", "T") + ".000000Z",
                    "level": level,
                    "message": message,
                    "target": target,
                    "filename": path,
                    "line_number": int(number),
                }
            )
        )
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("shape", ["text", "json"])
def test_a_router_log_is_read_in_its_own_format_and_names_the_workers(tmp_path: Path, shape: str) -> None:
    text = ROUTER_TEXT if shape == "text" else _as_json_records(ROUTER_TEXT)
    parsed = parse_text(text)
    assert parsed.format == "router"
    assert parsed.lines[1].timestamp > 0  # the router's own (UTC) time
    d = first(tmp_path, text)
    assert (d["signature"], d["category"], d["severity"]) == ("router-no-available-workers", "network", "critical")
    assert d["root_cause"]["line"].endswith("No available workers (all circuits open or unhealthy)")
    assert "workers the router's log names as failing: http://10.0.0.11:30001, http://10.0.0.12:30001" in d["evidence"]


@pytest.mark.parametrize(
    ("name", "signature"),
    [
        ("router-pd-no-prefill.log", "router-no-available-pd-workers"),
        ("router-registration-failed.log", "router-worker-registration-failed"),
        ("router-startup-timeout.log", "router-worker-startup-timeout"),
    ],
)
def test_router_failures(tmp_path: Path, name: str, signature: str) -> None:
    d = first(tmp_path, log(name))
    assert d["signature"] == signature
    if signature == "router-worker-startup-timeout":
        assert changes(d) == {"--worker-startup-timeout-secs": "600"}


def test_worker_urls_of_router_messages() -> None:
    assert worker_urls("Worker http://10.0.0.11:30001 health check failed: ... (http://10.0.0.11:30001/health)") == [
        "http://10.0.0.11:30001"
    ]
    assert parse_router_line("[Router (Rust)] 2025-03-08 02:33:09 - ERROR - Timeout 300s") is not None
    assert parse_router_line("2026-03-02 10:31:44  WARN some_other_crate::x: message") is None


def _daemon_engine() -> Engine:
    from crashdoc.commands.pipeline import build_engine

    return build_engine(Matcher(load_library(builtin_signature_dirs()), load_shipped()))


def test_the_daemon_names_the_worker_unit_a_router_failure_points_at() -> None:
    engine = _daemon_engine()
    engine.on_lifecycle(LifecycleRecord("sglang-worker.service", Lifecycle.STARTED, 1.0, invocation="w"))
    engine.on_line(
        LogLine(
            "sglang-worker.service", 7, "[2026-03-02 10:00:01] server_args=ServerArgs(port=30001, tp_size=2)", 2.0, "w"
        )
    )
    engine.on_lifecycle(LifecycleRecord("sglang-router.service", Lifecycle.STARTED, 1.0, invocation="r"))
    for text in ROUTER_TEXT.splitlines():
        engine.on_line(LogLine("sglang-router.service", 9, text, 3.0, "r"))
    [d] = [d for d in engine.diagnoses(["sglang-router.service"]) if d.signature == "router-no-available-workers"]
    assert (
        "the worker http://10.0.0.11:30001 is sglang-worker.service (--port 30001): see its own diagnosis" in d.evidence
    )


# --- fatal or handled, at request level --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "healthy-error-in-request-template.log",
        "healthy-streaming-error-in-request-quoted.log",
        "healthy-client-disconnect-asgi.log",
    ],
)
def test_a_request_handlers_traceback_is_a_bad_request_warning(tmp_path: Path, name: str) -> None:
    doc = explain(tmp_path, log(name))
    assert doc["diagnoses"] == []
    [w] = doc["warnings"]
    assert (w["kind"], w["severity"]) == (BAD_REQUEST, "warning")
    assert w["handled"].startswith("one request failed and was answered with an error")


def test_a_request_error_the_process_died_of_stays_fatal(tmp_path: Path) -> None:
    lines = log("healthy-error-in-request-template.log").splitlines()
    text = "\n".join(line for line in lines if 'HTTP/1.1" 500' not in line) + (
        "\n[2026-03-02 10:05:21] Received sigquit from a child process. It usually means the child failed.\n"
    )
    [d] = explain(tmp_path, text)["diagnoses"]
    assert d["root_cause"]["line"].startswith("jinja2.exceptions.TemplateError")


def test_bad_requests_are_counted_in_the_metrics_and_raise_no_alert() -> None:
    from crashdoc.outputs.metrics import CrashdocCollector, Health, exposition, make_registry

    engine = _daemon_engine()
    engine.on_lifecycle(LifecycleRecord("sglang.service", Lifecycle.STARTED, 1.0, invocation="a"))
    for n, text in enumerate(log("healthy-error-in-request-template.log").splitlines()):
        engine.on_line(LogLine("sglang.service", 10, text, 2.0 + n, "a"))
    engine.on_line(LogLine("sglang.service", 10, "[2026-03-02 10:05:21 TP0] Decode batch, #running-req: 1,", 90.0, "a"))
    engine.tick(95.0)
    events = [e.kind for e in engine.events()]
    assert not {"crash", "loop-started", "failed"} & set(events)
    assert engine.diagnoses() == []
    assert "bad request" in KINDS
    metrics = exposition(make_registry(CrashdocCollector(engine.units, Health(), threading.Lock()))).decode()
    assert 'crashdoc_warnings_total{kind="bad request",unit="sglang.service"} 1.0' in metrics


# --- runtime families with computed flags ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "flag", "value", "why"),
    [
        ("tp-above-visible-gpus.log", "--tp-size", "4", "the unit sees 4 GPU(s)"),
        ("fp8-block-tp.log", "--tp-size", "2", "768 / 2 = 384 = 3 x 128"),
        ("moe-block-vs-tp.log", "--ep-size", "16", "1536 / 16 = 96"),
        ("pd-mla-attn-tp-assert.log", "--tp-size", "4", "the message says prefill=4"),
        ("hicache-host-memory.log", "--hicache-ratio", "1.9", "1402.11 GB / 8 = 157.7 GB per rank"),
        ("lone-decode-oom.log", "--max-running-requests", "304", "75% of 412 = 309"),
        ("prefill-oom-chunked.log", "--chunked-prefill-size", "8192", "9120 free slots"),
        ("req-slots-exhausted.log", "--max-running-requests", "768", "--max-running-requests is 1024"),
        ("deepep-dispatch-limit.log", "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK", "256", ""),
        ("nccl-peer-access-last-error.log", "NCCL_P2P_DISABLE", "1", ""),
    ],
)
def test_a_runtime_failure_gets_a_flag_change_with_its_arithmetic(
    tmp_path: Path, name: str, flag: str, value: str, why: str
) -> None:
    d = first(tmp_path, log(name))
    assert changes(d).get(flag) == value
    assert why in " ".join(d["fix"]["why"])


def test_pd_tp_sizes_compare_the_two_units() -> None:
    engine = _daemon_engine()
    for unit, args in (
        ("sglang-prefill.service", "tp_size=4, disaggregation_mode='prefill'"),
        ("sglang-decode.service", "tp_size=8, disaggregation_mode='decode'"),
    ):
        engine.on_lifecycle(LifecycleRecord(unit, Lifecycle.STARTED, 1.0, invocation=unit))
        engine.on_line(LogLine(unit, 5, f"[2026-03-02 16:00:01] server_args=ServerArgs({args})", 2.0, unit))
    for text in log("pd-decode-tp-mismatch.log").splitlines()[2:]:
        engine.on_line(LogLine("sglang-decode.service", 6, text, 3.0, "sglang-decode.service"))
    engine.finish()
    [d] = engine.diagnoses(["sglang-decode.service"])
    assert d.signature == "pd-tp-size-mismatch"
    assert [(c.flag, c.value) for c in d.fix.changes] == [("--tp-size", "4")]
    assert "sglang-prefill.service (prefill) runs --tp-size 4" in " ".join(d.fix.why)


def test_without_the_other_unit_the_pd_tp_change_is_a_placeholder(tmp_path: Path) -> None:
    d = first(tmp_path, log("pd-decode-tp-mismatch.log"))
    [change] = d["fix"]["changes"]
    assert (change["flag"], change["value"], change.get("placeholder")) == (
        "--tp-size",
        "<the prefill unit's --tp-size>",
        True,
    )


# --- subsystem from where it happened --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "subsystem"),
    [
        ("keyerror-load-weights-every-line-prefix.log", "model-load"),
        ("hicache-generic-assert.log", "hicache"),
        ("deepep-dispatch-limit.log", "parallelism"),
        ("tp-above-visible-gpus.log", "parallelism"),
        ("spec-draft-shape-mismatch.log", "speculative"),
        ("lmcache-with-hicache.log", "flag-conflict"),
    ],
)
def test_the_subsystem_is_where_it_happened(tmp_path: Path, name: str, subsystem: str) -> None:
    assert first(tmp_path, log(name))["subsystem"] == subsystem


# --- paste shapes combined ---------------------------------------------------------------------------------------

BASE = log("dsv4-hicache-size.log")
BASE_LINE = "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."


def _quoted_ci(text: str) -> str:
    return "".join((f"> 2026-06-10T09:12:02.1234567Z {line}" if line else ">") + "\n" for line in text.splitlines())


def _ci_quoted(text: str) -> str:
    return "".join(f"2026-06-10T09:12:02.1234567Z > {line}".rstrip() + "\n" for line in text.splitlines())


def _indented(text: str) -> str:
    return "The log of the prefill unit:\n" + "".join(
        ("  " + line if line else "") + "\n" for line in text.splitlines()
    )


def _every_line(text: str) -> str:
    return "".join(
        (line if line.startswith("[") else f"[2026-01-01 00:00:00 TP0] {line}") + "\n" for line in text.splitlines()
    )


def _ray(text: str) -> str:
    return "".join(f"(SGLangEngine pid=4711) {line}\n" for line in text.splitlines())


@pytest.mark.parametrize(
    "shape",
    [
        _quoted_ci,
        _ci_quoted,
        _indented,
        _every_line,
        _ray,
        lambda t: _quoted_ci(_every_line(t)),
        lambda t: _indented(_ray(t)),
    ],
    ids=["quoted+CI", "CI+quoted", "indented", "prefix-every-line", "ray", "quoted+CI+prefix", "indented+ray"],
)
def test_paste_shapes_combined_give_the_same_diagnosis(tmp_path: Path, shape: Any) -> None:
    d = first(tmp_path, shape(BASE))
    assert (d["signature"], d["root_cause"]["line"]) == ("dsv4-hicache-size-unsupported", BASE_LINE)
    assert not d["root_cause"]["line"].startswith("(")  # no actor prefix in the root cause


def test_a_prefix_on_every_traceback_line_no_longer_hides_the_failure(tmp_path: Path) -> None:
    d = first(tmp_path, log("keyerror-load-weights-every-line-prefix.log"))
    assert d["root_cause"]["line"] == "KeyError: 'model.layers.0.mlp.experts.w2_weight_scale_inv'"
    assert d["signature"] == "model-weight-name-unknown"


# --- the decisive line ---------------------------------------------------------------------------------------------


def test_the_text_shows_every_line_of_the_root_cause_and_the_p2p_advice(tmp_path: Path) -> None:
    doc = explain(tmp_path, log("nccl-peer-access-last-error.log"))
    message = doc["diagnoses"][0]["root_cause"]["message"]
    text = explain(tmp_path, log("nccl-peer-access-last-error.log"), as_json=False)
    for line in message.splitlines():
        assert line.strip() in text
    assert "Cuda failure 'peer access is not supported between these two devices'" in text
    assert "NCCL_P2P_DISABLE=1" in text and "--disable-custom-all-reduce" in text
