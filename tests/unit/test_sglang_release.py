"""Which SGLang release a unit runs, read from files: venvs, system Pythons, editable installs, launch scripts,
broken and unreadable installs; and how the release reaches every diagnosis."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from crashdoc.events import UnitState
from crashdoc.outputs.html import diagnosis_section
from crashdoc.outputs.render import diagnosis_dict, diagnosis_text
from crashdoc.remedy.release import unit_install
from crashdoc.sources import sglang_install
from crashdoc.sources.sglang_install import find_sglang
from support.engine_driver import Host
from support.sglang_trees import make_editable, make_venv, set_release, unpack


def script(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def test_venv_interpreter_in_exec_start(tmp_path: Path) -> None:
    site = make_venv(tmp_path / "venv")
    release = unpack(site)
    found = unit_install([str(tmp_path / "venv/bin/python"), "-m", "sglang.launch_server", "--tp", "8"])
    assert found is not None
    assert (found.version, found.problems) == (release, ())
    assert found.source == str(site / "sglang")
    assert found.dist_info == str(site / f"sglang-{release}.dist-info")
    assert found.origin.endswith("sglang/_version.py")


def test_launch_script_that_activates_a_venv(tmp_path: Path) -> None:
    site = make_venv(tmp_path / "venv")
    unpack(site)
    set_release(site, "0.5.99")
    launch = script(
        tmp_path / "prefill.sh",
        f"#!/bin/bash\nset -e\nsource {tmp_path}/venv/bin/activate\nexec numactl --membind=0 python3 \\\n"
        "    -m sglang.launch_server --model-path m --tp 8\n",
    )
    found = unit_install(["/bin/bash", launch])
    assert found is not None
    assert found.version == "0.5.99"
    assert found.interpreter == f"{tmp_path}/venv/bin/python3"
    assert not found.problems  # dist-info and _version.py were both edited: no mixed install


def test_console_script_names_its_interpreter(tmp_path: Path) -> None:
    site = make_venv(tmp_path / "venv")
    release = unpack(site)
    script(tmp_path / "venv/bin/sglang", f"#!{tmp_path}/venv/bin/python\nfrom sglang.cli.main import main\nmain()\n")
    found = unit_install([f"{tmp_path}/venv/bin/sglang", "serve", "--model-path", "m"])
    assert found is not None and found.version == release
    assert found.interpreter == f"{tmp_path}/venv/bin/python"


def test_system_python_prefix_and_pythonpath(tmp_path: Path) -> None:
    prefix = tmp_path / "opt/python"
    (prefix / "bin").mkdir(parents=True)
    real = prefix / "bin/python3.11"
    real.write_text("")
    (prefix / "bin/python3").symlink_to("python3.11")  # the X.Y comes from the link's target
    site = prefix / "lib/python3.11/site-packages"
    release = unpack(site)
    found = find_sglang(str(prefix / "bin/python3"))
    assert (found.version, found.site) == (release, str(site))

    # PYTHONPATH comes first, as in `site`: a checkout on it wins over the installed wheel
    other = tmp_path / "checkout"
    unpack(other, dist_info=False)
    set_release(other, "0.6.0.dev1")
    found = unit_install(
        ["/usr/bin/env", f"PYTHONPATH={other}", str(prefix / "bin/python3"), "-m", "sglang.launch_server"]
    )
    assert found is not None and (found.version, found.site) == ("0.6.0.dev1", str(other))


def test_bare_python_is_looked_up_on_the_scripts_path(tmp_path: Path) -> None:
    site = make_venv(tmp_path / "venv")
    release = unpack(site)
    launch = script(
        tmp_path / "run.sh",
        f'#!/bin/sh\nexport PATH="{tmp_path}/venv/bin:$PATH"\npython -m sglang.launch_server --port 30000\n',
    )
    found = unit_install([launch])
    assert found is not None and found.version == release


def test_editable_install_reads_the_checkout(tmp_path: Path) -> None:
    site = make_venv(tmp_path / "venv")
    checkout = tmp_path / "src/sglang"
    unpack(checkout / "python", dist_info=False)
    set_release(checkout / "python", "0.5.24.dev7")
    make_editable(site, checkout, "0.5.23")  # pip wrote the dist-info before `git pull`: the source runs
    found = find_sglang(str(tmp_path / "venv/bin/python"))
    assert found.editable
    assert found.source == str(checkout / "python/sglang")
    assert found.version == "0.5.24.dev7"
    assert "editable install" in found.origin


def test_mixed_install_is_reported(tmp_path: Path) -> None:
    site = make_venv(tmp_path / "venv")
    release = unpack(site)
    (site / "sglang/_version.py").write_text("__version__ = version = '0.5.22'\n")  # a copy left over
    found = find_sglang(str(tmp_path / "venv/bin/python"))
    assert found.version == "0.5.22"  # what is imported is what runs
    assert any("mixed install" in p and release in p and "0.5.22" in p for p in found.problems)


def test_broken_dist_info(tmp_path: Path) -> None:
    site = make_venv(tmp_path / "venv")
    release = unpack(site, members=())  # a dist-info and no package: pip was interrupted
    (site / f"sglang-{release}.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: sglang\n\n")
    found = find_sglang(str(tmp_path / "venv/bin/python"))
    assert any(p.startswith("broken ") and "no Version" in p for p in found.problems)
    assert found.version == release  # the folder's name still says it
    (site / f"sglang-{release}.dist-info/METADATA").unlink()
    found = find_sglang(str(tmp_path / "venv/bin/python"))
    assert any(p.startswith("broken ") and "cannot read METADATA" in p for p in found.problems)


def test_unreadable_site_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = make_venv(tmp_path / "venv")
    unpack(site)
    if os.geteuid() == 0:  # root reads any mode: make the folder fail the way a non-root daemon sees it
        listdir = os.listdir

        def refuse(path: str) -> list[str]:
            if str(path) == str(site):
                raise PermissionError(13, "Permission denied", str(path))
            return listdir(path)

        monkeypatch.setattr(sglang_install.os, "listdir", refuse)
    else:
        site.chmod(0)
    try:
        found = find_sglang(str(tmp_path / "venv/bin/python"))
    finally:
        site.chmod(stat.S_IRWXU)
    assert found.version == ""
    assert any(p == f"cannot read {site}: Permission denied" for p in found.problems)


def test_missing_interpreter_and_container(tmp_path: Path) -> None:
    found = unit_install([f"{tmp_path}/nowhere/bin/python", "-m", "sglang.launch_server"])
    assert found is not None and found.version == "" and "not found" in found.problems[0]
    found = unit_install(
        ["/usr/bin/docker", "run", "--gpus", "all", "lmsys/sglang", "python3", "-m", "sglang.launch_server"]
    )
    assert found is not None and found.version == "" and "container (docker)" in found.problems[0]
    assert unit_install(["/usr/bin/sleep", "infinity"]) is None


def test_release_reaches_every_output() -> None:
    """The launch reader gives the run its release; JSON, text and the HTML page show it, and where from."""
    host = Host(
        sglang_release=lambda argv: (
            "0.5.21",
            "/opt/venv/bin/python: /opt/venv/lib/python3.11/site-packages/sglang/_version.py",
        )
    )
    host.files["/opt/sglang/prefill.sh"] = "exec /opt/venv/bin/python -m sglang.launch_server --hicache-size 150\n"
    host.feed(UnitState(host.unit, exec_start=("/opt/sglang/prefill.sh",)))
    for _ in range(2):
        host.start()
        host.crash()
    (d,) = host.engine.diagnoses()
    data = diagnosis_dict(d)
    assert data["sglang_version"] == "0.5.21"
    assert data["sglang_version_from"].endswith("sglang/_version.py")
    assert "  sglang: 0.5.21 (from /opt/venv/bin/python: " in diagnosis_text(d)
    assert "<th>SGLang release</th><td>0.5.21 (from /opt/venv/bin/python" in diagnosis_section(d)


def test_log_and_option_take_precedence() -> None:
    """What the run printed beats the files read now (an upgrade since); `--sglang-version` beats both."""
    host = Host(sglang_release=lambda argv: ("0.5.23", "python: METADATA"))
    host.feed(UnitState(host.unit, exec_start=("/opt/venv/bin/python", "-m", "sglang.launch_server")))
    host.start()
    host.line("Successfully installed sglang-0.5.14 sgl-kernel-0.1.0")
    host.crash()
    (d,) = host.engine.diagnoses()
    assert (d.sglang_release, d.sglang_release_from) == ("0.5.14", "the unit's log")
    host.engine.reporter.release_option = ("0.5.10", "--sglang-version")
    (d,) = host.engine.diagnoses()
    assert (d.sglang_release, d.sglang_release_from) == ("0.5.10", "--sglang-version")


def test_unknown_release_is_said() -> None:
    host = Host()
    host.start()
    host.crash()
    (d,) = host.engine.diagnoses()
    assert diagnosis_dict(d)["sglang_version"] is None
    assert "  sglang: unknown" in diagnosis_text(d)


def test_direct_url_json_is_data(tmp_path: Path) -> None:
    """A direct_url.json that is not JSON (or points nowhere) is no editable source, and no crash."""
    site = make_venv(tmp_path / "venv")
    info = site / "sglang-0.5.23.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Name: sglang\nVersion: 0.5.23\n\n")
    (info / "direct_url.json").write_text("{not json")
    found = find_sglang(str(tmp_path / "venv/bin/python"))
    assert (found.version, found.source, found.editable) == ("0.5.23", "", False)
    (info / "direct_url.json").write_text(json.dumps({"url": "file:///nonexistent/x", "dir_info": {"editable": True}}))
    found = find_sglang(str(tmp_path / "venv/bin/python"))
    assert (found.version, found.source) == ("0.5.23", "")


def test_release_named_by_sglang_version_line() -> None:
    """A launch script that runs `sglang version` first: SGLang's cli/main.py prints `sglang version: X`."""
    host = Host()
    host.start()
    host.line("sglang version: 0.5.21")
    host.line("git revision: 1a2b3c4")
    host.line("Successfully installed requests-2.32.3")  # pip installing something else names no release
    host.crash()
    (d,) = host.engine.diagnoses()
    assert (d.sglang_release, d.sglang_release_from) == ("0.5.21", "the unit's log")


def test_bash_c_string_that_activates_a_venv(tmp_path: Path) -> None:
    site = make_venv(tmp_path / "venv")
    unpack(site)
    set_release(site, "0.5.98")
    argv = ["/bin/bash", "-lc", f"source {tmp_path}/venv/bin/activate && exec python3 -m sglang.launch_server --tp 2"]
    found = unit_install(argv)
    assert found is not None and found.version == "0.5.98"
    # the same command without the activation runs the system's python3, whose import path has no such tree
    found = unit_install(["/bin/bash", "-lc", "exec python3 -m sglang.launch_server --tp 2"])
    assert found is not None and found.version != "0.5.98"
