"""Crash loops as systemd sees them, on a real (private) systemd with crashdoc running inside.

Each unit runs `crashdoc.sandbox.fake_sglang`, which has SGLang 0.5.23's process shape and
messages; which failure happens follows from its flags, as with the real server.
"""

from __future__ import annotations

import json
import re
import sys
import time

import pytest

from crashdoc.sandbox.demo import package_root
from support.e2e import CRASHDOC, RESTART_SCHEDULED, journal_json, pid1_records, start_crashdoc, wait_for

pytestmark = pytest.mark.sandbox

PY = sys.executable
MODEL = "deepseek-ai/DeepSeek-V4-Flash"
GOOD = f"--model-path {MODEL} --tp-size 2 --enable-hierarchical-cache --hicache-ratio 2.0"
BAD = f"--model-path {MODEL} --tp-size 2 --enable-hierarchical-cache --hicache-size 150"


def unit(
    exec_start: str,
    *,
    env: str = "",
    extra: str = "",
    start_limit: str = "StartLimitIntervalSec=0",
    restart: str = "always",
    restart_sec: str = "0.5",
) -> str:
    return (
        f"[Unit]\nDescription=SGLang test unit\n{start_limit}\n\n"
        f"[Service]\nExecStart={exec_start}\nRestart={restart}\nRestartSec={restart_sec}\n"
        f"Environment=PYTHONUNBUFFERED=1 PYTHONPATH={package_root()} {env}\n{extra}"
    )


def fake(flags: str) -> str:
    return f"{PY} -m crashdoc.sandbox.fake_sglang {flags}"


def state_of(cd, name: str) -> str | None:
    for (metric, labels), value in cd.metrics().items():
        if metric == "crashdoc_unit_state" and value == 1.0 and ("unit", name) in labels:
            return dict(labels)["state"]
    return None


def test_runtime_crashes_start_limit_slow_starter_and_oom_kill(sandbox_factory, sandbox_workdir) -> None:
    units = {
        # healthy for 2 s after "ready", then SGLang's runtime decode OOM: a loop of crashes after ready
        "sglang-runtime.service": unit(fake(GOOD), env="FAKE_SGLANG_CRASH_AFTER=2"),
        # dies at start-up; systemd gives up after 3 starts in 60 s
        "sglang-limit.service": unit(fake(BAD), start_limit="StartLimitIntervalSec=60\nStartLimitBurst=3"),
        # loads weights for 4 s (longer than crashdoc's 3 s recovery window), then dies before ready
        "sglang-slow.service": unit(fake(BAD), env="FAKE_SGLANG_LOAD_SECONDS=4"),
        # each rank allocates host memory for its HiCache pool until the unit's MemoryMax kills it
        "sglang-oom.service": unit(
            fake(GOOD),
            env="FAKE_SGLANG_FAILURE=host-oom FAKE_SGLANG_HOST_OOM_MB=400",
            extra="MemoryMax=160M\n",
            restart_sec="1",
        ),
    }
    sandbox = sandbox_factory(units, workdir=sandbox_workdir, start_units=[])
    cd = start_crashdoc(sandbox, config="thresholds: {recovery: 3, runtime_crashes: 3}\n")
    try:
        sandbox.systemctl("start", *units, check=True)

        # start limit hit: failed, and still counted as a loop until someone acts
        wait_for(
            lambda: cd.metric("crashdoc_unit_failed", unit="sglang-limit.service") == 1.0, 60, "the start limit", cd
        )
        assert cd.metric("crashdoc_unit_crashloop", unit="sglang-limit.service") == 1.0
        assert sandbox.systemctl("is-failed", "sglang-limit.service").stdout.strip() == "failed"
        assert "Start request repeated too quickly" in sandbox.journalctl("-u", "sglang-limit.service").stdout

        # the slow starter lives longer than the recovery window each time, but never gets ready
        wait_for(
            lambda: cd.metric("crashdoc_unit_crashloop", unit="sglang-slow.service") == 1.0,
            60,
            "the slow starter's loop",
            cd,
        )
        assert cd.metric("crashdoc_unit_restarts_total", unit="sglang-slow.service") >= 1.0

        # crashes after being ready count as runtime crashes: three make a loop
        wait_for(
            lambda: cd.metric("crashdoc_unit_crashloop", unit="sglang-runtime.service") == 1.0,
            90,
            "the runtime loop",
            cd,
        )
        diagnoses = {d["unit"]: d for d in cd.diagnoses()}
        runtime = diagnoses["sglang-runtime.service"]
        assert runtime["root_cause"]["line"].startswith("RuntimeError: Decode out of memory. Try to lower your batch")
        assert runtime["category"] == "memory"
        assert any("after SGLang reported ready" in e for e in runtime["evidence"])
        assert runtime["crashes"] >= 3

        # the kill-tree shape: the launcher's SIGKILL is the consequence, the child's error the cause
        slow = diagnoses["sglang-slow.service"]
        assert slow["signature"] == "dsv4-hicache-size-unsupported"
        assert slow["exit"] == "killed by SIGKILL"
        assert any("kills its whole process tree" in e for e in slow["evidence"])
        assert any("before SGLang reported ready" in e for e in slow["evidence"])

        if not sandbox.memory_enforced:
            pytest.skip(f"MemoryMax= is not enforced in this sandbox ({sandbox.cgroup_layout} cgroups)")
        wait_for(lambda: cd.metric("crashdoc_unit_crashloop", unit="sglang-oom.service") == 1.0, 90, "the OOM loop", cd)
        oom = {d["unit"]: d for d in cd.diagnoses()}["sglang-oom.service"]
        assert oom["category"] == "memory"
        assert oom["root_cause"]["line"] == "a process of the unit was killed by the kernel's OOM killer"
        assert any(e.startswith("kernel: oom-kill:") and "sglang-oom.service" in e for e in oom["evidence"])
        assert any("scheduler died during initialization (exit code: -9)" in e for e in oom["evidence"])
    finally:
        cd.stop()


