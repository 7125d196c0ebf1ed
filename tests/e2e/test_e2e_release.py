"""A unit whose interpreter sees an SGLang release crashdoc does not ship, on a real (private) systemd.

The unit runs a launch script that activates a venv; the venv holds files of SGLang's real wheel with its
version edited to one that does not exist (the dist-info and `_version.py`), and the fake SGLang raises one
of that tree's real flag checks. crashdoc must read the release from the venv's files, derive signatures
from the tree (in a child process, cached in its state folder), and diagnose from them, naming the release.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from crashdoc.matching.derived import load_shipped
from crashdoc.sandbox.demo import sglang_unit
from support.e2e import CRASHDOC, start_crashdoc, wait_for
from support.sglang_trees import VERSION_FILES, set_release, unpack

pytestmark = pytest.mark.sandbox

UNIT = "sglang-canary.service"
RELEASE = "0.5.99"  # no SGLang release: nothing shipped can know it
CHECK_FILE = "sglang/srt/arg_groups/validation_hook.py"
# SGLang 0.5.23's validation_hook.py: `raise ValueError(f"--sampling-mask-max-tokens must be positive (got ...")`
MESSAGE = "--sampling-mask-max-tokens must be positive (got 0)."
CONFIG = f"""
units:
  - {{name: "{UNIT}", role: prefill}}
"""


def test_unshipped_release_is_derived_from_the_units_tree(sandbox_factory, sandbox_workdir: Path) -> None:
    venv = sandbox_workdir / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    unpack(site, (*VERSION_FILES, CHECK_FILE))
    assert MESSAGE.split(" (got")[0] in (site / CHECK_FILE).read_text()  # the tree's own check
    set_release(site, RELEASE)
    assert RELEASE not in load_shipped().releases
    script = sandbox_workdir / "canary.sh"
    script.write_text(
        "#!/bin/bash\nset -e\n"
        f"source {venv}/bin/activate\n"
        f"export FAKE_SGLANG_RAISE={shlex.quote('ValueError: ' + MESSAGE)}\n"
        "exec python -m crashdoc.sandbox.fake_sglang --model-path meta-llama/Llama-3.1-8B-Instruct --tp-size 1\n"
    )
    script.chmod(0o755)
    units = {UNIT: sglang_unit("SGLang canary", str(script))}
    sandbox = sandbox_factory(units, workdir=sandbox_workdir, start_units=[])
    cd = start_crashdoc(sandbox, config=CONFIG)
    state = sandbox_workdir / "crashdoc-state"
    try:
        sandbox.systemctl("start", UNIT, check=True)

        def derived_diagnosis() -> dict | None:
            for d in cd.diagnoses():
                if d["unit"] == UNIT and d["derived"] and any(RELEASE in e for e in d["evidence"]):
                    return d
            return None

        d = wait_for(derived_diagnosis, 90, "a diagnosis from the tree's derived signatures", cd)
        assert isinstance(d, dict)
        assert d["root_cause"]["message"] == MESSAGE
        assert d["sglang_version"] == RELEASE
        assert d["sglang_version_from"].startswith(f"{venv}/bin/python")
        assert d["sglang_version_from"].endswith("sglang/_version.py")
        assert d["version_note"] is None  # the check is in the unit's own release
        assert "--sampling-mask-max-tokens" in d["flags"]
        assert [c["flag"] for c in d["fix"]["changes"]] == ["--sampling-mask-max-tokens"]

        status, body = cd.get("/healthz")
        assert status == 200
        health = json.loads(body)
        trees = health.get("detail", health).get("sglang_trees")
        assert trees and trees[0]["release"] == RELEASE and trees[0]["status"] in ("derived", "cached"), health
        cached = list((state / "cache").glob(f"derived-{RELEASE}-*.json"))
        assert len(cached) == 1
        stored = json.loads(cached[0].read_text())
        assert (stored["schema"], stored["version"], stored["release"]) == ("crashdoc-derived-tree", 1, RELEASE)

        def unit_page() -> bytes | None:  # the page shows the loop's diagnosis: from the second crash on
            status, page = cd.get(f"/units/{UNIT}")
            return page if status == 200 and b"SGLang release" in page else None

        page = wait_for(unit_page, 30, "the crash loop on the unit's page", cd)
        assert isinstance(page, bytes) and f"{RELEASE} (from {venv}/bin/python".encode() in page

        # the one-shot `diagnose` on the same host finds the same release, and its derived signatures in the cache
        config = sandbox_workdir / "diagnose.yaml"
        config.write_text(CONFIG + f"state_directory: {state}\n")
        r = sandbox.run([*CRASHDOC, "diagnose", "--config", str(config), "--unit", UNIT, "--json"], timeout=120)
        assert r.returncode == 1, r.stderr
        (one,) = [x for x in json.loads(r.stdout)["diagnoses"] if x["unit"] == UNIT]
        assert (one["sglang_version"], one["derived"]) == (RELEASE, True)
        assert any(RELEASE in e for e in one["evidence"])
        assert f"derived signatures for SGLang {RELEASE}" in r.stderr and "(from the cache)" in r.stderr
    finally:
        sandbox.systemctl("stop", UNIT)
        cd.stop()
    assert f"derived signatures for SGLang {RELEASE}" in cd.log()
