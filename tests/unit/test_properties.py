"""Property-based tests (hypothesis) on the parts that read untrusted text.

- The traceback assembler: tracebacks printed the way Python prints them, interleaved across processes,
  come back exactly; arbitrary lines never raise and everything it keeps stays within its limits.
- The signature loader: arbitrary bytes, arbitrary YAML and random edits of a real signature file give
  problems that name the file and a line, never an exception.
- The command-line rewriter (extends tests/unit/test_fix.py, which covers rewrite semantics on generated
  scripts): arbitrary argv and script bytes, nested scripts and hostile change values never raise, and
  a rewrite never lets a value escape its word.

`make test` draws the same cases on every run (tests/conftest.py: the "repeatable" profile). Every case a
run ever found is an `@example` below, fixed in the code, never in the test.
"""

from __future__ import annotations

import shutil
import string
import subprocess
from pathlib import Path

import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from crashdoc.assembly.traceback import Limits, TracebackAssembler
from crashdoc.events import FlagChange, LogLine, Traceback
from crashdoc.matching.library import LibraryError, Problem, load_file, load_library
from crashdoc.remedy.commandline import find_launch_command, parse_text, scan_shell
from crashdoc.remedy.fix import plan_fix
from crashdoc.remedy.rewrite import apply_changes
from support.argv_model import expected_values

UNIT = "sglang-prefill.service"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FIXTURE_SIGNATURES = Path(__file__).parent.parent / "fixtures" / "signatures"

# --- the traceback assembler -----------------------------------------------------------------------

IDENT = st.text(string.ascii_letters + "_", min_size=1, max_size=12)
PATH = st.lists(st.text(string.ascii_lowercase + "_", min_size=1, max_size=8), min_size=1, max_size=5).map(
    lambda parts: "/opt/venv/lib/python3.11/site-packages/" + "/".join(parts) + ".py"
)
CODE = st.text(string.ascii_letters + string.digits + " ()=.,_", min_size=1, max_size=40).map(str.strip).filter(bool)
FRAME = st.tuples(PATH, st.integers(1, 99_999), IDENT, st.one_of(st.none(), CODE))
EXC_TYPE = st.one_of(
    st.sampled_from(["ValueError", "RuntimeError", "torch.OutOfMemoryError", "AssertionError", "KeyError"]),
    st.builds(lambda a, b: f"{a}.{b.capitalize()}Error", IDENT, IDENT),
)
# a message line is anything printable that Python could print after the exception line, except what
# ends a traceback by definition: a new SGLang record, a header, a chain marker, a blank line
MESSAGE_LINE = st.text(
    st.characters(blacklist_categories=["Cc", "Cs", "Zl", "Zp"], blacklist_characters="\x85"),
    min_size=1,
    max_size=60,
).filter(
    lambda s: (
        s.strip() != ""
        and s == s.strip()
        and not s.startswith(
            (
                "[",
                "Traceback (most recent",
                "Exception in thread",
                "Process ",
                "Fatal Python",
                "During handling",
                "The above exception",
            )
        )
    )
)
EXCEPTION = st.tuples(EXC_TYPE, st.lists(MESSAGE_LINE, min_size=1, max_size=3), st.lists(FRAME, max_size=6))


def printed(chain: list[tuple[str, list[str], list[tuple[str, int, str, str | None]]]], rank: str) -> list[str]:
    """The lines of a (chained) traceback as Python and SGLang print them, one journal entry per line."""
    lines: list[str] = []
    for i, (exc_type, message, frames) in enumerate(chain):
        if i == 0:
            lines.append(f"[2026-05-01 12:00:03 {rank}] Scheduler hit an exception: Traceback (most recent call last):")
        else:
            lines += [
                "",
                "During handling of the above exception, another exception occurred:",
                "",
                "Traceback (most recent call last):",
            ]
        for path, number, func, code in frames:
            lines.append(f'  File "{path}", line {number}, in {func}')
            if code is not None:
                lines.append(f"    {code}")
        lines.append(f"{exc_type}: {message[0]}")
        lines += message[1:]
    return [*lines, ""]


