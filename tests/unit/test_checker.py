"""The SGLang checker's child: one import, a forked check per command, and every way a child can misbehave.

SGLang's entry points are stood in by a tree holding only `srt/server_args.py` (run by this machine's Python), so
these run anywhere; the real SGLang's answers are tested in test_verify.py and test_search.py.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from crashdoc.remedy.checker import Request, SGLangChecker, child_environment
from support.sglang_env import fake_sglang_tree

BEHAVIOUR = """
import argparse, os, socket, sys, time


class ServerArgs:
    def __init__(self, ns):
        self.ns = ns

    def resolve_once(self):
        ns = self.ns
        if ns.hang:
            time.sleep(60)
        if ns.die:
            os.kill(os.getpid(), 9)
        if ns.flood:
            for _ in range(200000):
                print("x" * 100)
                sys.stderr.write("y" * 100 + "\\n")
        if ns.write:
            for where in (os.path.expanduser("~/written"), "cwd-file", os.path.join(os.environ["TMPDIR"], "t")):
                with open(where, "w") as f:
                    f.write("x")
            raise ValueError("wrote " + os.path.expanduser("~"))
        if ns.network:
            s = socket.socket()
            s.bind(("127.0.0.1", ns.network))
            s.listen()
            bound = s.getsockname()[1]
            try:
                socket.create_connection(("127.0.0.1", 9), timeout=2)
                reached = "yes"
            except OSError as e:
                reached = "no (%s)" % e
            raise ValueError("bound=%d reached=%s" % (bound, reached))
        if ns.env_value:
            raise ValueError("SGLANG_X=" + os.environ.get("SGLANG_X", "unset"))
        if ns.niceness:
            raise ValueError("niceness=%d idle=%s" % (os.nice(0), os.sched_getscheduler(0) == os.SCHED_IDLE))
        if ns.tp_size % 2:
            raise ValueError("tp_size must be divisible by 2")


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    parser.add_argument("--model-path")
    parser.add_argument("--tp-size", type=int, default=2)
    for name in ("--hang", "--die", "--flood", "--write", "--env-value", "--niceness"):
        parser.add_argument(name, action="store_true")
    parser.add_argument("--network", type=int, default=0)
    return ServerArgs(parser.parse_args(argv))
"""


def _checker(tmp_path: Path, **kw: float) -> SGLangChecker:
    tree = fake_sglang_tree(tmp_path / "tree", BEHAVIOUR)
    env = child_environment([("PYTHONPATH", str(tree))], base={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")})
    return SGLangChecker(sys.executable, env, **kw)  # type: ignore[arg-type]


def test_many_commands_are_checked_by_one_child_in_order(tmp_path: Path) -> None:
    with _checker(tmp_path) as checker:
        answers = checker.check([Request(("--model-path", "m", "--tp-size", str(n))) for n in (1, 2, 3, 4)])
        again = checker.check([Request(("--model-path", "m", "--tp-size", "5"))])
    assert [a.status for a in answers] == ["rejected", "passed", "rejected", "passed"]
    assert answers[0].error == "ValueError: tp_size must be divisible by 2" and answers[0].version == "0.5.99"
    assert again[0].rejected


def test_checks_run_below_the_daemons_priority(tmp_path: Path) -> None:
    """Background work: on a busy host the daemon's reading and detection come before the checks."""
    with _checker(tmp_path) as checker:
        [answer] = checker.check([Request(("--model-path", "m", "--niceness"))])
    assert answer.error == f"ValueError: niceness={min(19, os.nice(0) + 10)} idle=True"


def test_a_check_that_hangs_is_killed_at_its_timeout_and_the_others_answer(tmp_path: Path) -> None:
    with _checker(tmp_path, timeout=2) as checker:
        started = time.monotonic()
        hung, fine = checker.check([Request(("--model-path", "m", "--hang")), Request(("--model-path", "m"))])
        took = time.monotonic() - started
    assert (hung.status, hung.error) == ("could-not-check", "no answer within 2 s")
    assert fine.status == "passed"
    assert took < 30  # killed, not waited for (it sleeps 60 s)


