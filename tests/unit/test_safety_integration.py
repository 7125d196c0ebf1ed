"""The HiCache host-memory check, run where it matters: inside the diagnosis of a real crash.

The DeepSeek V4 `--hicache-size` signature proposes `--hicache-ratio 2.0`; whether 2.0 fits depends on
the device KV pool SGLang logged in the same run, the rank count of the command, and the memory the
unit may use (MemAvailable, or one NUMA node's memory when it is bound to it). When it does not fit, the
fix carries the largest ratio that does (or turns HiCache off when none does): the summary, the changes,
the corrected command, the diff, the sed line and the alert all say the same value. These tests feed the
engine the lines and records a crash loop leaves in the journal, with the unit's real launch script on
disk and a fake /proc + /sys tree, pass its diagnosis through the remedy stage as `crashdoc run` and
`diagnose` do, and read it, as a user would.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from crashdoc.commands.pipeline import build_engine
from crashdoc.diagnosis.engine import feed
from crashdoc.events import (
    Diagnosis,
    Fix,
    FixTarget,
    FlagChange,
    Lifecycle,
    LifecycleRecord,
    LogLine,
    RootCause,
    Thresholds,
    UnitState,
)
from crashdoc.matching.library import builtin_signature_dirs, load_library
from crashdoc.matching.matcher import Matcher
from crashdoc.outputs.alerts import alert_annotations
from crashdoc.outputs.render import diagnosis_dict
from crashdoc.remedy.commandline import parse_text
from crashdoc.remedy.launch import LaunchReader
from crashdoc.remedy.safety.hicache_check import hicache_host_memory
from crashdoc.remedy.stage import RemedyStage

LIBRARY = load_library([builtin_signature_dirs()[0] / "sglang" / "hicache.yaml"])
UNIT = "sglang-prefill.service"
SIGNATURE = "dsv4-hicache-size-unsupported"
GIB = 1 << 30
API_KEY = "sk-live-5c0ffee5c0ffee5c0ffee5c0ffee"


def dsv4_traceback(rank: int) -> list[str]:
    return [
        f"[2026-05-01 12:00:03 TP{rank}] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 6361, '
        "in run_scheduler_process",
        "    scheduler = Scheduler(",
        '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/mem_cache/hybrid_cache/'
        'hybrid_pool_assembler.py", line 661, in _deepseek_v4_num_host_pages',
        "    raise ValueError(",
        "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead.",
        "",
    ]


def kv_line(rank: int, gib: float) -> str:
    """memory_pool.py's start-up line (SGLang prints GiB and calls them GB)."""
    return (
        f"[2026-05-01 12:00:02 TP{rank}] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1048576, "
        f"KV size: {gib:.2f} GB"
    )


# --- fake /proc and /sys -----------------------------------------------------------------------------


def fake_host(root: Path, mem_available_gib: float, nodes: dict[int, tuple[str, float]]) -> Path:
    """A /proc/meminfo and /sys/devices/system/node tree: node -> (cpulist, free GiB)."""
    kb = 1024 * 1024  # kB per GiB
    total = sum(free for _, free in nodes.values()) * 2 + 64
    (root / "proc").mkdir(parents=True)
    (root / "proc/meminfo").write_text(
        f"MemTotal:       {int(total * kb)} kB\nMemFree:        {int(mem_available_gib * kb) - 4096} kB\n"
        f"MemAvailable:   {int(mem_available_gib * kb)} kB\nBuffers:          123456 kB\n"
    )
    for n, (cpus, free) in nodes.items():
        d = root / f"sys/devices/system/node/node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
        # free is split over the fields the kernel reports, so the check has to add them up
        (d / "meminfo").write_text(
            f"Node {n} MemTotal:       {int((free * 2 + 32) * kb)} kB\n"
            f"Node {n} MemFree:        {int(free * 0.5 * kb)} kB\n"
            f"Node {n} MemUsed:        {int((free + 32) * kb)} kB\n"
            f"Node {n} Active(file):   {int(free * 0.25 * kb)} kB\n"
            f"Node {n} Inactive(file): {int(free * 0.15 * kb)} kB\n"
            f"Node {n} SReclaimable:   {int(free * 0.10 * kb)} kB\n"
        )
    (root / "sys/devices/system/node/possible").write_text(",".join(map(str, nodes)) + "\n")
    return root


