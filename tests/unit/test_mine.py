"""`crashdoc signatures mine`: rebuilding SGLang's messages, candidate files, coverage.

The fixture tree `tests/fixtures/mine/sglang` holds real SGLang 0.5.23 messages, each built
with one of the forms the miner must read. When the real package is unpacked at
.cache/sglang-0.5.23/sglang (`scripts/fetch-sglang.sh`, run by `make test`; or $CRASHDOC_SGLANG_SRC), the counts
over it are checked too.
"""

from __future__ import annotations

import io
import json
import os
import textwrap
import zipfile
from pathlib import Path

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from crashdoc.authoring.mine import (
    Hole,
    MineError,
    Template,
    candidate_id,
    locate,
    measure_coverage,
    mine,
    mine_source,
    pattern_and_example,
    report_json,
    report_text,
    write_candidates,
)
from crashdoc.authoring.selftest import test_library as run_library_examples
from crashdoc.cli import main
from crashdoc.matching.library import builtin_signature_dirs, load_file, load_library

FIXTURE = Path(__file__).parent.parent / "fixtures" / "mine"
REAL = Path(os.environ.get("CRASHDOC_SGLANG_SRC", Path(__file__).resolve().parents[2] / ".cache/sglang-0.5.23/sglang"))
DSV4 = "srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py"


@pytest.fixture(scope="module")
def report():
    return mine(str(FIXTURE), workers=1)


def by_source(report):
    return {c.statement.source: c for c in report.candidates}


# --- rebuilding messages -----------------------------------------------------------------


def test_every_form_is_rebuilt(report):
    got = {s: (c.statement.kind, c.statement.exception, c.message, c.flags) for s, c in by_source(report).items()}
    assert got == {
        # implicit concatenation
        f"{DSV4}:12": (
            "raise",
            "ValueError",
            "DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead.",
            ("--hicache-size", "--hicache-ratio"),
        ),
        # f-string with an attribute hole
        "srt/arg_groups/hicache_hook.py:12": (
            "raise",
            "ValueError",
            "--hicache-host-memory-mode x requires a host pool size: pass --hicache-size or --hicache-ratio.",
            ("--hicache-host-memory-mode", "--hicache-size", "--hicache-ratio"),
        ),
        # `+` around a join of a runtime list
        "srt/arg_groups/pd_disaggregation_hook.py:7": (
            "raise",
            "ValueError",
            "--enable-pd-role-switch does not rebuild role-specific state for the following features: x. "
            "Remove these options or drop --enable-pd-role-switch.",
            ("--enable-pd-role-switch",),
        ),
        # `%`
        "srt/arg_groups/pd_disaggregation_hook.py:16": (
            "raise",
            "ValueError",
            "--kv-cache-dtype=bfloat16 requires torch.float4_e2m1fn_x2 support. Please use PyTorch 2.8.0+ "
            "with CUDA 12.8+.",
            ("--kv-cache-dtype",),
        ),
        # `.format` with an automatic and a named field
        "srt/arg_groups/pd_disaggregation_hook.py:23": (
            "raise",
            "ValueError",
            "--dp-size 8 with --attn-dp-size 8: data-parallel replicas combined with attention data parallelism "
            "are not supported.",
            ("--dp-size", "--attn-dp-size"),
        ),
        # assert with a message; assert with a local name assigned once
        "srt/arg_groups/deepseek_v4_hook.py:6": (
            "assert",
            "AssertionError",
            "--dsv4-attn-backend trtllm requires an SM100/SM103 (Blackwell) GPU.",
            ("--dsv4-attn-backend",),
        ),
        "srt/arg_groups/deepseek_v4_hook.py:10": (
            "assert",
            "AssertionError",
            "--dsv4-attn-backend trtllm requires kv_cache_dtype=fp8_e4m3, got bfloat16.",
            ("--dsv4-attn-backend",),
        ),
        # UPPER_CASE module constant
        "srt/layers/attention/xpu_backend.py:12": (
            "raise",
            "ValueError",
            "DCP with sliding-window layers is not supported on intel_xpu. Drop --dcp-size.",
            ("--dcp-size",),
        ),
        # assigned in two branches: the example takes the first
        "srt/layers/quantization/humming.py:19": (
            "raise",
            "ImportError",
            "Humming quantization requires `humming-kernels`. Please install it to use `--quantization humming`.",
            ("--quantization",),
        ),
        # assigned once, then extended with +=: the example has every piece
        "srt/model_executor/pool_configurator.py:11": (
            "raise",
            "RuntimeError",
            "Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.8",
            ("--mem-fraction-static",),
        ),
        # half imported: mined, with a hole where the imported text goes
        "srt/managers/scheduler.py:15": (
            "raise",
            "ValueError",
            "<CP_TP_PREFIX>--speculative-algorithm is not supported with CP-TP group sharing.",
            ("--speculative-algorithm",),
        ),
    }


