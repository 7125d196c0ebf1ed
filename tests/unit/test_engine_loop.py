"""Crash-loop semantics of the engine, fed with the records systemd 252 really writes.

These run without a systemd: they pin down the state machine (startup loops, runtime loops,
slow starters, recovery, flapping, start limit, clean stops, OOM kills, config changes) on
exact event sequences. The same behaviours are checked on a real private systemd in
test_e2e_loops.py.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from crashdoc.diagnosis.crashloop import LoopState
from crashdoc.diagnosis.engine import STOP_GRACE
from crashdoc.events import Lifecycle, LifecycleRecord, Thresholds, UnitState
from support.engine_driver import SCRIPT, UNIT, Host
from support.journal_files import TRACEBACK as DSV4_TRACEBACK


def test_two_crashes_before_ready_make_a_loop_with_one_diagnosis() -> None:
    h = Host()
    h.start()
    h.crash()
    assert not h.rec.crashloop
    h.start()
    h.crash()
    assert h.rec.crashloop
    kinds = h.kinds()
    assert kinds.count("loop-started") == 1
    [d] = h.engine.diagnoses()  # what /diagnoses and --json show
    assert d.signature == "dsv4-hicache-size-unsupported" and d.crashes == 2 and d.confidence == 1.0
    assert d.restarts == 2, "restarts is systemd's NRestarts now, not when the loop was diagnosed"
    assert "main process killed by SIGKILL (SGLang's launcher kills its whole process tree" in " ".join(d.evidence)
    for _ in range(5):  # the loop goes on: no second loop-started, no new record unless the cause changes
        h.start()
        h.crash()
    assert "loop-started" not in h.kinds()
    assert h.rec.restarts_total == 7 and h.rec.crashes_by_signature["dsv4-hicache-size-unsupported"] == 7


def test_slow_starter_dying_every_eight_minutes_while_loading_is_a_loop() -> None:
    h = Host(Thresholds(recovery=120))
    for _ in range(2):
        h.start()
        h.line("[2026-05-01 12:00:00] server_args={'model_path': 'deepseek-ai/DeepSeek-V4', 'tp_size': 2}")
        h.line("[2026-05-01 12:00:01 TP0] Load weight begin. avail mem=78.31 GB")
        h.wait(8 * 60)  # loading weights for eight minutes, longer than the recovery window
        assert h.rec.loop_state != LoopState.RECOVERED
        h.crash()
    assert h.rec.crashloop


def test_runtime_crashes_after_ready_need_three_within_the_window() -> None:
    h = Host(Thresholds(recovery=10, runtime_crashes=3, runtime_window=600))
    for i in range(3):
        h.start()
        h.ready()
        h.wait(30)
        h.crash(
            [
                "[2026-05-01 12:05:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
                '  File "/x/sglang/srt/managers/scheduler.py", line 1, in event_loop',
                "RuntimeError: Decode out of memory. Try to lower your batch size.",
                "",
            ]
        )
        assert h.rec.crashloop == (i == 2)
    assert h.rec.diagnosis.signature is None  # not in the small test library: an unknown, still diagnosed
    assert h.rec.diagnosis.root_cause.line == "RuntimeError: Decode out of memory. Try to lower your batch size."
    assert h.rec.diagnosis.category == "memory"


def test_recovery_needs_a_ready_run_through_the_window_and_a_quick_relapse_is_the_same_loop() -> None:
    h = Host(Thresholds(recovery=10, flap_window=600))
    h.line("[2026-05-01 12:00:00] server_args={'model_path': 'deepseek-ai/DeepSeek-V4', 'tp_size': 2}")
    for _ in range(2):
        h.start()
        h.crash()
    started = h.rec.loop_started_at
    h.kinds()
    h.start()
    h.wait(30)
    assert h.rec.crashloop, "an SGLang run that never said ready has not recovered"
    h.ready()
    h.wait(11)
    assert not h.rec.crashloop and h.rec.loop_state == LoopState.RECOVERED
    assert h.kinds() == ["recovered"]
    h.crash()  # the recovered run dies after all, and the next two never get ready
    for _ in range(2):
        h.start()
        h.crash()
    assert h.rec.crashloop and h.rec.loop_started_at == started
    assert "loop-started" not in h.kinds(), "flapping must not raise a new loop"


def test_start_limit_hit_marks_the_unit_failed() -> None:
    h = Host()
    for _ in range(3):
        h.start()
        h.crash()
    h.pid1(Lifecycle.START_LIMIT_HIT, result="start-limit-hit")
    assert h.rec.failed and h.rec.crashloop
    assert "failed" in h.kinds()


def test_a_stop_on_request_is_not_a_crash_and_ends_the_loop() -> None:
    h = Host()
    for _ in range(2):
        h.start()
        h.crash()
    h.start()
    h.pid1(Lifecycle.EXITED, exit_code="killed", exit_status="TERM")
    h.pid1(Lifecycle.DEACTIVATED)
    h.feed(UnitState(UNIT, active_state="inactive", sub_state="dead", n_restarts=0, timestamp=h.t))
    h.wait(STOP_GRACE)
    assert h.rec.crashes_total == 2
    assert not h.rec.crashloop and h.rec.loop_state == LoopState.STOPPED
    assert h.rec.n_restarts == 0 and h.rec.restarts_total == 2
    assert "stopped" in h.kinds()


def test_a_restart_after_the_fix_is_a_recovery_not_a_stop() -> None:
    """`systemctl restart` after applying the fix: systemd may show the unit inactive (dead) for a moment
    between the stop and the start. The loop ends when the new run is good, as a recovery."""
    h = Host()
    for _ in range(2):
        h.start()
        h.crash()
    assert h.rec.crashloop
    h.feed(UnitState(UNIT, active_state="inactive", sub_state="dead", timestamp=h.t))
    h.t += 0.3
    h.start()
    h.feed(UnitState(UNIT, active_state="active", sub_state="running", timestamp=h.t))
    h.ready()
    h.wait(15)
    kinds = h.kinds()
    assert "recovered" in kinds and "stopped" not in kinds, kinds
    assert not h.rec.crashloop


def test_an_oom_kill_wins_over_the_launchers_scheduler_died_message() -> None:
    h = Host()
    for _ in range(2):
        h.start()
        h.t += 1
        h.engine.on_lifecycle(
            LifecycleRecord(
                UNIT,
                Lifecycle.OOM_KILL,
                h.t,
                message="oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/system.slice/sglang-prefill.service,task=python3",
            )
        )
        h.crash(
            [
                "Traceback (most recent call last):",
                '  File "/x/sglang/srt/entrypoints/engine.py", line 2029, in _wait_for_scheduler_ready',
                "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 "
                "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.",
            ],
            code="exited",
            status="1",
            result="exit-code",
        )
    d = h.rec.diagnosis
    assert d.signature == "test-oom-killed" and d.category == "memory"
    assert any(e.startswith("kernel: oom-kill:") for e in d.evidence)
    assert any("Rank 0 scheduler died" in e for e in d.evidence)


@pytest.mark.parametrize("old_value", ["--hicache-ratio 2.0"])
def test_config_change_between_a_good_run_and_the_loop_is_reported_with_the_flag_diff(old_value: str) -> None:
    good = f"#!/bin/bash\nexec python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4 {old_value}\n"
    bad = "#!/bin/bash\nexec python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4 --hicache-size 150\n"
    h = Host(Thresholds(recovery=10), files={SCRIPT: good})
    state = UnitState(UNIT, active_state="active", sub_state="running", exec_start=(SCRIPT,), n_restarts=0)
    h.feed(state)
    h.start()
    h.ready()
    h.wait(20)
    assert [r.good for r in h.runs_seen()] == [True]
    h.files[SCRIPT] = bad
    h.engine.on_file_changed(UNIT, SCRIPT, h.t)
    h.wait(12)
    h.pid1(Lifecycle.EXITED, exit_code="killed", exit_status="TERM")
    h.pid1(Lifecycle.DEACTIVATED)
    for _ in range(2):
        h.start()
        h.crash()
    d = h.rec.diagnosis
    assert d.config_change is not None
    assert d.config_change["path"] == SCRIPT and d.config_change["added"] == ["--hicache-size 150"]
    assert d.config_change["removed"] == ["--hicache-ratio 2.0"]
    assert d.evidence[0].startswith(f"crash loop began 12 s after {SCRIPT} changed: + --hicache-size 150")


def test_line_level_failures_are_counted_without_a_crash() -> None:
    h = Host()
    h.start()
    h.ready()
    for _ in range(3):
        h.line(
            "[2026-05-01 12:00:03 TP0] Decode handshake failed for request rank=0 decode_req.req.rid='a' "
            "with exception KVTransferError(bootstrap_room=1): Lost connection with prefill instance"
        )
    assert h.rec.line_failures["test-kv-transfer-failed"] == 3
    assert not h.rec.crashloop
    h.engine.finish()
    # the server went on serving: a warning like a traceback it survived, never a failure of the unit
    assert h.engine.diagnoses() == []
    [d] = h.engine.warnings()
    assert d.signature == "test-kv-transfer-failed" and d.severity == "warning" and d.crashes == 3
    assert d.handled.startswith("SGLang logged this failure and the process went on")


def test_an_unknown_error_is_one_group_across_restarts_pids_and_ranks() -> None:
    h = Host()
    for run in range(3):
        h.start()
        lines = []
        for rank in range(2):  # both ranks raise it, with their own GPU number and a pointer in the message
            head = f"[2026-05-01 12:00:0{run} TP{rank}] Scheduler hit an exception: "
            lines += [
                head + "Traceback (most recent call last):",
                '  File "/x/sglang/srt/layers/moe/fused_moe.py", line 88, in forward',
                f"SomeNewError: launch failed on GPU {rank} at 0x7f{run}a{rank}0 after {run * 7 + 3} tries",
                "",
            ]
        h.crash(lines)
    rec = h.rec
    assert rec.crashes_by_signature == {"unknown": 3}
    [d] = h.engine.diagnoses()
    assert d.signature is None and d.crashes == 3 and re.fullmatch(r"fp1-[0-9a-f]{16}", d.fingerprint)
    assert d.category == "other" and d.root_cause.type == "SomeNewError"
    assert d.confidence < 1.0, "an unknown error is what raised, not surely the cause"


def test_a_traceback_that_arrives_after_pid1s_record_is_not_lost_and_counters_never_go_down() -> None:
    """journald reads a flooding unit lazily: PID 1's end-of-run records can come first."""
    h = Host()
    h.start()
    h.pid1(Lifecycle.EXITED, exit_code="killed", exit_status="KILL")
    h.pid1(Lifecycle.FAILED, result="signal")
    for text in DSV4_TRACEBACK:  # within the grace: the crash is counted once, under its signature
        h.line(text, pid=200)
    h.wait(2)
    assert h.rec.crashes_by_signature == {"dsv4-hicache-size-unsupported": 1}

    h.start()
    h.pid1(Lifecycle.EXITED, exit_code="killed", exit_status="KILL")
    h.pid1(Lifecycle.FAILED, result="signal")
    h.wait(5)  # nothing logged in time: counted as an exit without a traceback
    counts = dict(h.rec.crashes_by_signature)
    for text in DSV4_TRACEBACK:  # ... then the lines arrive after all
        h.line(text, pid=300)
    h.engine.tick(h.t + 2)
    assert h.rec.crashloop
    assert h.engine.diagnoses()[0].signature == "dsv4-hicache-size-unsupported", "the diagnosis follows the lines"
    assert all(h.rec.crashes_by_signature[k] >= v for k, v in counts.items()), "counters only go up"