@SETTINGS
@given(st.lists(st.lists(EXCEPTION, min_size=1, max_size=3), min_size=1, max_size=4), st.randoms())
def test_printed_tracebacks_interleaved_across_processes_come_back_exactly(chains, rnd) -> None:
    queues = {100 + i: printed(chain, f"TP{i}") for i, chain in enumerate(chains)}
    order = [pid for pid, lines in queues.items() for _ in lines]
    rnd.shuffle(order)  # journald interleaves the ranks' lines; each rank's own order is kept
    assembler = TracebackAssembler()
    out: list[Traceback] = []
    cursor = dict.fromkeys(queues, 0)
    for pid in order:
        out.extend(assembler.feed(LogLine(UNIT, pid, queues[pid][cursor[pid]], 1.0, "inv")))
        cursor[pid] += 1
    out.extend(assembler.flush())
    assert sorted(tb.pid for tb in out) == sorted(queues)
    for tb in out:
        chain = chains[tb.pid - 100]
        assert tb.wrapper == "Scheduler" and tb.rank == f"TP{tb.pid - 100}"
        assert [e.type for e in tb.chain] == [c[0] for c in chain]
        assert [e.message for e in tb.chain] == ["\n".join(c[1]) for c in chain]
        assert [[(f.file, f.line, f.function, f.code) for f in e.frames] for e in tb.chain] == [
            [(p, n, fn, code or "") for p, n, fn, code in c[2]] for c in chain
        ]
    assert assembler.pending == 0


HOSTILE_PIECES = st.sampled_from(
    [
        "Traceback (most recent call last):",
        "[2026-05-01 12:00:03 TP0] ",
        "Scheduler hit an exception: ",
        '  File "/x/y.py", line 3, in f',
        '  File "',
        "    code()",
        "    ^^^^",
        "ValueError: ",
        "ValueError",
        "During handling of the above exception, another exception occurred:",
        "The above exception was the direct cause of the following exception:",
        "Exception in thread T:",
        "  [Previous line repeated 996 more times]",
        "",
        " ",
        "\t",
        "\x00",
        "\x1b[31m",
        "\x1b]0;t\x07",
        "\x9b",
        "\ufffd",
        "\r",
        "\u2028",
        "[rank0]: ",
        "x" * 300,
        "é",
        ":",
        '"',
    ]
)
HOSTILE_LINE = st.one_of(
    st.lists(HOSTILE_PIECES, max_size=6).map("".join),
    st.text(max_size=80),
)
SMALL = Limits(max_frames=8, max_message_lines=5, max_text_chars=600, max_pending=3, max_chain=4)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 5), HOSTILE_LINE, st.floats(0, 10)), max_size=120), st.integers(0, 5))
def test_arbitrary_lines_never_raise_and_stay_within_the_limits(lines, quiet) -> None:
    assembler = TracebackAssembler(SMALL)
    out: list[Traceback] = []
    for pid, text, t in lines:
        out.extend(assembler.feed(LogLine(UNIT, pid, text, t, "inv")))
        assert assembler.pending <= SMALL.max_pending
    out.extend(assembler.flush_idle(20.0, quiet))
    out.extend(assembler.flush())
    assert assembler.pending == 0
    for tb in out:
        assert tb.chain and len(tb.text) <= SMALL.max_text_chars
        assert len(tb.chain) <= SMALL.max_chain
        longest = max((len(text) for _, text, _ in lines), default=0)
        for exc in tb.chain:
            assert len(exc.frames) <= SMALL.max_frames
            assert len(exc.message.split("\n")) <= SMALL.max_message_lines
            assert len(exc.message) <= longest + SMALL.max_text_chars + SMALL.max_message_lines
            for text in (exc.message, exc.line, tb.text):  # what reaches a terminal or a page
                assert not any(ch in text for ch in "\x00\x1b\x07\x9b\r"), text


# --- the signature loader --------------------------------------------------------------------------

