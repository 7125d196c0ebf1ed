"""crashdoc's judgement around the root-cause line, on real SGLang messages.

- Fatal or handled: a traceback SGLang logged and carried on from (its record says "disabled",
  "retrying", ...), or that the server survived (it said ready, or served batches after it), is a
  warning: shown, counted in `crashdoc_warnings_total{unit,kind}`, never a crash or a loop.
- Two axes: every diagnosis has a subsystem (`category`) and a kind of failure.
- Logs as people paste them: quoted, behind CI/kubectl/compose columns, without indentation, cut
  mid-traceback, or just the exception line.
- Collateral stays out of the root cause: a native crash dump after NCCL's watchdog timeout, the
  idle threads of a faulthandler dump, the launcher's SIGQUIT.

The log lines are SGLang 0.5.23's own messages (file:line in the comments) and lines from public
SGLang issue threads (sgl-project/sglang#3424, #3709, #26987: program output, not prose).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from crashdoc.cli import main
from crashdoc.diagnosis.category import signature_kind
from crashdoc.diagnosis.engine import Engine
from crashdoc.events import KINDS, Lifecycle
from crashdoc.matching.library import builtin_signature_dirs, load_bytes, load_library
from crashdoc.matching.matcher import Matcher
from support.engine_driver import Host
from support.explaining import explain

FIXTURES = Path(__file__).parents[1] / "fixtures" / "judgement"

# A decode server replaying a CUDA graph when a kernel faults (the scheduler's wrapper, then the launcher's
# SIGQUIT handler: srt/managers/scheduler.py:6371, srt/entrypoints/engine.py:1978; the torch message as in
# sgl-project/sglang#26987).
GRAPH_REPLAY_IMA = (FIXTURES / "graph-replay-illegal-memory-access.log").read_text(encoding="utf-8")
IMA_LINE = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"

# A healthy DeepSeek-V3.1 server whose load publisher could not bind (load_publisher.py:188 logs it with
# exc_info=True and goes on), then ready (http_server.py:2600) and serving (metrics_reporter.py:754, 963).
HEALTHY_ZMQ = (FIXTURES / "healthy-load-publisher-zmq.log").read_text(encoding="utf-8")
ZMQ_LINE = "zmq.error.ZMQError: Address already in use (addr='tcp://10.0.0.5:5757')"

# utils/common.py retry(): traceback.print_exc(), then "retry() failed once ...", then the next try worked
# (model_config.py:1769 checks the Hub for hf_quant_config.json this way).
HUB_RETRY = [
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/utils/common.py", line 3787, in retry',
    "    return fn()",
    '  File "/usr/local/lib/python3.12/dist-packages/requests/adapters.py", line 700, in send',
    "    raise ConnectionError(e, request=request)",
    "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries "
    "exceeded with url: /api/models/deepseek-ai/DeepSeek-V3.1 (Caused by NameResolutionError)",
    "[2026-01-02 03:04:09] retry() failed once (0th try, maximum 2 retries). Will delay 1.03s and retry. Error: "
    "HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded",
]

# NCCL's watchdog on a serving TP rank (torch ProcessGroupNCCL, as in sgl-project/sglang#3424 and #3709), then
# std::terminate, faulthandler's dump (an idle tqdm thread and the scheduler's thread) and the launcher's SIGQUIT.
WATCHDOG = (FIXTURES / "nccl-watchdog-abort.log").read_text(encoding="utf-8")
WATCHDOG_LINE = WATCHDOG.splitlines()[1]

# A native crash inside a compiled extension while capturing CUDA graphs: faulthandler's dump only.
SEGFAULT = (FIXTURES / "native-segfault.log").read_text(encoding="utf-8")

DSV4_LINE = "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."


# --- pasted logs in every shape ------------------------------------------------------------------------------


def _quoted(text: str) -> str:
    return "".join(f"> {line}\n" if line else ">\n" for line in text.splitlines())


def _prefixed(prefix: str) -> Any:
    return lambda text: "".join(f"{prefix}{line}\n" for line in text.splitlines())


def _unindented(text: str) -> str:
    return "".join(line.lstrip() + "\n" for line in text.splitlines())


def _mid_traceback(text: str) -> str:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "model_runner.py" in line)
    return "\n".join(lines[start:]) + "\n"


def _fenced(text: str) -> str:
    return "```text\n" + text + "```\n"


def _docker_json(text: str) -> str:
    """docker's json-file driver: one JSON record per line, the program's line (colours and all) in `log`."""
    return "".join(
        json.dumps({"log": f"\x1b[0m{line}\n", "stream": "stderr", "time": f"2026-06-10T09:12:02.{i:06d}Z"}) + "\n"
        for i, line in enumerate(text.splitlines())
    )


SHAPES = {
    "as logged": lambda text: text,
    "quoted with > in a ticket": _quoted,
    "GitHub Actions timestamps": _prefixed("2026-06-10T09:12:02.1234567Z "),
    "kubectl logs --timestamps": _prefixed("2026-06-10T09:12:02.123456789Z "),
    "docker compose column": _prefixed("sglang-decode-1  | "),
    "docker json-file records": _docker_json,
    "container runtime log file (CRI)": _prefixed("2026-06-10T09:12:02.123456789Z stderr F "),
    "a Python wrapper's logging column": _prefixed("2026-06-10 09:12:02,123 - __main__ - INFO - "),
    "kubectl logs --prefix": _prefixed("[pod/sglang-decode-0/sglang] "),
    "indentation stripped by a chat": _unindented,
    "cut mid-traceback and unindented": lambda text: _unindented(_mid_traceback(text)),
    "in a code fence, quoted": lambda text: _quoted(_fenced(text)),
    "double-spaced (sgl-project/sglang#10350)": lambda text: "\n\n".join(text.splitlines()) + "\n",
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_paste_shape_of_a_graph_replay_fault_gets_the_same_diagnosis(tmp_path: Path, shape: str) -> None:
    [d] = explain(tmp_path, SHAPES[shape](GRAPH_REPLAY_IMA))["diagnoses"]
    assert d["signature"] == "cuda-illegal-memory-access"
    assert d["root_cause"]["line"] == IMA_LINE
    assert (d["category"], d["subsystem"], d["kind"]) == ("cuda-graph", "cuda-graph", "bug")
    mid = "mid-traceback" in " ".join(d["evidence"])
    assert mid == (shape == "cut mid-traceback and unindented"), d["evidence"]
    read_as = [e for e in d["evidence"] if e.startswith("read the pasted log after: ")]
    assert bool(read_as) == (shape not in ("as logged", "double-spaced (sgl-project/sglang#10350)")), read_as


def test_a_paste_cut_mid_traceback_says_what_is_missing(tmp_path: Path) -> None:
    text = explain(tmp_path, _mid_traceback(GRAPH_REPLAY_IMA), as_json=False)
    assert f"root cause: {IMA_LINE}" in text
    assert "the log starts mid-traceback (no `Traceback (most recent call last):` line)" in text


@pytest.mark.parametrize("text", [DSV4_LINE + "\n", "> " + DSV4_LINE + "\n", "\n  " + DSV4_LINE + "\n\n"])
def test_a_lone_exception_line_is_matched_on_its_message(tmp_path: Path, text: str) -> None:
    [d] = explain(tmp_path, text)["diagnoses"]
    assert d["signature"] == "dsv4-hicache-size-unsupported"
    assert d["root_cause"]["line"] == DSV4_LINE
    assert "no traceback given, matched on the message alone" in d["evidence"]
    assert (d["subsystem"], d["kind"]) == ("hicache", "config")


def test_a_warning_line_alone_is_no_failure(tmp_path: Path) -> None:
    text = "FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated.\n"
    assert explain(tmp_path, text) == {"diagnoses": [], "warnings": []}


# --- fatal or handled -----------------------------------------------------------------------------------------


def test_a_healthy_server_with_a_handled_traceback_has_no_failure_and_one_warning(tmp_path: Path) -> None:
    doc = explain(tmp_path, HEALTHY_ZMQ)
    assert doc["diagnoses"] == []
    [w] = doc["warnings"]
    assert w["root_cause"]["line"] == ZMQ_LINE
    assert w["severity"] == "warning"
    assert w["handled"].startswith("logged as: load-publisher disabled: failed to bind the load socket")
    assert (w["subsystem"], w["kind"]) == ("network", "environment")
    text = explain(tmp_path, HEALTHY_ZMQ, as_json=False)
    assert text.startswith("No failure found.\n")
    assert f"error: {ZMQ_LINE}" in text and "handled: logged as: load-publisher disabled" in text


def test_the_same_handled_error_in_every_rank_is_one_warning(tmp_path: Path) -> None:
    """Eight DP ranks each fail to bind their own port of the range (load_publisher.py: base + rank)."""
    lines = HEALTHY_ZMQ.splitlines()
    record, traceback_lines = lines[2], lines[3:14]
    ranks = []
    for rank in range(8):
        port = 5757 + rank
        ranks.append(record.replace("TP0", f"DP{rank} TP{rank} EP{rank}").replace("5757", str(port)))
        ranks.extend(t.replace("5757", str(port)) for t in traceback_lines)
    doc = explain(tmp_path, "\n".join([*lines[:2], *ranks, *lines[14:]]) + "\n")
    assert doc["diagnoses"] == []
    [w] = doc["warnings"]
    assert w["crashes"] == 8
    assert "the same error in 8 processes: DP0 TP0 EP0, DP1 TP1 EP1" in " ".join(w["evidence"])


def test_a_traceback_the_server_survived_is_a_warning_even_without_words(tmp_path: Path) -> None:
    """No record says it was handled, but the server said ready after it."""
    lines = HEALTHY_ZMQ.splitlines()
    lines[2] = "[2026-01-02 03:04:21 TP0] Init load publisher."  # no "disabled" any more
    doc = explain(tmp_path, "\n".join(lines) + "\n")
    assert doc["diagnoses"] == []
    assert [w["handled"] for w in doc["warnings"]] == ["the server said it was ready after it"]


def test_a_retried_traceback_is_a_warning(tmp_path: Path) -> None:
    text = "\n".join([*HEALTHY_ZMQ.splitlines()[:2], *HUB_RETRY, *HEALTHY_ZMQ.splitlines()[-4:]]) + "\n"
    doc = explain(tmp_path, text)
    assert doc["diagnoses"] == []
    [w] = [w for w in doc["warnings"] if "huggingface.co" in w["root_cause"]["line"]]
    assert w["handled"].startswith("SGLang retried after it (retry() failed once")
    assert w["kind"] == "hardware-network"


def test_the_same_traceback_without_ready_or_words_is_a_failure(tmp_path: Path) -> None:
    """The server never said it was ready: the traceback is fatal (a paste cut before ready counts too)."""
    lines = HEALTHY_ZMQ.splitlines()
    lines[2] = "[2026-01-02 03:04:21 TP0] Init load publisher."
    doc = explain(tmp_path, "\n".join(lines[:16]) + "\n")
    [d] = doc["diagnoses"]
    assert d["root_cause"]["line"] == ZMQ_LINE and d["severity"] == "critical"
    assert doc["warnings"] == []


def test_a_fatal_error_after_a_handled_one_is_the_root_cause(tmp_path: Path) -> None:
    text = HEALTHY_ZMQ + GRAPH_REPLAY_IMA
    doc = explain(tmp_path, text)
    [d] = doc["diagnoses"]
    assert d["root_cause"]["line"] == IMA_LINE
    assert any(e.startswith("handled earlier, not the cause: zmq.error.ZMQError") for e in d["evidence"])
    assert [w["root_cause"]["line"] for w in doc["warnings"]] == [ZMQ_LINE]


def test_decode_lines_before_a_sigquit_do_not_excuse_a_traceback(tmp_path: Path) -> None:
    """A bare traceback, a few batch lines of the other ranks, then the launcher's SIGQUIT: fatal."""
    text = "\n".join(
        [
            "[2026-06-10 09:12:00] The server is fired up and ready to roll!",
            *HUB_RETRY[:6],
            "[2026-06-10 09:12:01] Received sigquit from a child process. It usually means the child failed.",
            "[2026-06-10 09:12:01 TP1] Decode batch, #running-req: 3, #token: 812, token usage: 0.01, #queue-req: 0,",
        ]
    )
    [d] = explain(tmp_path, text + "\n")["diagnoses"]
    assert d["root_cause"]["line"].startswith("requests.exceptions.ConnectionError: HTTPSConnectionPool")


