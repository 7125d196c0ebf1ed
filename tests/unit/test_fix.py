"""The fix a human sees: the corrected command, a minimal diff, and apply/rollback commands that work."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from crashdoc.events import Fix, FlagChange
from crashdoc.remedy.commandline import find_launch_command, parse_argv, parse_text
from crashdoc.remedy.fix import (
    exec_start_line,
    plan_fix,
    sed_expressions,
    synthesize_fix,
    systemd_quote,
)
from crashdoc.remedy.rewrite import apply_changes, change_values
from support.argv_model import expected_values

LAUNCH = Path(__file__).parent.parent / "fixtures" / "launch"
UNIT = "sglang-prefill.service"
HICACHE = FlagChange("replace", "--hicache-size", "2.0", "--hicache-ratio")
SED = shutil.which("sed")
needs_sed = pytest.mark.skipif(SED is None, reason="GNU sed is needed to run the apply commands")


def script(tmp_path: Path, fixture: str, name: str = "prefill.sh") -> Path:
    path = tmp_path / name
    path.write_bytes((LAUNCH / fixture).read_bytes())
    return path


def run_file_steps(fix: Fix | list[str]) -> None:
    """Run the apply (or rollback) commands that touch files; skip the systemctl ones."""
    commands = fix.apply if isinstance(fix, Fix) else fix
    for command in commands:
        if not command.startswith("systemctl"):
            subprocess.run(["bash", "-c", command], check=True, capture_output=True, text=True)


def no_file(path: str) -> str:
    raise FileNotFoundError(2, "No such file or directory", path)


# --- the story ---------------------------------------------------------------------------------------


@needs_sed
def test_hicache_fix_in_a_launch_script_end_to_end(tmp_path: Path) -> None:
    path = script(tmp_path, "prefill.sh")
    original = path.read_text()
    fix = synthesize_fix(UNIT, ("/bin/bash", str(path)), [HICACHE], "replace --hicache-size with --hicache-ratio 2.0")
    p = str(path)

    assert fix.command == (
        "exec numactl --membind=0 --cpunodebind=0 python -m sglang.launch_server --model-path "
        "deepseek-ai/DeepSeek-V4 --tp-size 4 --disaggregation-mode prefill --disaggregation-ib-device mlx5_0 "
        "--host 0.0.0.0 --port 30000 --mem-fraction-static 0.82 --enable-hierarchical-cache "
        "--hicache-ratio 2.0 --api-key <redacted>"
    )
    assert fix.diff == (
        f"--- {p}\n"
        f"+++ {p}\n"
        "@@ -7,4 +7,4 @@\n"
        " exec numactl --membind=0 --cpunodebind=0 python -m sglang.launch_server --model-path "
        "deepseek-ai/DeepSeek-V4 --tp-size 4 \\\n"
        "     --disaggregation-mode prefill --disaggregation-ib-device mlx5_0 \\\n"
        "     --host 0.0.0.0 --port 30000 --mem-fraction-static 0.82 \\\n"
        "-    --enable-hierarchical-cache --hicache-size 150 --api-key <redacted>\n"
        "+    --enable-hierarchical-cache --hicache-ratio 2.0 --api-key <redacted>\n"
    )
    assert fix.apply == [
        f"cp -a {p} {p}.crashdoc-bak",
        f"sed -i -e '10s/--hicache-size 150/--hicache-ratio 2.0/' {p}",
        f"bash -n {p}",
        f"systemctl reset-failed {UNIT}",
        f"systemctl restart {UNIT}",
    ]
    assert fix.rollback == [
        f"cp -a {p}.crashdoc-bak {p}",
        f"systemctl reset-failed {UNIT}",
        f"systemctl restart {UNIT}",
    ]
    assert fix.warnings == []
    assert "s3cr3t" not in repr(fix)

    # the (redacted) apply commands really make that change, and the rollback really undoes it
    run_file_steps(fix)
    edited = path.read_text()
    assert edited == original.replace("--hicache-size 150", "--hicache-ratio 2.0")
    assert "--api-key s3cr3t" in edited
    run_file_steps(fix.rollback)
    assert path.read_text() == original


def test_fix_for_a_direct_exec_start_is_a_drop_in() -> None:
    argv = [
        "/usr/bin/numactl",
        "--membind=0",
        "/opt/venv/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "deepseek-ai/DeepSeek-V4",
        "--tp-size",
        "4",
        "--enable-hierarchical-cache",
        "--hicache-size",
        "150",
        "--api-key",
        "s3cr3t",
    ]
    fix = synthesize_fix(UNIT, argv, [HICACHE], "use --hicache-ratio", read=no_file)
    conf = f"/etc/systemd/system/{UNIT}.d/crashdoc-fix.conf"
    assert fix.command == (
        "/usr/bin/numactl --membind=0 /opt/venv/bin/python -m sglang.launch_server --model-path "
        "deepseek-ai/DeepSeek-V4 --tp-size 4 --enable-hierarchical-cache --hicache-ratio 2.0 --api-key <redacted>"
    )
    content = (
        f"# Written by crashdoc for {UNIT}: --hicache-size -> --hicache-ratio 2.0\n"
        f"# To undo: remove this file, then systemctl daemon-reload && systemctl restart {UNIT}\n"
        "[Service]\n"
        "ExecStart=\n"
        "ExecStart=/usr/bin/numactl --membind=0 /opt/venv/bin/python -m sglang.launch_server \\\n"
        "    --model-path deepseek-ai/DeepSeek-V4 \\\n"
        "    --tp-size 4 \\\n"
        "    --enable-hierarchical-cache \\\n"
        "    --hicache-ratio 2.0 \\\n"
        "    --api-key <redacted>\n"
    )
    assert fix.diff == f"--- /dev/null\n+++ {conf}\n@@ -0,0 +1,10 @@\n" + "".join(
        "+" + line + "\n" for line in content.splitlines()
    )
    assert fix.apply == [
        f"mkdir -p /etc/systemd/system/{UNIT}.d",
        f"cat > {conf} <<'CRASHDOC_EOF'\n{content}CRASHDOC_EOF",
        "systemctl daemon-reload",
        f"systemctl reset-failed {UNIT}",
        f"systemctl restart {UNIT}",
    ]
    assert fix.rollback == [
        f"rm {conf}",
        "systemctl daemon-reload",
        f"systemctl reset-failed {UNIT}",
        f"systemctl restart {UNIT}",
    ]
    assert fix.warnings == [
        f"Some apply commands repeat secrets of the unit, shown as <redacted>: fill them in from "
        f"`systemctl cat {UNIT}` before running them."
    ]
    assert "s3cr3t" not in repr(fix)


def test_existing_drop_in_is_backed_up_and_later_drop_ins_are_flagged() -> None:
    conf = f"/etc/systemd/system/{UNIT}.d/crashdoc-fix.conf"
    old = "[Service]\nExecStart=\nExecStart=/usr/bin/python3 -m sglang.launch_server --hicache-size 150\n"
    argv = ["/usr/bin/python3", "-m", "sglang.launch_server", "--hicache-size", "150"]
    inv = parse_argv(argv)
    plan = plan_fix(
        UNIT,
        inv,
        [HICACHE],
        read=lambda p: old if p == conf else no_file(p),
        drop_in_paths=[conf, f"/etc/systemd/system/{UNIT}.d/override.conf"],
    )
    assert plan.diff.startswith(f"--- {conf}\n+++ {conf}\n")
    assert "-ExecStart=/usr/bin/python3 -m sglang.launch_server --hicache-size 150\n" in plan.diff
    assert "+ExecStart=/usr/bin/python3 -m sglang.launch_server --hicache-ratio 2.0\n" in plan.diff
    assert plan.apply[1] == f"cp -a {conf} {conf}.crashdoc-bak"
    assert plan.rollback[0] == f"cp -a {conf}.crashdoc-bak {conf}"
    assert (
        f"/etc/systemd/system/{UNIT}.d/override.conf is read after crashdoc-fix.conf: an ExecStart= there "
        "overrides this fix." in plan.notes
    )


def test_bash_c_in_exec_start_keeps_the_wrapper() -> None:
    argv = [
        "/bin/bash",
        "-c",
        "source /opt/venv/bin/activate && exec python -m sglang.launch_server "
        "--model-path m --hicache-size 150 --api-key s3cr3t",
    ]
    fix = synthesize_fix(UNIT, argv, [HICACHE], "x", read=no_file)
    assert fix.command == (
        "/bin/bash -c 'source /opt/venv/bin/activate && exec python -m sglang.launch_server --model-path m "
        "--hicache-ratio 2.0 --api-key <redacted>'"
    )
    assert (
        'ExecStart=/bin/bash -c "source /opt/venv/bin/activate && exec python -m sglang.launch_server '
        '--model-path m --hicache-ratio 2.0 --api-key <redacted>"\n'
    ) in fix.diff


@needs_sed
def test_sh_c_string_inside_a_script_is_edited_in_place(tmp_path: Path) -> None:
    path = script(tmp_path, "nested.sh")
    fix = synthesize_fix(UNIT, ("/bin/bash", str(path)), [HICACHE], "x")
    assert fix.diff.endswith(
        '-exec /bin/bash -c "source /opt/venv/bin/activate && exec python -m sglang.launch_server --model-path m '
        '--tp 2 --hicache-size 150"\n'
        '+exec /bin/bash -c "source /opt/venv/bin/activate && exec python -m sglang.launch_server --model-path m '
        '--tp 2 --hicache-ratio 2.0"\n'
    )
    run_file_steps(fix)
    assert find_launch_command(("/bin/bash", str(path))).command.value("--hicache-ratio") == "2.0"


def test_docker_and_hidden_expansions_are_warned_about(tmp_path: Path) -> None:
    fix = synthesize_fix(UNIT, ("/bin/bash", str(script(tmp_path, "docker.sh"))), [HICACHE], "x")
    assert "SGLang runs inside a container (docker); the fix changes the arguments the unit passes to it." in (
        fix.warnings
    )
    assert "hf_AbCd" not in repr(fix)
    fix = synthesize_fix(
        UNIT, ("/bin/bash", str(script(tmp_path, "variables.sh"))), [FlagChange("remove", "--max-total-tokens")], "x"
    )
    assert fix.warnings == [
        "--max-total-tokens is not in the command: nothing to remove.",
        "The command also passes $EXTRA_ARGS, $@, which crashdoc cannot see into: check that it does not set "
        "--max-total-tokens.",
        "The command already satisfies these changes: nothing to edit.",
    ]
    assert fix.diff == "" and fix.apply == []


def test_other_launches_in_the_script_are_named(tmp_path: Path) -> None:
    fix = synthesize_fix(UNIT, ("/bin/bash", str(script(tmp_path, "branches.sh"))), [HICACHE], "x")
    assert f"{tmp_path}/prefill.sh also starts SGLang at lines 8-8; crashdoc changed lines 10-10 only." in fix.warnings


def test_unknown_command_still_gives_a_fix() -> None:
    fix = synthesize_fix(UNIT, ("/bin/bash", "/opt/gone.sh"), [HICACHE], "replace --hicache-size", read=no_file)
    assert fix.command is None and fix.diff is None
    assert fix.changes == [HICACHE]
    assert fix.warnings[0] == "cannot read /opt/gone.sh: No such file or directory"


# --- the four actions, on the line a human reads ----------------------------------------------------


def edit(text: str, *changes: FlagChange) -> str:
    inv = parse_text(text)[-1]
    return apply_changes(inv, changes).file_text


ONE_PER_LINE = (
    "exec python -m sglang.launch_server \\\n    --model-path m \\\n    --hicache-size 150 \\\n    --api-key k\n"
)


@pytest.mark.parametrize(
    ("text", "change", "expected"),
    [
        # replace: in place, where the first occurrence was; later ones and an existing new flag go
        (
            "python -m sglang.launch_server --hicache-size 150 --tp 4\n",
            HICACHE,
            "python -m sglang.launch_server --hicache-ratio 2.0 --tp 4\n",
        ),
        (
            "python -m sglang.launch_server --hicache-size=150 --tp 4\n",
            HICACHE,
            "python -m sglang.launch_server --hicache-ratio=2.0 --tp 4\n",
        ),
        (
            "python -m sglang.launch_server --hicache-size 1 --tp 4 --hicache-size 2 --hicache-ratio 3\n",
            HICACHE,
            "python -m sglang.launch_server --hicache-ratio 2.0 --tp 4\n",
        ),
        (
            "python -m sglang.launch_server --tp 4\n",
            HICACHE,
            "python -m sglang.launch_server --tp 4 --hicache-ratio 2.0\n",
        ),
        (
            "python -m sglang.launch_server --disable-cuda-graph --tp 4\n",
            FlagChange("replace", "--disable-cuda-graph", None, "--cuda-graph-max-bs"),
            "python -m sglang.launch_server --cuda-graph-max-bs --tp 4\n",
        ),
        (ONE_PER_LINE, HICACHE, ONE_PER_LINE.replace("--hicache-size 150", "--hicache-ratio 2.0")),
        # remove: every occurrence, with the line or continuation it leaves
        (ONE_PER_LINE, FlagChange("remove", "--hicache-size"), ONE_PER_LINE.replace("    --hicache-size 150 \\\n", "")),
        (
            ONE_PER_LINE,
            FlagChange("remove", "--api-key"),
            "exec python -m sglang.launch_server \\\n    --model-path m \\\n    --hicache-size 150\n",
        ),
        (
            "python -m sglang.launch_server --a 1 --cuda-graph-bs 1 2 4 --b --cuda-graph-bs=8\n",
            FlagChange("remove", "--cuda-graph-bs"),
            "python -m sglang.launch_server --a 1 --b\n",
        ),
        (
            "python -m sglang.launch_server --tp 4 \\\n  --hicache-size \\\n    150 --x 1\n",
            FlagChange("remove", "--hicache-size"),
            "python -m sglang.launch_server --tp 4 \\\n  --x 1\n",
        ),
        (
            "python -m sglang.launch_server --tp 4 --hicache-size 150 > /var/log/s.log 2>&1\n",
            FlagChange("remove", "--hicache-size"),
            "python -m sglang.launch_server --tp 4 > /var/log/s.log 2>&1\n",
        ),
        # add: appended, in the command's own layout; an existing flag is left alone
        (ONE_PER_LINE, FlagChange("add", "--enable-metrics"), ONE_PER_LINE[:-1] + " \\\n    --enable-metrics\n"),
        (
            "python -m sglang.launch_server --tp 4 | tee log\n",
            FlagChange("add", "--enable-metrics"),
            "python -m sglang.launch_server --tp 4 --enable-metrics | tee log\n",
        ),
        (
            "python -m sglang.launch_server --enable-metrics\n",
            FlagChange("add", "--enable-metrics"),
            "python -m sglang.launch_server --enable-metrics\n",
        ),
        # set: the last occurrence (argparse's) gets the value, earlier ones go; absent: added
        (
            "python -m sglang.launch_server --mem-fraction-static 0.9 --tp 4 --mem-fraction-static=0.88\n",
            FlagChange("set", "--mem-fraction-static", "0.8"),
            "python -m sglang.launch_server --tp 4 --mem-fraction-static=0.8\n",
        ),
        (
            "python -m sglang.launch_server --cuda-graph-bs 1 2 4 8 --tp 4\n",
            FlagChange("set", "--cuda-graph-bs", "1 2"),
            "python -m sglang.launch_server --cuda-graph-bs 1 2 --tp 4\n",
        ),
        (
            "python -m sglang.launch_server --cuda-graph-bs 1 --tp 4\n",
            FlagChange("set", "--cuda-graph-bs", "1 2 4"),
            "python -m sglang.launch_server --cuda-graph-bs 1 2 4 --tp 4\n",
        ),
        (
            'python -m sglang.launch_server --chat-template "a.jinja"\n',
            FlagChange("set", "--chat-template", "/etc/my template.jinja"),
            'python -m sglang.launch_server --chat-template "/etc/my template.jinja"\n',
        ),
        (
            "python -m sglang.launch_server --json-model-override-args '{}'\n",
            FlagChange("set", "--json-model-override-args", '{"a": "it\'s"}'),
            'python -m sglang.launch_server --json-model-override-args \'{"a": "it\'"\'"\'s"}\'\n',
        ),
        (
            "python -m sglang.launch_server --tp 4\n",
            FlagChange("set", "--schedule-conservativeness", "-0.5"),
            "python -m sglang.launch_server --tp 4 --schedule-conservativeness -0.5\n",
        ),
    ],
)
def test_actions(text: str, change: FlagChange, expected: str) -> None:
    assert edit(text, change) == expected


def test_changes_apply_in_order() -> None:
    text = "python -m sglang.launch_server --hicache-size 150 --mem-fraction-static 0.9\n"
    assert edit(
        text,
        HICACHE,
        FlagChange("set", "--mem-fraction-static", "0.85"),
        FlagChange("add", "--enable-hierarchical-cache"),
    ) == ("python -m sglang.launch_server --hicache-ratio 2.0 --mem-fraction-static 0.85 --enable-hierarchical-cache\n")


def test_argv_actions_keep_words_intact() -> None:
    inv = parse_argv(["python3", "-m", "sglang.launch_server", "--chat-template", "a b", "--hicache-size", "150"])
    rw = apply_changes(inv, [HICACHE, FlagChange("set", "--chat-template", "c d")])
    assert rw.exec_start == (
        "python3",
        "-m",
        "sglang.launch_server",
        "--chat-template",
        "c d",
        "--hicache-ratio",
        "2.0",
    )


def test_unknown_action_is_a_note_not_an_error() -> None:
    inv = parse_argv(["python3", "-m", "sglang.launch_server", "--tp", "4"])
    rw = apply_changes(inv, [FlagChange("toggle", "--tp")])
    assert not rw.changed
    assert rw.notes == ("unknown change action 'toggle' for --tp: expected one of replace, remove, add, set.",)


def test_change_values() -> None:
    assert change_values(None) == ()
    assert change_values("2.0") == ("2.0",)
    assert change_values("1 2 4 8") == ("1", "2", "4", "8")
    assert change_values("/models/my model") == ("/models/my model",)
    assert change_values('{"a": 1}') == ('{"a": 1}',)


# --- systemd's quoting --------------------------------------------------------------------------------


def test_systemd_quote() -> None:
    assert systemd_quote("--tp") == "--tp"
    assert systemd_quote("${MODEL}") == "${MODEL}"
    assert systemd_quote("50%") == "50%%"
    assert systemd_quote("a b") == '"a b"'
    assert systemd_quote('say "hi"\\') == '"say \\"hi\\"\\\\"'
    assert systemd_quote("line\nbreak\ttab") == '"line\\nbreak\\ttab"'
    assert systemd_quote(";") == '";"'
    assert systemd_quote("") == '""'
    assert exec_start_line(["/usr/bin/python3", "-m", "x", "--a", "1"]) == "ExecStart=/usr/bin/python3 -m x --a 1"


WEIRD_ARGS = [
    "plain",
    "two words",
    "50%",
    'quote"d',
    "it's",
    "back\\slash",
    "",
    "tab\there",
    ";",
    "{}",
    "--x=a b",
    "ünïcödé",
]


@pytest.mark.sandbox
def test_drop_in_gives_systemd_the_same_argv(sandbox_factory, sandbox_workdir: Path) -> None:
    """systemd itself parses the drop-in crashdoc writes and runs exactly the intended argv."""
    out = sandbox_workdir / "argv.json"
    printer = f"import json, sys; open({str(out)!r}, 'w').write(json.dumps(sys.argv[1:]))"
    python = shutil.which("python3") or "/usr/bin/python3"
    base = "[Service]\nType=oneshot\nExecStart=/bin/true\n"
    sb = sandbox_factory({"argv.service": base}, workdir=sandbox_workdir, start_units=[])
    argv = [python, "-c", printer, "--api-key", "k", *WEIRD_ARGS, "--tail"]
    conf_dir = sb.unit_dir / "argv.service.d"
    conf_dir.mkdir()
    (conf_dir / "crashdoc-fix.conf").write_text("[Service]\nExecStart=\n" + exec_start_line(argv, width=40) + "\n")
    sb.systemctl("daemon-reload", check=True, timeout=60)
    result = sb.systemctl("start", "argv.service", timeout=60)
    assert result.returncode == 0, result.stderr
    import json

    assert json.loads(out.read_text()) == ["--api-key", "k", *WEIRD_ARGS, "--tail"]


# --- environment variables ---------------------------------------------------------------------------


@needs_sed
@pytest.mark.parametrize(
    ("change", "before", "after"),
    [
        (  # an export the script already has is edited where it is
            FlagChange("set", "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "1800"),
            "export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600\n",
            "export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=1800\n",
        ),
        (
            FlagChange("remove", "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"),
            "export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600\n",
            "",
        ),
        (  # a new one goes on its own line just before the command, quoted for the shell
            FlagChange("set", "SGLANG_WARMUP_TIMEOUT", "18 00"),
            "\nexec numactl",
            "\nexport SGLANG_WARMUP_TIMEOUT='18 00'\nexec numactl",
        ),
        (  # one the unit may set elsewhere (Environment=, EnvironmentFile=) is unset before the command
            FlagChange("remove", "SGLANG_USE_HND_KVCACHE"),
            "\nexec numactl",
            "\nunset SGLANG_USE_HND_KVCACHE\nexec numactl",
        ),
    ],
)
def test_environment_changes_edit_the_launch_script(
    tmp_path: Path, change: FlagChange, before: str, after: str
) -> None:
    """An `SGLANG_*` change is a variable for SGLang's process, never a `--flag` on its command line."""
    path = script(tmp_path, "prefill.sh")
    original = path.read_text()
    fix = synthesize_fix(UNIT, ("/bin/bash", str(path)), [change, HICACHE], "x")
    expected = original.replace(before, after, 1).replace("--hicache-size 150", "--hicache-ratio 2.0")
    assert f"--{change.flag}" not in fix.command and fix.warnings == []
    run_file_steps(fix)
    assert path.read_text() == expected
    subprocess.run(["bash", "-n", str(path)], check=True)
    run_file_steps(fix.rollback)
    assert path.read_text() == original


