"""Does a corrected command pass SGLang's own argument checks? Asked of SGLang itself, never guessed.

The unit's own interpreter (`remedy.interpreter`) checks the corrected command in a throw-away child
(`remedy.checker.SGLangChecker`, one command), and what it says becomes the line shown as `fix.verified`. The
many candidates of a search go through the same checker (`remedy.search`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crashdoc.events import FlagChange
from crashdoc.redact import redact
from crashdoc.remedy.commandline import Reader, find_launch_command, read_text_file
from crashdoc.remedy.interpreter import interpreter_of, unsafe_to_run
from crashdoc.remedy.rewrite import apply_changes, is_environment

if TYPE_CHECKING:  # the child processes' machinery (subprocess, tempfile, ...) is imported when one is run
    from crashdoc.remedy.checker import Answer

TIMEOUT = 90.0


@dataclass(frozen=True, slots=True)
class Verification:
    status: str  # passed | partial | rejected | not-verified
    text: str  # the line shown as `fix.verified`


def verify_argv(
    interpreter: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> Verification:
    """Run SGLang's argument checks on `args` with `interpreter`, in a child process working in a throw-away
    folder (whatever it writes there is removed)."""
    from crashdoc.remedy.checker import Request, SGLangChecker

    with SGLangChecker(interpreter, env, parallel=1, timeout=timeout, start_timeout=timeout) as checker:
        [answer] = checker.check([Request(tuple(args))], deadline=time.monotonic() + timeout)
    return describe(answer, interpreter)


def describe(answer: Answer, interpreter: str) -> Verification:
    status, version, error = answer.status, answer.version or "?", answer.error[:300]
    if status == "passed":
        return Verification("passed", f"the corrected command passes SGLang {version}'s argument checks")
    if status == "partial":
        return Verification(
            "partial",
            f"the corrected command passes SGLang {version}'s argument checks, except (not checked): "
            + "; ".join(" ".join(u.split())[:240] for u in answer.unchecked),
        )
    if status == "not-importable":
        return Verification("not-verified", f"not verified: SGLang is not importable by {interpreter} ({error})")
    if status == "import-error":
        return Verification(
            "not-verified", f"not verified: SGLang {version}'s checks could not import what they need here ({error})"
        )
    if status == "cpu-rejected":
        return Verification(
            "not-verified",
            f"not verified: SGLang {version}'s argument checks, run with --device cpu because the GPU is hidden, "
            f"raised {error}; this may be a limit of the CPU check rather than of the command",
        )
    if status == "rejected":
        stage = "argument parsing" if answer.stage == "parse" else "argument checks"
        return Verification("rejected", f"rejected by SGLang {version}'s {stage}: {error}")
    return Verification("not-verified", f"not verified: {error}")


def verify_fix(
    cmdline: Sequence[str],
    changes: Sequence[FlagChange],
    *,
    read: Reader = read_text_file,
    timeout: float = TIMEOUT,
) -> Verification:
    """The unit's ExecStart with the fix applied (in memory), checked by the unit's own SGLang."""
    if not changes:
        return Verification("not-verified", "not verified: the fix changes no flag")
    waiting = [c.flag for c in changes if c.placeholder]
    if waiting:  # SGLang would check the placeholder, not the operator's value
        return Verification("not-verified", f"not verified: {', '.join(waiting)} needs your value first")
    if not cmdline:
        return Verification(
            "not-verified",
            "not verified: systemd did not report the unit's ExecStart here (no D-Bus), and crashdoc runs no "
            "command line read from the journal",
        )
    located = find_launch_command(tuple(cmdline), read)
    inv = located.command
    if inv is None:
        return Verification("not-verified", "not verified: crashdoc did not find SGLang's command in the unit")
    after = apply_changes(inv, [c for c in changes if not is_environment(c.flag)]).after
    interpreter, why = interpreter_of(after, read)
    if interpreter is None:
        return Verification("not-verified", f"not verified: {why}")
    unsafe = unsafe_to_run(interpreter)
    if unsafe:
        return Verification("not-verified", f"not verified: {unsafe}")
    if after.expansions:
        return Verification(
            "not-verified",
            f"not verified: the command passes {', '.join(after.expansions)}, which only the shell expands",
        )
    from crashdoc.remedy.checker import child_environment

    result = verify_argv(interpreter, after.sglang_args, env=child_environment(after.environment), timeout=timeout)
    return Verification(result.status, redact(result.text))
