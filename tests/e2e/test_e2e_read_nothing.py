"""`crashdoc diagnose` on a host journal that holds nothing to diagnose, on a real private systemd: no SGLang unit
in it, a unit that does not exist, and a user who may not read the journal. Each is exit status 3 with the
reason, never "No failure found." (issue 22); the healthy unit beside them is 0."""

from __future__ import annotations

import json

import pytest

from crashdoc.sandbox.demo import DECODE_UNIT, decode_unit
from support.e2e import CRASHDOC, wait_for

pytestmark = pytest.mark.sandbox
NOBODY = "65534"


def test_an_empty_or_unreadable_journal_is_nothing_read(sandbox_factory, sandbox_workdir) -> None:
    sandbox = sandbox_factory({DECODE_UNIT: decode_unit(CRASHDOC[0], sandbox_workdir)}, workdir=sandbox_workdir)
    wait_for(
        lambda: "fired up and ready to roll" in sandbox.journalctl("-u", DECODE_UNIT).stdout,
        60,
        "the decode unit to be ready",
        seen=lambda: sandbox.journalctl("-u", DECODE_UNIT, "-n", "5").stdout,
    )
    healthy = sandbox.run([*CRASHDOC, "diagnose", "--no-verify", "--unit", DECODE_UNIT], timeout=120)
    assert (healthy.returncode, healthy.stdout) == (0, "No failure found.\n"), healthy

    # the journal holds entries, none of the units asked for
    r = sandbox.run([*CRASHDOC, "diagnose", "--no-verify", "--unit", "sglang-router.service"], timeout=120)
    assert (r.returncode, r.stdout) == (3, ""), r
    assert r.stderr == "crashdoc: sglang-router.service: no such unit in the journal\n"
    r = sandbox.run([*CRASHDOC, "diagnose", "--no-verify", "--json", "--unit", "sglang-router*"], timeout=120)
    doc = json.loads(r.stdout)
    assert (
        r.returncode == 3
        and doc["diagnoses"] == []
        and doc["problems"][0].startswith("no entries of sglang-router*.service since ")
    ), (r.returncode, doc)

    # a user outside the systemd-journal group: journald's files are there, none is readable
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *CRASHDOC]
    r = sandbox.run([*argv, "diagnose", "--no-verify"], timeout=120, env={"XDG_CACHE_HOME": str(sandbox_workdir)})
    assert r.returncode == 3 and r.stdout == "", r
    assert r.stderr.startswith("crashdoc: cannot read the system journal (permission denied): run as root"), r.stderr