def test_patterns_say_what_varies(report):
    c = by_source(report)
    # the last hole is greedy (a lazy one would stop inside "0.8." or capture one character)
    assert c["srt/arg_groups/hicache_hook.py:12"].pattern == (
        r"--hicache-host-memory-mode (?P<hicache_host_memory_mode>.+) requires a host pool size: "
        r"pass --hicache-size or --hicache-ratio\."
    )
    assert c["srt/arg_groups/pd_disaggregation_hook.py:23"].pattern.startswith(
        r"--dp-size (?P<dp_size>.+?) with --attn-dp-size (?P<attn_dp_size>.+): "
    )
    # a hole that ends the message is greedy (a lazy one would capture one character), and text
    # that is appended only sometimes is optional
    assert c["srt/model_executor/pool_configurator.py:11"].pattern == (
        r"Not enough memory\. Please try to increase --mem-fraction-static\."
        r"(?: Current value: mem_fraction_static=(?P<mem_fraction_static>.+))?"
    )
    humming = c["srt/layers/quantization/humming.py:19"].pattern
    assert humming.startswith(r"(?:Humming quantization requires `humming-kernels`\.")
    assert humming.endswith(r"|Failed to import Humming quantization dependencies from `humming-kernels`: (?P<err>.+))")
    # the imported part is a hole without a capture name: nothing to name it after
    assert c["srt/managers/scheduler.py:15"].pattern.startswith(".+--speculative-algorithm")
    assert c["srt/arg_groups/pd_disaggregation_hook.py:23"].captures == {"dp_size": "8", "attn_dp_size": "8"}


def test_what_is_not_mined(report):
    sources = set(by_source(report))
    # a raise inside a docstring, a message without a flag (a flag in a comment does not count)
    assert not any(s.startswith(f"{DSV4}:") and s != f"{DSV4}:12" for s in sources)
    assert "srt/arg_groups/hicache_hook.py:18" not in sources
    assert "srt/arg_groups/hicache_hook.py:6" not in sources
    failures = {f.source: (f.reason, f.names_flag, f.mined) for f in report.failures}
    assert failures == {
        "srt/managers/scheduler.py:13": ("the exception is built by `_scheduler_died_error(...)`", False, False),
        "srt/managers/scheduler.py:15": ("`CP_TP_PREFIX` is imported from another module", True, True),
    }


def test_counts_and_kinds(report):
    assert report.version == "0.5.23"
    assert len(report.candidates) == 11
    assert report.by_kind() == {"assert naming flag": 2, "raise naming flag": 9}
    assert report.by_scope() == {"srt": {"raise": 9, "assert": 2}}
    # the category comes from where it is raised, then from the message
    cats = {c.statement.source: c.category for c in report.candidates}
    assert cats[f"{DSV4}:12"] == "hicache"
    assert cats["srt/arg_groups/hicache_hook.py:12"] == "hicache"
    assert cats["srt/arg_groups/pd_disaggregation_hook.py:7"] == "disaggregation"
    assert cats["srt/arg_groups/deepseek_v4_hook.py:6"] == "flag-conflict"
    assert cats["srt/layers/quantization/humming.py:19"] == "quantization"
    assert cats["srt/layers/attention/xpu_backend.py:12"] == "attention-backend"


def test_every_example_matches_its_own_pattern(report):
    for c in report.candidates:
        assert not c.problem, c.id
        m = re2.search(c.pattern, c.message)
        assert m is not None, c.id
        assert {k: v for k, v in m.groupdict().items() if k in c.captures} == c.captures


_literal = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12)
_hole = st.builds(
    Hole,
    expr=st.sampled_from(["cfg.tp_size", "port", "len(x)", "self.model_path", "backend", "ratio"]),
    name=st.sampled_from([None, "tp_size", "port", "model_path", "backend", "ratio"]),
    conversion=st.sampled_from(["", "r"]),
    spec=st.sampled_from(["", ".3f", "d", "%s", "%d", "%.2f", "%r"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_literal, _hole), min_size=1, max_size=6))
