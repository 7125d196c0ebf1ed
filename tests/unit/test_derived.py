"""Derived signatures: SGLang's own checks turned into signatures, shipped for every release.

Messages and conditions are SGLang's (0.5.16-0.5.23 source, read by the miner). When SGLang
0.5.23 is unpacked at .cache/sglang-0.5.23/sglang (`scripts/fetch-sglang.sh`), regenerating
it must give exactly the shipped records for 0.5.23.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from crashdoc.authoring.derive import derive_fix, derive_source
from crashdoc.cli import main
from crashdoc.commands.pipeline import explain_text
from crashdoc.events import FlagChange
from crashdoc.matching.derived import (
    DerivedSignature,
    library_of,
    load_shipped,
    loads,
    release_key,
    release_range,
    signature_id,
    to_dict,
)
from crashdoc.matching.library import builtin_signature_dirs, load_library
from crashdoc.matching.matcher import Matcher
from support.derived_records import page_size_check

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "mine"
REAL = Path(os.environ.get("CRASHDOC_SGLANG_SRC", ROOT / ".cache/sglang-0.5.23/sglang"))
SHIPPED = ROOT / "src" / "crashdoc" / "matching" / "data" / "derived"


def launcher_traceback(path: str, line: int, function: str, exc: str, message: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        f'  File "/opt/venv/lib/python3.11/site-packages/sglang/{path}", line {line}, in {function}\n'
        "    raise\n"
        f"{exc}: {message}\n"
    )


@pytest.fixture(scope="module")
def library():
    return load_library(builtin_signature_dirs())


# --- the generic fix, read from the message and the condition ------------------------------


@pytest.mark.parametrize(
    ("message", "condition", "kind", "flags", "env", "change"),
    [
        # the message proposes a setting
        (
            "FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use `--attention-backend flashinfer`.",
            "major == 8 and (not runner.use_mla_backend) or major == 9",
            "assert",
            ["--attention-backend"],
            [],
            FlagChange("set", "--attention-backend", "flashinfer"),
        ),
        (
            "MTP requires --speculative-eagle-topk 1.",
            "cfg.speculative_eagle_topk not in (None, 1)",
            "raise",
            ["--speculative-eagle-topk"],
            [],
            FlagChange("set", "--speculative-eagle-topk", "1"),
        ),
        # a renamed flag
        (
            "--elastic-ep-rejoin (deprecated) conflicts with --elastic-ep-join-mode {}.",
            "cfg.elastic_ep_rejoin and cfg.elastic_ep_join_mode is not None",
            "raise",
            ["--elastic-ep-rejoin", "--elastic-ep-join-mode"],
            [],
            FlagChange("replace", "--elastic-ep-rejoin", None, "--elastic-ep-join-mode"),
        ),
        # the condition's range: an assert's test must hold
        (
            "--elastic-ep-scale-timeout must be greater than zero.",
            "cfg.elastic_ep_scale_timeout > 0",
            "assert",
            ["--elastic-ep-scale-timeout"],
            [],
            FlagChange("set", "--elastic-ep-scale-timeout", "1"),
        ),
        # two switches that do not go together: the raise's condition tests both
        (
            "--enable-unified-cache-external-linker and --enable-hierarchical-cache are mutually exclusive.",
            "cfg.enable_unified_cache_external_linker and cfg.enable_hierarchical_cache",
            "raise",
            ["--enable-unified-cache-external-linker", "--enable-hierarchical-cache"],
            [],
            FlagChange("remove", "--enable-unified-cache-external-linker"),
        ),
        # an SGLANG_ variable the condition tests
        (
            "--enable-watermark is not supported with SGLANG_RUST_SERVER",
            "envs.SGLANG_RUST_SERVER.get()",
            "raise",
            ["--enable-watermark"],
            ["SGLANG_RUST_SERVER"],
            FlagChange("remove", "SGLANG_RUST_SERVER"),
        ),
        # `--x requires --y` where --y needs a value only the operator knows: drop --x
        (
            "--elastic-ep-join-mode requires --elastic-ep-backend to be set.",
            "cfg.elastic_ep_backend is not None",
            "assert",
            ["--elastic-ep-join-mode", "--elastic-ep-backend"],
            [],
            FlagChange("remove", "--elastic-ep-join-mode"),
        ),
    ],
)
def test_generic_fix(message, condition, kind, flags, env, change):
    changes, summary = derive_fix(message, condition, kind, flags, env)
    assert changes == [change]
    assert change.flag in summary


def test_a_required_value_only_the_operator_knows_is_a_placeholder():
    """A required flag with no value in sight: never drop what the message asks for, ask for its value."""
    changes, summary = derive_fix(
        "UNO requires --uno-lora-path.", "cfg.uno_lora_path is None", "raise", ["--uno-lora-path"], []
    )
    assert changes == [FlagChange("set", "--uno-lora-path", "<path>", placeholder=True)]
    assert "--uno-lora-path" in summary and "cfg.uno_lora_path is None" in summary


def test_no_change_when_nothing_justifies_one():
    """A message that names a flag without asking anything of it: name it, change nothing."""
    changes, summary = derive_fix("Unsupported SGLANG_FOO: {}", "", "raise", [], ["SGLANG_FOO"])
    assert changes == []
    assert "SGLANG_FOO" in summary


# --- deriving a tree ---------------------------------------------------------------------


def test_derive_fixture_tree():
    lib = derive_source(FIXTURE / "sglang", workers=1)
    assert lib.releases == ("0.5.23",)
    sigs = {s.template: s for s in lib.signatures()}
    assert len(sigs) == len(lib) > 0
    for sig in sigs.values():
        assert sig.id == signature_id(sig.exception_type, sig.template)
        assert sig.pattern.startswith("^")
        assert sig.releases == ("0.5.23",) and sig.sites[0][0] == "0.5.23"
        assert sig.sites[0][1].startswith("sglang/srt/")
        assert sig.flags or sig.env


def test_derive_cli(tmp_path, capsys):
    out = tmp_path / "derived.json.gz"
    assert main(["signatures", "derive", "--source", str(FIXTURE / "sglang"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "SGLang 0.5.23:" in text and "derived signatures" in text
    stored = loads(out.read_bytes())
    assert stored.releases == ("0.5.23",) and len(stored) > 0
    assert main(["signatures", "derive", "--source", str(tmp_path / "nope")]) == 1
    assert "no such folder or file" in capsys.readouterr().err


def test_derive_cli_rejects_a_tree_without_a_release(tmp_path, capsys):
    tree = tmp_path / "sglang"
    tree.mkdir()
    (tree / "__init__.py").write_text("")
    (tree / "x.py").write_text('def f(a):\n    if a:\n        raise ValueError("--tp-size must be 1")\n')
    assert main(["signatures", "derive", "--source", str(tree)]) == 1
    assert "which SGLang release" in capsys.readouterr().err


@pytest.mark.skipif(not (REAL / "srt").is_dir(), reason=f"SGLang 0.5.23 not unpacked at {REAL}")
def test_regenerating_0_5_23_gives_the_shipped_records():
    fresh = {s.id: to_dict(s) for s in derive_source(REAL).signatures()}
    shipped = {}
    for sig in load_shipped().signatures():
        if "0.5.23" in sig.releases:
            record = to_dict(sig)
            record["sites"] = [s for s in record["sites"] if s["release"] == "0.5.23"]
            record["releases"] = ["0.5.23"]
            shipped[sig.id] = record
    assert fresh.keys() == shipped.keys()
    assert fresh == shipped


def test_shipped_data_covers_every_release_and_stays_small():
    listed = [
        v.strip()
        for v in (ROOT / "signatures" / "derived-releases.txt").read_text().splitlines()
        if v.strip() and not v.startswith("#")
    ]
    body = json.loads(gzip.decompress((SHIPPED / "index.json.gz").read_bytes()))
    assert body["releases"] == sorted(listed, key=release_key)
    assert {"0.4.0", "0.4.0.post1", "0.5.10.post1", "0.5.23"} <= set(body["releases"])
    assert sorted(p.name for p in SHIPPED.iterdir()) == sorted(["index.json.gz", *body["chunks"]])
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) < 3_000_000


# --- matching and diagnosing -------------------------------------------------------------


def _sig(template: str, releases: tuple[str, ...], line: int = 10) -> DerivedSignature:
    return page_size_check(template, releases, line=line)


def test_release_order_and_ranges():
    assert sorted(["0.5.10", "0.5.9", "0.5.10.post1", "0.4.10", "0.5.10rc1"], key=release_key) == [
        "0.4.10",
        "0.5.9",
        "0.5.10rc1",
        "0.5.10",
        "0.5.10.post1",
    ]
    known = ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12"]
    assert release_range(["0.5.10", "0.5.10.post1", "0.5.11"], known) == "0.5.10\u20130.5.11"
    assert release_range(["0.5.9", "0.5.12"], known) == "0.5.9, 0.5.12"


def test_match_prefers_the_units_release_and_says_when_the_check_is_elsewhere():
    old = _sig("--page-size must be positive, got {}", ("0.5.9", "0.5.10"))
    new = _sig("--page-size must be positive, got {}.", ("0.5.11",), line=20)
    lib = library_of([old]).merged(library_of([new]))
    assert lib.releases == ("0.5.9", "0.5.10", "0.5.11")
    found = lib.match("--page-size must be positive, got 0.", "ValueError", "0.5.11")
    assert found is not None and found.signature.id == new.id and found.in_release is True
    found = lib.match("--page-size must be positive, got 0", "ValueError", "0.5.11")
    assert found is not None and found.signature.id == old.id and found.in_release is False
    assert found.captures == {"v": "0"}
    assert lib.match("--page-size must be positive, got 0", "KeyError") is None
    assert lib.match("the --page-size must be positive, got 0", "ValueError") is None  # anchored at the start


def test_merged_keeps_both_sites_of_a_shared_record():
    a = _sig("--page-size must be positive, got {}", ("0.5.9",), line=10)
    b = _sig("--page-size must be positive, got {}", ("0.5.10",), line=12)
    sig = library_of([a]).merged(library_of([b])).get(a.id)
    assert sig is not None
    assert sig.sites == (("0.5.9", "sglang/srt/x.py", 10, "check"), ("0.5.10", "sglang/srt/x.py", 12, "check"))


def test_unmatched_sglang_check_is_answered_by_its_derived_signature(library):
    text = launcher_traceback(
        "srt/arg_groups/parallel_hook.py",
        547,
        "handle_elastic_ep",
        "AssertionError",
        "--elastic-ep-join-mode requires --elastic-ep-backend to be set.",
    )
    assert explain_text(text, library, Matcher(library))[0].signature is None  # reviewed library alone
    [d] = explain_text(text, library, Matcher(library, load_shipped()))
    assert d.derived is True and d.signature is not None and d.signature.startswith("derived-")
    assert d.confidence == 0.6
    assert d.flags == ["--elastic-ep-join-mode", "--elastic-ep-backend"]
    assert [(c.action, c.flag) for c in d.fix.changes] == [("remove", "--elastic-ep-join-mode")]
    assert any(
        e.startswith("derived from SGLang 0.5.")
        and "sglang/srt/arg_groups/parallel_hook.py:547 (handle_elastic_ep): cfg.elastic_ep_backend is not None" in e
        for e in d.evidence
    )


def test_reviewed_signature_wins_over_a_derived_one(library):
    text = launcher_traceback(
        "srt/managers/scheduler.py",
        100,
        "init",
        "ValueError",
        "--enable-hisparse does not support --enable-mixed-chunk yet.",
    )
    [d] = explain_text(text, library, Matcher(library, load_shipped()))
    assert d.signature == "flag-hisparse-with-mixed-chunk" and d.derived is False and d.confidence == 1.0


def test_derived_runbook_says_it_was_derived():
    sig = load_shipped().match("--elastic-ep-join-mode requires --elastic-ep-backend to be set.", "AssertionError")
    assert sig is not None
    runbook = sig.signature.as_signature("other", sig.known).runbook
    assert "derived automatically from SGLang's source" in runbook
    assert "sglang/srt/arg_groups/parallel_hook.py:547" in runbook
    assert "asserts `cfg.elastic_ep_backend is not None`" in runbook


def test_runbook_page_of_a_derived_signature():
    from crashdoc.outputs.html import runbook_page

    found = load_shipped().match("--elastic-ep-join-mode requires --elastic-ep-backend to be set.", "AssertionError")
    assert found is not None
    page = runbook_page(found.signature.as_signature("other", found.known), []).decode()
    assert "derived automatically from SGLang" in page
    assert "remove --elastic-ep-join-mode" in page
    assert "sglang/srt/arg_groups/parallel_hook.py:547" in page