def _shipped_host() -> Host:
    host = Host()
    host.engine = Engine(Matcher(load_library(builtin_signature_dirs())), thresholds=host.engine.thresholds)
    return host


def test_the_unit_page_lists_the_errors_the_server_survived() -> None:
    from crashdoc.outputs.html import unit_page

    host = _shipped_host()
    host.start()
    for text in HEALTHY_ZMQ.splitlines():
        host.line(text)
    page = unit_page(host.rec, None, None, host.engine.warnings([host.unit])).decode()
    assert "No crash loop diagnosed." in page
    assert "Errors the server survived (warnings, no crash)" in page
    assert "zmq.error.ZMQError: Address already in use (addr=&#x27;tcp://10.0.0.5:5757&#x27;)" in page


def test_the_daemon_counts_a_handled_traceback_as_a_warning_and_no_crash() -> None:
    host = _shipped_host()
    host.start()
    for text in HEALTHY_ZMQ.splitlines():
        host.line(text)
    host.wait(30)
    rec = host.rec
    assert (rec.crashes_total, rec.crashloop, rec.diagnosis) == (0, False, None)
    assert dict(rec.warnings_by_kind) == {"environment": 1}
    assert [e for e in host.kinds() if e != "line-failure"] == []  # no crash, no loop: nothing to alert on
    assert host.engine.diagnoses() == []
    assert [w.root_cause.line for w in host.engine.warnings()] == [ZMQ_LINE]


