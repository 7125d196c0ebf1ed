"""Which SGLang release a unit runs: the interpreter of its launch command, then what that interpreter imports.

`commandline.find_launch_command` already finds the SGLang command behind wrappers, `bash -c` strings and launch
scripts; its launcher word is the interpreter (`/opt/venv/bin/python -m sglang.launch_server`), or a console
script whose first line names one (`sglang serve`). A launch script that activates a venv (`source
/opt/venv/bin/activate`) or exports PATH / PYTHONPATH changes where a bare `python3` and `sglang` come from, so
those lines are read too. A container's SGLang is not on this host's disk: that is said, not guessed.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

from crashdoc.remedy.commandline import LaunchCommand, Reader, Where, find_launch_command, read_text_file
from crashdoc.sources.sglang_install import (
    DEFAULT_PATH,
    SglangInstall,
    find_sglang,
    from_source,
    shebang_interpreter,
    which,
)

_ACTIVATE = re.compile(r"""^[ \t]*(?:source|\.)[ \t]+["']?([^"'\s;]+)/bin/activate\b""", re.M)
_EXPORT = re.compile(r"""^[ \t]*(?:export[ \t]+)?(PATH|PYTHONPATH)=["']?([^"'\s;]*)""", re.M)


def _expand(value: str, name: str, current: Sequence[str]) -> list[str]:
    """`/opt/venv/bin:$PATH` -> ["/opt/venv/bin", *current]; other variables are dropped (unknown here)."""
    out: list[str] = []
    for part in value.split(":"):
        if part in (f"${name}", f"${{{name}}}"):
            out.extend(current)
        elif part and "$" not in part:
            out.append(part)
    return out


def _before(inv: LaunchCommand) -> str:
    """The shell text that runs before the SGLang command (where a venv is activated or PATH exported)."""
    start = inv.words[0].start if inv.words and inv.words[0].start >= 0 else 0
    if inv.where is Where.SCRIPT_SHELL and inv.outer[0] >= 0:
        return inv.file_text[: inv.outer[0]] + "\n" + inv.text[:start]
    return inv.text[:start]


def search_paths(inv: LaunchCommand) -> tuple[list[str], list[str]]:
    """(PATH, PYTHONPATH) the launch command runs with, as far as its script and command line say."""
    path = list(DEFAULT_PATH)
    pythonpath: list[str] = []
    for m in _ACTIVATE.finditer(_before(inv)):
        path.insert(0, m.group(1) + "/bin")
    for m in _EXPORT.finditer(_before(inv)):
        if m.group(1) == "PATH":
            path = _expand(m.group(2), "PATH", path)
        else:
            pythonpath = _expand(m.group(2), "PYTHONPATH", pythonpath)
    for name, value in inv.environment:  # `env PYTHONPATH=... python -m ...`, `PATH=... exec python ...`
        if name == "PATH":
            path = _expand(value, "PATH", path)
        elif name == "PYTHONPATH":
            pythonpath = _expand(value, "PYTHONPATH", pythonpath)
    return path, pythonpath


def launch_install(inv: LaunchCommand) -> SglangInstall:
    """The SGLang the launch command's interpreter imports."""
    if inv.container:
        return SglangInstall(
            "", problems=(f"SGLang runs in a container ({inv.container}): its release is not on this host's disk",)
        )
    launcher = inv.words[inv.launcher].value
    path, pythonpath = search_paths(inv)
    if "$" in launcher:
        return SglangInstall(
            launcher, problems=(f"the interpreter {launcher} is a shell variable; crashdoc cannot read it",)
        )
    script = next(
        (w.value for w in inv.words[inv.launcher : inv.args] if w.value.endswith("sglang/launch_server.py")), ""
    )
    if script.startswith("/"):  # `python /src/sglang/python/sglang/launch_server.py`: the tree is named
        return from_source(posixpath.dirname(script))
    if posixpath.basename(launcher) == "sglang":  # a console script: its shebang names the interpreter
        program = which(launcher, path)
        interpreter = shebang_interpreter(program) if program else None
        if interpreter is None:
            where = program or f"{launcher} on PATH"
            return SglangInstall(launcher, problems=(f"cannot read the interpreter of {where}",))
        launcher = interpreter
    return find_sglang(launcher, pythonpath=pythonpath, path=path)


def unit_install(exec_start: Sequence[str], read: Reader = read_text_file) -> SglangInstall | None:
    """The SGLang a unit's ExecStart runs, read as files; None when the unit starts no SGLang crashdoc can see."""
    if not exec_start:
        return None
    located = find_launch_command(exec_start, read)
    if located.command is None:
        return None
    return launch_install(located.command)
