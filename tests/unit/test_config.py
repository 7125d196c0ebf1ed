"""The configuration file under hostile edits, at start and on reload (SIGHUP).

tests/unit/test_check_config.py covers the everyday mistakes through `crashdoc check-config`; here: YAML built
to break a loader (aliases that refer to themselves or expand exponentially, integers past Python's limit,
control characters, binary files, a folder instead of a file) must give file:line and never an exception,
`crashdoc run` must refuse to start on them, and a running daemon must take a good new configuration on
SIGHUP and reject a bad one while the old one keeps working.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from crashdoc.config import ConfigError, load_config
from support.e2e import CRASHDOC, free_port

LAUGHS = (
    "a0: &a0 [x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9))
    + "units: *a8\n"
)

HOSTILE = [
    ("units: &u [*u]\n", r":1: an alias refers to a collection that contains it"),
    (LAUGHS, r":1: more than \d+ values \(aliases expanding without end\?\)"),
    ("thresholds:\n  recovery: " + "9" * 5000 + "\n", r":2: invalid value: Exceeds the limit"),
    ("listen: 127.0.0.1:10247\ninstance: a\x00b\n", r":2: invalid YAML: character U\+0000 is not allowed"),
    ("units:\n  - name: x\x1b[2J\n", r":2: invalid YAML: character U\+001B is not allowed"),
    ("[" * 5000 + "]" * 5000 + "\n", r":1: invalid YAML: "),
    ("- just\n- a list\n", r":1: the configuration must be a mapping"),
    ("units: {name: a}\n", r":1: units: must be a non-empty list"),
]


@pytest.mark.parametrize(
    ("text", "expected"),
    HOSTILE,
    ids=["recursive-alias", "billion-laughs", "huge-int", "nul", "escape", "deep", "list", "mapping-units"],
)
def test_hostile_yaml_gives_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "crashdoc.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert re.match(re.escape(str(path)) + expected, caught.value.problems[0]), caught.value.problems


@pytest.mark.parametrize("kind", ["binary", "directory", "missing"])
def test_unreadable_config_files_give_a_clear_error(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "crashdoc.yaml"
    if kind == "binary":
        path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    elif kind == "directory":
        path.mkdir()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    [problem] = caught.value.problems
    assert problem.startswith(f"{path}: ") and len(problem.splitlines()) == 1, problem


@pytest.mark.parametrize(("text", "expected"), HOSTILE[:3], ids=["recursive-alias", "billion-laughs", "huge-int"])
def test_run_refuses_to_start_with_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "crashdoc.yaml"
    path.write_text(text)
    r = subprocess.run(
        [
            *CRASHDOC,
            "run",
            "--config",
            str(path),
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--state-directory",
            str(tmp_path / "state"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1
    assert r.stderr.startswith("crashdoc: invalid configuration, not starting:\n"), r.stderr
    assert re.search(re.escape(str(path)) + expected, r.stderr), r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "state").exists()


# --- reload on SIGHUP, on a private systemd ---------------------------------------------------------

LOOP_STARTED = "e5f9680e52774903bd4465732f57a1a4"


def _bad_unit() -> str:
    from crashdoc.sandbox.demo import package_root

    flags = "--model-path deepseek-ai/DeepSeek-V4-Flash --tp-size 2 --enable-hierarchical-cache --hicache-size 150"
    return (
        "[Unit]\nDescription=SGLang test unit\nStartLimitIntervalSec=0\n\n"
        f"[Service]\nExecStart={sys.executable} -m crashdoc.sandbox.fake_sglang {flags}\nRestart=always\n"
        f"RestartSec=1\nEnvironment=PYTHONUNBUFFERED=1 PYTHONPATH={package_root()}\n"
    )


def _crashes(cd, unit: str) -> float:
    return sum(
        v for (name, labels), v in cd.metrics().items() if name == "crashdoc_crashes_total" and ("unit", unit) in labels
    )


def _hup(cd) -> None:
    assert cd.pid is not None
    os.kill(cd.pid, signal.SIGHUP)


@pytest.mark.sandbox
def test_sighup_reloads_the_configuration_and_keeps_the_old_one_when_invalid(sandbox_factory, sandbox_workdir):
    from support.e2e import journal_json, start_crashdoc, wait_for

    a, b = "sglang-a.service", "sglang-b.service"
    sandbox = sandbox_factory({a: _bad_unit(), b: _bad_unit()}, workdir=sandbox_workdir, start_units=[])
    first = f"units: [{a}]\nthresholds: {{startup_crashes: 50}}\nrunbook_base_url: http://old.example.net/crashdoc\n"
    cd = start_crashdoc(sandbox, config=first)
    assert cd.config_path is not None
    try:
        sandbox.systemctl("start", a, b, check=True)
        wait_for(lambda: _crashes(cd, a) >= 2, 60, "two crashes of a", cd)
        assert cd.metric("crashdoc_unit_crashloop", unit=a) == 0.0  # 50 crashes needed
        assert cd.metric("crashdoc_unit_crashloop", unit=b) is None  # not watched

        # a valid new file: units, thresholds and runbook links change live; the instance name waits for a
        # restart, and the listen address stays the command line's (--listen wins over the file)
        cd.config_path.write_text(
            f"units: [{a}, {{name: {b}, role: prefill}}]\nthresholds: {{startup_crashes: 2}}\n"
            f"runbook_base_url: http://new.example.net/crashdoc\nlisten: 127.0.0.1:{free_port()}\ninstance: renamed\n"
        )
        _hup(cd)
        wait_for(lambda: cd.metric("crashdoc_config_reloads_total") == 1.0, 20, "the reload", cd)
        later = f"instance changed in {cd.config_path}: it takes effect when crashdoc restarts"
        wait_for(lambda: later in cd.log(), 10, "the log of the reload", cd)
        assert f"configuration reloaded from {cd.config_path}: units, thresholds, runbook_base_url changed" in cd.log()
        assert "listen changed" not in cd.log()
        wait_for(lambda: cd.metric("crashdoc_unit_crashloop", unit=b) == 1.0, 60, "b's loop, watched now", cd)
        wait_for(lambda: cd.metric("crashdoc_unit_crashloop", unit=a) == 1.0, 60, "a's loop, at 2 crashes now", cd)
        records = {r["CRASHDOC_UNIT"]: r for r in journal_json(sandbox, f"MESSAGE_ID={LOOP_STARTED}")}
        assert records[b]["CRASHDOC_RUNBOOK_URL"].startswith("http://new.example.net/crashdoc/runbook/")
        assert cd.metric("crashdoc_config_last_reload_successful") == 1.0

        # an invalid file: rejected with file:line, counted, and the configuration in use keeps working
        cd.config_path.write_text(f"units: [{a}]\nthresholds:\n  recovery: soon\n")
        _hup(cd)
        wait_for(lambda: cd.metric("crashdoc_config_reload_errors_total") == 1.0, 20, "the rejected reload", cd)
        wait_for(
            lambda: f"{cd.config_path}:3: thresholds.recovery: must be a positive number, got 'soon'" in cd.log(),
            10,
            "the problem logged as file:line",
            cd,
        )
        assert cd.metric("crashdoc_config_last_reload_successful") == 0.0
        crashes_b = _crashes(cd, b)
        wait_for(lambda: _crashes(cd, b) > crashes_b, 60, "b still followed after the rejected reload", cd)

        # dropping a unit from the file forgets it: its metrics (and any alert) go
        cd.config_path.write_text(f"units: [{b}]\nthresholds: {{startup_crashes: 2}}\n")
        _hup(cd)
        wait_for(lambda: cd.metric("crashdoc_config_reloads_total") == 2.0, 20, "the second reload", cd)
        wait_for(lambda: cd.metric("crashdoc_unit_crashloop", unit=a) is None, 10, "a forgotten", cd)
        assert cd.metric("crashdoc_unit_crashloop", unit=b) == 1.0
        assert cd.metric("crashdoc_config_last_reload_successful") == 1.0
        assert cd.metric("crashdoc_internal_errors_total") == 0.0 and "internal error" not in cd.log()
    finally:
        cd.stop()