def test_a_unit_that_exits_after_a_handled_traceback_crashes_of_something_else() -> None:
    """The handled traceback stays a warning; the crash is explained by what came after it."""
    host = _shipped_host()
    for _ in range(2):
        host.start()
        for text in HEALTHY_ZMQ.splitlines()[:15]:  # before ready
            host.line(text)
        host.crash(lines=GRAPH_REPLAY_IMA.splitlines())
        host.wait(2)
    rec = host.rec
    assert rec.crashloop and rec.diagnosis is not None
    assert rec.diagnosis.root_cause.line == IMA_LINE
    assert rec.warnings_by_kind["environment"] == 2


def test_warnings_appear_in_the_metrics_with_bounded_labels() -> None:
    from crashdoc.outputs.metrics import CrashdocCollector, Health, exposition, make_registry

    host = _shipped_host()
    host.start()
    for text in HEALTHY_ZMQ.splitlines():
        host.line(text)
    import threading

    text = exposition(make_registry(CrashdocCollector(host.engine.units, Health(), threading.Lock()))).decode()
    found = {
        line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("crashdoc_warnings_total{")
    }
    assert len(found) == len(KINDS)
    assert found['kind="environment",unit="sglang-prefill.service"'] == 1.0
    assert sum(found.values()) == 1.0


