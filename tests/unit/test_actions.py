"""Runtime failure families: the action is computed from the run's own numbers, with its arithmetic shown.

Every log line is SGLang 0.5.23's or PyTorch's real text (model_runner.py "Load weight begin/end",
memory_pool.py "KV Cache is allocated", kv_cache_configurator.py "Memory pool end", cuda_graph_setup.py
"Capture ... graph begin", PyTorch's OOM and NCCL watchdog messages), with the run's numbers filled in.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from crashdoc.commands.pipeline import explain_text, load_library_or_fail
from crashdoc.events import Diagnosis
from crashdoc.remedy.pins import LATEST, PINS
from support.corpus import corpus_dir

TB = "/opt/venv/lib/python3.11/site-packages/sglang/srt"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "families"


def _log(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def explain() -> object:
    library = load_library_or_fail(None)

    def run(text: str) -> Diagnosis:
        found = explain_text(text, library)
        assert found, "no diagnosis"
        return found[0]

    return run


def _value(d: Diagnosis, flag: str) -> str | None:
    return next((c.value for c in d.fix.changes if c.flag == flag), None)


def _server_args(**kw: object) -> str:
    body = ", ".join(f"'{k}': {v!r}" for k, v in kw.items())
    return f"[2026-05-01 12:00:00] server_args={{{body}}}"


MEMORY_LINES = _log("memory-lines.log")

WORKSPACE_OOM = _log("workspace-oom.log")


def test_workspace_oom_lowers_the_fraction_by_what_was_missing_and_the_request_again(explain) -> None:
    d = explain(
        _server_args(model_path="meta-llama/Llama-3.1-8B", mem_fraction_static=0.9)
        + "\n"
        + MEMORY_LINES
        + WORKSPACE_OOM
    )
    assert d.signature == "torch-oom-after-kv-pool"
    # (512 - 300) MiB short + 512 MiB again = 724 MiB, of the 78.50 GB free before the weights
    step = (512 - 300 + 512) / 1024 / 78.50
    expected = math.floor((0.9 - step) * 1000) / 1000
    value = _value(d, "--mem-fraction-static")
    assert value is not None and float(value) == pytest.approx(expected)
    assert f"to {value} " in d.fix.summary
    why = " ".join(d.fix.why)
    assert "78.50 GB free before the weights" in why and "212 MiB short" in why
    assert "417000 tokens" in why  # what the KV pool gives up


def test_fraction_is_estimated_from_the_pool_end_line_when_the_log_does_not_show_it(explain) -> None:
    d = explain(MEMORY_LINES + WORKSPACE_OOM)
    estimated = 1 - 9.42 / 78.50
    step = (512 - 300 + 512) / 1024 / 78.50
    assert float(_value(d, "--mem-fraction-static") or "nan") == pytest.approx(
        math.floor((estimated - step) * 1000) / 1000
    )
    assert "(estimated)" in d.fix.summary
    assert any("1 - 9.42/78.50" in w for w in d.fix.why)


KV_OOM = _log("kv-pool-oom.log")


def test_kv_pool_oom_shrinks_the_pool_by_what_was_missing_and_names_the_other_process(explain) -> None:
    d = explain(_server_args(mem_fraction_static=0.88) + "\n" + KV_OOM)
    assert d.signature == "torch-oom-kv-pool-alloc"
    step = (30.12 - 21.40) / 78.90 + 0.01
    assert float(_value(d, "--mem-fraction-static") or "nan") == pytest.approx(math.floor((0.88 - step) * 1000) / 1000)
    assert any("Another process (88231) holds 12.10 GiB" in w for w in d.fix.why)


GRAPH_OOM = _log("graph-capture-oom.log")


def test_graph_capture_oom_halves_the_decode_graph_batch_and_lowers_the_fraction_when_that_is_not_enough(
    explain,
) -> None:
    d = explain(_server_args(tp_size=8, mem_fraction_static=0.9) + "\n" + MEMORY_LINES + GRAPH_OOM)
    assert d.signature == "torch-oom-cuda-graph-capture"
    # SGLang's default for an 80 GB GPU at tp >= 4 is 512 (memory_hook.py): halved
    assert _value(d, "--cuda-graph-max-bs-decode") == "256"
    # 256 batch sizes x 2 MB = 512 MB saved < 384 MiB short + 896 MiB: the fraction goes down too
    assert _value(d, "--mem-fraction-static") is not None
    assert any("2 MB of graph memory per captured batch size" in w for w in d.fix.why)


def test_graph_capture_flag_follows_the_spelling_of_older_releases(explain) -> None:
    d = explain(_server_args(tp_size=1, cuda_graph_max_bs=160) + "\n" + GRAPH_OOM)
    assert _value(d, "--cuda-graph-max-bs") == "80"


WEIGHT_OOM = _log("weight-load-oom.log")


def test_weight_load_oom_asks_for_more_tensor_parallelism_as_a_lower_bound(explain) -> None:
    d = explain(_server_args(tp_size=2) + "\n" + WEIGHT_OOM)
    assert d.signature == "torch-oom-weight-load"
    tp = int(_value(d, "--tp-size") or 0)
    # at least (76.90 + 3.50) GiB per rank x 2 ranks must fit under 0.9 of each 79.19 GiB GPU
    assert tp >= 4 and (76.90 + 3.50) * 2 / tp <= 0.9 * 79.19
    assert any("4 GPUs" in w for w in d.fix.warnings)
    assert "--mem-fraction-static" not in {c.flag for c in d.fix.changes}


WATCHDOG = _log("nccl-watchdog.log")


def test_watchdog_timeout_names_the_rank_that_stopped_first_and_the_network_checks(explain) -> None:
    d = explain(_server_args(tp_size=4) + "\n" + WATCHDOG)
    assert d.signature == "nccl-collective-timeout"
    assert "rank 2" in d.fix.summary
    why = " ".join(d.fix.why)
    assert "last enqueued NCCL work 807" in why
    assert "NCCL_DEBUG=INFO" in why and "NCCL_SOCKET_IFNAME" in why
    assert not d.fix.changes  # it was serving: no start-up timeout to raise


def test_watchdog_timeout_names_a_silent_rank_when_every_reporter_agrees(explain) -> None:
    same = "\n".join(line for line in WATCHDOG.splitlines() if "Rank 2]" not in line)
    d = explain(_server_args(tp_size=4) + "\n" + same)
    assert "rank 2" in d.fix.summary
    assert any("never reported a timeout" in w for w in d.fix.why)


IMA_REPLAY = _log("ima-graph-replay.log")


def test_illegal_memory_access_in_graph_replay_disables_graphs_to_confirm_and_says_what_to_report(explain) -> None:
    d = explain(IMA_REPLAY)
    assert d.signature == "cuda-illegal-memory-access"
    assert _value(d, "--cuda-graph-backend-decode") == "disabled"
    why = " ".join(d.fix.why)
    assert "CUDA_LAUNCH_BLOCKING=1" in why and "sglang.check_env" in why and "graph replay" in why


def test_gloo_timeout_before_ready_suggests_a_longer_dist_timeout_and_the_interface(explain) -> None:
    d = explain(_log("gloo-timeout.log"))
    assert d.signature == "gloo-collective-timeout"
    assert _value(d, "--dist-timeout") == str(1800 * 2)  # twice the 1800000 ms it waited
    assert "TP1" in d.fix.summary and any("GLOO_SOCKET_IFNAME" in w for w in d.fix.why)


def test_device_side_assert_outside_graphs_changes_no_flag_and_says_how_to_find_the_kernel(explain) -> None:
    d = explain(_log("device-assert.log"))
    assert d.signature == "cuda-device-side-assert"
    assert not d.fix.changes
    assert "CUDA_LAUNCH_BLOCKING=1" in d.fix.summary and "report it upstream" in d.fix.summary


def test_older_releases_get_their_own_switch_for_cuda_graphs(explain) -> None:
    """Before 0.5.2x, server_args has disable_cuda_graph and no cuda_graph_backend_decode: the boolean flag."""
    d = explain(_server_args(tp_size=4, disable_cuda_graph=False, cuda_graph_max_bs=160) + "\n" + IMA_REPLAY)
    assert [(c.action, c.flag, c.value) for c in d.fix.changes] == [("add", "--disable-cuda-graph", None)]
    assert "`--disable-cuda-graph`" in d.fix.summary


RELEASE_LINE = "[2026-01-01 00:00:00] sglang version: 0.5.22\n"  # what SGLang logs at start-up


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("missing-gguf.log", "pip install gguf"),
        ("missing-flashinfer.log", "pip install flashinfer_python"),  # the unit's release unknown: no pin
        ("missing-mooncake-hicache.log", "pip install mooncake-transfer-engine"),
    ],
)
def test_missing_package_gives_the_pip_line(explain, name: str, line: str) -> None:
    d = explain(_log(name))
    assert f"`{line}`" in d.fix.summary


def test_the_pin_is_the_units_release_and_only_a_condition_when_the_release_is_unknown(explain) -> None:
    known = explain(RELEASE_LINE + _log("missing-flashinfer.log"))
    assert f"`pip install 'flashinfer_python=={PINS['0.5.22']['flashinfer_python']}'`" in known.fix.summary
    unknown = explain(_log("missing-flashinfer.log"))
    pin = f"flashinfer_python=={PINS[LATEST]['flashinfer_python']}"
    assert pin not in unknown.fix.summary
    assert any(
        f"if the unit runs SGLang {LATEST} (its release is not known here" in w and pin in w for w in unknown.fix.why
    )


def test_version_mismatch_names_the_pinned_version(explain) -> None:
    d = explain(RELEASE_LINE + _log("transformers-import-name.log"))
    assert any(f"SGLang 0.5.22 pins transformers=={PINS['0.5.22']['transformers']}" in w for w in d.fix.why)
    assert any(f"pip install 'transformers=={PINS['0.5.22']['transformers']}'" in w for w in d.fix.why)


def test_undefined_symbol_pins_the_kernel_package_and_torch_together(explain) -> None:
    """The published message of sgl-project/sglang#5100."""
    d = explain(RELEASE_LINE + _log("sgl-kernel-undefined-symbol.log"))
    assert d.signature == "native-extension-abi-mismatch"
    kernel, torch = PINS["0.5.22"]["sglang-kernel"], PINS["0.5.22"]["torch"]
    assert any(
        f"To match SGLang 0.5.22: `pip install 'sglang-kernel=={kernel}' 'torch=={torch}'`" in w for w in d.fix.why
    )
    unknown = explain(_log("sgl-kernel-undefined-symbol.log"))  # as pasted: no release in it
    assert not any(w.startswith("To match SGLang") for w in unknown.fix.why)
    assert any(
        w.startswith(f"If the unit runs SGLang {LATEST} (its release is not known here") for w in unknown.fix.why
    )


