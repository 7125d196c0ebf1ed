"""The private systemd is real: it boots, logs, answers on D-Bus, crash-loops units, and leaves nothing.

These tests also pin the systemd 252 journal facts that crashdoc's sources rely on (see the docstring
of crashdoc.sandbox.systemd), so a different systemd that changes them fails here first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from crashdoc.sandbox import demo
from crashdoc.sandbox.namespaces import tmp_mounts
from crashdoc.sandbox.systemd import PrivateSystemd, SandboxError, unavailable_reason
from support.sandboxes import SandboxFactory

RESTART_SCHEDULED = "5eb03494b6584870a536b337290809b3"
PROCESS_EXITED = "98e322203f7a4ed290d09fe03c09fe15"
UNIT_FAILED = "d9b373ed55a64feb8242e02dbe79a49c"
UNIT_STARTED = "39f53479d3a045ac8e11786248231fbf"
JOB_FAILED = "be02cf6855d2428ba40df7e9d022f03d"
DSV4_HICACHE = "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."
FAKE = "crashdoc.sandbox.fake_sglang"


def entries(sandbox: PrivateSystemd, *matches: str) -> list[dict[str, str]]:
    """Journal entries as dicts (``journalctl -o json``) inside the sandbox."""
    out = sandbox.journalctl("-o", "json", *matches, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def messages(sandbox: PrivateSystemd, *matches: str) -> list[str]:
    return [str(e.get("MESSAGE", "")) for e in entries(sandbox, *matches)]


def prop(sandbox: PrivateSystemd, unit: str, name: str) -> str:
    return sandbox.show(unit, name)[name]


def service(
    exec_start: str,
    *,
    restart: str = "no",
    start_limit: str = "StartLimitIntervalSec=0\n",
    extra_service: str = "",
) -> str:
    return (
        f"[Unit]\nDescription=test {exec_start[:40]}\n{start_limit}\n"
        f"[Service]\nExecStart={exec_start}\nRestart={restart}\nRestartSec=0.2\n"
        f"Environment=PYTHONUNBUFFERED=1\nEnvironment=PYTHONPATH={demo.package_root()}\n{extra_service}"
    )


def fake_sglang(python: str, *flags: str) -> str:
    return " ".join([python, "-m", FAKE, *flags])


def has_pid_namespace(ns: str) -> list[int]:
    """Host PIDs of processes that live in the PID namespace ``ns`` (``pid:[...]``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "pid") == ns:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.sandbox