# --- collateral stays out of the root cause ----------------------------------------------------------------------


def test_an_nccl_watchdog_timeout_is_the_root_cause_not_the_abort_that_follows(tmp_path: Path) -> None:
    [d] = explain(tmp_path, WATCHDOG)["diagnoses"]
    assert d["signature"] == "nccl-collective-timeout"
    assert d["root_cause"]["line"] == WATCHDOG_LINE
    assert (d["category"], d["kind"]) == ("distributed", "hardware-network")
    assert any("Fatal Python error: Aborted" in e and "consequence" in e for e in d["evidence"]), d["evidence"]


def test_a_watchdog_timeout_without_the_dump_keeps_the_watchdog_line(tmp_path: Path) -> None:
    text = "\n".join(line for line in WATCHDOG.splitlines() if "Fatal Python" not in line and "File" not in line)
    [d] = explain(tmp_path, text + "\n")["diagnoses"]
    assert d["root_cause"]["line"] == WATCHDOG_LINE


@pytest.mark.parametrize(
    "shape", ["as logged", "double-spaced (sgl-project/sglang#10350)", "quoted with > in a ticket"]
)
def test_a_native_crash_names_the_crashing_thread_and_what_to_collect(tmp_path: Path, shape: str) -> None:
    [d] = explain(tmp_path, SHAPES[shape](SEGFAULT))["diagnoses"]
    assert d["root_cause"] == {
        "type": "Fatal Python error",
        "message": "Segmentation fault\n(1 other thread stack(s) in the dump)",
        "line": "Fatal Python error: Segmentation fault",
    }
    assert d["kind"] == "bug" and d["severity"] == "critical"
    where = "/usr/local/lib/python3.12/dist-packages/sgl_kernel/allreduce.py:120"
    assert f"the crashing thread was running all_reduce at {where}" in d["evidence"]
    assert not any("tqdm" in e or "threading.py" in e for e in d["evidence"])
    for what in ("core dump", "PYTHONFAULTHANDLER", "CUDA_LAUNCH_BLOCKING=1"):
        assert what in d["fix"]["summary"]


