"""Issue 8, part A: crashdoc killed and restarted, journal faults, log floods, on a real private systemd.

Every claim is checked against `journalctl -o json` (PID 1's own records), never against
crashdoc's word. The looping units run `crashdoc.sandbox.fake_sglang`; the noisy ones a small
writer (`_WRITER`) that prints SGLang's batch lines at a fixed rate with journald's rate limit
lifted (`LogRateLimitBurst=`; `LogRateLimitIntervalSec=0` would mean journald's default, which
cuts a unit off after ~35,000 lines), so that every line really reaches the journal. The
crashdoc under test loads only the two signature files these units need: the full library
costs seconds of YAML parsing per start, which would make twenty restarts slow and prove
nothing more. The figures are printed (`pytest -s`) for the README.
"""

from __future__ import annotations

import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from crashdoc.matching.library import builtin_signature_dirs
from crashdoc.runtime.daemon import BUSY_PERIOD
from crashdoc.sandbox.demo import package_root
from crashdoc.sandbox.systemd import PrivateSystemd
from support.e2e import (
    CRASHDOC,
    PATIENCE,
    PROCESS_EXITED,
    RESTART_SCHEDULED,
    Crashdoc,
    restart_crashdoc,
    start_crashdoc,
    wait_for,
)

pytestmark = pytest.mark.sandbox

PY = sys.executable
UNIT_FAILED = "d9b373ed55a64feb8242e02dbe79a49c"  # PID 1: "<unit>: Failed with result '...'"
HICACHE = "sglang-hicache.service"  # DeepSeek V4 --hicache-size: every rank raises, the launcher SIGKILLs the tree
LMCACHE = "sglang-lmcache.service"  # --enable-lmcache with HiCache: the launcher raises before any child
NOISY = "sglang-noisy.service"  # healthy, but floods the journal
FLOOD = "sglang-flood.service"  # 10k lines/s, then a traceback of 10,000 frames
SIGNATURES = {HICACHE: "dsv4-hicache-size-unsupported", LMCACHE: "hicache-lmcache-mutually-exclusive"}
FAKE = f"{PY} -m crashdoc.sandbox.fake_sglang"
HICACHE_FLAGS = "--model-path deepseek-ai/DeepSeek-V4-Flash --tp-size 2 --enable-hierarchical-cache --hicache-size 150"
LMCACHE_FLAGS = "--model-path Qwen/Qwen3-8B --enable-hierarchical-cache --enable-lmcache"
LINE_MAX = 48 * 1024  # journald's LineMax default: a longer line is split into several entries

# Prints SGLang's decode-batch line at `rate` lines/s for `seconds` (0: forever), every 100th padded to
# `width` characters; then, with `frames`, a traceback of that many frames and exit 1.
_WRITER = r"""
import sys, time
rate, seconds, width, frames = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
out = sys.stdout
began = time.monotonic()
n = 0
while not seconds or time.monotonic() - began < seconds:
    due = int((time.monotonic() - began) * rate) + rate // 100 + 1
    while n < due:
        n += 1
        line = (f"[2026-05-02 10:00:00 TP0] Decode batch, #running-req: 12, #token: {n}, token usage: 0.31, "
                f"cuda graph: True, gen throughput (token/s): 812.40, #queue-req: 0")
        out.write((line.ljust(width, "x") if width and n % 100 == 0 else line) + "\n")
    out.flush()
    time.sleep(0.01)
if frames:
    out.write("Traceback (most recent call last):\n")
    for i in range(frames):
        out.write(f'  File "/usr/lib/python3/dist-packages/sglang/srt/deep{i % 50}.py", line {i + 1}, in f{i}\n')
        out.write(f"    return f{i + 1}(x)\n")
    out.write("RecursionError: maximum recursion depth exceeded\n")
    out.flush()
    sys.exit(1)
"""


# --- units, configuration, ground truth ------------------------------------------------------------


def service(exec_start: str, *, env: str = "", restart: str = "always", restart_sec: str = "0.2") -> str:
    return (
        "[Unit]\nDescription=SGLang test unit\nStartLimitIntervalSec=0\n\n"
        f"[Service]\nExecStart={exec_start}\nRestart={restart}\nRestartSec={restart_sec}\n"
        f"Environment=PYTHONUNBUFFERED=1 PYTHONPATH={package_root()} FAKE_SGLANG_LOAD_SECONDS=0.1 {env}\n"
        "LogRateLimitIntervalSec=1s\nLogRateLimitBurst=10000000\n"
    )