@needs_sed
def test_several_environment_changes_and_a_prefix_on_another_command(tmp_path: Path) -> None:
    """Several changes land together; `NAME=x other-command` sets NAME for that command only, so it is not
    the assignment to edit."""
    path = tmp_path / "prefill.sh"
    original = (
        "#!/bin/bash\n"
        "set -e\n"
        "SGLANG_WARMUP_TIMEOUT=5 python warm_cache.py\n"
        "export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600  # PD bootstrap\n"
        "  exec python -m sglang.launch_server --tp 2\n"
    )
    path.write_text(original)
    changes = [
        FlagChange("set", "SGLANG_WARMUP_TIMEOUT", "1800"),
        FlagChange("remove", "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"),
        FlagChange("set", "SGLANG_DISABLE_MSA", "1"),
    ]
    fix = synthesize_fix(UNIT, ("/bin/bash", str(path)), changes, "x")
    run_file_steps(fix)
    assert path.read_text() == (
        "#!/bin/bash\n"
        "set -e\n"
        "SGLANG_WARMUP_TIMEOUT=5 python warm_cache.py\n"
        "  export SGLANG_WARMUP_TIMEOUT=1800\n"
        "  export SGLANG_DISABLE_MSA=1\n"
        "  exec python -m sglang.launch_server --tp 2\n"
    )
    run_file_steps(fix.rollback)
    assert path.read_text() == original