TWO_NODES = {0: ("0-63", 240.0), 1: ("64-127", 250.0)}


def launch_script(tmp_path: Path, wrapper: str = "", tp: str = "4") -> Path:
    script = tmp_path / "prefill.sh"
    script.write_text(
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        f"exec {wrapper}python3 -m sglang.launch_server \\\n"
        "    --model-path deepseek-ai/DeepSeek-V4-Flash \\\n"
        f"    --tp-size {tp} \\\n"
        "    --enable-hierarchical-cache \\\n"
        "    --hicache-size 150 \\\n"
        f"    --api-key {API_KEY}\n"
    )
    return script


# --- the crash loop ----------------------------------------------------------------------------------


class Loop:
    """Feeds the engine what journald and D-Bus report for a unit that crashes twice at start-up."""

    def __init__(self, root: Path, state: UnitState, release: str = "") -> None:
        forced = (release, "--sglang-version") if release else None
        self.engine = build_engine(Matcher(LIBRARY), thresholds=Thresholds(recovery=10), release=forced)
        self.launches = LaunchReader()
        self.stage = RemedyStage(root=root)
        feed(self.engine, self.launches.prepare([state]))
        self.t = 1_800_000_000.0

    def run(self, n: int, ranks: int, kv_gib: float | None) -> None:
        inv = f"inv{n}"
        self.engine.on_lifecycle(LifecycleRecord(UNIT, Lifecycle.STARTED, self.t, invocation=inv))
        pids = [1000 * n + r for r in range(ranks)]
        if kv_gib is not None:
            for r, pid in enumerate(pids):
                self.engine.on_line(LogLine(UNIT, pid, kv_line(r, kv_gib), self.t, inv))
        for r, pid in enumerate(pids):
            for text in dsv4_traceback(r):
                self.engine.on_line(LogLine(UNIT, pid, text, self.t, inv))
        self.t += 0.5
        self.engine.on_lifecycle(
            LifecycleRecord(UNIT, Lifecycle.EXITED, self.t, invocation=inv, exit_code="killed", exit_status="9")
        )
        self.t += 1
        self.engine.on_lifecycle(
            LifecycleRecord(UNIT, Lifecycle.RESTART_SCHEDULED, self.t, invocation=inv, n_restarts=n)
        )
        self.t += 1

    def diagnosis(self) -> Diagnosis:
        rec = self.engine.units()[UNIT]
        assert rec.crashloop, "two crashes at start-up should make a loop"
        d = rec.diagnosis
        assert d is not None and d.signature == SIGNATURE
        return self.stage.apply(d)


def loop_diagnosis(
    tmp_path: Path,
    *,
    nodes: dict[int, tuple[str, float]] = TWO_NODES,
    mem_available: float = 480.0,
    wrapper: str = "",
    tp: str = "4",
    kv_gib: float | None = 40.0,
    ranks: int = 4,
    cmdline: bool = True,
    release: str = "",
    **unit_props: str,
) -> Diagnosis:
    root = fake_host(tmp_path / "host", mem_available, nodes)
    script = launch_script(tmp_path, wrapper, tp)
    state = UnitState(UNIT, active_state="activating", exec_start=(str(script),) if cmdline else (), **unit_props)
    loop = Loop(root, state, release)
    loop.run(1, ranks, kv_gib)
    loop.run(2, ranks, kv_gib)
    return loop.diagnosis()


def safety_warning(d: Diagnosis) -> str:
    found = [w for w in d.fix.warnings if "--hicache-ratio" in w and ("fit" in w or "check" in w)]
    assert len(found) == 1, d.fix.warnings
    return found[0]


def gib_after(text: str, words: str) -> float:
    m = re.search(re.escape(words) + r" ([\d.]+) GiB", text)
    assert m, f"{words!r} not in {text!r}"
    return float(m.group(1))


def proposed_ratio(text: str) -> float:
    m = re.search(r"The corrected command uses --hicache-ratio ([\d.]+), the largest that fits", text)
    assert m, text
    return float(m.group(1))