VALID = (FIXTURE_SIGNATURES / "basic.yaml").read_text()


def assert_problems_locate(problems: list[Problem], path: Path, text: str | None) -> None:
    """Every problem names the file and, when it is about the content, a line that exists."""
    lines = text.count("\n") + 1 if text is not None else 1
    for p in problems:
        assert p.file == str(path) and p.message
        assert 0 <= p.line <= lines + 1, (p, lines)
        whole_file = p.message.startswith(("file is larger", "cannot read", "no signatures"))
        assert p.line >= 1 or whole_file, p
        assert str(p).startswith(f"{path}:{p.line}: " if p.line else f"{path}: ")


def load_text(tmp_path: Path, data: bytes) -> tuple[Path, list[Problem]]:
    path = tmp_path / "sig.yaml"
    path.write_bytes(data)
    signatures, problems = load_file(path)
    assert signatures or problems
    return path, problems


@SETTINGS
@given(st.binary(max_size=400))
def test_loader_on_arbitrary_bytes(tmp_path_factory, data: bytes) -> None:
    path, problems = load_text(tmp_path_factory.mktemp("b"), data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    assert problems
    assert_problems_locate(problems, path, text)


YAML_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20))
YAML_TREE = st.recursive(
    YAML_SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "signatures",
                    "id",
                    "match",
                    "fix",
                    "examples",
                    "line",
                    "message",
                    "exception",
                    "title",
                    "category",
                    "severity",
                    "runbook",
                    "x",
                ]
            )
            | st.text(max_size=8),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=25,
)


@SETTINGS
@given(YAML_TREE)
def test_loader_on_arbitrary_yaml(tmp_path_factory, tree) -> None:
    text = yaml.safe_dump(tree, allow_unicode=True)
    path, problems = load_text(tmp_path_factory.mktemp("y"), text.encode())
    assert_problems_locate(problems, path, text)


EDIT = st.tuples(
    st.sampled_from(["delete", "insert", "duplicate", "replace"]),
    st.floats(0, 1),
    st.integers(1, 40),
    st.sampled_from(
        [
            "(a+)+$",
            "(?=x)",
            "\\1",
            "&a",
            "*a",
            "!!python/object:os.system",
            ": ",
            "- ",
            "\t",
            "'",
            '"',
            "{",
            "[",
            "\n",
            "  ",
            "${x}",
            "999999999999999999999999",
            "~",
            "id: dup",
            "\x00",
            "\ufeff",
        ]
    ),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(EDIT, min_size=1, max_size=4))
def test_loader_on_edits_of_a_real_signature_file(tmp_path_factory, edits) -> None:
    text = VALID
    for action, where, size, piece in edits:
        at = int(where * len(text))
        if action == "delete":
            text = text[:at] + text[at + size :]
        elif action == "insert":
            text = text[:at] + piece + text[at:]
        elif action == "duplicate":
            text = text[:at] + text[at : at + size * 10] + text[at:]
        else:
            text = text[:at] + piece + text[at + size :]
    folder = tmp_path_factory.mktemp("e")
    path, problems = load_text(folder, text.encode())
    assert_problems_locate(problems, path, text)
    try:  # the whole library: a Library, or LibraryError with the same located problems
        load_library([folder])
    except LibraryError as exc:
        assert_problems_locate([p for p in exc.problems if p.file == str(path)], path, text)


# --- the command-line rewriter ----------------------------------------------------------------------