def test_environment_changes_for_a_direct_exec_start_are_a_drop_in() -> None:
    argv = ["/opt/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "m"]
    changes = [FlagChange("set", "SGLANG_WARMUP_TIMEOUT", "1800"), FlagChange("remove", "SGLANG_USE_HND_KVCACHE")]
    fix = synthesize_fix(UNIT, argv, changes, "x", read=no_file)
    assert fix.command == "/opt/venv/bin/python -m sglang.launch_server --model-path m", "the command is unchanged"
    conf = f"/etc/systemd/system/{UNIT}.d/crashdoc-fix.conf"
    content = (
        f"# Written by crashdoc for {UNIT}: SGLANG_WARMUP_TIMEOUT=1800; unset SGLANG_USE_HND_KVCACHE\n"
        f"# To undo: remove this file, then systemctl daemon-reload && systemctl restart {UNIT}\n"
        "[Service]\n"
        "Environment=SGLANG_WARMUP_TIMEOUT=1800\n"
        "UnsetEnvironment=SGLANG_USE_HND_KVCACHE\n"
    )
    assert fix.apply[1] == f"cat > {conf} <<'CRASHDOC_EOF'\n{content}CRASHDOC_EOF"
    # with a flag change too, the same drop-in also overrides ExecStart
    fix = synthesize_fix(UNIT, [*argv, "--hicache-size", "1"], [*changes, HICACHE], "x", read=no_file)
    assert (
        "Environment=SGLANG_WARMUP_TIMEOUT=1800\nUnsetEnvironment=SGLANG_USE_HND_KVCACHE\nExecStart=\n"
        in (fix.apply[1])
    )


@pytest.mark.parametrize("head", ["exec /usr/bin/env ", ""])
def test_a_variable_assigned_on_the_command_itself_is_edited_there(tmp_path: Path, head: str) -> None:
    """`NAME=x python ...` and `env NAME=x` win over the unit's environment: the assignment word changes."""
    path = tmp_path / "prefill.sh"
    path.write_text(f"#!/bin/bash\n{head}SGLANG_WARMUP_TIMEOUT=60 python -m sglang.launch_server --tp 2\n")
    set_ = FlagChange("set", "SGLANG_WARMUP_TIMEOUT", "1800")
    fix = synthesize_fix(UNIT, ("/bin/bash", str(path)), [set_], "x")
    assert fix.command == f"{head}SGLANG_WARMUP_TIMEOUT=1800 python -m sglang.launch_server --tp 2"
    assert "export" not in fix.diff and fix.warnings == []
    fix = synthesize_fix(UNIT, ("/bin/bash", str(path)), [FlagChange("remove", "SGLANG_WARMUP_TIMEOUT")], "x")
    assert fix.command == f"{head}python -m sglang.launch_server --tp 2"
    assert "unset" not in fix.diff and fix.warnings == []


@pytest.mark.sandbox
def test_a_drop_in_environment_reaches_the_process(sandbox_factory, sandbox_workdir: Path) -> None:
    """systemd itself reads the Environment=/UnsetEnvironment= lines crashdoc writes: the value reaches
    SGLang's process with spaces, quotes, `%`, `$` and backslashes intact."""
    out = sandbox_workdir / "env.json"
    fake = sandbox_workdir / "sglang"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "launch_server.py").write_text(
        f"import json, os\nopen({str(out)!r}, 'w').write(json.dumps("
        "[os.environ.get('SGLANG_T'), os.environ.get('SGLANG_GONE')]))\n"
    )
    python = shutil.which("python3") or "/usr/bin/python3"
    argv = [python, "-m", "sglang.launch_server", "--model-path", "m"]
    unit = (
        f"[Service]\nType=oneshot\nEnvironment=PYTHONPATH={sandbox_workdir}\nEnvironment=SGLANG_GONE=1\n"
        f"{exec_start_line(argv)}\n"
    )
    sb = sandbox_factory({"env.service": unit}, workdir=sandbox_workdir, start_units=[])
    weird = 'a b "q" it\'s 50% $HOME \\ end'
    inv = parse_argv(argv)
    assert inv is not None
    changes = [FlagChange("set", "SGLANG_T", weird), FlagChange("remove", "SGLANG_GONE")]
    plan = plan_fix("env.service", inv, changes, read=no_file)
    assert "ExecStart" not in plan.new_text.split("[Service]")[1], "only the environment changes"
    conf_dir = sb.unit_dir / "env.service.d"
    conf_dir.mkdir()
    (conf_dir / "crashdoc-fix.conf").write_text(plan.new_text)
    sb.systemctl("daemon-reload", check=True, timeout=60)
    result = sb.systemctl("start", "env.service", timeout=60)
    assert result.returncode == 0, result.stderr
    import json

    assert json.loads(out.read_text()) == [weird, None]