def assert_one_value_everywhere(d: Diagnosis, value: str, old: str = "2.0") -> None:
    """The summary, the changes, the corrected command, the diff, the sed line and the alert carry `value`."""
    fix = d.fix
    assert f"--hicache-ratio {value}" in fix.summary and f"`--hicache-ratio {old}`" not in fix.summary, fix.summary
    assert [c.value for c in fix.changes if (c.new_flag or c.flag) == "--hicache-ratio"] == [value], fix.changes
    assert fix.command and f"--hicache-ratio {value} " in fix.command and "--hicache-size" not in fix.command
    assert fix.diff and f"+    --hicache-ratio {value} \\" in fix.diff, fix.diff
    [sed] = [a for a in fix.apply if a.startswith("sed ")]
    assert f"--hicache-ratio {value}/" in sed, sed
    alert = alert_annotations(UNIT, d, "http://x/runbook/y")["description"].splitlines()
    said = [ln for ln in alert if ln.startswith(("Fix:", "Corrected command:"))]
    assert len(said) == 2 and all(f"--hicache-ratio {value}" in ln for ln in said), alert
    assert not any(f"--hicache-ratio {old} " in ln for ln in said), alert


# --- tests -------------------------------------------------------------------------------------------


def test_numactl_membind_checks_the_nodes_memory_and_proposes_a_ratio(tmp_path: Path) -> None:
    d = loop_diagnosis(tmp_path, wrapper="numactl --membind=0 ")
    w = safety_warning(d)
    # 2.0 x 40 GiB x 4 ranks = 320 GiB against node 0's ~240 GiB: no, though the host's 480 GiB would do
    assert w.startswith("--hicache-ratio 2.0 does not fit"), w
    assert "NUMA node 0 (numactl --membind=0)" in w
    assert "x 4 ranks = 320.0 GiB" in w
    node0 = gib_after(w, "has")
    assert node0 == pytest.approx(240.0, abs=0.1)
    ratio = proposed_ratio(w)
    budget = (node0 - 10) * 0.9  # SGLang's 10 GiB reserve, crashdoc's 10 % headroom
    assert ratio * 160 <= budget < (ratio + 0.1) * 160
    assert (
        ratio == 1.2
        and "1.2 x 40.0 GiB x 4 = 192.0 GiB, within the 230.0 GiB left on NUMA node 0 after the reserve" in w
    )
    # one truth: the fix carries the ratio the check accepts, everywhere; nothing leaks the key
    assert_one_value_everywhere(d, "1.2")
    assert API_KEY not in str(diagnosis_dict(d))


def test_systemd_numa_policy_binds_to_the_mask_node(tmp_path: Path) -> None:
    d = loop_diagnosis(tmp_path, numa_policy="bind", numa_mask="1")
    w = safety_warning(d)
    assert "NUMA node 1 (NUMAPolicy=bind NUMAMask=1)" in w
    assert gib_after(w, "has") == pytest.approx(250.0, abs=0.1)
    assert "does not fit" in w


def test_cpu_affinity_on_one_node_warns_about_remote_memory(tmp_path: Path) -> None:
    """CPUAffinity= alone does not confine memory: checked against the host, with a note on the node."""
    d = loop_diagnosis(tmp_path, cpu_affinity="0-31")
    w = safety_warning(d)
    assert w.startswith("--hicache-ratio 2.0 fits"), w
    assert "the host has 480.0 GiB available" in w
    assert "CPUAffinity=0-31" in w and "remote memory" in w


def test_it_fits_and_says_so_briefly(tmp_path: Path) -> None:
    d = loop_diagnosis(tmp_path, kv_gib=10.0)
    w = safety_warning(d)
    assert w.startswith("--hicache-ratio 2.0 fits"), w
    assert "2.0 x 10.0 GiB device KV pool per rank x 4 ranks = 80.0 GiB" in w
    assert "largest ratio" not in w and len(w) < 300


def test_no_kv_cache_line_says_what_is_missing(tmp_path: Path) -> None:
    d = loop_diagnosis(tmp_path, kv_gib=None)
    w = safety_warning(d)
    assert "could not check" in w and '"KV Cache is allocated"' in w


def test_without_the_command_the_ranks_come_from_the_log(tmp_path: Path) -> None:
    """Journal only (no D-Bus): the rank count is the number of processes that logged a pool."""
    d = loop_diagnosis(tmp_path, cmdline=False, ranks=2, kv_gib=40.0, mem_available=100.0)
    w = safety_warning(d)
    assert "does not fit" in w and "x 2 ranks = 160.0 GiB" in w
    assert "crashdoc counted 2 rank(s) in the log" in w
    assert any("command line is unknown" in x for x in d.fix.warnings)