def test_generated_examples_match_generated_patterns(parts):
    template = Template(tuple(parts))
    pattern, example, captures = pattern_and_example(template)
    m = re2.compile(pattern).search(example)
    assert m is not None, (pattern, example)
    assert set(m.groupdict()) == set(captures)  # every named hole is a capture, named once


def test_trailing_newlines_move_into_the_optional_piece_that_follows():
    # `msg = "a\n"; msg += "b\n"`: a traceback shows "a\nb" or "a", never the final newline
    template = Template(
        ("Command: x\n", Hole("msg += ...", choices=(("stderr:\n", Hole("err", "err"), "\n"),), optional=True))
    ).stripped()
    pattern, example, captures = pattern_and_example(template)
    assert pattern == r"Command: x(?:\nstderr:\n(?P<err>.+))?"
    assert example == "Command: x\nstderr:\nx" and captures == {"err": "x"}
    assert re2.search(pattern, "Command: x").group(0) == "Command: x"


def test_ids_are_stable_and_short():
    assert candidate_id(DSV4, 661) == "srt-mem-cache-hybrid-cache-hybrid-pool-assembler-661"
    long = "multimodal_gen/runtime/pipelines_core/stages/model_specific_stages/sana_wm_streaming_denoising.py"
    ident = candidate_id(long, 651)
    assert len(ident) <= 80 and ident.endswith("-651") and ident == candidate_id(long, 651)
    assert ident != candidate_id(long.replace("sana", "sena"), 651)


# --- reading packages ----------------------------------------------------------------------


def test_a_wheel_gives_the_same_candidates(tmp_path, report):
    wheel = tmp_path / "sglang-0.5.23-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path in (FIXTURE / "sglang").rglob("*"):
            if path.is_file():
                zf.write(path, "sglang/" + path.relative_to(FIXTURE / "sglang").as_posix())
        zf.writestr("sglang-0.5.23.dist-info/METADATA", "Name: sglang\n")
    from_wheel = mine(str(wheel), workers=1)
    assert [c.id for c in from_wheel.candidates] == [c.id for c in report.candidates]
    assert [c.pattern for c in from_wheel.candidates] == [c.pattern for c in report.candidates]
    assert from_wheel.version == "0.5.23"


def test_installed_packages_are_found_without_importing_them():
    tree = locate("jsonschema")
    assert tree.folder is not None and tree.folder.name == "jsonschema"
    assert "validators.py" in tree.files()
    with pytest.raises(MineError):
        locate("no_such_package_crashdoc_test")
    with pytest.raises(MineError):
        locate("/no/such/path")


def test_parallel_workers_give_the_same_result(report):
    assert [c.id for c in mine(str(FIXTURE), workers=2).candidates] == [c.id for c in report.candidates]


_BIG_MODULE = textwrap.dedent(
    '''
    import os
    from typing import Any

    _PREFIX = "--tp-size "
    HINT = "Drop --dcp-size."


    @decorator(
        name="x",
    )
    def helper(cfg):
        raise ValueError(f"--dp-size {cfg.dp_size} is too large.")


    class Scheduler(
        MixinA,
        MixinB,
    ):
        """Schedules.

    text at column 0 inside a docstring of the class body
        """

    {methods}

        @property
        def hinted(self):
            raise ValueError(HINT)

        def prefixed(self):
            raise ValueError(_PREFIX + "must divide the number of heads.")

        def column_zero(self):
            message = """--page-size
    must be a power of two"""
            raise ValueError(message)


    def trailing():
        if os.environ.get("SGLANG_X"):
            raise RuntimeError("SGLANG_X is set")
    '''
)


def _module_with(methods: str) -> str:
    return _BIG_MODULE.replace("{methods}", methods)


def test_partial_parse_finds_what_a_whole_parse_finds():
    methods = "\n".join(f"    def m{i}(self):\n        return {i}\n" for i in range(120))
    methods += "\n    def hot(self, size):\n        assert size > 0, f'--chunked-prefill-size {size} must be positive'"
    text = _module_with(methods)
    partial = mine_source("srt/managers/scheduler.py", text)
    whole = mine_source("srt/managers/scheduler.py", text, whole=True)
    assert [(s.line, s.template) for s in partial.statements] == [(s.line, s.template) for s in whole.statements]
    lines = {s.line: s.template.display for s in whole.statements}
    assert sorted(lines.values()) == sorted(
        [
            "--dp-size {cfg.dp_size} is too large.",
            "Drop --dcp-size.",
            "--tp-size must divide the number of heads.",
            "--page-size\nmust be a power of two",
            "SGLANG_X is set",
            "--chunked-prefill-size {size} must be positive",
        ]
    )
    # the docstring at column 0 makes the class unsplittable: the file was parsed whole
    assert partial.counts["files_parsed_whole"] == 1