# --- properties -------------------------------------------------------------------------------------

FLAG_NAMES = ["--tp", "--hicache-size", "--hicache-ratio", "--cuda-graph-bs", "--api-key", "--x"]
VALUES = st.one_of(
    st.sampled_from(
        [
            "4",
            "150",
            "-1",
            "0.5",
            "a b",
            "it's",
            '"q"',
            "$HOME",
            "${TP:-8}",
            "",
            "x\\y",
            "#c",
            "--",
            "-",
            "a=b",
            "2>&1",
            "|",
            ";",
        ]
    ),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=6),
)
CHANGES = st.builds(
    FlagChange,
    action=st.sampled_from(["replace", "remove", "add", "set"]),
    flag=st.sampled_from(FLAG_NAMES),
    value=st.one_of(st.none(), st.sampled_from(["2.0", "1 2 4", "a b", "it's", "-0.5", "$X", '{"k": [1]}'])),
    new_flag=st.one_of(st.none(), st.sampled_from(FLAG_NAMES)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from(FLAG_NAMES), st.lists(VALUES, max_size=3), st.booleans()), max_size=6),
    st.lists(CHANGES, min_size=1, max_size=3),
)
def test_argv_rewrite_gives_the_requested_values(groups, changes) -> None:
    argv = ["/usr/bin/numactl", "--membind=0", "python3", "-m", "sglang.launch_server"]
    for name, values, inline in groups:
        values = [v for v in values if not v.startswith("-") and v != "--"]
        argv += [f"{name}={values[0]}"] if inline and values else [name, *values]
    inv = parse_argv(argv)
    rw = apply_changes(inv, changes)
    want = expected_values(changes, inv)
    for flag, values in want.items():
        assert rw.after.values(flag) == values, (flag, rw.after.argv)
    plan = plan_fix(UNIT, inv, changes, read=no_file)
    plan.to_fix("s")


