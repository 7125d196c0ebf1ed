"""`crashdoc check-config FILE`: OK and a summary, or every problem as FILE:LINE and exit 1.

Run as the command an SRE runs before rolling a configuration out; the shipped example must pass
and must document every option the loader knows.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import pytest

from crashdoc import config as config_module
from crashdoc.cli import main
from crashdoc.config import AlertmanagerConfig, Config, SglangChecksConfig, load_config
from crashdoc.events import ROLES, Thresholds
from support.e2e import CRASHDOC

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "config.example.yaml"


def check(path: Path) -> subprocess.CompletedProcess[str]:
    """The command as an SRE runs it."""
    return subprocess.run([*CRASHDOC, "check-config", str(path)], capture_output=True, text=True, timeout=120)


def check_here(path: Path, capsys: pytest.CaptureFixture[str]) -> subprocess.CompletedProcess[str]:
    """The same command line, parsed and run in this process (no interpreter start-up per case)."""
    code = main(["check-config", str(path)])
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["check-config", str(path)], code, out.out, out.err)


def test_example_config_passes() -> None:
    r = check(EXAMPLE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{EXAMPLE}: OK\n")
    assert "sglang-prefill*.service (prefill)" in r.stdout
    assert re.search(r"signatures: +\d+ from built-in", r.stdout), r.stdout
    assert r.stderr == ""


def test_example_documents_every_option() -> None:
    """Every key the loader accepts is written in the example, set or commented out."""
    text = EXAMPLE.read_text()

    def written(key: str) -> bool:
        return re.search(rf"^[ #]*-? *{re.escape(key)}:", text, re.M) is not None

    keys = [
        *config_module._TOP,
        *(f.name for f in dataclasses.fields(Thresholds)),
        *(f.name for f in dataclasses.fields(AlertmanagerConfig) if f.name != "client"),
        *config_module._CLIENT_KEYS,  # the client settings, written as Prometheus writes them
        *(f.name for f in dataclasses.fields(SglangChecksConfig)),
        "builtin",
        "folders",
        "directory",
        "name",
        "role",
    ]
    assert [k for k in keys if not written(k)] == []
    assert all(role in text for role in ROLES)


def test_example_values_are_the_defaults_except_units() -> None:
    example = load_config(EXAMPLE)
    default = Config()
    differ = [
        f.name
        for f in dataclasses.fields(Config)
        if getattr(example, f.name) != getattr(default, f.name) and f.name not in ("units", "source")
    ]
    assert differ == [] or (differ == ["state_directory"] and example.state_directory == "/var/lib/crashdoc")


def test_readme_configuration_block_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The defaults the README shows (runbook_base_url: null included) are a valid configuration."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## Configuration.*?```yaml\n(.*?)```", readme, re.S)
    assert block, "README has no Configuration block"
    path = tmp_path / "readme.yaml"
    path.write_text(block.group(1))
    r = check_here(path, capsys)
    assert r.returncode == 0, r.stderr


def signature_folder(root: Path) -> Path:
    folder = root / "signatures"
    folder.mkdir()
    (folder / "site.yaml").write_text("id: my-sig\ntitle: x\n")
    return folder


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("listen: 127.0.0.1:10247\nbogus: 1\n", r":2: bogus: unknown key"),
        ("units:\n  - name: sglang.service\n    role: prefil\n", r":3: units\.0\.role: 'prefil' is not one of"),
        ("units: []\n", r":1: units: must be a non-empty list"),
        ("listen: localhost\n", r":1: listen: listen address must be HOST:PORT"),
        ("thresholds:\n  recovery: soon\n", r":2: thresholds\.recovery: must be a positive number"),
        ("thresholds:\n  startup_crashes: .inf\n", r":2: thresholds\.startup_crashes: must be a positive number"),
        ("thresholds:\n  recovery: .nan\n", r":2: thresholds\.recovery: must be a positive number"),
        ("thresholds:\n  startup_crashes: 2.5\n", r":2: thresholds\.startup_crashes: must be a whole number"),
        ("thresholds:\n  recovery: 0\n", r":2: thresholds\.recovery: must be a positive number"),
        ("runbook_base_url: crashdoc.example.net\n", r":1: runbook_base_url: must be an http\(s\) URL"),
        ("alertmanager:\n  url: am:9093\n", r":2: alertmanager\.url: must be an http\(s\) URL"),
        ("alertmanager:\n  timeout: .inf\n", r":2: alertmanager\.timeout: must be a positive number"),
        ("dbus: maybe\n", r":1: dbus: must be true or false"),
        ("sglang_checks: yes\n", r":1: sglang_checks: must be a mapping"),
        ("sglang_checks:\n  enabled: 1\n", r":2: sglang_checks\.enabled: must be true or false"),
        ("sglang_checks:\n  at_once: 0\n", r":2: sglang_checks\.at_once: must be a whole number from 1 to 16"),
        ("sglang_checks:\n  waiting: 2.5\n", r":2: sglang_checks\.waiting: must be a whole number from 1 to"),
        ("sglang_checks:\n  parallel: 4\n", r":2: sglang_checks\.parallel: unknown key \(known: enabled, "),
        ("units: [\n", r":2: invalid YAML"),
        ("listen: a:1\nlisten: b:2\n", r":2: duplicate key 'listen'"),
        (
            "signatures:\n  folders:\n    - /nonexistent/crashdoc-signatures\n",
            r":3: signatures\.folders: /nonexistent/crashdoc-signatures: no such folder",
        ),
        (
            "signatures: [/nonexistent/crashdoc-signatures]\n",
            r":1: signatures\.folders: /nonexistent/crashdoc-signatures: no such folder",
        ),
        ("signatures:\n  builtin: false\n", r":2: signatures: no library"),
        ("journal:\n  directory: /nonexistent/journal\n", r":2: journal\.directory: /nonexistent/journal: no such"),
        ("state_directory: var/lib/crashdoc\n", r":1: state_directory: must be an absolute path"),
    ],
)
def test_broken_configs_name_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = tmp_path / "crashdoc.yaml"
    path.write_text(text)
    r = check_here(path, capsys)
    assert r.returncode == 1, r.stdout
    assert re.search(re.escape(str(path)) + expected, r.stderr), r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_broken_signature_folder_names_the_signature_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder whose signatures do not load: the daemon would refuse to start; the problem is in that file."""
    folder = signature_folder(tmp_path)
    path = tmp_path / "crashdoc.yaml"
    path.write_text(f"signatures:\n  folders: [{folder}]\n")
    r = check_here(path, capsys)
    assert r.returncode == 1
    assert f"{folder / 'site.yaml'}:1: " in r.stderr, r.stderr
    assert f"(signature library, {path}:2)" in r.stderr


def test_missing_file(tmp_path: Path) -> None:
    r = check(tmp_path / "nope.yaml")  # through the real command line: exit status and stderr
    assert r.returncode == 1
    assert r.stderr.strip() == f"{tmp_path / 'nope.yaml'}: no such file"