def test_partial_parse_cuts_a_long_class_into_members():
    methods = "\n".join(f"    def m{i}(self):\n        return {i}\n" for i in range(120))
    text = _module_with(methods).replace("\ntext at column 0 inside a docstring of the class body\n", "\n")
    text = text.replace('"""--page-size\nmust be a power of two"""', '"--page-size must be a power of two"')
    partial = mine_source("srt/managers/scheduler.py", text)
    whole = mine_source("srt/managers/scheduler.py", text, whole=True)
    assert partial.counts["files_parsed_whole"] == 0
    assert [(s.line, s.template, s.function) for s in partial.statements] == [
        (s.line, s.template, s.function) for s in whole.statements
    ]
    assert len(partial.statements) == 5


def test_a_file_that_does_not_parse_is_reported():
    result = mine_source("srt/broken.py", 'def f(:\n    raise ValueError("--tp-size")\n')
    assert result.error.startswith("does not parse")
    assert not result.statements


# --- candidate files -----------------------------------------------------------------------


def test_written_candidates_load_and_diagnose_themselves(tmp_path, report):
    written = write_candidates(report, tmp_path / "out")
    assert sorted(p.name for p in written) == [
        "attention-backend.yaml",
        "disaggregation.yaml",
        "flag-conflict.yaml",
        "hicache.yaml",
        "other.yaml",
        "quantization.yaml",
        "speculative.yaml",
    ]
    loaded = []
    for path in written:
        signatures, problems = load_file(path)
        assert problems == [], problems
        loaded.extend(signatures)
    assert sorted(s.id for s in loaded) == sorted(c.id for c in report.candidates)
    for sig in loaded:
        assert sig.fix_summary.startswith("TODO(review):")
        assert "TODO(review)" in sig.runbook
        assert sig.source and sig.sglang == "0.5.23"
        assert sig.near_misses == () and len(sig.examples) == 1
    dsv4 = next(s for s in loaded if s.source == f"{DSV4}:12")
    assert dsv4.category == "hicache" and dsv4.flags == ("--hicache-size", "--hicache-ratio")
    assert dsv4.exception_types == ("ValueError",)
    # each candidate's example is a traceback that the real pipeline diagnoses as that candidate
    library = load_library([tmp_path / "out"])
    count, failures = run_library_examples(library)
    assert count == len(report.candidates) and failures == []
    # a second run writes the same files
    before = {p.name: p.read_text() for p in written}
    write_candidates(mine(str(FIXTURE), workers=1), tmp_path / "out")
    assert {p.name: p.read_text() for p in written} == before


# --- coverage ------------------------------------------------------------------------------

_TINY = """\
signatures:
  - id: tiny-mem-fraction
    title: KV pool does not fit
    category: memory
    severity: critical
    match:
      exception: [RuntimeError]
      message: 'Not enough memory\\. Please try to increase --mem-fraction-static'
    fix: {summary: raise --mem-fraction-static}
    runbook: "## Why it happens\\nThe KV pool does not fit in what the static fraction leaves."
    examples:
      match:
        - text: |
            Traceback (most recent call last):
              File "/x/sglang/srt/model_executor/pool_configurator.py", line 11, in __post_init__
                raise RuntimeError(msg)
            RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
  - id: tiny-dcp-swa
    title: DCP with sliding-window layers on XPU
    category: attention-backend
    severity: critical
    match:
      message: 'DCP with sliding-window layers is not supported'
    fix: {summary: drop --dcp-size}
    runbook: "## Why it happens\\nIntel XPU attention cannot shard sliding-window layers across DCP ranks."
    examples:
      match:
        - text: |
            Traceback (most recent call last):
              File "/x/sglang/srt/layers/attention/xpu_backend.py", line 12, in _assert_dcp_supported
                raise ValueError(_DCP_SWA_MSG)
            ValueError: DCP with sliding-window layers is not supported on intel_xpu. Drop --dcp-size.
"""


@pytest.fixture()
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(_TINY)
    return path