def test_a_check_that_dies_is_could_not_check(tmp_path: Path) -> None:
    with _checker(tmp_path) as checker:
        died, fine = checker.check([Request(("--model-path", "m", "--die")), Request(("--model-path", "m"))])
    assert died.status == "could-not-check" and "killed by signal 9" in died.error
    assert fine.status == "passed"


def test_what_a_check_prints_goes_nowhere(tmp_path: Path) -> None:
    with _checker(tmp_path) as checker:
        [flooded] = checker.check([Request(("--model-path", "m", "--flood"))])
    assert flooded.status == "passed"  # 40 MB to its stdout and stderr: /dev/null, not crashdoc's memory


def test_nothing_is_written_outside_the_scratch_folder(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with _checker(tmp_path) as checker:
        [wrote] = checker.check([Request(("--model-path", "m", "--write"))])
        scratch = wrote.error.removeprefix("ValueError: wrote ")
        assert Path(scratch, "written").exists() and Path(scratch, "cwd-file").exists()
    assert scratch.startswith("/") and scratch != str(home)
    assert not Path(scratch).exists()  # removed with the checker
    assert list(home.iterdir()) == []


def test_no_port_is_bound_and_no_connection_made(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with _checker(tmp_path) as checker:
        [answer] = checker.check([Request(("--model-path", "m", "--network", str(port)))])
    assert answer.error.startswith("ValueError: bound=0 reached=no")
    with socket.socket() as again:
        again.bind(("127.0.0.1", port))  # still free


def test_environment_changes_reach_one_check_only(tmp_path: Path) -> None:
    with _checker(tmp_path) as checker:
        set_, plain = checker.check(
            [
                Request(("--model-path", "m", "--env-value"), env=(("SGLANG_X", "1"),)),
                Request(("--model-path", "m", "--env-value")),
            ]
        )
    assert set_.error == "ValueError: SGLANG_X=1" and plain.error == "ValueError: SGLANG_X=unset"


def _script(tmp_path: Path, body: str) -> str:
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return str(script)


def test_an_interpreter_that_hangs_is_killed_at_its_timeout(tmp_path: Path) -> None:
    with SGLangChecker(_script(tmp_path, "exec sleep 60\n"), start_timeout=1) as checker:
        started = time.monotonic()
        [answer] = checker.check([Request(("--model-path", "m"))])
    assert (answer.status, answer.error) == ("could-not-check", "SGLang did not import within 1 s")
    assert time.monotonic() - started < 20


def test_an_interpreter_that_crashes_is_could_not_check(tmp_path: Path) -> None:
    with SGLangChecker(_script(tmp_path, "echo 'Fatal Python error: init' >&2\nkill -SEGV $$\n")) as checker:
        [answer] = checker.check([Request(("--model-path", "m"))])
    assert answer.status == "could-not-check"
    assert "killed by signal 11" in answer.error and "Fatal Python error: init" in answer.error


def test_an_interpreter_that_prints_garbage_is_could_not_check(tmp_path: Path) -> None:
    body = "head -c 3000 /dev/urandom\necho\necho 'CRASHDOC-VERIFY {\"ready\": tr'\nsleep 60\n"
    with SGLangChecker(_script(tmp_path, body), start_timeout=20) as checker:
        [answer] = checker.check([Request(("--model-path", "m"))])
    assert (answer.status, answer.error) == ("could-not-check", "it printed an answer that is not JSON")


def test_an_interpreter_that_floods_its_output_is_killed(tmp_path: Path) -> None:
    with SGLangChecker(_script(tmp_path, "exec yes 'no answer here'\n"), start_timeout=60) as checker:
        started = time.monotonic()
        [answer] = checker.check([Request(("--model-path", "m"))])
    assert (answer.status, answer.error) == ("could-not-check", "it printed more than 4 MB (flooding its output)")
    assert time.monotonic() - started < 50
