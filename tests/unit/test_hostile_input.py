"""Hostile input without a systemd: crafted journal files, pasted logs, a million generated messages,
and signatures written to hang a backtracking regex engine.

Journal files are written by systemd-journal-remote from the export format, which can hold any bytes
in any field, trusted ones included: a copied journal file is input like any other. The live
counterpart (forged records sent through journald's native protocol) is test_e2e_hostile.py.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crashdoc.diagnosis.engine import Engine
from crashdoc.events import Lifecycle, LifecycleRecord, LogLine, WatchRule
from crashdoc.matching.library import builtin_signature_dirs, load_library
from crashdoc.matching.matcher import Facts, Matcher
from crashdoc.sources.journal import JournalSource, UnitFilter
from support.journal_files import (
    CRASHDOC,
    DSV4,
    EXITED,
    FAILED,
    RESTART,
    TERMINAL_HOSTILE,
    TRACEBACK,
    UNIT,
    line,
    needs_journal_remote,
    pid1,
    write_journal,
)


def hostile_journal_entries() -> list[dict[str, str | bytes]]:
    forged_restart = {"MESSAGE_ID": RESTART, "N_RESTARTS": "99"}
    return [
        # a watched unit forging PID 1's records (native protocol fields) and printing its wording
        line(f"{UNIT}: Scheduled restart job, restart counter is at 99.", **forged_restart, UNIT=UNIT),
        line(
            f"{UNIT}: Main process exited, code=killed, status=9/KILL",
            MESSAGE_ID=EXITED,
            UNIT=UNIT,
            EXIT_CODE="killed",
            EXIT_STATUS="9",
        ),
        # another unit, and even init.scope with a PID that is not 1 (a crafted file)
        {**pid1("forged", scope="other.service", pid="77"), **forged_restart},
        {**pid1("forged", pid="77"), **forged_restart},
        # PID 1 records with broken fields: binary unit name, junk counters and ids
        {**pid1("junk", unit=b"sglang-\xff\xfe.service"), **forged_restart},
        {**pid1("junk"), "MESSAGE_ID": b"\xff" * 16},
        {**pid1("junk"), "MESSAGE_ID": EXITED, "EXIT_CODE": b"\x00\xff", "EXIT_STATUS": b"\x1b[31m9"},
        # binary and hostile lines of the watched unit, before and inside the traceback
        line(b"invalid utf-8 \xff\xfe\xc0\x80 and NUL \x00 and \x1b[31mANSI\x1b[0m \x1b]0;title\x07 \xc2\x9b2J"),
        line(b"\xf0\x9f" * (1 << 19)),  # 1 MB of cut-off UTF-8 sequences
        line("M" * (1 << 20)),
        line(b"", BLOB=b"\x00\x01\x02"),
        line("a process with a PID that is not a number", pid=b"12ab"),
        line("a process with an empty PID", pid=b""),
        {"_TRANSPORT": "stdout", "_SYSTEMD_UNIT": UNIT, "MESSAGE": "no _PID at all"},
        {"_TRANSPORT": "stdout", "_SYSTEMD_UNIT": UNIT, "_PID": "4242"},  # no MESSAGE
        *(line(text.encode() + (b" \xff\x00\x1b[0m" if "File" in text else b"")) for text in TRACEBACK[:-2]),
        line(b"\x1b[1;31m" + DSV4.encode() + b"\x1b[0m\x00\xff"),
        line(""),
        # what PID 1 really wrote: one crash, one restart
        pid1(
            f"{UNIT}: Main process exited, code=killed, status=9/KILL",
            MESSAGE_ID=EXITED,
            EXIT_CODE="killed",
            EXIT_STATUS="9",
        ),
        pid1(f"{UNIT}: Failed with result 'signal'.", MESSAGE_ID=FAILED, UNIT_RESULT="signal"),
        pid1(f"{UNIT}: Scheduled restart job, restart counter is at 1.", MESSAGE_ID=RESTART, N_RESTARTS="1"),
    ]


@needs_journal_remote
def test_journal_file_with_forgeries_and_binary_fields_reads_without_error(tmp_path: Path) -> None:
    path = write_journal(tmp_path, hostile_journal_entries())
    source = JournalSource(UnitFilter([WatchRule("sglang*.service")]), files=[str(path)])
    source.seek_head()
    events = []
    while True:
        events.extend(source.read(7))  # small batches: state carried across reads
        if source.at_end:
            break
    lifecycle = [e for e in events if isinstance(e, LifecycleRecord) and e.unit == UNIT]
    lines = [e for e in events if isinstance(e, LogLine)]
    # what PID 1 wrote about the unit, and nothing the unit itself or another scope wrote
    assert [(r.kind, r.n_restarts) for r in lifecycle] == [
        (Lifecycle.EXITED, None),
        (Lifecycle.EXITED, None),
        (Lifecycle.FAILED, None),
        (Lifecycle.RESTART_SCHEDULED, 1),
    ]
    assert (lifecycle[0].exit_code, lifecycle[0].exit_status) == ("\x00\ufffd", "\x1b[31m9")  # PID 1's, junk or not
    assert (lifecycle[1].exit_code, lifecycle[1].exit_status) == ("killed", "KILL")
    # every line of the unit is read, as text, cut to a bounded size
    assert max(len(e.text) for e in lines) <= 16 * 1024
    assert any("\ufffd" in e.text for e in lines)
    assert source.stats.errors == 0


@needs_journal_remote
def test_diagnose_file_on_a_hostile_journal(tmp_path: Path) -> None:
    path = write_journal(tmp_path, hostile_journal_entries())
    result = subprocess.run(
        [*CRASHDOC, "diagnose", "--json", "--file", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1, result.stderr  # a failure found
    assert "Traceback" not in result.stderr
    [d] = json.loads(result.stdout)["diagnoses"]
    assert d["unit"] == UNIT and d["signature"] == "dsv4-hicache-size-unsupported"
    assert d["restarts"] == 1  # PID 1's N_RESTARTS, never the forged 99
    assert d["root_cause"]["line"].startswith(DSV4)
    assert_sensible(json.dumps(d, ensure_ascii=False))
    text = subprocess.run([*CRASHDOC, "diagnose", "--file", str(path)], capture_output=True, text=True, timeout=120)
    assert text.returncode == 1 and DSV4 in text.stdout
    assert_sensible(text.stdout)


@needs_journal_remote
def test_escapes_in_a_units_output_never_reach_the_terminal(tmp_path: Path) -> None:
    """A unit prints escape sequences (title, screen clear, OSC, C1 CSI) on the line a line signature
    matches; its capture lands in the fix. `diagnose` shows the text without them."""
    path = write_journal(
        tmp_path,
        [
            line(
                b"sglang serve: error: unrecognized arguments: --foo \x1b]0;pwned\x07\x1b[2J\x1b[31mRED\x1b[0m\xc2\x9b"
                b"\x08\r"
            ),
            pid1(
                f"{UNIT}: Main process exited, code=exited, status=2/INVALIDARGUMENT",
                MESSAGE_ID=EXITED,
                EXIT_CODE="exited",
                EXIT_STATUS="2",
            ),
            pid1(f"{UNIT}: Failed with result 'exit-code'.", MESSAGE_ID=FAILED, UNIT_RESULT="exit-code"),
        ],
    )
    for args in ([], ["--json"]):
        result = subprocess.run(
            [*CRASHDOC, "diagnose", "--file", str(path), *args], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 1, result.stderr
        assert "unrecognized arguments: --foo RED" in result.stdout and "pwned" not in result.stdout
        assert_sensible(result.stdout)


def assert_sensible(text: str, limit: int = 64 * 1024) -> None:
    """Output a terminal can show: no escapes or control characters from the log, and bounded."""
    bad = [ch for ch in TERMINAL_HOSTILE if ch in text]
    assert not bad, (bad, text[:2000])
    assert len(text) < limit, len(text)


# --- pasted logs ----------------------------------------------------------------------------------


def hostile_logs() -> dict[str, bytes]:
    """Pasted logs wrapped in colours, with NUL, C1 and invalid bytes and 1 MB lines: SGLang's traceback in
    one, argparse's one-line error (a line signature, whose capture lands in the fix) in the other."""
    junk = [
        b"\x1b[32m[2026-05-01 12:00:01] Load weight begin.\x1b[0m \x00\x07\x08",
        b"invalid utf-8 \xff\xfe\xc0\x80 then an OSC title \x1b]0;pwned\x07 and a C1 CSI \xc2\x9b2J",
        b"Z" * (1 << 20),
    ]
    traceback = [
        *junk,
        *(t.encode() + (b"\x00\x1b[0m" if "File" in t else b"") for t in TRACEBACK[:-2]),
        b"\x1b[1;31m" + DSV4.encode() + b"\x1b[0m\x00\xff" + b"A" * (1 << 20),
        b"",
    ]
    argparse = [
        *junk,
        b"sglang serve: error: unrecognized arguments: --foo \x1b]0;pwned\x07\x1b[2J\x1b[31mRED\x00\xc2\x9b\r\x7f",
    ]
    return {"traceback.log": b"\n".join(traceback) + b"\n", "argparse.log": b"\n".join(argparse) + b"\n"}


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_explain_shows_hostile_logs_as_sensible_text(tmp_path: Path, as_json: bool) -> None:
    for name, data in hostile_logs().items():
        (tmp_path / name).write_bytes(data)
    files = [str(tmp_path / name) for name in hostile_logs()]
    result = subprocess.run(
        [*CRASHDOC, "explain", *files, *(["--json"] if as_json else [])], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1, result.stderr
    assert_sensible(result.stdout, limit=2 * 64 * 1024)
    assert DSV4 in result.stdout
    assert "unrecognized arguments: --foo RED" in result.stdout and "pwned" not in result.stdout  # escapes: gone
    if as_json:
        found = {d["signature"]: d for doc in map(json.loads, result.stdout.splitlines()) for d in doc["diagnoses"]}
        assert set(found) == {"dsv4-hicache-size-unsupported", "argparse-unrecognized-arguments"}
        assert found["dsv4-hicache-size-unsupported"]["root_cause"]["line"].startswith(DSV4 + "\ufffd")
        assert found["argparse-unrecognized-arguments"]["captures"]["args"] == "--foo RED"


# --- the assembler's bounds on input built to exhaust them -------------------------------------------


def assemble(lines: Iterator[str]) -> list:
    from crashdoc.assembly.traceback import TracebackAssembler

    assembler = TracebackAssembler()
    out = []
    for text in lines:
        out.extend(assembler.feed(LogLine(UNIT, 7, text, 1.0, "inv")))
    return out + assembler.flush()


def test_a_message_of_many_long_lines_is_bounded() -> None:
    def lines() -> Iterator[str]:
        yield from TRACEBACK[:-1]
        for i in range(200):
            yield f"detail {i} " + "x" * 16_000

    [tb] = assemble(lines())
    assert tb.final.message.startswith(DSV4.removeprefix("ValueError: ")) and tb.truncated
    assert len(tb.final.message) <= 2 * 16 * 1024 and len(tb.text) <= 16 * 1024


def test_a_million_blank_lines_inside_a_record_are_not_kept() -> None:
    def lines() -> Iterator[str]:
        yield from TRACEBACK[:-1]
        yield from ("" for _ in range(1_000_000))
        yield "and one more line of message"

    [tb] = assemble(lines())
    assert len(tb.final.message.split("\n")) <= 81


def test_a_chain_of_ten_thousand_exceptions_keeps_its_ends() -> None:
    def lines() -> Iterator[str]:
        for i in range(10_000):
            if i:
                yield from ("", "During handling of the above exception, another exception occurred:", "")
            yield from (
                "Traceback (most recent call last):",
                f'  File "/x/m{i}.py", line {i}, in f{i}',
                f"KeyError: {i}",
            )
        yield "[2026-05-01 12:00:04] next record"

    [tb] = assemble(lines())
    assert len(tb.chain) <= 16 and tb.truncated
    assert tb.chain[0].message == "0" and tb.final.message == "9999"  # the first cause and what was raised


# --- a million hostile messages through the engine --------------------------------------------------

PIECES = (
    "Traceback (most recent call last):",
    "[2026-05-01 12:00:03 TP0] ",
    "Scheduler hit an exception: ",
    '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 6361, in run',
    '  File "',
    "    scheduler = Scheduler(",
    "    ^^^^^^^",
    "ValueError: ",
    "RuntimeError",
    DSV4,
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79 GiB",
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
    "Exception in thread T-1 (w):",
    "The server is fired up and ready to roll!",
    "server_args={'model_path': 'x', 'tp_size': 8, 'a': [1, {",
    "Received sigquit from a child process. It usually means one child failed.",
    "kill_process_tree called",
    "KV Cache is allocated.",
    "Load weight begin.",
    "sglang serve: error: unrecognized arguments: ",
    "[Previous line repeated 996 more times]",
    "NCCL WARN",
    "Scheduled restart job, restart counter is at 99.",
    "Main process exited, code=killed, status=9/KILL",
    "\x00",
    "\x1b[31m",
    "\x1b]0;t\x07",
    "\x9b",
    "\ufffd" * 3,
    "\r",
    "\t",
    "\n",
    "\u2028",
    "\U0001f600",
    "é",
    "'",
    '"',
    "(",
    "{",
    "[",
    "$(",
    "${x}",
    " ",
    "",
    "x" * 1000,
)
UNITS = ("sglang-prefill.service", "sglang-decode.service", "sglang-router.service", "other.service")
KINDS = tuple(Lifecycle)


def hostile_pool(rnd: random.Random, size: int) -> list[str]:
    pool = ["".join(rnd.choice(PIECES) for _ in range(rnd.randint(0, 7))) for _ in range(size)]
    pool += [rnd.choice(PIECES) * rnd.randint(1, 40) for _ in range(size // 8)]  # repeated pieces
    pool.append("L" * (48 * 1024))  # journald's LineMax
    return pool


def test_a_million_hostile_messages_through_the_engine() -> None:
    """Journal-shaped lines (watched and unwatched units, ranks as PIDs, runs as invocations) and PID 1's
    records with junk in every field, fed as the daemon feeds them, ticked, read and snapshotted: no
    exception escapes and the engine's state stays bounded. About 25 s on a busy 2-CPU machine (printed)."""
    rnd = random.Random(8)
    pool = hostile_pool(rnd, 6000)
    library = load_library(builtin_signature_dirs())
    engine = Engine(Matcher(library), role_of=lambda unit: None if unit == "other.service" else "any")
    runs = dict.fromkeys(UNITS, 0)
    now = 1_800_000_000.0
    total = 1_000_000
    started = time.perf_counter()
    for i in range(total):
        unit = UNITS[i % 7 % 4]
        now += 0.001
        if i % 499 == 0:  # PID 1 speaks, sometimes with junk fields
            kind = KINDS[rnd.randrange(len(KINDS))]
            if kind is Lifecycle.STARTED:
                runs[unit] += 1
            engine.on_lifecycle(
                LifecycleRecord(
                    unit,
                    kind,
                    now if i % 3 else 0.0,
                    invocation=f"run{runs[unit]}" if i % 5 else rnd.choice(pool)[:40],
                    n_restarts=rnd.choice([None, 0, 1, 99, 2**62]),
                    exit_code=rnd.choice([None, "killed", "exited", "?"]),
                    exit_status=rnd.choice([None, "9", "KILL", "", "\x00\ufffd", "x" * 500]),
                    result=rnd.choice([None, "signal", "exit-code", "start-limit-hit", "\x1b[2J"]),
                    message=rnd.choice(pool)[:500],
                )
            )
            continue
        engine.on_line(
            LogLine(
                unit,
                1000 + i % 13,
                pool[i % len(pool)],
                now,
                f"run{runs[unit]}",
                pool[(i * 7) % len(pool)][:200] if i % 1000 == 1 else "",
            )
        )
        if i % 20_000 == 0:
            engine.tick(now)
            engine.events()
            engine.diagnoses()
        if i % 250_000 == 0:
            engine.restore(engine.snapshot())
    engine.finish()
    engine.diagnoses()
    elapsed = time.perf_counter() - started
    print(f"\n{total:,} hostile messages through the engine in {elapsed:.1f} s ({elapsed / total * 1e6:.1f} us each)")
    assert engine.assembler.pending <= engine.assembler.limits.max_pending
    assert set(engine.units()) == set(UNITS[:3])
    for name in engine.units():
        runs = engine.runs(name)
        assert len(runs) <= 16 and all(len(run.tracebacks) <= 16 for run in runs)
        assert len(engine._units[name].loop.crashes) <= 200  # the working record's bound (not published)


# --- work per line grows linearly with the line ------------------------------------------------------


def _best_of(fn, arg, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        fn(arg)
        best = min(best, time.perf_counter() - started)
    return best


def _wrapped_header(n: int) -> None:
    from crashdoc.assembly.traceback import TracebackAssembler

    TracebackAssembler().feed(LogLine(UNIT, 1, "x" * n + " Traceback (most recent call last):"))


def _frame_path(n: int) -> None:
    from crashdoc.assembly.fingerprint import frame_module
    from crashdoc.events import Frame

    frame_module(Frame("/a" * (n // 2), 1, "f"))


def _server_args(n: int) -> None:
    from crashdoc.assembly.markers import parse_server_args

    parse_server_args("server_args=ServerArgs(" + "a" * n)


@pytest.mark.parametrize("work", [_wrapped_header, _frame_path, _server_args], ids=lambda f: f.__name__[1:])
def test_long_lines_cost_linear_time(work) -> None:
    """A 16K line (the journal source's cut) costs about 16x a 1K line; these three were quadratic (a 16K
    frame path took 9 s, a 16K server_args word 3 s, a 16K word before "Traceback" 4 s, blocking the daemon).
    Relative to the 1K baseline measured here, with room for noise: quadratic would be 256x."""
    baseline = _best_of(work, 1024)
    long = _best_of(work, 16 * 1024)
    assert long < 64 * baseline + 0.005, (baseline, long)


# --- signature safety: RE2, linear time -------------------------------------------------------------

SIGNATURE_YAML = """\
signatures:
- id: {id}
  title: {id}
  category: other
  severity: critical
  match:
    {kind}: '{pattern}'
  fix:
    summary: nothing to change
  runbook: a signature written to hang a backtracking engine
  examples:
    match:
    - text: '{example}'
"""


def write_signature(folder: Path, sig_id: str, kind: str, pattern: str, example: str) -> Path:
    path = folder / f"{sig_id}.yaml"
    text = SIGNATURE_YAML.format(id=sig_id, kind=kind, pattern=pattern, example=example)
    if kind == "message":
        text = text.replace("    message:", "    exception: [ValueError]\n    message:")
    path.write_text(text)
    return path


def _fastest(fn, rounds: int = 7) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def test_catastrophic_patterns_match_a_48k_line_in_linear_time(tmp_path: Path) -> None:
    """(a+)+$ and (x+x+)+y take exponential time in a backtracking engine (Python's re needs a noticeable
    time on 20 characters); loaded through the real loader next to the built-in library, crashdoc's matcher
    runs them over a 48K line (journald's LineMax) in about the time a plain pattern takes."""
    import re

    from crashdoc.events import ExceptionInfo

    folder = tmp_path / "sigs"
    folder.mkdir()
    write_signature(folder, "nested-plus-line", "line", "(a+)+$", "aaaa")
    write_signature(folder, "nested-plus-message", "message", "(x+x+)+y", "xxy")
    write_signature(folder, "plain-line", "line", "a+b$", "aab")  # the baseline: one pass, no nesting
    library = load_library([*builtin_signature_dirs(), folder])
    matcher = Matcher(library)
    hostile_line = "a" * (48 * 1024 - 1) + "!"  # no match: a backtracking engine tries every split
    hostile_message = ExceptionInfo("ValueError", "x" * (48 * 1024))
    # each signature really is in the library, and matches where it should
    assert matcher.match_line("aaaa").signature_id == "nested-plus-line"
    assert [m.signature_id for m in matcher.match_exception(ExceptionInfo("ValueError", "xxy"), Facts())] == [
        "nested-plus-message"
    ]

    baseline = _fastest(lambda: matcher.match_line("a" * (48 * 1024 - 1) + "c"))
    nested_line = _fastest(lambda: matcher.match_line(hostile_line))
    nested_message = _fastest(lambda: matcher.match_exception(hostile_message, Facts()))
    backtracking = _fastest(lambda: re.compile("(a+)+$").search("a" * 19 + "!"), rounds=1)
    print(
        f"\n48K line: plain {baseline * 1e3:.2f} ms, (a+)+$ {nested_line * 1e3:.2f} ms, "
        f"(x+x+)+y {nested_message * 1e3:.2f} ms; Python re, (a+)+$ on 20 characters: {backtracking * 1e3:.0f} ms"
    )
    assert matcher.match_line(hostile_line) is None and matcher.match_exception(hostile_message, Facts()) == []
    assert nested_line < 10 * baseline + 0.002, (baseline, nested_line)
    assert nested_message < 10 * baseline + 0.002, (baseline, nested_message)
    assert backtracking > nested_line, "the pattern is not catastrophic for a backtracking engine: a weak test"


def test_a_48k_line_still_finds_the_real_error_in_a_large_set(tmp_path: Path) -> None:
    """The line set has a memory budget: a long line must not make it give up silently (RE2's Set returns
    no match when its DFA runs out of memory)."""
    folder = tmp_path / "sigs"
    folder.mkdir()
    write_signature(folder, "nested-plus-line", "line", "(a+)+$", "aaaa")
    matcher = Matcher(load_library([*builtin_signature_dirs(), folder]))
    line = "".join(random.Random(3).choice("ab(){}[]:=., 0123456789") for _ in range(48 * 1024 - 80))
    line += " sglang serve: error: unrecognized arguments: --frobnicate"
    assert matcher.match_line(line).signature_id == "argparse-unrecognized-arguments"


@pytest.mark.parametrize(
    ("kind", "pattern", "hint"),
    [
        ("line", "(\\w+\\s*){1000}", "too complex to run on every log line (RE2 program size 10004, at most 1000)"),
        ("line", "(?=worker)worker died", "RE2 has no look-around"),
        ("line", "(?!ok)error", "RE2 has no look-around"),
        ("message", "(?<=rank )\\d+ failed", "RE2 has no look-around"),
        ("message", "(\\w+) and \\1", "RE2 has no back-references"),
    ],
)
def test_patterns_re2_cannot_run_or_that_are_too_big_are_rejected_at_load_and_lint_with_file_and_line(
    tmp_path: Path, kind: str, pattern: str, hint: str
) -> None:
    from crashdoc.matching.library import LibraryError

    folder = tmp_path / "sigs"
    folder.mkdir()
    path = write_signature(folder, "bad-pattern", kind, pattern, "x")
    line = 1 + path.read_text().splitlines().index(next(t for t in path.read_text().splitlines() if f"{kind}:" in t))
    with pytest.raises(LibraryError) as caught:
        load_library([folder])
    [problem] = [p for p in caught.value.problems if "bad RE2 pattern" in p.message]
    assert (problem.file, problem.line) == (str(path), line) and hint in problem.message, problem
    lint = subprocess.run([*CRASHDOC, "signatures", "lint", str(folder)], capture_output=True, text=True, timeout=120)
    assert lint.returncode == 1 and "Traceback" not in lint.stderr
    assert f"{path}:{line}: match.{kind}: bad RE2 pattern: " in lint.stderr and hint in lint.stderr, lint.stderr