FLAGS = ["--hicache-size", "--hicache-ratio", "--tp-size", "--mem-fraction-static", "--model-path", "--cuda-graph-bs"]
WORDS = st.one_of(
    st.sampled_from(
        [
            "python",
            "python3",
            "-m",
            "sglang.launch_server",
            "sglang",
            "serve",
            "/bin/sh",
            "-c",
            "bash",
            "exec",
            "numactl",
            "--membind=0",
            "env",
            "A=1",
            "--",
            "$ARGS",
            "${X:-1}",
            "/s.sh",
            "/t.sh",
            *FLAGS,
            "150",
            "2.0",
            "'",
            '"',
            "\\",
            ";",
            "&&",
            "\n",
        ]
    ),
    st.text(max_size=12),
)
HOSTILE_VALUE = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "'; rm -rf / #",
            "$(reboot)",
            "`id`",
            "a\nb",
            "\\",
            '"',
            "x' y",
            "--tp-size",
            "-",
            "",
            " ",
            "${HOME}",
            "*",
            "\x00",
            "\x1b[2J",
            "é",
        ]
    ),
    st.text(max_size=10),
)
HOSTILE_CHANGES = st.lists(
    st.builds(
        FlagChange,
        action=st.sampled_from(["replace", "remove", "add", "set", "frobnicate"]),
        flag=st.sampled_from(FLAGS),
        value=HOSTILE_VALUE,
        new_flag=st.one_of(st.none(), st.sampled_from(FLAGS)),
    ),
    min_size=1,
    max_size=3,
)
SCRIPT_BYTES = st.one_of(
    st.binary(max_size=200),
    st.lists(WORDS, max_size=30).map(" ".join).map(str.encode),
)


@SETTINGS
@given(
    st.lists(WORDS, max_size=12), st.dictionaries(st.sampled_from(["/s.sh", "/t.sh"]), SCRIPT_BYTES), HOSTILE_CHANGES
)
def test_find_invocation_and_fix_never_raise(argv, files, changes) -> None:
    """Any ExecStart argv, scripts that call each other (or themselves) with any bytes in them."""

    def read(path: str) -> str:
        if path not in files:
            raise FileNotFoundError(path)
        return files[path].decode("utf-8", "replace")

    located = find_launch_command(argv, read)
    assert located.command is not None or located.problems
    for inv in (located.command, *located.others) if located.command else ():
        plan = plan_fix(UNIT, inv, changes, read=read)
        fix = plan.to_fix("summary")
        assert isinstance(fix.summary, str)


@SETTINGS
@given(st.lists(st.sampled_from(FLAGS), min_size=1, max_size=5), HOSTILE_CHANGES)
# found on a fresh clone (issue 22): a value that reads as a flag was written as a word of its own
@example(["--hicache-size"], [FlagChange("set", "--hicache-size", "--tp-size")])
# found the same way: `--hicache-size --tp-size` then made `--tp-size` look present, so the `add` did nothing
@example(
    ["--hicache-size"],
    [FlagChange("replace", "--hicache-size", "--tp-size"), FlagChange("add", "--tp-size", "'; rm -rf / #")],
)
@example(["--tp-size"], [FlagChange("add", "--hicache-size", "-x"), FlagChange("set", "--tp-size", "-1h")])
def test_hostile_values_stay_literal_words_of_the_one_command(flags, changes) -> None:
    """Quotes, $(...), backticks, newlines and `;` in a value stay inside its word, and a value that reads as
    an option (`--tp-size`, `-x`) is written `--flag=value`: re-reading the new script gives exactly the values
    asked for (test_fix's reference model) or the fix says it did not, and no new command appears."""
    assume(all((c.value is None or "\x00" not in c.value) and c.action != "frobnicate" for c in changes))
    text = "#!/bin/sh\nset -e\nexec python -m sglang.launch_server " + " ".join(f"{f} 1" for f in flags) + "\n"
    [inv] = parse_text(text)
    rw = apply_changes(inv, changes)
    [after] = parse_text(rw.file_text)
    assert after.argv == rw.after.argv
    for flag, values in expected_values(changes, inv).items():
        # a value argparse would read as a flag (`--tp-size`) cannot be written: the fix must then say so
        said = any(note.startswith(f"after the edit, {flag} should be") for note in rw.notes)
        assert after.values(flag) == values or said, (flag, rw.file_text, rw.notes)
    before_commands, _ = scan_shell(text)
    after_commands, problems = scan_shell(rw.file_text)
    assert len(after_commands) == len(before_commands) and not problems, rw.file_text
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=rw.file_text, text=True, capture_output=True).returncode == 0