def test_coverage_against_a_tiny_library(report, tiny):
    measure_coverage(report, load_library([tiny]))
    assert report.matched == {
        "srt-model-executor-pool-configurator-11": "tiny-mem-fraction",
        "srt-layers-attention-xpu-backend-12": "tiny-dcp-swa",
    }
    data = report_json(report)
    assert data["matched"] == 2 and data["unmatched"] == 9
    assert data["by_category"]["attention-backend"] == {"mined": 1, "matched": 1}
    assert data["by_category"]["hicache"] == {"mined": 2, "matched": 0}
    assert "srt-mem-cache-hybrid-cache-hybrid-pool-assembler-12" in data["unmatched_ids"]
    assert len(data["unmatched_ids"]) == 9
    assert data["top_unmatched_files"][0] == {"file": "srt/arg_groups/pd_disaggregation_hook.py", "unmatched": 3}
    text = report_text(report)
    assert "2 of 11 matched (18.2%), 9 not matched" in text
    assert "srt/arg_groups/pd_disaggregation_hook.py" in text


def test_the_builtin_library_knows_the_deepseek_v4_hicache_error(report):
    measure_coverage(report, load_library(builtin_signature_dirs()))
    assert report.matched["srt-mem-cache-hybrid-cache-hybrid-pool-assembler-12"] == "dsv4-hicache-size-unsupported"


def test_cli_prints_json_and_writes_candidates(tmp_path, tiny, capsys):
    out = tmp_path / "candidates"
    code = main(["signatures", "mine", str(FIXTURE), "--json", "--signatures", str(tiny), "--out", str(out)])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["counts"]["mined"] == 11 and data["matched"] == 2
    assert data["sglang"] == "0.5.23" and data["library"] == [str(tiny)]
    assert {f["source"] for f in data["rebuild_failures"]} == {
        "srt/managers/scheduler.py:13",
        "srt/managers/scheduler.py:15",
    }
    assert (out / "hicache.yaml").is_file()


def test_cli_text_report_and_errors(tiny, capsys):
    assert main(["signatures", "mine", str(FIXTURE), "--signatures", str(tiny)]) == 0
    text = capsys.readouterr().out
    assert "mined: 11 (9 raise, 2 assert)" in text
    assert "coverage by the library" in text
    assert main(["signatures", "mine", "/no/such/folder", "--signatures", str(tiny)]) == 1
    assert "no such folder or file" in capsys.readouterr().err


# --- the real package ----------------------------------------------------------------------

real = pytest.mark.skipif(not (REAL / "srt").is_dir(), reason=f"SGLang 0.5.23 is not unpacked at {REAL}")


@pytest.fixture(scope="module")
def real_report():
    return mine(str(REAL))


@real
def test_real_package_counts(real_report):
    r = real_report
    assert r.version == "0.5.23"
    assert not r.parse_errors
    assert not [c.id for c in r.candidates if c.problem]
    # the reference AST pass: 1,193 raise or assert statements naming a flag or any env var;
    # we count SGLANG_ variables only and statements, not distinct messages
    assert 1120 <= len(r.candidates) <= 1230
    scope = r.by_scope()
    assert 740 <= scope["srt"]["raise"] <= 820  # "about 770"
    kinds = r.by_kind()
    assert kinds["assert naming flag"] + kinds["assert naming flag+env"] == 141  # as the reference counts
    assert 150 <= sum(n for k, n in kinds.items() if k.startswith("raise") and "env" in k) <= 207
    assert len({c.id for c in r.candidates}) == len(r.candidates)


@real
def test_real_package_dsv4_hicache_error_is_matched_by_the_builtin_library(real_report):
    dsv4 = [c for c in real_report.candidates if c.statement.source == f"{DSV4}:661"]
    assert len(dsv4) == 1
    assert dsv4[0].flags == ("--hicache-size", "--hicache-ratio") and dsv4[0].category == "hicache"
    measure_coverage(real_report, load_library(builtin_signature_dirs()))
    assert real_report.matched[dsv4[0].id] == "dsv4-hicache-size-unsupported"
    data = report_json(real_report)
    assert data["matched"] + data["unmatched"] == len(real_report.candidates)
    assert dsv4[0].id not in data["unmatched_ids"]


@real
@pytest.mark.slow
def test_real_package_partial_parse_equals_whole_parse():
    tree = locate(str(REAL))
    paths = [p for p in tree.files() if p.startswith(("srt/managers/", "srt/arg_groups/", "srt/mem_cache/"))]
    for path, text in tree.read_many(paths):
        partial = mine_source(path, text)
        whole = mine_source(path, text, whole=True)
        assert [(s.line, s.template) for s in partial.statements] == [(s.line, s.template) for s in whole.statements], (
            path
        )


def test_report_text_is_printable(report):
    out = io.StringIO()
    out.write(report_text(report))
    assert out.getvalue().splitlines()[0] == f"sglang 0.5.23 at {FIXTURE / 'sglang'}"