def test_ranks_come_from_the_flags_when_fewer_logged(tmp_path: Path) -> None:
    """The log may hold fewer ranks than will run (rank 3 died first); the flags say how many pin memory."""
    d = loop_diagnosis(tmp_path, tp="8", ranks=2, wrapper="numactl -m 0,1 ")
    w = safety_warning(d)
    assert "x 8 ranks = 640.0 GiB" in w
    assert "NUMA nodes 0,1" in w
    node_sum = gib_after(w, "have")
    assert node_sum == pytest.approx(490.0, abs=0.1)
    ratio = proposed_ratio(w)
    assert ratio == math.floor((node_sum - 10) * 0.9 / 320 * 10) / 10
    assert_one_value_everywhere(d, f"{ratio:.1f}")


@pytest.mark.parametrize("release", ["0.5.20", "0.5.23", ""], ids=["no-auto-sizing", "auto-sizing", "unknown"])
def test_the_seeds_numbers_give_a_command_the_check_accepts(tmp_path: Path, release: str) -> None:
    """The incident: NUMA node 0 with 240 GiB, 40 GiB of device KV pool x 4 ranks. SGLang's default 2.0 pins
    320 GiB; the corrected command carries 1.2, which the same check accepts. On a release that sizes HiCache
    itself (0.5.21+) the ratio stays explicit too: that auto-sizing reads the whole host's memory, not the node's,
    and does not support DeepSeek V4's KV pool."""
    d = loop_diagnosis(tmp_path, wrapper="numactl --membind=0 ", release=release)
    assert d.sglang_release == (release or None)
    w = safety_warning(d)
    assert w.startswith("--hicache-ratio 2.0 does not fit") and "320.0 GiB" in w, w
    assert proposed_ratio(w) == 1.2
    assert "auto-sizing" not in w, "the fix sets an explicit ratio: SGLang's auto-sizing is off"
    assert_one_value_everywhere(d, "1.2")
    # the corrected command itself, checked again (its ratio, its numactl, the same host): accepted
    [corrected] = parse_text(d.fix.command or "")
    again = hicache_host_memory(None, [kv_line(r, 40.0) for r in range(4)], corrected, root=tmp_path / "host")
    assert again[0].startswith("--hicache-ratio 1.2 fits: HiCache would pin 1.2 x 40.0 GiB"), again
    assert "NUMA node 0 (numactl --membind=0)" in again[0]


def test_a_small_host_gets_the_largest_ratio_that_fits(tmp_path: Path) -> None:
    """A 64 GiB host, no NUMA binding: 2.0 x 10 GiB x 4 = 80 GiB does not fit; 1.2 (48 GiB of 54 GiB) does."""
    d = loop_diagnosis(tmp_path, mem_available=64.0, kv_gib=10.0)
    w = safety_warning(d)
    assert w.startswith("--hicache-ratio 2.0 does not fit") and "the host has 64.0 GiB available" in w, w
    assert proposed_ratio(w) == math.floor((64 - 10) * 0.9 / 40 * 10) / 10 == 1.2
    assert_one_value_everywhere(d, "1.2")


def test_a_host_where_no_ratio_fits_turns_hicache_off_and_says_why(tmp_path: Path) -> None:
    """12 GiB available, 40 GiB x 4 ranks: even 0.1 (16 GiB) does not fit in what the 10 GiB reserve leaves.
    No value is proposed that the check rejects: the corrected command runs without HiCache."""
    d = loop_diagnosis(tmp_path, mem_available=12.0)
    w = safety_warning(d)
    assert w.startswith("--hicache-ratio 2.0 does not fit"), w
    assert "No --hicache-ratio fits: the host has 12.0 GiB available, 2.0 GiB after SGLang's 10.0 GiB reserve" in w
    assert "even --hicache-ratio 0.1 would pin 0.1 x 40.0 GiB x 4 = 16.0 GiB" in w
    assert d.fix.summary.startswith("no --hicache-ratio fits this host: turn HiCache off"), d.fix.summary
    assert [(c.action, c.flag) for c in d.fix.changes] == [
        ("remove", "--hicache-size"),
        ("remove", "--enable-hierarchical-cache"),
    ]
    command = d.fix.command or ""
    assert command and not any(f in command for f in ("--hicache", "--enable-hierarchical-cache")), command
    assert "-    --enable-hierarchical-cache \\" in (d.fix.diff or "")
    alert = alert_annotations(UNIT, d, "http://x/runbook/y")["description"].splitlines()
    [corrected] = [ln for ln in alert if ln.startswith("Corrected command:")]
    assert "--hicache" not in corrected and "--enable-hierarchical-cache" not in corrected, alert


