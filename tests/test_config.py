"""The configuration file under hostile edits, at start and on reload (SIGHUP).

tests/test_check_config.py covers the everyday mistakes through `crashdoc check-config`; here: YAML built
to break a loader (aliases that refer to themselves or expand exponentially, integers past Python's limit,
control characters, binary files, a folder instead of a file) must give file:line and never an exception,
`crashdoc run` must refuse to start on them, and a running daemon must take a good new configuration on
SIGHUP and reject a bad one while the old one keeps working.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from crashdoc.config import ConfigError, load_config
from e2e import CRASHDOC, free_port

LAUGHS = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
) + "units: *a8\n"

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


@pytest.mark.parametrize(("text", "expected"), HOSTILE, ids=[
    "recursive-alias", "billion-laughs", "huge-int", "nul", "escape", "deep", "list", "mapping-units"])
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
    r = subprocess.run([*CRASHDOC, "run", "--config", str(path), "--listen", f"127.0.0.1:{free_port()}",
                        "--state-directory", str(tmp_path / "state")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.startswith("crashdoc: invalid configuration, not starting:\n"), r.stderr
    assert re.search(re.escape(str(path)) + expected, r.stderr), r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "state").exists()
