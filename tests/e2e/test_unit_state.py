"""What D-Bus says of a unit, as the daemon reads it (`sources.units.UnitWatcher.state`), against a private systemd:
the same values `systemctl show` prints, read in two round trips (GetAll of the Unit and Service interfaces:
pystemd holds the GIL while PID 1 answers, so every call is a stall of the whole daemon), by busread.c (the GIL
released while PID 1 answers) and by pystemd where busread.c cannot be built: the same states."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.e2e import CRASHDOC

UNITS = {
    "demo-sleep.service": (
        "[Service]\nExecStart=/bin/sleep 1000\n"
        "Environment=CUDA_VISIBLE_DEVICES=1,0 API_TOKEN=secret\nEnvironmentFile=-/etc/crashdoc-test-none.env\n"
        "CPUAffinity=0\nNUMAPolicy=local\n"
    ),
}
PROBE = r"""
import dataclasses, json, sys
from pathlib import Path
from crashdoc.events import WatchRule
from crashdoc.sources.journal import UnitFilter
from crashdoc.sources.units import UnitWatcher

build_dir = Path(sys.argv[1]) if sys.argv[1] else None
w = UnitWatcher(UnitFilter([WatchRule("demo-*.service")]), build_dir=build_dir)
assert w.connect(), w.last_error
calls = []


class Counting:
    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        attr = getattr(self.real, name)
        if name not in ("call_method", "get_property", "get_all", "get_many"):
            return attr

        def counted(*args):
            calls.append(name)
            return attr(*args)

        return counted


def fields(s):
    return {k: v for k, v in dataclasses.asdict(s).items() if k != "timestamp"}


fast = w.fast_bus
w.bus = Counting(w.bus)
w.fast_bus = Counting(fast) if fast is not None else None
out = {"fast_reads": w.fast_reads}
for unit in sys.argv[2:]:
    del calls[:]
    s = w.state(unit)
    out[unit] = dict(calls=list(calls), loaded=s.loaded, active=s.active_state, sub=s.sub_state,
                     invocation=s.invocation, argv=list(s.exec_start), environment=list(s.environment),
                     files=list(s.environment_files), restarts=s.n_restarts, fragment=s.fragment_path,
                     affinity=s.cpu_affinity, numa=s.numa_policy, state=fields(s))
    if fast is not None:  # the same unit through pystemd: busread.c's values are pystemd's
        w.fast_bus = None
        out[unit]["pystemd"] = fields(w.state(unit))
        w.fast_bus = Counting(fast)
del calls[:]
many = w.states(sys.argv[2:])  # the daemon's refresh of the units PID 1 spoke of
out["many"] = dict(calls=list(calls), states={unit: fields(s) for unit, s in many.items()})
out["up"] = w.up
print(json.dumps(out))
"""


def _show(sandbox, unit: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    props = "ActiveState,SubState,InvocationID,NRestarts,FragmentPath,ExecStart"
    out = sandbox.systemctl("show", unit, "-p", props, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.mark.sandbox
@pytest.mark.parametrize("reader", ["busread.c", "pystemd"])
def test_a_units_state_is_what_systemctl_shows_read_in_two_calls(
    sandbox_factory, sandbox_workdir: Path, reader: str
) -> None:  # type: ignore[no-untyped-def]
    sandbox = sandbox_factory(UNITS, workdir=sandbox_workdir)
    probe = sandbox_workdir / "probe.py"
    probe.write_text(PROBE)
    build_dir = str(sandbox_workdir / "cache") if reader == "busread.c" else ""
    out = json.loads(
        sandbox.run([CRASHDOC[0], str(probe), build_dir, "demo-sleep.service", "demo-none.service"], check=True).stdout
    )
    call = "get_all" if reader == "busread.c" else "call_method"
    assert out["fast_reads"] == ("" if build_dir else "not asked for (no folder to build it in)"), out
    shown, got = _show(sandbox, "demo-sleep.service"), out["demo-sleep.service"]
    assert got["calls"] == [call, call], got
    assert (got["active"], got["sub"], str(got["restarts"])) == (
        shown["ActiveState"],
        shown["SubState"],
        shown["NRestarts"],
    )
    assert got["invocation"] == shown["InvocationID"] and got["fragment"] == shown["FragmentPath"]
    assert got["argv"] == ["/bin/sleep", "1000"] and "argv[]=/bin/sleep 1000 " in shown["ExecStart"]
    assert got["environment"] == ["CUDA_VISIBLE_DEVICES=1,0"]  # the GPU variable alone: API_TOKEN is never kept
    assert got["files"] == ["/etc/crashdoc-test-none.env"]
    assert (got["affinity"], got["numa"]) == ("0", "local")
    missing = out["demo-none.service"]
    assert missing["loaded"] is False and missing["calls"] == [call], missing
    if reader == "busread.c":
        assert got["state"] == got["pystemd"] and missing["state"] == missing["pystemd"]
    # several units at once: the same states, in one round trip through busread.c (all GetAll calls sent together)
    assert out["many"]["states"] == {"demo-sleep.service": got["state"], "demo-none.service": missing["state"]}
    assert out["many"]["calls"] == (["get_many"] if reader == "busread.c" else [call] * 3), out["many"]
    assert out["up"] is True  # a unit systemd does not know is no lost bus
