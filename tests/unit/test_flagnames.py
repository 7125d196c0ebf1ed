"""Fixes find a flag under any of SGLang's spellings of it (`--tp` for `--tp-size`)."""

from __future__ import annotations

from crashdoc.events import FlagChange
from crashdoc.matching.flagnames import canonical_flags, spellings
from crashdoc.remedy.fix import synthesize_fix
from crashdoc.remedy.launch import LaunchReader

SCRIPT = "/opt/sglang/decode.sh"
TEXT = (
    "#!/bin/bash\n"
    "exec python -m sglang.launch_server --model deepseek-ai/DeepSeek-V4 \\\n"
    "    --tp 8 --enable-hicache --ep 8\n"
)


def read(path: str) -> str:
    assert path == SCRIPT
    return TEXT


def test_a_fix_about_tp_size_edits_the_tp_the_script_wrote() -> None:
    fix = synthesize_fix("u.service", (SCRIPT,), [FlagChange("set", "--tp-size", "4")], "use TP 4", read=read)
    assert fix.command is not None and " --tp 4 " in fix.command and "--tp-size" not in fix.command
    assert "-    --tp 8 --enable-hicache --ep 8\n+    --tp 4 --enable-hicache --ep 8" in (fix.diff or "")


def test_replacing_an_aliased_flag_drops_every_spelling() -> None:
    change = FlagChange("replace", "--enable-hierarchical-cache", None, "--enable-lmcache")
    fix = synthesize_fix("u.service", (SCRIPT,), [change], "use LMCache", read=read)
    assert fix.command is not None and "--enable-hicache" not in fix.command and "--enable-lmcache" in fix.command


def test_flags_are_known_by_their_canonical_names() -> None:
    flags = LaunchReader(read=read).facts("u.service", (SCRIPT,)).flags
    assert flags["--tp-size"] == "8" and flags["--model-path"] == "deepseek-ai/DeepSeek-V4"
    assert flags["--ep-size"] == "8" and "--tp" not in flags
    assert canonical_flags({"--tensor-parallel-size": "2", "--tp": "4"}) == {"--tp-size": "4"}
    assert spellings("--tp") == ("--tp-size", "--tensor-parallel-size", "--tp")
