"""Traceback assembly on the shapes SGLang really produces, one journal entry per line."""

from __future__ import annotations

from crashdoc.assembly.fingerprint import fingerprint_traceback, normalise_message
from crashdoc.assembly.logline import split_prefix
from crashdoc.assembly.traceback import Limits, TracebackAssembler
from crashdoc.events import LogLine
from crashdoc.text import clean

UNIT = "sglang-prefill.service"


def feed(lines: list[tuple[int, str]], assembler: TracebackAssembler | None = None):
    a = assembler or TracebackAssembler()
    out = []
    for pid, text in lines:
        out.extend(a.feed(LogLine(UNIT, pid, text, 1.0, "inv")))
    out.extend(a.flush())
    return out


def wrapped(rank: str, exc_lines: list[str], frames: int = 1) -> list[str]:
    body = [f"[2026-05-01 12:00:03 {rank}] Scheduler hit an exception: Traceback (most recent call last):"]
    for i in range(frames):
        body += [
            f'  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line {i}, in f{i}',
            "    do()",
        ]
    return [*body, *exc_lines, ""]


def test_interleaved_ranks_are_kept_apart_by_pid() -> None:
    tp0 = wrapped("TP0", ["ValueError: first"], frames=3)
    tp1 = wrapped("TP1", ["ValueError: second"], frames=3)
    lines = [x for pair in zip([(10, t) for t in tp0], [(11, t) for t in tp1], strict=True) for x in pair]
    tbs = feed(lines)
    assert sorted((tb.rank, tb.final.message, len(tb.final.frames)) for tb in tbs) == [
        ("TP0", "first", 3),
        ("TP1", "second", 3),
    ]
    assert all(tb.wrapper == "Scheduler" for tb in tbs)


def test_a_chain_inside_a_wrapped_record_is_one_traceback() -> None:
    lines = wrapped(
        "TP1",
        [
            "RuntimeError: CUDA error: invalid argument",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "/x/sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", line 602, in __init__',
            "    raise Exception(",
            "Exception: Capture cuda graph failed: CUDA error: invalid argument",
            "Possible solutions:",
            "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        ],
    )
    [tb] = feed([(5, t) for t in lines])
    assert [e.type for e in tb.chain] == ["RuntimeError", "Exception"]
    assert tb.final.message.splitlines()[1] == "Possible solutions:"


def test_a_blank_line_inside_a_message_does_not_cut_it() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/x/transformers/models/auto/configuration_auto.py", line 1362, in from_pretrained',
        "    raise ValueError(",
        "ValueError: The checkpoint you are trying to load has model type `glm_moe_dsa` but ...",
        "",
        "You can update Transformers with the command `pip install --upgrade transformers`.",
    ]
    [tb] = feed([(0, t) for t in lines])
    assert tb.final.line.startswith("ValueError: The checkpoint")
    assert tb.final.message.endswith("`pip install --upgrade transformers`.")


def test_a_log_cut_mid_traceback_still_gives_the_exception() -> None:
    lines = [
        "                                   ^^^^^^^^^^^^",
        '  File "/x/triton/compiler/compiler.py", line 80, in make_ir',
        "    return ast_to_ttir(self.fn, self, context=context)",
        "triton.compiler.errors.CompilationError: at 1:0:",
        "def _fwd_grouped_kernel_stage1(",
        "^",
        'ValueError("type fp8e4nv not supported in this architecture.")',
        "",
        "[2026-06-10 06:37:50] Received sigquit from a child process. It usually means the child failed.",
    ]
    [tb] = feed([(0, t) for t in lines])
    assert tb.truncated and tb.final.type == "triton.compiler.errors.CompilationError"
    assert tb.final.message.splitlines()[-1].startswith("ValueError(")


def test_thread_and_process_headers_are_kept() -> None:
    lines = [
        "Exception in thread Thread-4 (transfer_worker):",
        "Traceback (most recent call last):",
        '  File "/x/sglang/srt/disaggregation/mooncake/conn.py", line 2882, in transfer_worker',
        "RuntimeError: Transfer thread failed because of boom.",
    ]
    [tb] = feed([(0, t) for t in lines])
    assert tb.header == "Exception in thread Thread-4 (transfer_worker):"


def test_deep_recursion_and_huge_messages_stay_bounded() -> None:
    limits = Limits(max_frames=120, max_message_lines=80, max_text_chars=16 * 1024)
    lines = ["Traceback (most recent call last):"]
    for i in range(10_000):
        lines += [f'  File "/x/sglang/srt/layers/deep.py", line {i}, in recurse', "    recurse()"]
    lines += ["RecursionError: maximum recursion depth exceeded", *(f"detail {i} " + "x" * 1000 for i in range(500))]
    [tb] = feed([(0, t) for t in lines], TracebackAssembler(limits))
    assert len(tb.final.frames) == 120 and tb.truncated
    assert tb.final.frames[0].line == 0 and tb.final.frames[-1].line == 9_999  # entry point and innermost kept
    assert len(tb.final.message.splitlines()) <= 80 and len(tb.text) <= 16 * 1024 + 200


def test_ansi_and_control_characters_are_removed_before_parsing() -> None:
    assert clean("\x1b[1;33mWARNING\x1b[0m: x\x00y") == "WARNING: xy"
    assert split_prefix("[2026-05-01 12:00:03.417 DP1 TP3 EP3] hello") == (True, "DP1 TP3 EP3", "hello")
    head = "Traceback (most recent call last):"
    assert split_prefix(f"[rank0]: {head}") == (False, "", head)


def test_the_same_error_from_eight_ranks_has_one_fingerprint() -> None:
    tbs = feed(
        [
            (100 + r, t)
            for r in range(8)
            for t in wrapped(
                f"TP{r}",
                [
                    f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB. GPU {r} has a total "
                    f"capacity of 79.1{r} GiB of which 3.88 GiB is free."
                ],
            )
        ]
    )
    assert len(tbs) == 8 and len({fingerprint_traceback(tb) for tb in tbs}) == 1
    assert "<n>" in normalise_message("GPU 3 has 79.1 GiB at 0x7f00 in /opt/x/y.py")


def test_a_lazy_pattern_answers_as_the_compiled_one_and_becomes_it_on_first_use() -> None:
    """The cold paths' patterns (crashdoc.text.LazyPattern) are compiled on first use: same answers as `re`, and
    after that first call each method is the compiled pattern's own (nothing added per call)."""
    import re

    from crashdoc.text import LazyPattern

    text = "Error at 0xDEADbeef and 0x1f; again 0xdeadbeef"
    lazy, plain = LazyPattern(r"0x([0-9a-f]+)", re.I), re.compile(r"0x([0-9a-f]+)", re.I)
    assert "search" not in vars(lazy)  # nothing compiled at import
    assert lazy.search(text).span() == plain.search(text).span()  # type: ignore[union-attr]
    assert lazy.findall(text) == plain.findall(text) == ["DEADbeef", "1f", "deadbeef"]
    assert lazy.sub("<hex>", text, 2) == plain.sub("<hex>", text, 2)
    assert [m.group(1) for m in lazy.finditer(text, 10)] == [m.group(1) for m in plain.finditer(text, 10)]
    assert lazy.match(text) is None and lazy.fullmatch("0x1F") is not None
    assert lazy.search.__self__.pattern == lazy.pattern  # type: ignore[attr-defined]
