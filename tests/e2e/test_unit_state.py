"""What D-Bus says of a unit, as the daemon reads it (`sources.units.UnitWatcher.state`), against a private systemd:
the same values `systemctl show` prints, read in two round trips (GetAll of the Unit and Service interfaces:
pystemd holds the GIL while PID 1 answers, so every call is a stall of the whole daemon)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.e2e import CRASHDOC

UNITS = {
    "demo-sleep.service": (
        "[Service]\nExecStart=/bin/sleep 1000\n"
        "Environment=CUDA_VISIBLE_DEVICES=1,0 API_TOKEN=secret\nEnvironmentFile=-/etc/crashdoc-test-none.env\n"
    ),
}
PROBE = r"""
import json, sys
from crashdoc.events import WatchRule
from crashdoc.sources.journal import UnitFilter
from crashdoc.sources.units import UnitWatcher

w = UnitWatcher(UnitFilter([WatchRule("demo-*.service")]))
assert w.connect(), w.last_error
real, calls = w.bus, []


class Counting:
    def __getattr__(self, name):
        attr = getattr(real, name)
        if name not in ("call_method", "get_property"):
            return attr

        def counted(*args):
            calls.append(name)
            return attr(*args)

        return counted


w.bus = Counting()
out = {}
for unit in sys.argv[1:]:
    del calls[:]
    s = w.state(unit)
    out[unit] = dict(calls=list(calls), loaded=s.loaded, active=s.active_state, sub=s.sub_state,
                     invocation=s.invocation, argv=list(s.exec_start), environment=list(s.environment),
                     files=list(s.environment_files), restarts=s.n_restarts, fragment=s.fragment_path)
out["up"] = w.up
print(json.dumps(out))
"""


def _show(sandbox, unit: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    props = "ActiveState,SubState,InvocationID,NRestarts,FragmentPath,ExecStart"
    out = sandbox.systemctl("show", unit, "-p", props, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.mark.sandbox
def test_a_units_state_is_what_systemctl_shows_read_in_two_calls(sandbox_factory, sandbox_workdir: Path) -> None:  # type: ignore[no-untyped-def]
    sandbox = sandbox_factory(UNITS, workdir=sandbox_workdir)
    probe = sandbox_workdir / "probe.py"
    probe.write_text(PROBE)
    out = json.loads(
        sandbox.run([CRASHDOC[0], str(probe), "demo-sleep.service", "demo-none.service"], check=True).stdout
    )
    shown, got = _show(sandbox, "demo-sleep.service"), out["demo-sleep.service"]
    assert got["calls"] == ["call_method", "call_method"], got
    assert (got["active"], got["sub"], str(got["restarts"])) == (
        shown["ActiveState"],
        shown["SubState"],
        shown["NRestarts"],
    )
    assert got["invocation"] == shown["InvocationID"] and got["fragment"] == shown["FragmentPath"]
    assert got["argv"] == ["/bin/sleep", "1000"] and "argv[]=/bin/sleep 1000 " in shown["ExecStart"]
    assert got["environment"] == ["CUDA_VISIBLE_DEVICES=1,0"]  # the GPU variable alone: API_TOKEN is never kept
    assert got["files"] == ["/etc/crashdoc-test-none.env"]
    missing = out["demo-none.service"]
    assert missing["loaded"] is False and missing["calls"] == ["call_method"], missing
    assert out["up"] is True  # a unit systemd does not know is no lost bus
