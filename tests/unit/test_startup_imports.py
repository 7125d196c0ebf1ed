"""What `crashdoc explain` of a healthy one-line log imports: only what reading, matching and the engine's step
need. The judgment (root cause, categories), the remedy, the daemon and the outputs it does not print are
imported at their first use, so that a log without a failure starts fast (issue 26: bench/startup.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEALTHY = "[2026-12-01 10:00:00 TP0] Decode batch, #running-req: 12, #token: 40312, token usage: 0.21\n"
FAILED = (
    "[2026-12-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sglang/srt/managers/scheduler.py", line 10, in run\n'
    "    raise RuntimeError('CUDA error: an illegal memory access was encountered')\n"
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
)

# Run in a child: the modules `explain` left in sys.modules, after what it printed (the CLI called with its
# arguments, as a caller does: in a process of its own it would end with the command, `cli.end_now`).
_CHILD = """
import json, sys
from crashdoc.cli import main
main(["explain", sys.argv[1]])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("crashdoc", "shutil", "hashlib"))))
"""

# Never imported by explain of a healthy log (a prefix names a package and what is under it)
NOT_FOR_A_HEALTHY_LOG = (
    "crashdoc.diagnosis.rootcause",
    "crashdoc.diagnosis.category",
    "crashdoc.diagnosis.failures",  # line hits, survived tracebacks, crashes, loop changes: none in a healthy log
    "crashdoc.diagnosis.report",  # the diagnosis builder and its context: made with the first diagnosis
    "crashdoc.diagnosis.snapshot",
    "crashdoc.diagnosis.gpustate",
    "crashdoc.diagnosis.views",
    "crashdoc.diagnosis.configchange",
    "crashdoc.gpu_events",
    "crashdoc.diagnosis_records",
    "crashdoc.failure_records",  # a traceback's records and a match: a healthy line makes none
    "crashdoc.unit_records",  # a unit's D-Bus state, launch facts, watch rules: a paste has none
    "crashdoc.remedy",
    "crashdoc.runtime",
    "crashdoc.config",
    "crashdoc.outputs.metrics",
    "crashdoc.outputs.http",
    "crashdoc.sources.journal",
    "crashdoc.authoring",
    "crashdoc.sandbox",
    "crashdoc.redact",  # "No failure found." has nothing to redact: imported where a diagnosis is printed
    "crashdoc.matching.derived",  # the derived signatures: read at the first traceback no signature answers
    "crashdoc.matching.derived_store",
    "crashdoc.matching.derived_index",
    "shutil",  # with bz2 and lzma: argparse's help formatter and the spooling of standard input import it
    "hashlib",  # OpenSSL: the library cache's key is computed only when the cache is written
)


def _explain_imports(tmp_path: Path, text: str) -> tuple[str, list[str]]:
    log = tmp_path / "one.log"
    log.write_text(text)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    argv = [sys.executable, "-c", _CHILD, str(log)]
    subprocess.run(argv, capture_output=True, env=env, check=True, timeout=120)  # writes the library's cache
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True, timeout=120)  # a warm start
    said, _, modules = out.stdout.rstrip("\n").rpartition("\n")
    return said, json.loads(modules)


def _imported(modules: list[str], prefix: str) -> list[str]:
    return [m for m in modules if m == prefix or m.startswith(prefix + ".")]


def test_explain_of_a_healthy_line_imports_no_judgment_remedy_or_daemon(tmp_path: Path) -> None:
    said, modules = _explain_imports(tmp_path, HEALTHY)
    assert said == "No failure found."
    assert "crashdoc.diagnosis.engine" in modules  # the child did run explain's engine
    imported = {prefix: _imported(modules, prefix) for prefix in NOT_FOR_A_HEALTHY_LOG}
    assert not any(imported.values()), {k: v for k, v in imported.items() if v}


def test_explain_of_a_failure_still_imports_the_judgment(tmp_path: Path) -> None:
    said, modules = _explain_imports(tmp_path, FAILED)
    assert "illegal memory access" in said
    assert "crashdoc.diagnosis.rootcause" in modules
    assert "crashdoc.diagnosis.category" in modules
    assert "crashdoc.diagnosis.report" in modules
    assert "crashdoc.failure_records" in modules


def test_the_records_made_elsewhere_keep_their_names_in_events() -> None:
    """`crashdoc.events` names the GPU paths' records, a diagnosis's and a unit's too, the same classes, imported at
    their first use (a state pickled by crashdoc 0.1.0 names `crashdoc.events.Diagnosis`)."""
    code = (
        "import sys, crashdoc.events as e\n"
        "apart = ['crashdoc.gpu_events', 'crashdoc.diagnosis_records', 'crashdoc.unit_records']\n"
        "apart.append('crashdoc.failure_records')\n"
        "before = [m in sys.modules for m in apart]\n"
        "from crashdoc.events import Diagnosis, Fix, GpuEvent, HostGpus, LaunchFacts, UnitState, WatchRule\n"
        "from crashdoc.events import ExceptionInfo, Frame, Match, Traceback\n"
        "import crashdoc.diagnosis_records as d, crashdoc.gpu_events as g, crashdoc.unit_records as u\n"
        "import crashdoc.failure_records as f\n"
        "same = GpuEvent is g.GpuEvent and HostGpus is g.HostGpus and Diagnosis is d.Diagnosis and Fix is d.Fix\n"
        "same = same and UnitState is u.UnitState and LaunchFacts is u.LaunchFacts and WatchRule is u.WatchRule\n"
        "same = same and Traceback is f.Traceback and ExceptionInfo is f.ExceptionInfo and Frame is f.Frame\n"
        "same = same and Match is f.Match\n"
        "print(*before, same, hasattr(e, 'NoSuchRecord'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["False", "False", "False", "False", "True", "False"]


def test_the_configuration_and_the_journal_source_import_no_alert_sender_or_gpu_records() -> None:
    """`diagnose` reads the configuration and opens the journal before its first walk starts: the client settings
    for Alertmanager come without the sender (threads, JSON) and the diagnosis records it reads, the host's name
    without `socket`, the journal source without the GPU faults' records (imported with the kernel's reader) and on
    systemd-python's C reader alone."""
    code = (
        "import json, sys, crashdoc.config\n"
        "config = set(sys.modules)\n"
        "import crashdoc.sources.journal\n"
        "print(json.dumps([sorted(config), sorted(sys.modules)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    config, journal = json.loads(out.stdout)
    for name in ("crashdoc.outputs.alerts", "crashdoc.diagnosis_records", "crashdoc.gpu_events", "threading", "socket"):
        assert name not in config
    assert "crashdoc.outputs.httpclient" in config
    assert "crashdoc.sources.journal" in journal
    assert not {"crashdoc.gpu_events", "crashdoc.diagnosis_records", "crashdoc.outputs.alerts"} & set(journal)
    # systemd-python's C reader without its Python module (which imports logging, uuid, traceback, platform)
    assert "systemd._reader" in journal
    assert not {"systemd.journal", "logging", "uuid", "traceback", "platform"} & set(journal)


def test_a_built_c_reader_is_found_without_the_build_tools(tmp_path: Path) -> None:
    """The C batch reader built once is found by a stat: what builds it (subprocess, shutil, tempfile, sysconfig)
    and hashlib are imported only when it has to be built."""
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from systemd import _reader\n"  # the journal source's import, before this one
        "before = set(sys.modules)\n"
        "from crashdoc.sources.fastread import built_library\n"
        "found, why = built_library(Path(sys.argv[1]))\n"
        "print(json.dumps([str(found), why, sorted(set(sys.modules) - before)]))"
    )
    argv = [sys.executable, "-c", code, str(tmp_path)]
    first = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, timeout=300).stdout)
    if first[0] == "None":
        pytest.skip(f"the C batch reader cannot be built here: {first[1]}")
    found, why, imported = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    assert (found, why) == (first[0], "")
    assert not {"subprocess", "shutil", "tempfile", "sysconfig", "hashlib"} & set(imported), imported