def test_a_fix_without_a_safety_check_has_no_such_warning(tmp_path: Path) -> None:
    """Only signatures that name the check run it: the builder passes `fix.safety` along, nothing else does."""
    stage = RemedyStage(root=fake_host(tmp_path / "host", 480.0, TWO_NODES))
    changes = [FlagChange("replace", "--hicache-size", "2.0", "--hicache-ratio")]
    target = FixTarget(cmdline=(str(launch_script(tmp_path)),))
    d = Diagnosis(UNIT, SIGNATURE, "t", "hicache", "critical", RootCause("", "", ""), [], Fix("x", changes), "fp")
    fix = stage.apply(replace(d, target=target)).fix
    assert fix.command and "--hicache-ratio 2.0" in fix.command
    assert not any("fit" in w for w in fix.warnings), fix.warnings
    fix = stage.apply(replace(d, target=replace(target, safety="hicache-host-memory"))).fix
    assert any("--hicache-ratio 2.0" in w and "could not check" in w for w in fix.warnings), fix.warnings
    assert d.fix.command is None and d.fix.warnings == [], "the engine's diagnosis is left as it was"


# --- on a real systemd -------------------------------------------------------------------------------


@pytest.mark.sandbox
def test_systemd_numa_settings_reach_the_check_over_dbus(sandbox_factory, sandbox_workdir) -> None:
    """The demo prefill unit bound with NUMAPolicy=bind NUMAMask=0: `crashdoc diagnose` reads the binding
    from D-Bus and checks the ratio against node 0 of this machine (its real /proc and /sys)."""
    from crashdoc.sandbox.demo import PREFILL_UNIT, demo_units
    from support.e2e import CRASHDOC, RESTART_SCHEDULED, pid1_records, wait_for

    units = demo_units(sandbox_workdir, CRASHDOC[0])
    units[PREFILL_UNIT] = units[PREFILL_UNIT].replace(
        "[Service]\n", "[Service]\nNUMAPolicy=bind\nNUMAMask=0\nCPUAffinity=0\n"
    )
    sandbox = sandbox_factory(units, workdir=sandbox_workdir)
    wait_for(lambda: len(pid1_records(sandbox, PREFILL_UNIT, RESTART_SCHEDULED)) >= 2, 60, "two restarts")
    probe = (
        "import json; from crashdoc.sources.units import UnitWatcher; "
        "from crashdoc.sources.journal import UnitFilter; from crashdoc.events import WatchRule; "
        f"w = UnitWatcher(UnitFilter([WatchRule({PREFILL_UNIT!r})])); assert w.connect(), w.last_error; "
        f"s = w.state({PREFILL_UNIT!r}); print(json.dumps([s.numa_policy, s.numa_mask, s.cpu_affinity]))"
    )
    out = sandbox.run([CRASHDOC[0], "-c", probe], check=True).stdout
    assert json.loads(out) == ["bind", "0", "0"]
    r = sandbox.run([*CRASHDOC, "diagnose", "--unit", PREFILL_UNIT, "--json"], timeout=60)
    assert r.returncode == 1, r.stderr  # a failure found
    d = json.loads(r.stdout)["diagnoses"][0]
    assert d["signature"] == SIGNATURE
    w = safety_warning_of(d["fix"]["warnings"])
    assert "NUMA node 0 (NUMAPolicy=bind NUMAMask=0)" in w, w
    assert "x 2 ranks" in w, w  # the demo runs --tp-size 2 and both ranks logged their pool


def safety_warning_of(warnings: list[str]) -> str:
    found = [w for w in warnings if w.startswith("--hicache-ratio")]
    assert len(found) == 1, warnings
    return found[0]
