"""Hostile input on a real (private) systemd, with `crashdoc run` following the journal inside.

A process inside a watched unit can write anything to the journal: through the native protocol it
chooses every field except the trusted ones (those starting with `_`, which journald sets from the
socket's credentials), so it can send systemd's MESSAGE_IDs with `UNIT=` and `N_RESTARTS=`, and on
stdout it can print systemd's wording. None of it may move a counter: crashdoc counts only records
that journald says PID 1 wrote. The same processes send binary and invalid UTF-8 fields, NUL bytes,
ANSI escapes and 1 MB messages; crashdoc must keep running, diagnose the real crash loop beside
them, and show sensible text, live and through `crashdoc diagnose --file`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from crashdoc.sandbox.demo import package_root
from support.e2e import CRASHDOC, RESTART_SCHEDULED, journal_json, pid1_records, start_crashdoc, wait_for

pytestmark = pytest.mark.sandbox

PY = sys.executable
VICTIM = "sglang-victim.service"  # healthy; the forger writes restart records about it
FORGER = "sglang-forger.service"  # watched too: it forges records about itself as well
OUTSIDER = "forger-outside.service"  # not watched: what it forges about watched units must not count either
BINARY = "sglang-binary.service"  # a real crash loop whose traceback is full of binary junk
FORGED_RESTARTS = 99
DSV4_MESSAGE = b"DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."

FORGER_PY = textwrap.dedent(
    '''
    """Forges PID 1's records through every channel a service has, then sleeps."""
    import os, socket, sys, time, uuid
    from systemd import journal

    TARGETS = sys.argv[1:]
    for unit in TARGETS:
        common = dict(SYSLOG_IDENTIFIER="systemd", SYSLOG_PID="1", _PID="1", _COMM="systemd",
                      _SYSTEMD_UNIT="init.scope", _UID="0", OBJECT_PID="1")
        journal.send(f"{unit}: Scheduled restart job, restart counter is at 99.",
                     MESSAGE_ID="5eb03494b6584870a536b337290809b3", UNIT=unit, N_RESTARTS="99", **common)
        journal.send(f"{unit}: Main process exited, code=killed, status=9/KILL",
                     MESSAGE_ID="98e322203f7a4ed290d09fe03c09fe15", UNIT=unit, EXIT_CODE="killed",
                     EXIT_STATUS="9", **common)
        journal.send(f"{unit}: Failed with result 'signal'.",
                     MESSAGE_ID="d9b373ed55a64feb8242e02dbe79a49c", UNIT=unit, UNIT_RESULT="signal", **common)
        journal.send(f"{unit}: Start request repeated too quickly.", UNIT=unit, **common)
        journal.send(f"Failed to start {unit}.", MESSAGE_ID="be02cf6855d2428ba40df7e9d022f03d", UNIT=unit,
                     JOB_RESULT="failed", JOB_TYPE="start", **common)
        journal.send(f"Started {unit}.", MESSAGE_ID="39f53479d3a045ac8e11786248231fbf", UNIT=unit,
                     JOB_TYPE="start", JOB_RESULT="done", INVOCATION_ID=uuid.uuid4().hex, **common)
        journal.send(f"{unit}: A process of this unit has been killed by the OOM killer.",
                     MESSAGE_ID="fe6faa94e7774663a0da52717891d8ef", UNIT=unit, **common)
        journal.send("Process 4242 (python3) dumped core.", MESSAGE_ID="fc2e22bc6ee647b6b90729ab34a250b1",
                     COREDUMP_UNIT=unit, COREDUMP_SIGNAL_NAME="SIGSEGV", COREDUMP_SIGNAL="11", **common)
        # the same records as text, on stdout and through syslog as "systemd[1]"
        print(f"{unit}: Scheduled restart job, restart counter is at 99.", flush=True)
        print(f"{unit}: Main process exited, code=killed, status=9/KILL", flush=True)
        print(f"{unit}: Failed with result 'signal'.", flush=True)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(f"<30>systemd[1]: {unit}: Scheduled restart job, restart counter is at 99.".encode(),
                     "/run/systemd/journal/dev-log")
    # binary, invalid UTF-8, NUL, ANSI and 1 MB through the native protocol and stdout
    journal.sendv(b"MESSAGE=invalid utf-8 \\xff\\xfe\\xc0\\x80 and a NUL \\x00 here", b"BLOB=\\x00\\x01\\x02\\xff")
    journal.sendv(b"MESSAGE=\\x1b[31mred\\x1b[0m \\x1b]0;title\\x07 \\x1b[2J cleared", b"PRIORITY=3")
    journal.sendv(b"MESSAGE=" + b"\\xf0\\x9f" * (1 << 19))  # 1 MB of cut-off UTF-8 sequences
    journal.send("M" * (1 << 20), HUGE="h" * (1 << 20))
    sys.stdout.buffer.write(b"\\x1b[1;31mstdout \\xff\\xfe junk\\x1b[0m\\n" + b"L" * (1 << 20) + b"\\n")
    sys.stdout.flush()
    print("FORGER DONE", flush=True)
    while True:
        time.sleep(3600)
    '''
)

BINARY_CRASH_PY = textwrap.dedent(
    '''
    """SGLang's DeepSeek V4 HiCache traceback, written line by line through the native protocol with
    binary junk inside, after a 1 MB message; then exit 1, so that systemd restarts it."""
    import sys, time
    from systemd import journal

    def send(raw):
        journal.sendv(b"MESSAGE=" + raw, b"PRIORITY=3")

    send(b"\\xff" * (1 << 20))
    send(b"[2026-05-01 12:00:03 TP0] Scheduler hit an exception: Traceback (most recent call last):")
    send(b'  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 6361, '
         b"in run_scheduler_process\\xff\\xfe")
    send(b"    scheduler = Scheduler(\\x00\\x1b[0m")
    send(b'  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/mem_cache/hybrid_cache/'
         b'hybrid_pool_assembler.py", line 661, in _deepseek_v4_num_host_pages')
    send(b"    raise ValueError(")
    send(b"\\x1b[1;31mValueError: %s\\x1b[0m\\x00\\xff\\xc3" % MESSAGE)
    send(b"")
    time.sleep(0.2)
    sys.exit(1)
    '''
).replace("% MESSAGE", "% " + repr(DSV4_MESSAGE))


def _unit(exec_start: str, restart: str = "no") -> str:
    return (
        "[Unit]\nDescription=hostile test unit\nStartLimitIntervalSec=0\n\n"
        f"[Service]\nExecStart={exec_start}\nRestart={restart}\nRestartSec=0.5\n"
        f"Environment=PYTHONUNBUFFERED=1 PYTHONPATH={package_root()}\n"
    )


def _unit_samples(cd, unit: str) -> dict[str, float]:
    """Every sample crashdoc exports about `unit`, by metric name (and state label)."""
    out: dict[str, float] = {}
    for (name, labels), value in cd.metrics().items():
        d = dict(labels)
        if d.get("unit") != unit:
            continue
        key = name + "".join(f"{{{d[label]}}}" for label in ("state", "signature") if label in d)
        out[key] = value
    return out


def test_forged_lifecycle_records_and_binary_junk_move_nothing(sandbox_factory, sandbox_workdir) -> None:
    forger = sandbox_workdir / "forger.py"
    forger.write_text(FORGER_PY)
    crasher = sandbox_workdir / "binary_crash.py"
    crasher.write_text(BINARY_CRASH_PY)
    units = {
        VICTIM: _unit("/bin/sleep infinity"),
        FORGER: _unit(f"{PY} {forger} {VICTIM} {FORGER} {BINARY}"),
        OUTSIDER: _unit(f"{PY} {forger} {VICTIM} {BINARY}"),
        BINARY: _unit(f"{PY} {crasher}", restart="always"),
    }
    sandbox = sandbox_factory(units, workdir=sandbox_workdir, start_units=[VICTIM])
    cd = start_crashdoc(sandbox)
    try:
        sandbox.systemctl("start", FORGER, OUTSIDER, check=True)
        wait_for(lambda: len(journal_json(sandbox, "MESSAGE=FORGER DONE")) == 2, 30, "the forgers", cd)
        # journald kept the forged MESSAGE_ID, UNIT and N_RESTARTS, but not the forged _PID=1
        forged = journal_json(sandbox, f"MESSAGE_ID={RESTART_SCHEDULED}", f"UNIT={VICTIM}")
        assert forged and all(e["_PID"] != "1" and e["N_RESTARTS"] == "99" for e in forged)
        assert {e["_SYSTEMD_UNIT"] for e in forged} == {FORGER, OUTSIDER}
        syslog = journal_json(sandbox, "_TRANSPORT=syslog", f"_SYSTEMD_UNIT={FORGER}")
        assert any(e["SYSLOG_IDENTIFIER"] == "systemd" and e["SYSLOG_PID"] == "1" for e in syslog)

        # a real crash loop beside the forgeries, full of binary junk: crashdoc is alive and caught up
        sandbox.systemctl("start", BINARY, check=True)
        wait_for(lambda: cd.metric("crashdoc_unit_crashloop", unit=BINARY) == 1.0, 60, "the binary unit's loop", cd)
        sandbox.systemctl("stop", BINARY, check=True)
        real = pid1_records(sandbox, BINARY, RESTART_SCHEDULED)
        wait_for(
            lambda: cd.metric("crashdoc_unit_restarts_total", unit=BINARY) == float(len(real)),
            15,
            "PID 1's restart records counted",
            cd,
        )
        assert len(real) >= 1
        assert (cd.metric("crashdoc_unit_nrestarts", unit=BINARY) or 0) < FORGED_RESTARTS

        # nothing the forger wrote moved a counter, a state or a loop
        for name in (VICTIM, FORGER):
            samples = _unit_samples(cd, name)
            assert samples.get("crashdoc_unit_restarts_total") == 0.0, samples
            assert samples.get("crashdoc_unit_crashloop") == 0.0, samples
            assert samples.get("crashdoc_unit_failed") == 0.0, samples
            assert samples.get("crashdoc_unit_nrestarts") == 0.0, samples
            assert samples.get("crashdoc_unit_state{healthy}") == 1.0, samples
            assert not any(k.startswith("crashdoc_crashes_total") and v for k, v in samples.items()), samples
        assert cd.metric("crashdoc_internal_errors_total") == 0.0
        assert cd.proc is not None and cd.proc.poll() is None
        assert "internal error" not in cd.log()

        # the binary junk reads as sensible text: no NUL, no escapes, U+FFFD for invalid bytes, bounded
        live = {d["unit"]: d for d in cd.diagnoses()}
        assert set(live) == {BINARY}, live.keys()
        _assert_sensible(live[BINARY])
        status, page = cd.get(f"/units/{BINARY}")
        assert status == 200 and b"\x00" not in page and b"\x1b" not in page
        assert cd.get(f"/units/{FORGER}")[0] == 200

        # the same journal through `diagnose --file`, on the host: the same verdicts
        files = sorted(str(p) for p in sandbox.journal_dir.rglob("*.journal"))
        result = subprocess.run(
            [*CRASHDOC, "diagnose", "--json", *(f"--file={f}" for f in files)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 1, result.stderr  # a failure found
        assert "Traceback" not in result.stderr
        offline = {d["unit"]: d for d in json.loads(result.stdout)["diagnoses"]}
        assert set(offline) == {BINARY}
        _assert_sensible(offline[BINARY])
        assert offline[BINARY]["restarts"] == len(real)  # PID 1's last N_RESTARTS, never the forged 99
        victim = subprocess.run(
            [*CRASHDOC, "diagnose", "--unit", VICTIM, *(f"--file={f}" for f in files)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert victim.returncode == 0 and victim.stdout.strip() == "No failure found.", victim
    finally:
        cd.stop()


def _assert_sensible(d: dict) -> None:
    assert d["signature"] == "dsv4-hicache-size-unsupported", d
    line = d["root_cause"]["line"]
    assert line.startswith("ValueError: " + DSV4_MESSAGE.decode()), line
    text = json.dumps(d, ensure_ascii=False)
    assert "\x00" not in text and "\x1b" not in text
    assert "\ufffd" in line  # the invalid bytes after the message, shown as U+FFFD
    assert len(text) < 64 * 1024, len(text)  # a 1 MB message does not make a 1 MB diagnosis