def test_manual_restart_resets_nrestarts_and_a_config_change_is_correlated(sandbox_factory, sandbox_workdir):
    script = sandbox_workdir / "prefill.sh"
    script.write_text(f"#!/bin/sh\n# prefill\nexec {PY} -m sglang.launch_server \\\n    {GOOD}\n")
    script.chmod(0o755)
    units = {"sglang-prefill.service": unit(str(script), env=f"PYTHONPATH={sandbox_workdir}/shim:{package_root()}")}
    shim = sandbox_workdir / "shim" / "sglang"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("")
    (shim / "launch_server.py").write_text(  # `python -m sglang.launch_server`, as in a real launch script
        "from crashdoc.sandbox.fake_sglang import main\n\nif __name__ == '__main__':\n    main()\n"
    )
    sandbox = sandbox_factory(units, workdir=sandbox_workdir)
    cd = start_crashdoc(sandbox, config="thresholds: {recovery: 3}\n")
    try:
        name = "sglang-prefill.service"
        # a good run: ready and up for the recovery window
        wait_for(lambda: "fired up and ready to roll" in sandbox.journalctl("-u", name).stdout, 30, "ready", cd)
        wait_for(lambda: state_of(cd, name) == "healthy", 10, "healthy", cd)
        time.sleep(4)  # longer than the recovery window: this run is known good
        # someone edits the launch script and restarts the unit
        script.write_text(script.read_text().replace("--hicache-ratio 2.0", "--hicache-size 150"))
        sandbox.systemctl("restart", name, check=True)
        wait_for(lambda: cd.metric("crashdoc_unit_crashloop", unit=name) == 1.0, 60, "the loop", cd)
        d = {d["unit"]: d for d in cd.diagnoses()}[name]
        change = d["config_change"]
        assert change is not None, d["evidence"]
        assert change["path"] == str(script)
        assert change["added"] == ["--hicache-size 150"] and change["removed"] == ["--hicache-ratio 2.0"]
        assert re.match(
            rf"crash loop began \d+ s after {re.escape(str(script))} changed: \+ --hicache-size 150", d["evidence"][0]
        )

        # a manual restart resets systemd's NRestarts; crashdoc's restart counter keeps counting
        wait_for(lambda: (cd.metric("crashdoc_unit_nrestarts", unit=name) or 0) >= 2, 30, "two restarts", cd)
        before = cd.metric("crashdoc_unit_restarts_total", unit=name)
        sandbox.systemctl("restart", name, check=True)
        wait_for(lambda: cd.metric("crashdoc_unit_nrestarts", unit=name) == 0.0, 10, "NRestarts reset", cd)
        assert cd.metric("crashdoc_unit_restarts_total", unit=name) >= before
        # `restarts` in the JSON is systemd's NRestarts (since that reset); the unit keeps looping meanwhile
        n_before = int(sandbox.show(name, "NRestarts")["NRestarts"])
        out = json.loads(sandbox.run([*CRASHDOC, "diagnose", "--unit", name, "--json"]).stdout)
        n_after = int(sandbox.show(name, "NRestarts")["NRestarts"])
        assert n_before <= out["diagnoses"][0]["restarts"] <= n_after
    finally:
        cd.stop()


def test_dbus_stopped_and_restarted_while_crashdoc_runs(sandbox_factory, sandbox_workdir) -> None:
    units = {"sglang-prefill.service": unit(fake(BAD), restart_sec="1")}
    sandbox = sandbox_factory(units, workdir=sandbox_workdir, start_units=[])
    cd = start_crashdoc(sandbox)
    try:
        assert cd.metric("crashdoc_dbus_up") == 1.0
        sandbox.systemctl("stop", "dbus.socket", "dbus.service", check=True)
        wait_for(lambda: cd.metric("crashdoc_dbus_up") == 0.0, 20, "crashdoc_dbus_up 0", cd)
        # the journal alone still shows the loop and counts PID 1's restart records
        sandbox.systemctl("start", "sglang-prefill.service", check=True)
        wait_for(
            lambda: cd.metric("crashdoc_unit_crashloop", unit="sglang-prefill.service") == 1.0,
            60,
            "the loop without D-Bus",
            cd,
        )
        wait_for(
            lambda: (
                cd.metric("crashdoc_unit_restarts_total", unit="sglang-prefill.service")
                == len(pid1_records(sandbox, "sglang-prefill.service", RESTART_SCHEDULED))
            ),
            10,
            "restart records counted",
            cd,
        )
        assert "D-Bus" in cd.log()
        sandbox.systemctl("start", "dbus.socket", check=True)
        wait_for(lambda: cd.metric("crashdoc_dbus_up") == 1.0, 60, "D-Bus to come back", cd)
        wait_for(
            lambda: (cd.metric("crashdoc_unit_nrestarts", unit="sglang-prefill.service") or 0) >= 1,
            20,
            "NRestarts over D-Bus again",
            cd,
        )
        assert cd.proc is not None and cd.proc.poll() is None
        assert not [r for r in journal_json(sandbox, "SYSLOG_IDENTIFIER=crashdoc") if "Traceback" in r["MESSAGE"]]
    finally:
        cd.stop()
