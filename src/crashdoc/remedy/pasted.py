"""The launch command in a pasted log: the line a user ran, above what it printed.

A paste often starts with the command (`$ python -m sglang.launch_server ...`), written the ways people run
SGLang: `python3 -m sglang.launch_server`, `sglang serve`, with a shell prompt or not, `VAR=value` before it,
inside `docker run ... image python3 -m sglang.launch_server ...` or `torchrun ... -m sglang.launch_server`,
continued over lines with backslashes. It is read with the same shell reader as a unit's launch script
(`commandline`), so that a fix can be applied to it; it is never run (only an interpreter the operator names is).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crashdoc.remedy.commandline import WRAPPERS, LaunchCommand, Where, find_launcher, parse_text, scan_shell

# a shell prompt before the command: `$ `, `# `, `> `, `(venv) $ `, `user@host:~/x$ `, `[user@host x]# `
_PROMPT = re.compile(r"^\s*(?:\([\w.-]+\)\s*)?(?:[\w.-]+@[\w.-]+(?::[^\s$#>]*)?\s*|\[[^\]]*\]\s*)?[$#>%]\s+")
_LAUNCH = re.compile(r"sglang[._]launch_server|sglang_router[._]launch_|\bsglang\s+serve\b|launch_server\.py")
MAX_LINES = 4000  # a paste is read this far for its command
MAX_CONTINUED = 200


@dataclass(frozen=True, slots=True)
class PastedCommand:
    """The command found, the text it was read from, and any problem reading it."""

    command: LaunchCommand | None
    text: str = ""
    problem: str = ""


def _continued(lines: list[str], start: int) -> tuple[str, int]:
    """The line at `start` with its backslash continuations, and the index after them."""
    parts = [lines[start]]
    i = start
    while parts[-1].rstrip().endswith("\\") and i + 1 < len(lines) and len(parts) < MAX_CONTINUED:
        i += 1
        parts.append(lines[i])
    return "\n".join(parts), i + 1


def command_in_paste(text: str) -> PastedCommand:
    """The SGLang launch command a paste shows (the last one, as a re-run follows a first try), if any."""
    lines = text.splitlines()[:MAX_LINES]
    found: PastedCommand = PastedCommand(None)
    i = 0
    while i < len(lines):
        line = lines[i]
        if not _LAUNCH.search(line):
            i += 1
            continue
        block, after = _continued(lines, i)
        i = after
        stripped = _PROMPT.sub("", block, count=1)
        one = parse_command(stripped)
        if one.command is not None or (stripped is not block and found.command is None):
            found = one
    return found


def parse_command(text: str) -> PastedCommand:
    """A command as given (`explain --command '...'`, or a pasted line without its prompt)."""
    text = text.strip()
    if not text:
        return PastedCommand(None, text, "the command is empty")
    commands, problems = scan_shell(text)
    if not any(find_launcher([w.value for w in c.words]) for c in commands):
        return PastedCommand(None, text, "no SGLang launch (python -m sglang.launch_server, sglang serve) in it")
    found = parse_text(text, Where.SCRIPT)
    if not found:
        return PastedCommand(None, text, "; ".join(problems) or "crashdoc could not read it as a shell command")
    if problems:
        return PastedCommand(None, text, "crashdoc could not read it as a shell command: " + "; ".join(problems))
    command = found[-1]
    strangers = [w.name for w in command.wrappers if w.name not in WRAPPERS]
    if strangers:  # `Example: sglang serve ...` in SGLang's own output is prose, not the command that ran
        return PastedCommand(None, text, f"{strangers[0]} is not a program that starts SGLang")
    return PastedCommand(command, text)