def test_boot_runs_journald_dbus_and_units_without_touching_host_tmp(sandbox_factory: SandboxFactory) -> None:
    canary = Path("/tmp") / f"crashdoc-canary-{uuid.uuid4().hex}"
    canary.write_text("the private systemd must not delete me\n")
    try:
        unit = service("/bin/sh -c 'while true; do echo hello from the sandbox; sleep 0.2; done'")
        sb = sandbox_factory({"hello.service": unit})

        assert sb.run(["cat", "/proc/1/comm"]).stdout.strip() == "systemd"
        nspid = [ln for ln in Path(f"/proc/{sb.pid}/status").read_text().splitlines() if ln.startswith("NSpid:")]
        assert nspid[0].split()[-1] == "1"
        assert sb.run(["systemctl", "is-system-running"]).stdout.strip() == "running"
        bus = sb.run(
            [
                "busctl",
                "get-property",
                "org.freedesktop.systemd1",
                "/org/freedesktop/systemd1",
                "org.freedesktop.systemd1.Manager",
                "SystemState",
            ],
            check=True,
        )
        assert bus.stdout.strip() == 's "running"'
        assert prop(sb, "hello.service", "NRestarts") == "0"
        assert prop(sb, "hello.service", "ActiveState") == "active"

        sb.wait_until(lambda: "hello from the sandbox" in messages(sb, "-u", "hello.service"), message="unit line")
        host_view = subprocess.run(
            ["journalctl", "--no-pager", "--directory", str(sb.journal_dir), "-u", "hello.service"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert "hello from the sandbox" in host_view.stdout

        assert sb.run(["test", "-e", str(canary)]).returncode == 1  # /tmp inside is private
        assert sb.run(["stat", "-f", "-c", "%T", "/tmp"]).stdout.strip() == "tmpfs"
        sb.stop()
        assert canary.read_text() == "the private systemd must not delete me\n"
    finally:
        canary.unlink(missing_ok=True)


@pytest.mark.sandbox
def test_stop_leaves_no_process_cgroup_or_folder_behind(sandbox_factory: SandboxFactory) -> None:
    sb = sandbox_factory({"sleeper.service": service("/bin/sleep 1000")})
    ns = os.readlink(f"/proc/{sb.pid}/ns/pid")
    inside = sb.popen(["sleep", "1000"])
    sb.wait_until(lambda: len(has_pid_namespace(ns)) >= 5, message="journald, dbus, unit and popen'd sleep")
    workdir, cgroup = sb.workdir, sb.cgroup_name

    sb.stop()

    assert has_pid_namespace(ns) == []  # PID 1, journald, dbus, the unit and the popen'd process
    assert inside.poll() is not None
    assert not workdir.exists()
    leftovers = [p for p in Path("/sys/fs/cgroup").rglob(cgroup)] if cgroup else []
    assert leftovers == []
    with pytest.raises(SandboxError):
        sb.run(["true"])
    sb.stop()  # idempotent


@pytest.mark.sandbox
def test_a_private_tmp_units_host_folder_goes_with_the_sandbox(sandbox_factory: SandboxFactory) -> None:
    """PrivateTmp= makes /var/tmp/systemd-private-<boot>-<unit>-XXXX on the host (the sandbox hides /tmp, not
    /var/tmp); systemd would remove it at the unit's stop, which a killed PID 1 never reaches: stop() does."""
    unit = f"private-{uuid.uuid4().hex[:8]}.service"
    sb = sandbox_factory({unit: service("/bin/sleep 1000", extra_service="PrivateTmp=yes\n")})
    mine = lambda: sorted(Path("/var/tmp").glob(f"systemd-private-*-{unit}-*"))  # noqa: E731
    sb.wait_until(lambda: prop(sb, unit, "ActiveState") == "active" and mine(), message=f"{unit}'s private /var/tmp")
    made = mine()
    assert len(made) == 1 and made[0].is_dir()

    sb.stop()

    assert mine() == [], "the unit's private /var/tmp folder is left on the host"


@pytest.mark.sandbox
def test_two_sandboxes_do_not_see_each_other(sandbox_factory: SandboxFactory) -> None:
    a = sandbox_factory({"same.service": service("/bin/sh -c 'echo I am A; exec sleep 1000'")})
    b = sandbox_factory({"same.service": service("/bin/sh -c 'echo I am B; exec sleep 1000'")})
    for sb, me, other in ((a, "I am A", "I am B"), (b, "I am B", "I am A")):
        sb.wait_until(lambda sb=sb, me=me: me in messages(sb, "-u", "same.service"), message=me)
        assert other not in messages(sb, "-u", "same.service")
    a.stop()
    assert prop(b, "same.service", "ActiveState") == "active"


@pytest.mark.sandbox
def test_pid1_journal_records_have_the_fields_crashdoc_relies_on(sandbox_factory: SandboxFactory) -> None:
    units = {
        "crash.service": service("/bin/sh -c 'echo dying; sleep 0.2; kill -9 $$$$'", restart="always"),
        "exit3.service": service("/bin/sh -c 'sleep 0.2; exit 3'"),
        "ok0.service": service(
            "/bin/true", restart="always", start_limit="StartLimitIntervalSec=30\nStartLimitBurst=3\n"
        ),
        "fork.service": service(
            '/usr/bin/python3 -c \'import os,time\\nprint("parent")\\nif os.fork() == 0:\\n'
            '    print("child"); os._exit(0)\\ntime.sleep(1000)\''
        ),
    }
    sb = sandbox_factory(units)
    sb.wait_until(lambda: int(prop(sb, "crash.service", "NRestarts")) >= 2, message="crash.service restarts")
    sb.wait_until(lambda: prop(sb, "ok0.service", "ActiveState") == "failed", message="ok0 start limit")
    sb.wait_until(lambda: prop(sb, "exit3.service", "ActiveState") == "failed", message="exit3 fails")
    sb.wait_until(lambda: len(messages(sb, "_SYSTEMD_UNIT=fork.service")) >= 2, message="fork lines")

    restarts = entries(sb, f"MESSAGE_ID={RESTART_SCHEDULED}", "UNIT=crash.service")
    assert restarts, "no 'Scheduled restart job' record"
    first = restarts[0]
    assert first["N_RESTARTS"] == "1" and first["MESSAGE"].endswith("restart counter is at 1.")
    assert (first["_PID"], first["_COMM"], first["_SYSTEMD_UNIT"]) == ("1", "systemd", "init.scope")
    assert first["_SYSTEMD_CGROUP"] == "/init.scope"
    assert len(first["INVOCATION_ID"]) == 32 and "_SYSTEMD_INVOCATION_ID" not in first
    latest_n = int(restarts[-1]["N_RESTARTS"])
    assert int(prop(sb, "crash.service", "NRestarts")) >= latest_n

    exited = entries(sb, f"MESSAGE_ID={PROCESS_EXITED}", "UNIT=crash.service")[0]
    assert (exited["EXIT_CODE"], exited["EXIT_STATUS"]) == ("killed", "9")
    assert exited["MESSAGE"] == "crash.service: Main process exited, code=killed, status=9/KILL"
    failed = entries(sb, f"MESSAGE_ID={UNIT_FAILED}", "UNIT=crash.service")[0]
    assert failed["UNIT_RESULT"] == "signal"
    # the unit's own line carries the same invocation as PID 1's record about that run
    started = entries(sb, f"MESSAGE_ID={UNIT_STARTED}", "UNIT=crash.service")[0]
    own = entries(sb, "_SYSTEMD_UNIT=crash.service", "MESSAGE=dying")[0]
    assert own["_SYSTEMD_INVOCATION_ID"] == started["INVOCATION_ID"] == exited["INVOCATION_ID"]
    assert "INVOCATION_ID" not in own and own["_TRANSPORT"] == "stdout"

    e3 = entries(sb, f"MESSAGE_ID={PROCESS_EXITED}", "UNIT=exit3.service")[0]
    assert (e3["EXIT_CODE"], e3["EXIT_STATUS"]) == ("exited", "3")
    assert entries(sb, f"MESSAGE_ID={UNIT_FAILED}", "UNIT=exit3.service")[0]["UNIT_RESULT"] == "exit-code"

    ok0 = entries(sb, "UNIT=ok0.service")
    limit = [e for e in ok0 if e["MESSAGE"] == "ok0.service: Start request repeated too quickly."]
    assert limit and "MESSAGE_ID" not in limit[0]
    assert [e["UNIT_RESULT"] for e in ok0 if e.get("MESSAGE_ID") == UNIT_FAILED] == ["start-limit-hit"]
    assert [e["JOB_RESULT"] for e in ok0 if e.get("MESSAGE_ID") == JOB_FAILED] == ["failed"]
    assert not [e for e in ok0 if e.get("MESSAGE_ID") == PROCESS_EXITED]  # exit 0 is not reported

    lines = {e["MESSAGE"]: e for e in entries(sb, "_SYSTEMD_UNIT=fork.service")}
    assert lines["parent"]["_PID"] != lines["child"]["_PID"]  # the writer's PID, not the main PID
    assert lines["parent"]["_SYSTEMD_INVOCATION_ID"] == lines["child"]["_SYSTEMD_INVOCATION_ID"]


@pytest.mark.sandbox
def test_demo_prefill_crash_loops_while_decode_stays_up(sandbox_factory: SandboxFactory, sandbox_workdir: Path) -> None:
    sb = sandbox_factory(demo.demo_units(sandbox_workdir), workdir=sandbox_workdir)
    prefill, decode = demo.PREFILL_UNIT, demo.DECODE_UNIT
    sb.wait_until(lambda: int(prop(sb, prefill, "NRestarts")) >= 2, timeout=45, message="prefill restarts")

    assert sb.run(["systemctl", "is-active", prefill]).stdout.strip() in ("active", "activating")
    assert "sglang-prefill.sh" in prop(sb, prefill, "ExecStart")
    log = entries(sb, "-u", prefill)
    text = [e.get("MESSAGE", "") for e in log]
    headers = [t for t in text if "] Scheduler hit an exception: Traceback (most recent call last):" in t]
    assert any(" TP0] " in h for h in headers) and any(" TP1] " in h for h in headers)
    assert text.count(DSV4_HICACHE) >= 2
    assert any(t.endswith("] Received sigquit from a child process. It usually means the child failed.") for t in text)
    main_pids = {e["_PID"] for e in log if "server_args=" in e.get("MESSAGE", "")}
    rank_pids = {e["_PID"] for e in log if e.get("MESSAGE") == DSV4_HICACHE}
    assert rank_pids and not rank_pids & main_pids  # ranks are their own processes

    pid1 = [e for e in log if e.get("_PID") == "1"]
    restart = [e for e in pid1 if e.get("MESSAGE_ID") == RESTART_SCHEDULED]
    assert restart and "Scheduled restart job, restart counter is at 1." in restart[0]["MESSAGE"]
    killed = [e for e in pid1 if e.get("MESSAGE_ID") == PROCESS_EXITED]
    assert killed and all((e["EXIT_CODE"], e["EXIT_STATUS"]) == ("killed", "9") for e in killed)
    assert {e["UNIT_RESULT"] for e in pid1 if e.get("MESSAGE_ID") == UNIT_FAILED} == {"signal"}

    assert prop(sb, decode, "ActiveState") == "active"
    assert prop(sb, decode, "NRestarts") == "0"
    sb.wait_until(
        lambda: any("] Decode batch, #running-req: " in m for m in messages(sb, "-u", decode)),
        timeout=15,
        message="decode batch lines",
    )
    assert any(m.endswith("] The server is fired up and ready to roll!") for m in messages(sb, "-u", decode))
    # the fake secret is in SGLang's own server_args line: crashdoc must redact it, not the workload
    assert any(demo.DEMO_API_KEY in t for t in text)


def _exit_of(sb: PrivateSystemd, unit: str) -> tuple[str, str]:
    rec = entries(sb, f"MESSAGE_ID={PROCESS_EXITED}", f"UNIT={unit}")[-1]
    return rec["EXIT_CODE"], rec["EXIT_STATUS"]


@pytest.mark.sandbox
def test_fake_sglang_failure_modes_follow_the_flags(sandbox_factory: SandboxFactory) -> None:
    py = sys.executable
    units = {
        "launcher.service": service(
            fake_sglang(
                py,
                "--model-path",
                "Qwen/Qwen3-8B",
                "--tp-size",
                "2",
                "--disaggregation-mode",
                "decode",
                "--enable-kv-cache-sharding",
            )
        ),
        "cudaoom.service": service(
            fake_sglang(
                py, "--model-path", "meta-llama/Llama-3.1-70B", "--tp-size", "2", "--mem-fraction-static", "0.96"
            )
        ),
        "runtime.service": service(
            fake_sglang(py, "--model-path", "meta-llama/Llama-3.1-70B", "--tp-size", "2"),
            extra_service="Environment=FAKE_SGLANG_CRASH_AFTER=2 FAKE_SGLANG_BATCH_INTERVAL=0.5\n",
        ),
        "slow.service": service(
            fake_sglang(
                py,
                "--model-path",
                "deepseek-ai/DeepSeek-V4-Flash",
                "--tp-size",
                "2",
                "--enable-hierarchical-cache",
                "--hicache-size",
                "64",
            ),
            extra_service="Environment=FAKE_SGLANG_LOAD_SECONDS=3\n",
        ),
        "badflag.service": service(fake_sglang(py, "--model-path", "x", "--no-such-flag")),
    }
    sb = sandbox_factory(units)
    for unit in units:
        sb.wait_until(lambda unit=unit: prop(sb, unit, "ActiveState") == "failed", timeout=40, message=unit)

    launcher = messages(sb, "_SYSTEMD_UNIT=launcher.service")
    assert _exit_of(sb, "launcher.service") == ("exited", "1")
    assert "Traceback (most recent call last):" in launcher  # plain, no [timestamp] prefix
    assert launcher[-1] == (
        "ValueError: --enable-kv-cache-sharding is only supported on PD prefill workers: a rank's pool "
        "holds only its stripe of every cached page, which is incompatible with local decode."
    )
    assert not [m for m in launcher if "Load weight begin" in m or "hit an exception" in m]  # no child ran

    oom = messages(sb, "_SYSTEMD_UNIT=cudaoom.service")
    assert _exit_of(sb, "cudaoom.service") == ("killed", "9")
    assert any(" TP1] Scheduler hit an exception: Traceback" in m for m in oom)
    assert any(m.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ") for m in oom)

    runtime = entries(sb, "_SYSTEMD_UNIT=runtime.service")
    rt = [e["MESSAGE"] for e in runtime]
    assert _exit_of(sb, "runtime.service") == ("killed", "9")
    ready = next(e for e in runtime if e["MESSAGE"].endswith("The server is fired up and ready to roll!"))
    crash = next(
        e for e in runtime if e["MESSAGE"] == "RuntimeError: Decode out of memory. Try to lower your batch size."
    )
    assert int(crash["__REALTIME_TIMESTAMP"]) - int(ready["__REALTIME_TIMESTAMP"]) >= 1_500_000
    assert any(
        m.endswith("] SIGQUIT received. signum=None, frame=None. It usually means one child failed.") for m in rt
    )

    slow = entries(sb, "-u", "slow.service")
    assert _exit_of(sb, "slow.service") == ("killed", "9")
    start = next(e for e in slow if e.get("MESSAGE_ID") == UNIT_STARTED)
    died = next(e for e in slow if e.get("MESSAGE") == DSV4_HICACHE)
    assert int(died["__REALTIME_TIMESTAMP"]) - int(start["__REALTIME_TIMESTAMP"]) >= 3_000_000
    assert any("Loading safetensors checkpoint shards:" in e.get("MESSAGE", "") for e in slow)

    bad = messages(sb, "_SYSTEMD_UNIT=badflag.service")
    assert _exit_of(sb, "badflag.service") == ("exited", "2")
    assert bad[-1] == "sglang serve: error: unrecognized arguments: --no-such-flag"


@pytest.mark.sandbox
def test_memory_max_gets_a_rank_oom_killed(sandbox_factory: SandboxFactory) -> None:
    py = sys.executable
    unit = service(
        fake_sglang(
            py,
            "--model-path",
            "deepseek-ai/DeepSeek-V4-Flash",
            "--tp-size",
            "2",
            "--enable-hierarchical-cache",
            "--hicache-ratio",
            "2.0",
        ),
        extra_service="MemoryMax=160M\nEnvironment=FAKE_SGLANG_FAILURE=host-oom FAKE_SGLANG_HOST_OOM_MB=400\n",
    )
    sb = sandbox_factory({"hostoom.service": unit})
    if not sb.memory_enforced:
        pytest.skip(f"no memory controller is delegated to the sandbox ({sb.cgroup_layout} cgroups)")
    sb.wait_until(lambda: prop(sb, "hostoom.service", "ActiveState") == "failed", timeout=40, message="oom")

    assert prop(sb, "hostoom.service", "MemoryMax") == str(160 << 20)
    assert _exit_of(sb, "hostoom.service") == ("exited", "1")
    log = messages(sb, "_SYSTEMD_UNIT=hostoom.service")
    died = [
        m
        for m in log
        if m.startswith("RuntimeError: Rank ") and "scheduler died during initialization (exit code: -9)" in m
    ]
    assert died, log[-5:]
    kernel = messages(sb, "_TRANSPORT=kernel")
    assert any(f"/{sb.cgroup_name}/system.slice/hostoom.service" in m and "oom-kill:" in m for m in kernel)
    assert prop(sb, "hostoom.service", "Result") == "exit-code"  # PID 1 is not told it was the OOM killer


@pytest.mark.sandbox
def test_install_unit_while_running(sandbox_factory: SandboxFactory) -> None:
    sb = sandbox_factory()
    sb.install_unit("late.service", service("/bin/sh -c 'echo first version; exec sleep 1000'"), start=True)
    sb.wait_until(lambda: "first version" in messages(sb, "-u", "late.service"), message="late unit")
    sb.install_unit("late.service", service("/bin/sh -c 'echo second version; exec sleep 1000'"))
    sb.systemctl("restart", "late.service", check=True)
    sb.wait_until(lambda: "second version" in messages(sb, "-u", "late.service"), message="reloaded unit")
    assert "DefaultDependencies=no" in (sb.unit_dir / "late.service").read_text()
    sb.remove_unit("late.service")
    assert prop(sb, "late.service", "LoadState") == "not-found"


@pytest.mark.sandbox
def test_boot_errors_are_clear_and_clean_up(sandbox_factory: SandboxFactory) -> None:
    with pytest.raises(SandboxError, match=r"unit nosuch\.service did not load"):
        sandbox_factory({"real.service": service("/bin/sleep 1000")}, start_units=["nosuch.service"])
    sb = PrivateSystemd({"real.service": service("/bin/sleep 1000")})
    with pytest.raises(
        SandboxError, match=r"(?s)boot failed: not booted within the timeout.*what PID 1 and the boot script printed"
    ):
        sb.start(timeout=0.0)
    assert not sb.running and sb._launcher is not None and sb._launcher.poll() is not None


def test_paths_under_tmp_to_bind_back_are_the_outermost_real_ones(tmp_path: Path) -> None:
    """A checkout under /tmp, its venv and package inside it, a symlink to it and a folder outside /tmp: one bind
    (the checkout), the symlink recreated, nothing for /var/tmp."""
    checkout = tmp_path / "clone"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / "src" / "crashdoc").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "python").symlink_to("/bin/sh")  # an interpreter outside /tmp
    link = tmp_path / "latest"
    link.symlink_to(checkout)
    binds, links = tmp_mounts(
        [checkout / ".venv" / "bin" / "python", checkout / "src", checkout, link / "src", "/var/tmp", tmp_path / "gone"]
    )
    real = checkout.resolve()
    assert binds == [real] and links == [(link.resolve().parent / "latest", str(checkout))]
    assert tmp_mounts([Path("/bin/sh"), "/var/tmp"]) == ([], [])  # nothing under /tmp: nothing to do
    with pytest.raises(SandboxError, match="newline"):
        odd = tmp_path / "a\nb"
        odd.mkdir()
        tmp_mounts([odd])


@pytest.mark.sandbox
def test_folders_under_tmp_that_units_need_are_visible_and_nothing_else_of_tmp(
    sandbox_factory: SandboxFactory, tmp_path: Path
) -> None:
    """A work folder and a tool under /tmp (a clone in /tmp): units run the tool and write into the work folder,
    while the rest of the host's /tmp stays invisible inside and untouched."""
    work, tools = tmp_path / "work", tmp_path / "tools"
    work.mkdir()
    tools.mkdir()
    tool = tools / "hello.sh"
    tool.write_text(f"#!/bin/sh\necho hello from the tool in /tmp\necho written > {work}/out.txt\nsleep 1000\n")
    tool.chmod(0o755)
    canary = Path("/tmp") / f"crashdoc-canary-{uuid.uuid4().hex}"
    canary.write_text("not for the sandbox\n")
    try:
        sb = sandbox_factory({"tool.service": service(str(tool))}, workdir=work, visible=[tools])
        sb.wait_until(lambda: (work / "out.txt").exists(), message="the unit to write into the work folder in /tmp")
        assert "hello from the tool in /tmp" in messages(sb, "-u", "tool.service")
        assert sb.run(["test", "-e", str(canary)]).returncode == 1
        assert sb.run(["stat", "-f", "-c", "%T", "/tmp"]).stdout.strip() == "tmpfs"
        assert sb.run(["sh", "-c", f"ls {tmp_path}"]).stdout.split() == ["tools", "work"]
        sb.stop()
        assert canary.read_text() == "not for the sandbox\n" and (work / "out.txt").read_text() == "written\n"
    finally:
        canary.unlink(missing_ok=True)


def test_unit_names_are_checked(sandbox_workdir: Path) -> None:
    sb = PrivateSystemd({"../evil.service": "[Service]\nExecStart=/bin/true\n"}, sandbox_workdir)
    with pytest.raises(SandboxError, match="not a unit file name"):
        sb._prepare_workdir()


def test_not_root_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "root" in (unavailable_reason() or "")


def test_wait_until_returns_the_value_or_times_out() -> None:
    sb = PrivateSystemd()
    sb._pid, sb._stopped = os.getpid(), False  # "running" enough for polling
    assert sb.wait_until(lambda: 42, timeout=1) == 42
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="the answer"):
        sb.wait_until(lambda: 0, timeout=0.2, interval=0.05, message="the answer")
    assert time.monotonic() - began < 2
    sb._pid = None