class _RunsCode:
    """A pickle that, loaded by plain `pickle.loads`, would run a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_a_snapshot_round_trips_and_one_written_by_someone_else_cannot_run_code(tmp_path: Path) -> None:
    """The state file holds the engine's snapshot as versioned JSON: one that names anything but
    crashdoc's data classes is rejected (the daemon then resumes with empty counters), and so is an old
    pickle that would run code, instead of running it."""
    h = Host()
    for _ in range(2):
        h.start()
        h.crash()
    copy = Host().engine
    copy.restore(json.loads(json.dumps(h.engine.snapshot())))
    [d] = copy.diagnoses()
    assert copy.units()[UNIT].crashloop and d.signature == "dsv4-hicache-size-unsupported" and d.crashes == 2
    foreign = {"schema": "crashdoc-engine", "version": 2, "data": {"__type__": "Popen", "args": ["touch"]}}
    with pytest.raises(ValueError, match=r"Popen is not part of a crashdoc snapshot"):
        copy.restore(foreign)
    older = {"schema": "crashdoc-engine", "version": 1, "data": {"__dict__": {"units": {"__type__": "Popen"}}}}
    with pytest.raises(ValueError, match=r"v1:Popen is not part of a crashdoc snapshot"):
        copy.restore(older)
    newer = {**h.engine.snapshot(), "version": 99}
    with pytest.raises(ValueError, match=r"snapshot version 99 is newer than this crashdoc reads"):
        copy.restore(newer)
    marker = tmp_path / "ran"
    hostile = pickle.dumps({"version": "crashdoc-engine-1/0.1.0", "units": _RunsCode(marker)})
    with pytest.raises(ValueError, match=r"posix\.system is not part of a crashdoc snapshot"):
        copy.restore(hostile)
    assert not marker.exists()
    assert copy.units()[UNIT].crashloop, "a rejected snapshot leaves the engine as it was"


def test_a_field_added_since_the_snapshot_was_written_gets_its_default() -> None:
    """A newer crashdoc adds fields to its records; the state an older one saved still loads."""
    h = Host()
    for _ in range(2):
        h.start()
        h.crash()
    doc = h.engine.snapshot()
    runs = [v for v in _walk(doc) if isinstance(v, dict) and v.get("__type__") == "run"]
    assert runs, "the snapshot holds the runs"
    assert [r.exit for r in h.engine.runs(UNIT)] == ["killed by SIGKILL"] * 2
    for run in runs:
        del run["exit_code"], run["exit_status"]
    copy = Host().engine
    copy.restore(doc)
    rec = copy.units()[UNIT]
    assert rec.crashloop and rec.crashes_total == 2
    assert [r.exit for r in copy.runs(UNIT)] == [None, None]


def _walk(value: object) -> Iterator[object]:
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def test_an_unknown_validation_error_points_at_the_flags_it_names_and_how_the_run_set_them() -> None:
    """No signature knows it, but SGLang's checks name their flags: the diagnosis lists them (aliases
    resolved) with the crashed run's values, secrets redacted when shown."""
    h = Host()
    for _ in range(2):
        h.start()
        h.line(
            "[2026-05-01 12:00:01] server_args=ServerArgs(model_path='m', tp_size=4, frobnicate_size=7, "
            "enable_frobnication=False, api_key='sk-abcdefabcdefabcdef12')"
        )
        h.crash(
            [
                "[2026-05-01 12:00:02] Traceback (most recent call last):",
                '  File "/x/sglang/srt/server_args.py", line 6123, in _handle_frobnication',
                "    raise ValueError(",
                "ValueError: --frobnicate-size 7 requires --enable-frobnication and --tp 8 (or SGLANG_FROB=1).",
                "",
            ]
        )
    [d] = h.engine.diagnoses()
    assert d.signature is None and d.category == "flag-conflict"
    assert d.flags == ["--frobnicate-size", "--enable-frobnication", "--tp-size", "SGLANG_FROB"]
    assert d.fix.summary.startswith(
        "The error names --frobnicate-size, --enable-frobnication, --tp-size, SGLANG_FROB: the setting to change "
        "is most likely among them. No signature knows this error yet."
    )
    assert d.fix.summary.endswith("This run has --frobnicate-size 7, no --enable-frobnication, --tp-size 4")
    assert d.fix.changes == [], "crashdoc does not guess a change it cannot justify"


