"""`crashdoc runbooks render DIR`: every signature's runbook as a Markdown page for a wiki, plus an index."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from crashdoc.matching.library import builtin_signature_dirs, load_library
from support.e2e import CRASHDOC

KEY = "sk-proj-9f8e7d6c5b4a39281706f5e4d3c2b1a0"

CUSTOM = f"""
signatures:
  - id: decode-host-pool-too-small
    title: "PD decode host pool | too small"
    category: disaggregation
    severity: warning
    sglang: "0.5.23"
    source: srt/disaggregation/decode.py:120
    match:
      exception: [ValueError]
      message: 'Host pool must hold a retraction and a receive page'
    flags: [--hicache-ratio]
    fix:
      summary: 'double the host pool: `--hicache-ratio ${{flag:--hicache-ratio|default:1|mul:2}}`'
      changes:
        - {{action: set, flag: --hicache-ratio, value: '${{flag:--hicache-ratio|default:1|mul:2}}'}}
      safety: hicache-host-memory
    runbook: |
      ## Why it happens
      The decode server's host pool is smaller than one retraction plus one page.
      Test it with `curl -H 'Authorization: Bearer {KEY}' http://decode:30001/health`.
    examples:
      match:
        - text: |
            ValueError: Host pool must hold a retraction and a receive page; increase --hicache-size or --hicache-ratio
  - id: nccl-timeout
    title: NCCL watchdog timeout
    category: distributed
    severity: critical
    match:
      line: 'Watchdog caught collective operation timeout'
    fix:
      summary: check the interconnect
    runbook: |
      ## Why it happens
      A rank stopped answering.
    examples:
      match:
        - text: "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)"
"""


def render(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CRASHDOC, "runbooks", "render", *args], capture_output=True, text=True, timeout=120)


def custom_library(tmp_path: Path) -> Path:
    folder = tmp_path / "sigs"
    folder.mkdir()
    (folder / "custom.yaml").write_text(CUSTOM)
    return folder


def test_every_builtin_signature_gets_a_page_and_an_index_entry(tmp_path: Path) -> None:
    library = load_library(builtin_signature_dirs())
    out = tmp_path / "wiki"
    r = render(str(out))
    assert r.returncode == 0, r.stderr
    assert f"wrote {len(library)} runbooks and index.md to {out}" in r.stdout
    pages = {p.stem for p in out.glob("*.md")} - {"index"}
    assert pages == {s.id for s in library.signatures}
    index = (out / "index.md").read_text()
    assert set(re.findall(r"\]\(([a-z0-9-]+)\.md\)", index)) == pages
    for sig in library.signatures:
        page = (out / f"{sig.id}.md").read_text()
        assert f"# {sig.title}\n" in page
        assert f"| id | `{sig.id}` |" in page
        assert f"| category | {sig.category} |" in page and f"| severity | {sig.severity} |" in page
        for flag in sig.flags:
            assert f"`{flag}`" in page
        assert "## Fix" in page
        if sig.source:
            assert sig.source in page
        assert re.search(r"\| signature \| `[\w./-]+\.ya?ml:\d+` \|", page), "where the signature is defined"
    hicache = (out / "dsv4-hicache-size-unsupported.md").read_text()
    assert "replace `--hicache-size {current --hicache-size}` with `--hicache-ratio 2.0`" in hicache
    assert "- `--hicache-size -> --hicache-ratio 2.0`" in hicache
    assert "| raised in | SGLang 0.5.23 `srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py:661` |" in hicache
    assert "| safety check | `hicache-host-memory` |" in hicache
    assert "| signature | `signatures/sglang/hicache.yaml:2` |" in hicache
    assert "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size" in hicache  # the example


def test_signatures_option_templates_tables_and_secrets(tmp_path: Path) -> None:
    out = tmp_path / "wiki"
    r = render(str(out), "--signatures", str(custom_library(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.glob("*.md")) == [
        "decode-host-pool-too-small.md",
        "index.md",
        "nccl-timeout.md",
    ]
    page = (out / "decode-host-pool-too-small.md").read_text()
    assert "# PD decode host pool | too small\n" in page
    assert "double the host pool: `--hicache-ratio {current --hicache-ratio (default 1) x 2}`" in page
    assert "- `set --hicache-ratio {current --hicache-ratio (default 1) x 2}`" in page
    assert "| signature | `sigs/custom.yaml:3` |" in page
    assert KEY not in page and "Authorization: Bearer <redacted>" in page
    line = (out / "nccl-timeout.md").read_text()
    assert "- log line (RE2): `Watchdog caught collective operation timeout`" in line
    assert "| flags | none |" in line
    index = (out / "index.md").read_text()
    row = "| [decode-host-pool-too-small](decode-host-pool-too-small.md) | warning | PD decode host pool \\| too small"
    assert row in index
    assert index.index("## disaggregation") < index.index("## distributed")


def test_rerendering_removes_only_its_own_stale_pages(tmp_path: Path) -> None:
    out = tmp_path / "wiki"
    sigs = custom_library(tmp_path)
    assert render(str(out), "--signatures", str(sigs)).returncode == 0
    (out / "team-notes.md").write_text("# our own page\n")
    text = CUSTOM[: CUSTOM.index("  - id: nccl-timeout")]
    (sigs / "custom.yaml").write_text(text)
    r = render(str(out), "--signatures", str(sigs))
    assert r.returncode == 0, r.stderr
    assert "removed 1 page(s) of signatures that are gone" in r.stdout
    assert sorted(p.name for p in out.glob("*.md")) == ["decode-host-pool-too-small.md", "index.md", "team-notes.md"]
    assert "nccl-timeout" not in (out / "index.md").read_text()


@pytest.mark.parametrize("problem", ["a file", "a bad library"])
def test_problems_are_reported_without_a_traceback(tmp_path: Path, problem: str) -> None:
    if problem == "a file":
        target = tmp_path / "wiki"
        target.write_text("not a folder")
        r = render(str(target), "--signatures", str(custom_library(tmp_path)))
        assert f"cannot write the runbooks to {target}" in r.stderr
    else:
        bad = tmp_path / "bad"
        bad.mkdir()
        (bad / "x.yaml").write_text("signatures:\n  - id: Not An Id\n")
        r = render(str(tmp_path / "wiki"), "--signatures", str(bad))
        assert "the signature library has problems" in r.stderr and "x.yaml:" in r.stderr
        assert not (tmp_path / "wiki").exists()
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