CORPUS = corpus_dir()


@pytest.mark.skipif(not (CORPUS / "labels.jsonl").is_file(), reason=f"real-log corpus not found at {CORPUS}")
def test_corpus_031_gets_a_fraction_in_the_window_its_author_found(explain) -> None:
    """The author's LOG.md: 0.985 OOM'd at FlashInfer's 384 MB workspace, 0.96-0.97 is the viable window."""
    d = explain((CORPUS / "031-glm-air-mem0985-flashinfer-workspace-oom.log").read_text(encoding="utf-8"))
    value = float(_value(d, "--mem-fraction-static") or "nan")
    assert 0.96 <= value <= 0.97
    assert any("384 MiB" in w for w in d.fix.why) and any("0.49 GB" in w for w in d.fix.why)


@pytest.mark.skipif(not (CORPUS / "labels.jsonl").is_file(), reason=f"real-log corpus not found at {CORPUS}")
def test_corpus_022_says_no_flag_fits_with_the_numbers(explain) -> None:
    d = explain((CORPUS / "022-glm5-transformers-fallback-hip-oom-8ranks.log").read_text(encoding="utf-8"))
    assert not d.fix.changes
    assert "292.38 GiB" in d.fix.summary and "287.98 GiB" in d.fix.summary


WHEELS = Path(__file__).resolve().parents[2] / ".cache" / "sglang-wheels"


@pytest.mark.skipif(not any(WHEELS.glob("sglang-0.5.*.whl")), reason=f"no SGLang 0.5.x wheels in {WHEELS}")
def test_the_pins_are_what_the_wheels_require() -> None:
    """remedy/pins.py is generated from the wheels' METADATA; regenerate it when this fails."""
    import runpy

    script = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "sglang-pins.py"))
    for wheel in sorted(WHEELS.glob("sglang-0.5.*.whl")):
        release = wheel.name.split("-")[1]
        assert PINS[release] == script["pins_of"](str(wheel)), release