def test_an_unknown_error_naming_no_flag_says_so_plainly() -> None:
    h = Host()
    h.start()
    h.crash(["Traceback (most recent call last):", '  File "/x/y.py", line 1, in f', "KeyError: 'layers.0.w'", ""])
    h.start()
    h.crash(["Traceback (most recent call last):", '  File "/x/y.py", line 1, in f', "KeyError: 'layers.0.w'", ""])
    [d] = h.engine.diagnoses()
    assert d.flags == [] and d.fix.summary.startswith("No signature knows this error yet.")


# The engine's step, run in a child whose file system, processes and sockets are gone once the library is
# loaded: what it needs from disk arrives as LaunchFacts, what it decides leaves as abstract changes.
NO_FILE_SYSTEM = r"""
import builtins, io, json, os, socket, subprocess, sys
from pathlib import Path
from crashdoc.commands.pipeline import build_engine
from crashdoc.diagnosis.engine import feed
from crashdoc.events import LaunchFacts, Lifecycle, LifecycleRecord, LogLine, Thresholds, UnitState
from crashdoc.matching.library import load_library
from crashdoc.matching.matcher import Matcher

library = load_library([Path(sys.argv[1])])
traceback = json.loads(sys.argv[2])
engine = build_engine(Matcher(library), thresholds=Thresholds(recovery=10))
engine.diagnoses(), engine.warnings(), engine.restore(engine.snapshot())  # every import done before the cut

def cut(*args, **kwargs):
    raise AssertionError(f"the engine did I/O: {args[:1]}")

for owner, names in ((builtins, ["open"]), (io, ["open", "open_code"]), (subprocess, ["Popen"]),
                     (socket, ["socket", "create_connection"]),
                     (os, ["open", "stat", "lstat", "listdir", "scandir", "access", "readlink", "system"])):
    for name in names:
        setattr(owner, name, cut)

unit, script, t = "sglang-prefill.service", "/opt/sglang/prefill.sh", 1_800_000_000.0
good = {"--model-path": "deepseek-ai/DeepSeek-V4", "--hicache-ratio": "2.0"}
bad = {"--model-path": "deepseek-ai/DeepSeek-V4", "--hicache-size": "150"}
state = UnitState(unit, active_state="active", sub_state="running", exec_start=(script,), n_restarts=0)
feed(engine, [LaunchFacts(unit, (script,), good, "0.5.23", "/opt/venv/bin/python: METADATA"), state])
feed(engine, [LifecycleRecord(unit, Lifecycle.STARTED, t, "inv0")])
engine.on_line(LogLine(unit, 100, "[2026-05-01 12:00:09] The server is fired up and ready to roll!", t, "inv0"))
engine.tick(t + 20)
engine.on_file_changed(unit, script, t + 21)
t += 30
for n in (1, 2):
    run = f"inv{n}"
    facts = LaunchFacts(unit, (script,), bad, "0.5.23", "METADATA")
    feed(engine, [facts, LifecycleRecord(unit, Lifecycle.STARTED, t, run)])
    for text in traceback:
        engine.on_line(LogLine(unit, 200 + n, text, t, run))
    feed(engine, [LifecycleRecord(unit, Lifecycle.EXITED, t + 0.2, run, exit_code="killed", exit_status="KILL"),
                  LifecycleRecord(unit, Lifecycle.FAILED, t + 0.2, run, result="signal"),
                  LifecycleRecord(unit, Lifecycle.RESTART_SCHEDULED, t + 1, run, n_restarts=n)])
    t += 2
    engine.tick(t)
engine.restore(engine.snapshot())  # saved and read back as data: no file either
engine.finish()
[d] = engine.diagnoses()
view = engine.units()[unit]
print(json.dumps({
    "kinds": [e.kind for e in engine.events()],
    "looping": view.crashloop,
    "signature": d.signature,
    "changes": [[c.action, c.flag, c.value, c.new_flag] for c in d.fix.changes],
    "command": d.fix.command,
    "target": list(d.target.cmdline),
    "release": d.sglang_release,
    "config_change": d.evidence[0],
    "runs": [r.flags.get("--hicache-size") for r in engine.runs(unit)],
}))
"""


def test_the_engine_runs_with_no_file_system() -> None:
    """Files, processes and sockets cut off (any use raises): a crash loop still gets its diagnosis, its
    abstract fix and the flag diff against the last good run, from the launch facts handed in; the command,
    diff and checks are the remedy stage's, later."""
    import subprocess
    import sys

    library = Path(__file__).parent.parent / "fixtures" / "signatures"
    child = subprocess.run(
        [sys.executable, "-c", NO_FILE_SYSTEM, str(library), json.dumps(DSV4_TRACEBACK)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads(child.stdout.strip().splitlines()[-1])
    assert out["looping"] and out["kinds"][:3] == ["crash", "crash", "loop-started"]
    assert out["signature"] == "dsv4-hicache-size-unsupported"
    assert out["changes"] == [["replace", "--hicache-size", "2.0", "--hicache-ratio"]]
    assert out["command"] is None and out["target"] == ["/opt/sglang/prefill.sh"]
    assert out["release"] == "0.5.23"
    assert out["config_change"].endswith("changed: + --hicache-size 150, - --hicache-ratio 2.0")
    assert out["runs"] == [None, "150", "150"]
