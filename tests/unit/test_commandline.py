"""Finding the SGLang command behind a unit's ExecStart: what crashdoc reports as the unit's flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crashdoc.remedy.commandline import (
    Where,
    find_launch_command,
    is_flag,
    join_argv,
    scan_shell,
)

LAUNCH = Path(__file__).parent.parent / "fixtures" / "launch"
SERVER = ["-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "4", "--hicache-size", "150"]


def files(mapping: dict[str, str]):
    """A reader over a fake file system: {path on the host: fixture name or literal text}."""

    def read(path: str) -> str:
        if path not in mapping:
            raise FileNotFoundError(2, "No such file or directory", path)
        value = mapping[path]
        fixture = LAUNCH / value
        return fixture.read_text() if fixture.is_file() else value

    return read


@pytest.mark.parametrize(
    ("argv", "wrappers"),
    [
        (["python", *SERVER], []),
        (["python3", *SERVER], []),
        (["/opt/sglang/venv/bin/python", *SERVER], []),
        (["/usr/bin/python3.11", "-u", "-X", "faulthandler", "-W", "ignore", *SERVER], []),
        (["/usr/bin/env", "python3", *SERVER], ["env"]),
        (["/usr/bin/numactl", "--membind=0", "--cpunodebind=0", "python3", *SERVER], ["numactl"]),
        (["/usr/bin/numactl", "-m", "0", "-N", "0", "python3", *SERVER], ["numactl"]),
        (["/usr/bin/env", "CUDA_VISIBLE_DEVICES=0,1,2,3", "NCCL_DEBUG=WARN", "python3", *SERVER], ["env"]),
        (["/usr/bin/taskset", "-c", "0-31", "python3", *SERVER], ["taskset"]),
        (
            ["/usr/bin/nice", "-n", "-5", "/usr/bin/ionice", "-c", "2", "-n", "0", "python3", *SERVER],
            ["nice", "ionice"],
        ),
        (["/usr/bin/stdbuf", "-oL", "-eL", "python3", *SERVER], ["stdbuf"]),
        (["/usr/bin/timeout", "--signal=KILL", "12h", "python3", *SERVER], ["timeout"]),
        (["/usr/bin/srun", "-n", "1", "--gpus", "4", "python3", *SERVER], ["srun"]),
        (["/usr/bin/systemd-run", "--scope", "-p", "MemoryMax=200G", "python3", *SERVER], ["systemd-run"]),
        (
            ["/usr/bin/docker", "run", "--rm", "--gpus", "all", "lmsysorg/sglang:v0.5.23", "python3", *SERVER],
            ["docker"],
        ),
        (
            [
                "/usr/bin/numactl",
                "--membind=0",
                "/usr/bin/env",
                "A=1",
                "/usr/bin/taskset",
                "-c",
                "0-31",
                "python",
                *SERVER,
            ],
            ["numactl", "env", "taskset"],
        ),
    ],
)
def test_direct_exec_start(argv: list[str], wrappers: list[str]) -> None:
    located = find_launch_command(argv, files({}))
    inv = located.command
    assert inv is not None, located.problems
    assert inv.where is Where.ARGV
    assert [w.name for w in inv.wrappers] == wrappers
    assert inv.value("--hicache-size") == "150"
    assert inv.value("--tp-size", "--tp") == "4"
    assert inv.sglang_args == tuple(SERVER[2:])


def test_sglang_serve_and_router_entry_points() -> None:
    inv = find_launch_command(["/opt/venv/bin/sglang", "serve", "deepseek-ai/DeepSeek-V4", "--tp", "8"]).command
    assert inv is not None
    assert inv.value("--tp") == "8"
    assert [inv.words[i].value for i in inv.positionals] == ["deepseek-ai/DeepSeek-V4"]
    router = ["python3", "-m", "sglang_router.launch_server", "--model-path", "m", "--dp", "2"]
    inv = find_launch_command(router).command
    assert inv is not None and inv.value("--dp") == "2"
    inv = find_launch_command(["python3", "-msglang.launch_server", "--port", "1"]).command
    assert inv is not None and inv.value("--port") == "1"


def test_environment_and_docker_are_reported() -> None:
    argv = ["/usr/bin/env", "HF_HOME=/models", "NCCL_IB_HCA=mlx5_0", "python3", *SERVER]
    assert find_launch_command(argv).command.environment == (("HF_HOME", "/models"), ("NCCL_IB_HCA", "mlx5_0"))
    docker = ["/usr/bin/docker", "run", "--gpus", "all", "-e", "A=B", "img:1", "python3", *SERVER]
    assert find_launch_command(docker).command.container == "docker"


@pytest.mark.parametrize(
    "argv",
    [
        ["/bin/bash", "-c", "exec python3 -m sglang.launch_server --model-path m --hicache-size 150"],
        ["/bin/sh", "-c", "source /opt/venv/bin/activate; python -m sglang.launch_server --hicache-size 150"],
        ["/bin/bash", "-lc", "cd /srv && exec numactl -m 0 python -m sglang.launch_server --hicache-size 150"],
        [
            "/usr/bin/numactl",
            "--membind=0",
            "/bin/bash",
            "-o",
            "pipefail",
            "-c",
            "python -m sglang.launch_server --hicache-size 150 2>&1 | tee /var/log/sglang.log",
        ],
    ],
)
def test_shell_command_strings(argv: list[str]) -> None:
    inv = find_launch_command(argv).command
    assert inv is not None
    assert inv.where is Where.ARGV_SHELL
    assert inv.argv_index == len(argv) - 1
    assert inv.value("--hicache-size") == "150"


@pytest.mark.parametrize(
    "exec_start",
    [
        ["/bin/bash", "/opt/sglang/prefill.sh"],
        ["/bin/sh", "-e", "/opt/sglang/prefill.sh"],
        ["/bin/bash", "--norc", "-x", "/opt/sglang/prefill.sh"],
        ["/opt/sglang/prefill.sh"],
        ["/usr/bin/numactl", "--membind=0", "/opt/sglang/prefill.sh"],
        ["/bin/bash", "/opt/sglang/wrapper.sh"],
    ],
)
def test_launch_script_behind_exec_start(exec_start: list[str]) -> None:
    read = files({"/opt/sglang/prefill.sh": "prefill.sh", "/opt/sglang/wrapper.sh": "wrapper.sh"})
    located = find_launch_command(exec_start, read)
    inv = located.command
    assert inv is not None, located.problems
    assert inv.where is Where.SCRIPT
    assert inv.path == "/opt/sglang/prefill.sh"
    assert inv.lines == (7, 10)
    assert inv.snippet.splitlines()[0].startswith("exec numactl --membind=0 --cpunodebind=0 python -m")
    assert inv.snippet.splitlines()[-1] == "    --enable-hierarchical-cache --hicache-size 150 --api-key s3cr3t"
    assert [(w.name, w.args) for w in inv.wrappers] == [("exec", ()), ("numactl", ("--membind=0", "--cpunodebind=0"))]
    assert inv.value("--hicache-size") == "150"
    assert inv.value("--disaggregation-ib-device") == "mlx5_0"
    assert inv.has("--enable-hierarchical-cache") and inv.value("--enable-hierarchical-cache") == ""


def test_relative_script_resolves_against_working_directory() -> None:
    read = files({"/srv/sglang/prefill.sh": "prefill.sh"})
    located = find_launch_command(["/bin/bash", "prefill.sh"], read, working_directory="/srv/sglang")
    assert located.command is not None and located.command.path == "/srv/sglang/prefill.sh"


def test_one_flag_per_line_with_env_prefix_and_lists() -> None:
    inv = find_launch_command(["/bin/bash", "/s.sh"], files({"/s.sh": "one-flag-per-line.sh"})).command
    assert inv is not None
    assert inv.lines == (5, 15)
    assert inv.environment == (("CUDA_VISIBLE_DEVICES", "4,5,6,7"), ("SGLANG_LOG_LEVEL", "info"))
    assert inv.values("--cuda-graph-bs") == ("1", "2", "4", "8", "16")
    assert inv.value("--tp-size", "--tp") == "4"
    assert inv.value("--trust-remote-code") == ""
    # the echo after the command is another command, not an argument
    assert inv.sglang_args[-2:] == ("--admin-api-key", "adm1n-s3cr3t")


def test_variables_quoting_repeats_and_expansions() -> None:
    inv = find_launch_command(["/bin/bash", "/s.sh"], files({"/s.sh": "variables.sh"})).command
    assert inv is not None
    assert inv.lines == (7, 11)  # not the commented-out line 6
    assert inv.value("--model-path") == "$MODEL"
    assert inv.value("--tp") == "${TP:-8}"
    assert inv.value("--mem-fraction-static") == "0.83"  # the last occurrence wins, = form or not
    assert [f.inline for f in inv.occurrences("--mem-fraction-static")] == [True, False]
    assert inv.value("--hicache-size") == "64"
    assert inv.value("--chat-template") == "/etc/sglang/chat template.jinja"
    assert inv.value("--served-model-name") == "qwen 235b"
    assert inv.value("--schedule-conservativeness") == "-0.5"  # a negative number is a value
    assert inv.value("--json-model-override-args") == '{"rope_scaling": {"factor": 4.0}}'
    assert inv.expansions == ("$EXTRA_ARGS", "$@")  # may hold flags crashdoc cannot see
    assert "tee" not in inv.argv  # the pipe ends the command


def test_branches_heredocs_and_comments() -> None:
    located = find_launch_command(["/bin/bash", "/s.sh"], files({"/s.sh": "branches.sh"}))
    assert located.command is not None
    assert located.command.lines == (10, 10)
    assert located.command.value("--hicache-size") == "32"
    assert [o.lines for o in located.others] == [(8, 8)]
    assert "--in-a-heredoc" not in str([inv.argv for inv in (located.command, *located.others)])


def test_sh_script_with_tabs_and_no_final_newline() -> None:
    inv = find_launch_command(["/s.sh"], files({"/s.sh": "serve-no-newline.sh"})).command
    assert inv is not None
    assert inv.lines == (3, 5)
    assert inv.value("--hicache-size") == "200"


def test_sh_c_inside_a_script() -> None:
    inv = find_launch_command(["/bin/bash", "/s.sh"], files({"/s.sh": "nested.sh"})).command
    assert inv is not None
    assert inv.where is Where.SCRIPT_SHELL
    assert inv.value("--hicache-size") == "150"
    s, e = inv.outer
    assert inv.file_text[s:e].startswith('"source /opt/venv/bin/activate')


def test_docker_inside_a_script() -> None:
    inv = find_launch_command(["/bin/bash", "/s.sh"], files({"/s.sh": "docker.sh"})).command
    assert inv is not None and inv.container == "docker"
    assert inv.value("--tp") == "8"


def test_problems_are_reported_not_raised() -> None:
    located = find_launch_command(["/bin/bash", "/opt/missing.sh"], files({}))
    assert located.command is None
    assert located.problems[0] == "cannot read /opt/missing.sh: No such file or directory"
    assert "no SGLang launch" in located.problems[-1]

    located = find_launch_command(["/usr/bin/vllm", "serve", "m"], files({}))
    assert located.command is None
    assert located.problems == (
        "cannot read /usr/bin/vllm: No such file or directory",  # it might have been a launch script
        "no SGLang launch (python -m sglang.launch_server, sglang serve) found in /usr/bin/vllm serve m",
    )

    located = find_launch_command([], files({}))
    assert located.problems == ("the unit has no ExecStart command",)

    broken = "exec python -m sglang.launch_server --model-path 'unterminated --tp 2\n"
    located = find_launch_command(["/bin/sh", "/b.sh"], files({"/b.sh": broken}))
    assert located.command is not None
    assert any("unterminated single quote" in p for p in located.problems)


def test_binary_and_real_files_with_the_default_reader(tmp_path: Path) -> None:
    script = tmp_path / "prefill.sh"
    script.write_bytes((LAUNCH / "prefill.sh").read_bytes())
    assert find_launch_command(["/bin/bash", str(script)]).command.value("--hicache-size") == "150"
    binary = tmp_path / "server"
    binary.write_bytes(b"\x7fELF\x00\x00python -m sglang.launch_server")
    located = find_launch_command([str(binary)])
    assert located.command is None
    unreadable = tmp_path / "locked.sh"
    unreadable.write_text("python -m sglang.launch_server\n")
    unreadable.chmod(0)
    located = find_launch_command(
        [str(unreadable)], lambda p: (_ for _ in ()).throw(PermissionError(13, "Permission denied"))
    )
    assert located.problems[0] == f"cannot read {unreadable}: Permission denied"


def test_flag_words() -> None:
    assert is_flag("--tp") and is_flag("-h")
    assert not is_flag("-1") and not is_flag("-0.5") and not is_flag("--") and not is_flag("1")


def test_join_argv_shell_quotes_for_display() -> None:
    assert join_argv(
        ["python", "--chat-template", "a b", "--x", "it's", "--m", "$MODEL", "--api-key", "<redacted>"]
    ) == ("python --chat-template 'a b' --x 'it'\"'\"'s' --m \"$MODEL\" --api-key <redacted>")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(max_size=12)
        | st.sampled_from(
            [
                "python",
                "-m",
                "sglang.launch_server",
                "--tp",
                "bash",
                "-c",
                "numactl",
                "env",
                "A=B",
                "--",
                "-1",
                "docker",
            ]
        ),
        max_size=20,
    )
)
def test_never_raises_on_any_argv(argv: list[str]) -> None:
    located = find_launch_command(argv, files({}))
    assert located.command is not None or located.problems


_SHELLISH = st.lists(
    st.sampled_from(
        [
            "python",
            " -m ",
            "sglang.launch_server",
            " --tp ",
            "4",
            "'",
            '"',
            "\\",
            "\n",
            "\\\n",
            "$",
            "${X:-1}",
            "$(",
            ")",
            "`",
            "#",
            ";",
            "&&",
            "|",
            "<<EOF\n",
            "EOF\n",
            "<<-",
            "2>&1",
            " ",
            "\t",
            "{",
            "}",
            "=",
            "exec ",
            "bash -c ",
            "--a=b",
            "$'x'",
            "((",
            "<(",
        ]
    ),
    max_size=40,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(_SHELLISH)
def test_never_raises_on_any_script(text: str) -> None:
    commands, _ = scan_shell(text)
    for command in commands:
        for w in command.words:
            assert 0 <= w.start <= w.end <= len(text)
    find_launch_command(["/bin/sh", "/x.sh"], files({"/x.sh": text}))