LAYOUT = st.sampled_from([" ", " \\\n    ", " \\\n\t", "  "])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(FLAG_NAMES),
            st.lists(st.sampled_from(["4", "150", "-1", "'a b'", '"$M"', "${TP:-8}", "x\\ y", "0.5"]), max_size=3),
            LAYOUT,
        ),
        max_size=6,
    ),
    st.sampled_from(
        ["", "# comment\n", "set -e\nexport A=1\n", "cat <<EOF\npython -m sglang.launch_server --no\nEOF\n"]
    ),
    st.sampled_from(["\n", "", " 2>&1 | tee log\n", " # tail\n", "\necho done\n"]),
    st.lists(CHANGES, min_size=1, max_size=3),
)
def test_script_rewrite_properties(groups, head, tail, changes) -> None:
    command = "exec python -m sglang.launch_server"
    for name, values, sep in groups:
        command += sep + " ".join([name, *values])
    text = head + command + tail
    found = parse_text(text)
    assume(found)
    inv = found[-1]
    rw = apply_changes(inv, changes)
    # 1. re-reading the new text gives what argparse would see after the changes
    want = expected_values(changes, inv)
    for flag, values in want.items():
        assert rw.after.values(flag) == values, (flag, text, rw.file_text)
    # 2. lines outside the command are byte-identical
    old_lines, new_lines = text.split("\n"), rw.file_text.split("\n")
    first, last = inv.lines
    assert new_lines[: first - 1] == old_lines[: first - 1]
    after_old = old_lines[last:]
    assert new_lines[len(new_lines) - len(after_old) :] == after_old
    # 3. the shell agrees that the result is still valid
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=rw.file_text, text=True, capture_output=True).returncode == 0