# --- the two axes ---------------------------------------------------------------------------------------------------


def test_every_shipped_signature_has_a_kind_and_checks_are_configuration() -> None:
    library = load_library(builtin_signature_dirs())
    kinds = {s.id: signature_kind(s) for s in library.signatures}
    assert set(kinds.values()) == set(KINDS)
    assert all(kinds[s.id] == "config" for s in library.signatures if "/validation/" in s.origin)
    assert kinds["torch-oom-weight-load"] == "resource"
    assert kinds["nccl-collective-timeout"] == "hardware-network"
    assert kinds["mooncake-not-installed"] == "environment"
    assert kinds["cuda-illegal-memory-access"] == "bug"


def test_a_signature_may_state_its_kind() -> None:
    raw = (Path(__file__).parents[1] / "fixtures" / "signatures").glob("*.yaml")
    source = next(iter(sorted(raw))).read_bytes()
    edited = source.replace(b"\n  severity: critical\n", b"\n  severity: critical\n  kind: hardware-network\n", 1)
    assert edited != source
    sigs, problems = load_bytes("sig.yaml", edited)
    assert problems == []
    assert signature_kind(sigs[0]) == "hardware-network"
    _, problems = load_bytes("sig.yaml", edited.replace(b"kind: hardware-network", b"kind: cosmic-rays"))
    assert problems and "kind" in str(problems[0])


def test_pid1_lifecycle_is_unchanged_by_the_judgement() -> None:
    """A run that PID 1 says failed is a crash even when its only traceback was handled: exit evidence wins."""
    host = _shipped_host()
    host.start()
    for text in HEALTHY_ZMQ.splitlines()[:15]:
        host.line(text)
    host.t += 1
    host.pid1(Lifecycle.EXITED, exit_code="killed", exit_status="KILL")
    host.pid1(Lifecycle.FAILED, result="signal")
    host.wait(3)
    assert host.rec.crashes_total == 1
    [d] = host.engine.diagnoses()
    assert d.root_cause.line == ZMQ_LINE  # SGLang said it handled it, but nothing else explains the death
    assert host.engine.warnings() == []