def writer(workdir: Path, rate: int, seconds: float = 0, width: int = 0, frames: int = 0) -> str:
    script = workdir / "writer.py"
    script.write_text(_WRITER)
    return f"{PY} {script} {rate} {seconds} {width} {frames}"


def hicache_unit(restart_sec: str = "0.2") -> str:
    return service(f"{FAKE} {HICACHE_FLAGS}", env="FAKE_SGLANG_KILL_GRACE=0.3", restart_sec=restart_sec)


def lmcache_unit(restart_sec: str = "0.2") -> str:
    return service(f"{FAKE} {LMCACHE_FLAGS}", restart_sec=restart_sec)


def config(workdir: Path) -> str:
    """Watch sglang-*; load only the signatures of the looping units (see the module docstring)."""
    folder = workdir / "signatures"
    folder.mkdir(exist_ok=True)
    sglang = next(d / "sglang" for d in builtin_signature_dirs() if (d / "sglang" / "hicache.yaml").is_file())
    shutil.copy(sglang / "hicache.yaml", folder / "hicache.yaml")
    shutil.copy(sglang / "validation" / "hicache.yaml", folder / "validation-hicache.yaml")
    return (
        'units: [{name: "sglang-*.service", role: any}]\n'
        f"signatures: {{builtin: false, folders: [{json.dumps(str(folder))}]}}\n"
        "thresholds: {recovery: 600}\n"
    )