@needs_sed
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(FLAG_NAMES),
            st.lists(st.sampled_from(["4", "150", "-1", "'a b'", '"$M"', "a/b", "x&y", "[0]", "1.5"]), max_size=2),
            LAYOUT,
        ),
        max_size=5,
    ),
    st.lists(CHANGES, min_size=1, max_size=3),
)
def test_sed_commands_reproduce_the_diff(tmp_path_factory, groups, changes) -> None:
    text = "#!/bin/bash\nset -e\nexec python -m sglang.launch_server"
    for name, values, sep in groups:
        text += sep + " ".join([name, *values])
    text += "\necho done\n"
    new = apply_changes(parse_text(text)[-1], changes).file_text
    path = tmp_path_factory.mktemp("sed") / "s.sh"
    path.write_text(text)
    exprs = sed_expressions(text, new)
    if exprs:
        subprocess.run([SED, "-i", *(a for e in exprs for a in ("-e", e)), str(path)], check=True)
    assert path.read_text() == new, shlex.join(exprs)


@needs_sed
@pytest.mark.parametrize("fixture", sorted(p.name for p in LAUNCH.glob("*.sh") if p.name != "wrapper.sh"))
@pytest.mark.parametrize(
    "change",
    [
        HICACHE,
        FlagChange("remove", "--hicache-size"),
        FlagChange("set", "--mem-fraction-static", "0.7"),
        FlagChange("add", "--enable-metrics"),
        FlagChange("set", "--cuda-graph-bs", "1 2 4"),
    ],
)
def test_apply_commands_on_every_fixture(tmp_path: Path, fixture: str, change: FlagChange) -> None:
    path = script(tmp_path, fixture)
    original = path.read_bytes()
    plan = plan_fix(UNIT, find_launch_command(("/bin/bash", str(path))).command, [change])
    fix = plan.to_fix("s")
    run_file_steps(fix)
    if original.endswith(b"\n"):
        assert path.read_text() == plan.new_text
    else:  # sed ends the last line it prints with a newline; the command is the same
        assert path.read_text().rstrip("\n") == plan.new_text.rstrip("\n")
    after = find_launch_command(("/bin/bash", str(path))).command
    assert after.argv == plan.rewrite.after.argv
    run_file_steps(fix.rollback)
    assert path.read_bytes() == original