def test_sibling_ranks_teardown_and_their_dumps_stay_collateral(tmp_path: Path) -> None:
    """TP1 runs out of memory; TP0 then loses its gloo peer and aborts (a faulthandler dump), the launcher
    reports the dead child and SIGQUITs: the root cause is TP1's error."""
    [d] = explain(tmp_path, (FIXTURES / "oom-then-sibling-teardown.log").read_text(encoding="utf-8"))["diagnoses"]
    assert d["root_cause"]["line"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB")
    assert (d["subsystem"], d["kind"]) == ("memory", "resource")
    assert "2 other traceback(s) in this run treated as consequences" in d["evidence"]


@pytest.mark.parametrize(
    "teardown",
    [
        "[2025-08-01 10:00:03] Child process unexpectedly failed with exitcode=9. pid=4242",  # engine.py, 0.4.9
        "[2025-08-01 10:00:03] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
    ],
)
def test_a_traceback_before_sglangs_teardown_is_fatal_whatever_served_before(tmp_path: Path, teardown: str) -> None:
    text = "\n".join(
        [
            "[2025-08-01 10:00:00] The server is fired up and ready to roll!",
            "[2025-08-01 10:00:01 TP0] Decode batch, #running-req: 3, #token: 812, token usage: 0.01, #queue-req: 0,",
            *HUB_RETRY[:6],
            teardown,
        ]
    )
    doc = explain(tmp_path, text + "\n")
    assert [d["root_cause"]["line"][:38] for d in doc["diagnoses"]] == ["requests.exceptions.ConnectionError: H"]
    assert doc["warnings"] == []


def test_diagnose_file_reads_a_pasted_log_like_explain(tmp_path: Path) -> None:
    path = tmp_path / "ticket.log"
    path.write_text(SHAPES["quoted with > in a ticket"](GRAPH_REPLAY_IMA), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["diagnose", "--json", "--file", str(path)])
    assert status == 1  # a failure found
    assert err.getvalue() == f"crashdoc: {path} is a text log, read as a pasted log (as `crashdoc explain` does)\n"
    [d] = json.loads(out.getvalue())["diagnoses"]
    assert (d["root_cause"]["line"], d["subsystem"]) == (IMA_LINE, "cuda-graph")


def test_a_flood_of_handled_tracebacks_is_counted_and_stays_bounded() -> None:
    host = _shipped_host()
    host.start()
    for i in range(2000):
        host.line(
            "[2026-01-02 03:04:21 TP0] load-publisher: publish failed; routers fall back to their in-flight load signal"
        )
        host.line("Traceback (most recent call last):")
        host.line('  File "/usr/local/lib/python3.12/dist-packages/zmq/sugar/socket.py", line 700, in send_multipart')
        word = "".join(chr(97 + int(d)) for d in str(i))  # distinct errors, not only distinct numbers
        host.line(f"zmq.error.Again: Resource temporarily unavailable ({word})")
    host.line("[2026-01-02 03:04:22] The server is fired up and ready to roll!")
    [run] = host.runs_seen()
    assert sum(host.rec.warnings_by_kind.values()) == 2000
    assert len(host.engine.warnings()) == 16 and run.tracebacks == ()
    assert host.engine.diagnoses() == []


def test_diagnose_on_a_unit_systemd_says_is_running_keeps_its_open_traceback_a_warning() -> None:
    """`crashdoc diagnose` on the host: an unwrapped traceback after ready in a process that logs no batches
    is judged by systemd: the run is still active, so it did not end it."""
    from crashdoc.events import UnitState

    host = _shipped_host()
    host.start()
    for text in [*HEALTHY_ZMQ.splitlines()[-3:], *HUB_RETRY[:6]]:
        host.line(text, pid=7)  # the HTTP server's process: ready, then a traceback, no batch lines after it
    running = UnitState(host.unit, active_state="active", sub_state="running", invocation=f"inv{host.runs}")
    host.feed(running)
    host.engine.finish()
    assert host.engine.diagnoses() == []
    [w] = host.engine.warnings()
    assert w.handled == "systemd says the run is still active"
    assert w.root_cause.line.startswith("requests.exceptions.ConnectionError")


def test_without_systemds_word_the_same_open_traceback_is_a_failure() -> None:
    host = _shipped_host()
    host.start()
    for text in [*HEALTHY_ZMQ.splitlines()[-3:], *HUB_RETRY[:6]]:
        host.line(text, pid=7)
    host.engine.finish()
    [d] = host.engine.diagnoses()
    assert d.root_cause.line.startswith("requests.exceptions.ConnectionError")


def test_words_of_an_unrelated_record_do_not_excuse_an_uncaught_traceback(tmp_path: Path) -> None:
    """An info record that says "disabled" (server_args.py), then Python's own traceback of an uncaught error
    and the launcher's teardown: the words were not about this traceback, it was fatal."""
    text = "\n".join(
        [
            "[2026-01-02 03:04:05] Radix cache is disabled for decode server",
            *HUB_RETRY[:6],
            "[2026-01-02 03:04:06] Received sigquit from a child process. It usually means the child failed.",
        ]
    )
    doc = explain(tmp_path, text + "\n")
    assert [d["root_cause"]["line"][:38] for d in doc["diagnoses"]] == ["requests.exceptions.ConnectionError: H"]
    assert doc["warnings"] == []


def test_a_paste_that_ends_with_a_handled_record_is_a_warning(tmp_path: Path) -> None:
    head = HEALTHY_ZMQ.splitlines()[:14]  # up to the ZMQError line: nothing after it
    doc = explain(tmp_path, "\n".join(head) + "\n")
    assert doc["diagnoses"] == []
    assert [w["root_cause"]["line"] for w in doc["warnings"]] == [ZMQ_LINE]
