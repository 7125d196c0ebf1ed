"""Runbook pages for the Xid families: rendered by `crashdoc runbooks render DIR` under DIR/gpu, one for
every signature a hardware diagnosis can carry, in the four parts, with the family's rows of the catalog."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from crashdoc.cli import main
from crashdoc.diagnosis.hardware import signature_of
from crashdoc.events import GpuEvent
from crashdoc.matching.gpu_catalog import load_catalog
from crashdoc.outputs.gpu_runbooks import FAMILIES, gpu_runbook_markdown


def render(out: Path) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["runbooks", "render", str(out)]) == 0
    return buffer.getvalue()


def test_render_writes_a_page_per_xid_family_linked_from_the_index(tmp_path: Path) -> None:
    render(tmp_path / "wiki")
    gpu = tmp_path / "wiki" / "gpu"
    assert sorted(p.name for p in gpu.glob("*.md")) == sorted([*(f"gpu-fault-{f}.md" for f in FAMILIES), "index.md"])
    assert "[the Xid families](gpu/index.md)" in (tmp_path / "wiki" / "index.md").read_text()
    index = (gpu / "index.md").read_text()
    assert set(re.findall(r"\]\((gpu-fault-[a-z]+)\.md\)", index)) == {f"gpu-fault-{f}" for f in FAMILIES}


def test_every_hardware_diagnosis_links_to_an_existing_page() -> None:
    catalog = load_catalog()
    ids = {signature_of(GpuEvent("xid", code=c), catalog) for c in catalog.entries}
    ids |= {signature_of(GpuEvent(kind), catalog) for kind in ("fallen-off-bus", "init-failed", "ecc", "sxid")}
    assert ids == {f"gpu-fault-{f}" for f in FAMILIES}


def test_each_page_has_the_four_parts_and_its_rows_of_the_catalog() -> None:
    catalog = load_catalog()
    for family in FAMILIES:
        page = gpu_runbook_markdown(family, catalog)
        for part in ("## Why it happens", "## How to confirm", "## Safe fix", "## Roll back", "## The Xids"):
            assert part in page, (family, part)
        rows = {int(m) for m in re.findall(r"^\| (\d+) \|", page, re.MULTILINE)}
        assert rows == {e.code for e in catalog.entries.values() if e.family == family}, family
        assert catalog.source in page


def test_what_a_page_says_for_the_bus_and_the_application_families() -> None:
    bus = gpu_runbook_markdown("bus")
    assert "| 79 | `ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS` | GPU has fallen off the bus | RESTART_BM |" in bus
    assert "drain the node" in bus and "nvidia-smi -L" in bus
    app = gpu_runbook_markdown("application")
    assert "| 13 | `ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY` |" in app
    application = [e for e in load_catalog().entries.values() if e.points_at == "application"]
    assert app.count("| application | no |") == len(application) == 7  # application faults are never the cause
    assert "teardown" in app
    assert "| 149 | `NVLINK_NETIR_ERROR` |" in gpu_runbook_markdown("nvlink")
    assert "when the line says Fatal" in gpu_runbook_markdown("nvlink")