HOSTILE = st.lists(
    st.sampled_from(
        [
            "python -m sglang.launch_server",
            " --hicache-size ",
            " --tp ",
            "150",
            "'",
            '"',
            "\\",
            "\n",
            " \\\n",
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
            "2>&1",
            " ",
            "\t",
            "=",
            "exec ",
            "bash -c ",
            "--hicache-size=1",
            "$@",
            "-1",
            "\r",
            "ü",
            "export SGLANG_T=1\n",
            "SGLANG_T=2 ",
            "env SGLANG_T=3 ",
        ]
    ),
    max_size=40,
).map("".join)
ENV_CHANGES = st.builds(
    FlagChange,
    action=st.sampled_from(["remove", "add", "set"]),
    flag=st.just("SGLANG_T"),
    value=st.sampled_from(["1", "a b", "it's", "$X", "\n"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE, st.lists(st.one_of(CHANGES, ENV_CHANGES), min_size=1, max_size=2))
def test_rewriter_never_raises_on_hostile_scripts(text: str, changes: list[FlagChange]) -> None:
    located = find_launch_command(["/bin/sh", "/x.sh"], lambda p: text)
    for inv in (located.command, *located.others) if located.command else ():
        plan = plan_fix(UNIT, inv, changes, read=no_file)
        fix = plan.to_fix("summary")
        assert isinstance(fix.diff, str)
