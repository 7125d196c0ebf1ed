"""End-to-end golden output: `crashdoc explain --json` on pasted logs and `/metrics` of a fixed scenario,
compared with reviewed copies in tests/golden/ (`pytest --update-golden` rewrites them after a deliberate
change; review the diff).

For the real-log corpus (read from ../shared, never copied into the repository) the golden copy keeps what
the diagnosis concluded (signature, title, category, exception type, fingerprint, flags, fix), not the
log's own lines.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from crashdoc.events import HostGpus
from crashdoc.outputs.metrics import CrashdocCollector, Health, exposition, make_registry
from crashdoc.sources.kernel_gpu import KernelGpuReader
from crashdoc.sources.nvidia_gpus import read_gpu_map
from support.corpus import corpus_dir
from support.engine_driver import Host
from support.explaining import explain_file
from support.golden import Golden
from support.gpu_faults import FIXTURE_ROOT, xid
from support.journal_files import TRACEBACK as DSV4_TRACEBACK

LOGS = Path(__file__).parent.parent / "fixtures" / "logs"
CORPUS = corpus_dir()
CONCLUSION = ("signature", "title", "category", "severity", "flags", "fingerprint")


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_explain_json_of_the_fixture_logs(name: str, golden: Golden) -> None:
    out = explain_file(LOGS / name)
    golden.check(f"explain/{name}.json", json.dumps(out, indent=1, ensure_ascii=False) + "\n")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the real-log corpus (../shared/corpus/real) is not here")
def test_explain_json_of_the_real_corpus(golden: Golden) -> None:
    conclusions = {}
    for path in sorted(CORPUS.glob("*.log")):
        diagnoses = explain_file(path)["diagnoses"]
        conclusions[path.name] = [
            {
                **{k: d.get(k) for k in CONCLUSION},
                "root_cause_type": d["root_cause"]["type"],
                "fix": d["fix"]["summary"],
                "changes": d["fix"]["changes"],
            }
            for d in diagnoses
        ]
    golden.check("explain/corpus.json", json.dumps(conclusions, indent=1, ensure_ascii=False) + "\n")


def test_metrics_of_a_fixed_scenario(golden: Golden) -> None:
    """Prefill loops on the DeepSeek V4 HiCache error, decode is ready and serving, and the kernel logged an Xid on
    a GPU neither uses: what a scrape shows."""
    decode = Host(unit="sglang-decode.service")
    decode.facts(HostGpus(read_gpu_map(FIXTURE_ROOT)))
    decode.feed(*KernelGpuReader().feed(xid(94, "Contained: SM (0x1). RST: No, D-RST: No", bus="0000:dc:00"), decode.t))
    decode.start()
    decode.ready()
    decode.wait(30)
    prefill = Host()
    prefill.engine, prefill.t = decode.engine, decode.t
    for _ in range(3):
        prefill.start()
        prefill.crash()
    prefill.wait(2)
    engine = prefill.engine
    health = Health(dbus_up=True, signatures_loaded=7, started_at=1_800_000_000.0, journal_entries_read=42)
    registry = make_registry(CrashdocCollector(engine.units, health, threading.Lock(), gpus=engine.gpus))
    assert registry.get_sample_value("crashdoc_unit_crashloop", {"unit": "sglang-prefill.service"}) == 1.0
    assert registry.get_sample_value("crashdoc_unit_crashloop", {"unit": "sglang-decode.service"}) == 0.0
    crashes = registry.get_sample_value(
        "crashdoc_crashes_total", {"unit": "sglang-prefill.service", "signature": "dsv4-hicache-size-unsupported"}
    )
    assert crashes == 3.0
    assert registry.get_sample_value("crashdoc_gpu_xid_total", {"gpu": "7", "xid": "94", "unit": ""}) == 1.0
    golden.check("metrics/fixed-scenario.txt", exposition(registry).decode())
    assert DSV4_TRACEBACK, "the scenario's crashes are SGLang's real DeepSeek V4 HiCache traceback"