def host_journal(sandbox: PrivateSystemd, *matches: str) -> list[dict[str, Any]]:
    """`journalctl -o json` on the sandbox's journal folder from the host: quicker than entering it."""
    r = subprocess.run(
        ["journalctl", "-D", str(sandbox.journal_dir), "-o", "json", "--no-pager", *matches],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


class Truth:
    """PID 1's restart and failure records per unit, accumulated by cursor: a vacuum deletes the
    journal's old records, so the ground truth is collected before each one."""

    def __init__(self, sandbox: PrivateSystemd, units: list[str]) -> None:
        self.sandbox, self.units = sandbox, units
        self.restarts: dict[str, set[str]] = {u: set() for u in units}
        self.failures: dict[str, set[str]] = {u: set() for u in units}

    def collect(self) -> dict[str, tuple[int, int]]:
        """Per unit: (restarts PID 1 scheduled, runs PID 1 saw fail), all seen so far."""
        for unit in self.units:
            for message_id, seen in ((RESTART_SCHEDULED, self.restarts), (UNIT_FAILED, self.failures)):
                for r in host_journal(self.sandbox, f"MESSAGE_ID={message_id}", f"UNIT={unit}", "_PID=1"):
                    if r.get("UNIT_RESULT", "") != "success":
                        seen[unit].add(r["__CURSOR"])
        return {u: (len(self.restarts[u]), len(self.failures[u])) for u in self.units}


def counters(cd: Crashdoc, units: list[str]) -> dict[str, tuple[int, int]]:
    """Per unit: (crashdoc_unit_restarts_total, crashdoc_crashes_total summed over signatures)."""
    metrics = cd.metrics()
    out = {}
    for unit in units:
        restarts = metrics.get(("crashdoc_unit_restarts_total", (("unit", unit),)), -1.0)
        crashes = sum(v for (m, ls), v in metrics.items() if m == "crashdoc_crashes_total" and ("unit", unit) in ls)
        out[unit] = (int(restarts), int(crashes))
    return out


def own_records(sandbox: PrivateSystemd) -> list[dict[str, Any]]:
    """crashdoc's own journal records (loop started, diagnosis changed, failed, recovered/stopped)."""
    return [r for r in host_journal(sandbox, "SYSLOG_IDENTIFIER=crashdoc") if "CRASHDOC_EVENT_ID" in r]


def record_count(sandbox: PrivateSystemd, event: str, units: list[str]) -> int:
    return sum(r["CRASHDOC_EVENT"] == event and r["CRASHDOC_UNIT"] in units for r in own_records(sandbox))


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem in MB, and CPU seconds (user + system), from /proc."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(value.split()[0]) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    out["cpu"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def quiet_cpu(cd: Crashdoc, seconds: float = 3.0) -> float:
    """crashdoc's CPU seconds over `seconds` of wall time."""
    assert cd.pid is not None
    before = proc_status(cd.pid)["cpu"]
    time.sleep(seconds)
    return proc_status(cd.pid)["cpu"] - before


# --- 1. kill -9 -------------------------------------------------------------------------------------


def test_kill_9_twenty_times_loses_nothing_and_duplicates_nothing(sandbox_factory, sandbox_workdir) -> None:
    """kill -9 twenty times while two units crash-loop and a third floods: 14 at random moments (a quarter
    of them during start-up), 6 right after crashdoc wrote a record (the moment effects and saved state
    can disagree). Afterwards every restart and crash PID 1 logged is counted once, /diagnoses has one
    diagnosis per looping unit with every crash of the loop, and each loop start and stop is recorded
    once."""
    looping = [HICACHE, LMCACHE]
    units = {HICACHE: hicache_unit(), LMCACHE: lmcache_unit(), NOISY: service(writer(sandbox_workdir, 1000))}
    sandbox = sandbox_factory(units, workdir=sandbox_workdir, start_units=[])
    cd = start_crashdoc(sandbox, config=config(sandbox_workdir))
    truth = Truth(sandbox, [*looping, NOISY])
    # the same kill moments on every run (CRASHDOC_TEST_SEED=random draws new ones, to hunt)
    wanted = os.environ.get("CRASHDOC_TEST_SEED", "20221204")
    seed = random.randrange(1 << 30) if wanted == "random" else int(wanted)
    print(f"kill moments: random.Random({seed})")  # shown with a failure
    rng = random.Random(seed)
    kills = 0

    def kill_and_restart(wait: bool = True) -> None:
        nonlocal kills
        cd.stop(signal.SIGKILL)
        kills += 1
        restart_crashdoc(cd, wait=wait)

    def kill_after_record(event: str, expected: int) -> None:
        """kill -9 as soon as crashdoc's `event` records for both looping units are in the journal."""
        wait_for(
            lambda: record_count(sandbox, event, looping) >= expected,
            60,
            f"{expected} {event} records",
            cd,
            interval=0.01,
            seen=lambda: collections.Counter((r["CRASHDOC_EVENT"], r["CRASHDOC_UNIT"]) for r in own_records(sandbox)),
        )
        kill_and_restart()

    try:
        sandbox.systemctl("start", *units, check=True)
        loops = 1
        kill_after_record("loop-started", 2)
        for _ in range(14):
            time.sleep(rng.uniform(0.0, 1.5))
            kill_and_restart(wait=rng.random() < 0.75)
        wait_for(lambda: cd.metrics() != {}, 30, "crashdoc to answer", cd)
        for _ in range(2):
            sandbox.systemctl("stop", *looping, check=True)
            kill_after_record("stopped", 2 * loops)
            started = time.time()  # the current loop's crashes are the runs that failed since
            sandbox.systemctl("start", *looping, check=True)
            loops += 1
            kill_after_record("loop-started", 2 * loops)

        # /diagnoses while the units loop: one per unit, with every crash of the current loop. They keep
        # crashing: crashdoc's figure must lie between PID 1's count before and after the request.
        def loop_failures() -> dict[str, int]:
            return {
                unit: sum(
                    r.get("UNIT_RESULT") != "success" and int(r["__REALTIME_TIMESTAMP"]) / 1e6 >= started
                    for r in host_journal(sandbox, f"MESSAGE_ID={UNIT_FAILED}", f"UNIT={unit}", "_PID=1")
                )
                for unit in looping
            }

        def diagnoses_agree() -> bool:
            before = loop_failures()
            diagnoses = cd.diagnoses()
            after = loop_failures()
            per_unit = collections.Counter(d["unit"] for d in diagnoses)
            crashes = {d["unit"]: d["crashes"] for d in diagnoses}
            return all(per_unit[u] == 1 and before[u] <= crashes[u] <= after[u] for u in looping)

        wait_for(diagnoses_agree, 30, f"/diagnoses to agree with PID 1 ({loop_failures()})", cd, interval=0.5)
        for d in cd.diagnoses():
            if d["unit"] in looping:
                assert d["signature"] == SIGNATURES[d["unit"]], d

        sandbox.systemctl("stop", *units, check=True)
        kill_after_record("stopped", 2 * loops)
        assert kills == 20
        wait_for(lambda: counters(cd, truth.units) == truth.collect(), 30, "counters equal to PID 1's records", cd)
        final = truth.collect()
        print(
            f"\nkill -9 x{kills} (seed {seed}); PID 1's (restarts, failed runs): "
            f"{final}; crashdoc's: {counters(cd, truth.units)}"
        )
        assert all(restarts >= 5 and failed >= 5 for restarts, failed in (final[u] for u in looping)), final
        assert final[NOISY] == (0, 0)

        records = own_records(sandbox)
        ids = collections.Counter(r["CRASHDOC_EVENT_ID"] for r in records)
        assert not [i for i, n in ids.items() if n > 1], records
        for unit in looping:
            kinds = collections.Counter(r["CRASHDOC_EVENT"] for r in records if r["CRASHDOC_UNIT"] == unit)
            # a loop's fix once SGLang's checks spoke: a follow-up record, never in the outbox (a kill before it
            # lands asks again once D-Bus reads the unit; a check already done is in the loop's own record)
            checked = kinds.pop("fix-checked", 0)
            assert kinds == {"loop-started": loops, "stopped": loops} and checked <= loops, (unit, kinds, checked)
        print(f"crashdoc's records: {len(records)}, duplicates: 0")
        # a kill during a save leaves a temporary file; the next start sweeps it
        # (cache/ holds the compiled signature library, not state)
        assert sorted(p.name for p in (sandbox_workdir / "crashdoc-state").iterdir() if p.name != "cache") == [
            "state.json"
        ]
    finally:
        cd.stop()


# --- 2. journal faults ------------------------------------------------------------------------------


def test_journal_rotated_vacuumed_journald_restarted_and_a_corrupt_file(sandbox_factory, sandbox_workdir) -> None:
    """Rotation, vacuum and a journald restart while crashdoc follows: it goes on counting every crash,
    its newest-entry timestamp keeps moving, and it does not spin. Rotated and vacuumed while crashdoc
    was down: it resumes after the lost stretch with its counters, and says how many entries it lost.
    A truncated, bit-flipped file in a copied folder: `diagnose --directory` names it and diagnoses
    from the rest."""
    units = {LMCACHE: lmcache_unit("1"), NOISY: service(writer(sandbox_workdir, 300))}
    sandbox = sandbox_factory(units, workdir=sandbox_workdir, start_units=[])
    cd = start_crashdoc(sandbox, config=config(sandbox_workdir))
    truth = Truth(sandbox, [LMCACHE])

    def crashes() -> int:
        return counters(cd, [LMCACHE])[LMCACHE][1]

    def newest_read() -> float:
        return cd.metric("crashdoc_journal_last_entry_timestamp_seconds") or 0.0

    try:
        sandbox.systemctl("start", *units, check=True)
        wait_for(lambda: cd.metric("crashdoc_unit_crashloop", unit=LMCACHE) == 1.0, 60, "the loop", cd)
        faults = (
            ["journalctl", "--rotate"],
            ["journalctl", "--vacuum-files=1"],
            ["journalctl", "--rotate", "--vacuum-size=1K"],
            ["systemctl", "restart", "systemd-journald"],
        )
        for argv in faults:
            truth.collect()  # PID 1's records, before a vacuum deletes them
            before, at = crashes(), time.time()
            sandbox.run(argv, check=True)
            wait_for(lambda b=before, t=at: crashes() >= b + 2 and newest_read() > t, 30, f"crashes after {argv}", cd)
        sandbox.systemctl("stop", LMCACHE, check=True)
        wait_for(lambda: counters(cd, [LMCACHE]) == truth.collect(), 30, "counters equal to PID 1's records", cd)
        print(
            f"\nafter rotate, vacuum-files, vacuum-size, journald restart: PID 1 {truth.collect()}, "
            f"crashdoc {counters(cd, [LMCACHE])}"
        )

        # quiet: no spinning, and the newest-entry timestamp is exactly the journal's newest entry. Quiet means
        # settled: the stopped loop's record written (and read back: crashdoc reads its own records), every
        # entry read, then the loop's brisk polling after activity (BUSY_PERIOD) over; what is measured after
        # that is the idle loop alone, which a spin after the faults would show at once.
        sandbox.systemctl("stop", NOISY, check=True)
        wait_for(lambda: cd.metric("crashdoc_unit_crashloop", unit=LMCACHE) == 0.0, 30, "the stopped loop's end", cd)

        def newest_written() -> float:
            return int(host_journal(sandbox, "-n", "1")[0]["__REALTIME_TIMESTAMP"]) / 1e6

        wait_for(lambda: newest_read() == pytest.approx(newest_written(), abs=1e-3), 30, "every entry read", cd)
        time.sleep(BUSY_PERIOD + 0.5)
        cpu = quiet_cpu(cd, 3.0)
        print(f"quiet after the faults: {cpu:.2f} s of CPU in 3 s")
        assert cpu <= 0.15, f"crashdoc used {cpu:.2f} s of CPU in 3 quiet seconds"
        assert newest_read() == pytest.approx(newest_written(), abs=1e-3)
        assert cd.metric("crashdoc_journal_lag_seconds") == 0.0
        assert cd.metric("crashdoc_journal_entries_skipped_total") == 0.0

        # down while the journal is rotated and vacuumed: the saved position's entry is gone
        sandbox.systemctl("start", *units, check=True)
        wait_for(lambda: counters(cd, [LMCACHE]) == truth.collect() and crashes() >= 12, 60, "more crashes", cd)
        kept = counters(cd, [LMCACHE])[LMCACHE]
        cd.stop(signal.SIGKILL)
        saved = json.loads((sandbox_workdir / "crashdoc-state" / "state.json").read_text())["cursor"]
        time.sleep(3)  # the loop and the noise go on, crashdoc does not read them
        sandbox.run(["journalctl", "--rotate", "--vacuum-files=1"], check=True)
        oldest = host_journal(sandbox)[0]  # what is left: the new file
        saved_seq = int(dict(p.split("=", 1) for p in saved.split(";"))["i"], 16)
        oldest_seq = int(dict(p.split("=", 1) for p in oldest["__CURSOR"].split(";"))["i"], 16)
        gone = oldest_seq - saved_seq - 1
        assert gone > 0, (saved, oldest["__CURSOR"])
        restart_crashdoc(cd)
        wait_for(
            lambda: cd.metric("crashdoc_journal_entries_skipped_total") == float(gone),
            20,
            f"{gone} entries reported as skipped",
            cd,
        )
        assert "the saved journal position is gone" in cd.log()
        assert f"{gone} journal entries were gone before they could be read" in cd.log()
        wait_for(lambda: crashes() >= kept[1] + 2, 30, "new crashes after the lost stretch", cd)
        assert counters(cd, [LMCACHE])[LMCACHE][0] >= kept[0], "the counters started again from 0"
        print(f"down while rotated and vacuumed: {gone} entries lost, reported; counters went on from {kept}")

        # a copied folder with one truncated, bit-flipped file: the rest is diagnosed, the file is named
        sandbox.run(["journalctl", "--rotate"], check=True)
        rotated = crashes()
        wait_for(lambda: crashes() >= rotated + 2, 30, "two crashes in the new file", cd)
        sandbox.systemctl("stop", *units, check=True)
        copy = sandbox_workdir / "journal-copy"
        shutil.copytree(sandbox.journal_dir, copy)
        archived = sorted(copy.glob("*/system@*.journal"))
        assert archived, list(copy.rglob("*"))
        damaged = archived[-1]
        data = bytearray(damaged.read_bytes())
        for offset in range(len(data) // 4, len(data) // 2, 509):
            data[offset] ^= 0xFF
        damaged.write_bytes(data[: len(data) * 2 // 3])
        r = subprocess.run(
            [
                *CRASHDOC,
                "diagnose",
                "--directory",
                str(copy),
                "--json",
                "--signatures",
                str(sandbox_workdir / "signatures"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 3, r.stderr  # the worst: a file not read (the rest is diagnosed)
        assert f"skipped {damaged}: truncated or corrupt" in r.stderr, r.stderr
        diagnoses = {d["unit"]: d for d in json.loads(r.stdout)["diagnoses"]}
        assert diagnoses[LMCACHE]["signature"] == SIGNATURES[LMCACHE], diagnoses
        print(f"diagnose --directory with a damaged file: exit 3, {r.stderr.strip()}")
    finally:
        cd.stop()


# --- 3. floods --------------------------------------------------------------------------------------

FLOOD_RATE = 10_000  # lines per second, as in the issue
FLOOD_SECONDS = 20  # the issue says 60 s; 20 s shows the same steady state and keeps the file under 3 minutes


def test_flood_keeps_memory_bounded_and_another_loop_is_seen_within_a_second(sandbox_factory, sandbox_workdir):
    """A watched unit writes 10,000 lines/s for 20 s, every 100th line as long as journald's LineMax
    (48K), then a traceback of 10,000 frames. Meanwhile another unit starts crash-looping: /metrics
    shows its loop within 1 s of its second crash (by PID 1's record). crashdoc's own memory (RssAnon)
    stays flat; VmRSS also counts the journal file pages libsystemd maps, which are reported apart."""
    flood = service(writer(sandbox_workdir, FLOOD_RATE, FLOOD_SECONDS, LINE_MAX - 1, 10_000), restart="no")
    units = {FLOOD: flood, LMCACHE: lmcache_unit("0.5")}
    sandbox = sandbox_factory(units, workdir=sandbox_workdir, start_units=[])
    cd = start_crashdoc(sandbox, config=config(sandbox_workdir))
    assert cd.pid is not None
    pid = cd.pid
    idle = proc_status(pid)
    samples: list[dict[str, float]] = []
    lags: list[float] = []

    def sample() -> None:
        samples.append(proc_status(pid))
        lags.append(cd.metric("crashdoc_journal_lag_seconds") or 0.0)

    try:
        sandbox.systemctl("start", FLOOD, check=True)
        began = time.time()
        time.sleep(5)
        sandbox.systemctl("start", LMCACHE, check=True)
        looping_at = wait_for(
            lambda: cd.metric("crashdoc_unit_crashloop", unit=LMCACHE) == 1.0 and time.time(),
            30,
            "the other unit's loop during the flood",
            cd,
            interval=0.02,
        )
        exits = host_journal(sandbox, f"MESSAGE_ID={PROCESS_EXITED}", f"UNIT={LMCACHE}", "_PID=1")
        delay = float(looping_at) - int(exits[1]["__REALTIME_TIMESTAMP"]) / 1e6
        sandbox.systemctl("stop", LMCACHE, check=True)
        while sandbox.systemctl("is-active", FLOOD).stdout.strip() in ("active", "activating"):
            sample()
            time.sleep(0.5)
        flood_seconds = time.time() - began
        # journald reads the unit's 20,000 traceback lines after PID 1's exit record: the crash is settled
        # first, the traceback joins its run when it arrives (/diagnoses is computed from the runs)
        diagnosis = wait_for(
            lambda: next(
                (d for d in cd.diagnoses() if d["unit"] == FLOOD and d["root_cause"]["type"] == "RecursionError"), None
            ),
            30,
            "the flood unit's crash with its 10,000-frame traceback",
            cd,
        )
        for _ in range(4):
            sample()
            time.sleep(0.5)

        lines = sandbox.journalctl("-u", FLOOD, "-o", "cat", "--output-fields=_PID", timeout=120).stdout.count("\n")
        lines -= 2 * 10_000 + 2  # the traceback
        padded = host_journal(sandbox, "--all", "-u", FLOOD, "-r", "-n3", "--grep=x{99}")
        long_lines = [len(r["MESSAGE"]) for r in padded]
        peak = {k: round(max(s[k] for s in samples), 1) for k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")}
        idle = {k: round(v, 1) for k, v in idle.items()}
        print(
            f"\nflood: {lines} lines from {FLOOD} in {flood_seconds:.0f} s (long ones: {long_lines[:1]} chars); "
            f"the other loop shown {delay:.3f} s after its 2nd crash; lag max {max(lags):.2f} s; "
            f"memory MB idle {idle}, peak {peak}"
        )
        assert lines >= FLOOD_RATE * FLOOD_SECONDS * 0.9, f"the flood did not happen: {lines} lines"
        assert long_lines and all(n == LINE_MAX - 1 for n in long_lines), long_lines
        # within a second on an idle host (README); a loaded one (CRASHDOC_TEST_PATIENCE) may take longer
        assert delay <= 1.0 * PATIENCE, f"the other unit's loop was shown {delay:.2f} s after its second crash"
        assert len(json.dumps(diagnosis)) < 64 * 1024, "a 10,000-frame traceback made an unbounded diagnosis"
        assert peak["RssAnon"] <= 60, peak
        assert peak["RssAnon"] - idle["RssAnon"] <= 15, (idle, peak)
    finally:
        cd.stop()
