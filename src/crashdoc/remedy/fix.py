"""Turns flag changes into the corrected command, a minimal diff and the commands a human runs.

crashdoc never applies a fix: it shows one. The diff is of the file the human edits: the launch script when
SGLang is started from one (rewritten by `remedy.rewrite`, which touches only the words that change), else a
drop-in that overrides the unit's ExecStart. The apply commands edit only the changed words (`sed`), so they
stay usable after `crashdoc.redact` has masked the secrets that the diff shows: a `patch` of the redacted
diff would not apply.
"""

from __future__ import annotations

import difflib
import itertools
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from crashdoc.events import Fix, FlagChange
from crashdoc.matching.templates import placeholder_note
from crashdoc.redact import REDACTED, Redactor, is_secret_flag, redact
from crashdoc.remedy.commandline import (
    LaunchCommand,
    Located,
    Reader,
    Where,
    find_launch_command,
    join_argv,
    read_text_file,
)
from crashdoc.remedy.rewrite import Rewrite, apply_changes, describe, is_environment, plain_quote

DROP_IN_DIR = "/etc/systemd/system"
DROP_IN_NAME = "crashdoc-fix.conf"
BACKUP_SUFFIX = ".crashdoc-bak"
HEREDOC = "CRASHDOC_EOF"


# --- what the human sees -----------------------------------------------------------------------------


def unified_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    """A unified diff that `patch` accepts, including files that do not end with a newline."""
    lines = difflib.unified_diff(_lines(old), _lines(new), old_name, new_name)
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _lines(text: str) -> list[str]:
    """Lines as `patch` and `sed` see them: only \\n ends one (str.splitlines also splits at \\r, \\f)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def systemd_quote(arg: str) -> str:
    """One ExecStart= word for systemd: `%` doubled (specifiers are already resolved in the D-Bus argv),
    `$VAR` kept (systemd expands it at start, as it did for the original), C escapes inside double quotes."""
    arg = arg.replace("%", "%%")
    if arg and arg != ";" and re.fullmatch(r"[\w@%+=:,./${}-]+", arg):
        return arg
    escaped = []
    for ch in arg:
        if ch in '\\"':
            escaped.append("\\" + ch)
        elif ch == "\n":
            escaped.append("\\n")
        elif ch == "\t":
            escaped.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            escaped.append(f"\\x{ord(ch):02x}")
        else:
            escaped.append(ch)
    return '"' + "".join(escaped) + '"'


def exec_start_line(argv: Sequence[str], width: int = 100, break_from: int = 1) -> str:
    """`ExecStart=...`, continued before each `--flag` from word `break_from` on when longer than `width`."""
    words = [systemd_quote(a) for a in argv]
    line = "ExecStart=" + " ".join(words)
    if len(line) <= width or not words:
        return line
    parts = ["ExecStart=" + words[0]]
    for i in range(1, len(words)):
        brk = i >= break_from and argv[i].startswith("--")
        parts.append((" \\\n    " if brk else " ") + words[i])
    return "".join(parts)


def sed_expressions(old: str, new: str) -> list[str]:
    """GNU sed expressions (one per `-e`) that turn `old` into `new`, naming only the words that change.

    Addresses are line numbers of the original file. A changed line becomes `Ns/OLD/NEW/` on the changed words;
    removed lines `Nd`; added lines `Na\\`.
    """
    a, b = old.split("\n"), new.split("\n")  # sed's lines: only \n ends one
    exprs: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        pairs = min(i2 - i1, j2 - j1)
        for t in range(pairs):
            exprs.append(_line_substitution(i1 + t + 1, a[i1 + t], b[j1 + t]))
        if i2 - i1 > pairs:
            lo, hi = i1 + pairs + 1, i2
            exprs.append(f"{lo}d" if lo == hi else f"{lo},{hi}d")
        if j2 - j1 > pairs:
            added = b[j1 + pairs : j2]
            anchor = i1 + pairs
            head = f"{anchor}a\\" if anchor > 0 else "1i\\"
            body = [line.replace("\\", "\\\\") for line in added]
            exprs.append(head)
            exprs.extend(line + "\\" for line in body[:-1])
            exprs.append(body[-1])
    return exprs


def _line_substitution(n: int, old: str, new: str) -> str:
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    s = 0
    while s < min(len(old), len(new)) - p and old[-1 - s] == new[-1 - s]:
        s += 1
    if s == 0 and p == len(old):
        return f"{n}s/$/{_sed_replacement(new[p:], '/')}/"  # appended at the end of the line
    if s == 0 and p == len(new) and old[p].isspace():
        return f"{n}s/{_sed_regex(old[p:], '/')}$//"  # cut from the end of the line (a continuation)
    # widen to whole words so the command reads `s/--hicache-size 150/--hicache-ratio 2.0/`
    while 0 < p < len(old) and not old[p - 1].isspace() and not old[p].isspace():
        p -= 1
    while 0 < s < len(old) and not old[len(old) - s].isspace() and not old[len(old) - s - 1].isspace():
        s -= 1
    old_mid, new_mid = old[p : len(old) - s], new[p : len(new) - s]
    delim = next((d for d in "/|#,@%!" if d not in old_mid and d not in new_mid), "/")
    starts = [m.start() for m in re.finditer(re.escape(old_mid), old)] if old_mid else []
    if old_mid and p in starts:
        nth = starts.index(p) + 1 if _non_overlapping(starts, len(old_mid)) else 0
        if nth:
            suffix = "" if nth == 1 else str(nth)
            return f"{n}s{delim}{_sed_regex(old_mid, delim)}{delim}{_sed_replacement(new_mid, delim)}{delim}{suffix}"
    return (
        f"{n}s{delim}^\\(.\\{{{p}\\}}\\){_sed_regex(old_mid, delim)}{delim}\\1{_sed_replacement(new_mid, delim)}{delim}"
    )


def _non_overlapping(starts: list[int], length: int) -> bool:
    return all(b - a >= length for a, b in itertools.pairwise(starts))


def _sed_regex(text: str, delim: str) -> str:
    return re.sub(r"([\\.*\[\]^$" + re.escape(delim) + r"])", r"\\\1", text)


def _sed_replacement(text: str, delim: str) -> str:
    return re.sub(r"([\\&" + re.escape(delim) + r"])", r"\\\1", text)


@dataclass(frozen=True, slots=True)
class FixPlan:
    """Everything a human needs to apply and undo a fix, unredacted (use `to_fix` for output)."""

    unit: str
    rewrite: Rewrite
    changes: tuple[FlagChange, ...]
    command: str  # the corrected command, shell-quoted, including wrappers
    path: str  # the file a human edits: the script, or the drop-in
    old_text: str  # that file before ("" when it does not exist yet)
    new_text: str
    diff: str
    apply: tuple[str, ...]
    rollback: tuple[str, ...]
    notes: tuple[str, ...] = ()
    secrets: tuple[str, ...] = field(default=(), repr=False)  # secret values seen in the command

    @property
    def changed(self) -> bool:
        return self.old_text != self.new_text

    def to_fix(self, summary: str, warnings: Sequence[str] = (), redactor: Redactor | None = None) -> Fix:
        """The `events.Fix` to report, with every secret masked (also the literal values seen in the command).

        When masking touched an apply command, a warning says which values to fill in by hand.
        """
        r = (redactor or Redactor()).with_secrets(self.secrets)
        apply = [redact(a, r) for a in self.apply]
        extra = list(self.notes)
        if apply != list(self.apply):
            where = (
                self.path
                if self.rewrite.before.where in (Where.SCRIPT, Where.SCRIPT_SHELL)
                else (f"`systemctl cat {self.unit}`")
            )
            extra.append(
                f"Some apply commands repeat secrets of the unit, shown as {REDACTED}: fill them in from "
                f"{where} before running them."
            )
        return Fix(
            summary=redact(summary, r),
            changes=list(self.changes),
            command=redact(self.command, r),
            diff=redact(self.diff, r),
            apply=apply,
            rollback=[redact(a, r) for a in self.rollback],
            warnings=[redact(w, r) for w in dict.fromkeys((*warnings, *extra))],
        )


def plan_fix(
    unit: str,
    inv: LaunchCommand,
    changes: Sequence[FlagChange],
    *,
    read: Reader = read_text_file,
    drop_in_paths: Sequence[str] = (),
) -> FixPlan:
    """Work out the corrected command, the diff, and the apply/rollback commands. Reads (never writes) the
    existing drop-in, if any. Never raises."""
    rw = apply_changes(inv, changes)  # flags, and variables assigned on SGLang's command line
    on_command = {name for name, _ in inv.environment}
    env_changes = [c for c in changes if is_environment(c.flag) and c.flag not in on_command]
    notes = list(rw.notes)
    if inv.container:
        notes.append(
            f"SGLang runs inside a container ({inv.container}); the fix changes the arguments the unit passes to it."
        )
        if env_changes:
            notes.append(
                f"Pass {', '.join(c.flag for c in env_changes)} into the container too (`-e NAME`): "
                "a container does not inherit the unit's environment."
            )
    secrets = _secret_values(inv)
    if inv.where in (Where.SCRIPT, Where.SCRIPT_SHELL):
        command = _script_command(rw.after)
        path, old_text = inv.path, inv.file_text
        new_text, env_notes = _script_environment(rw.after, env_changes)
        notes += env_notes
        diff = unified_diff(old_text, new_text, path, path)
        apply, rollback = _script_commands(unit, path, old_text, new_text)
    else:
        command = join_argv(rw.exec_start)
        path = f"{DROP_IN_DIR}/{unit}.d/{DROP_IN_NAME}"
        try:
            old_text = read(path)
        except (OSError, UnicodeError, ValueError):
            old_text = ""
        if rw.changed or env_changes:
            exec_start = rw.exec_start if rw.changed else None
            new_text = _drop_in(unit, exec_start, changes, rw.after.args, env_changes)
        else:
            new_text = old_text
        diff = unified_diff(old_text, new_text, path if old_text else "/dev/null", path)
        apply, rollback = _drop_in_commands(unit, path, old_text, new_text)
        later = sorted(p for p in drop_in_paths if p.rsplit("/", 1)[-1] > DROP_IN_NAME and p != path)
        if later:
            settings = " or ".join(
                key for key, used in (("ExecStart=", rw.changed), ("Environment=", env_changes)) if used
            )
            notes.append(
                f"{', '.join(later)} {'is' if len(later) == 1 else 'are'} read after {DROP_IN_NAME}: "
                f"an {settings or 'ExecStart='} there overrides this fix."
            )
    if old_text == new_text:
        diff, apply, rollback = "", [], []
        notes.append("The command already satisfies these changes: nothing to edit.")
    if inv.where is Where.SCRIPT_SHELL and rw.changed and not plain_quote(inv.file_text[slice(*inv.outer)], inv.text):
        notes.append(
            f"The command is inside a `sh -c` string in {inv.path} that mixes quoting styles: crashdoc re-quoted "
            "the whole string; check that the variables in it still expand where they should."
        )
    waiting = [c for c in changes if c.placeholder]
    if waiting:
        apply, rollback = [], []
        notes.append(placeholder_note(waiting))
    return FixPlan(
        unit,
        rw,
        tuple(changes),
        command,
        path,
        old_text,
        new_text,
        diff,
        tuple(apply),
        tuple(rollback),
        tuple(dict.fromkeys(notes)),
        secrets,
    )


def synthesize_fix(
    unit: str,
    exec_start: Sequence[str],
    changes: Sequence[FlagChange],
    summary: str,
    *,
    warnings: Sequence[str] = (),
    read: Reader = read_text_file,
    drop_in_paths: Sequence[str] = (),
    working_directory: str = "/",
) -> Fix:
    """From a unit's ExecStart to the redacted `events.Fix`, in one call. When the SGLang command cannot be
    found, the Fix still carries the summary and changes, and says why in its warnings."""
    located: Located = find_launch_command(exec_start, read, working_directory=working_directory)
    if located.command is None:
        return Fix(
            summary=redact(summary), changes=list(changes), warnings=[redact(w) for w in (*warnings, *located.problems)]
        )
    plan = plan_fix(unit, located.command, changes, read=read, drop_in_paths=drop_in_paths)
    extra = list(located.problems)
    if located.others:
        spans = ", ".join(f"lines {o.lines[0]}-{o.lines[1]}" for o in located.others)
        extra.append(
            f"{located.command.path} also starts SGLang at {spans}; crashdoc changed lines "
            f"{located.command.lines[0]}-{located.command.lines[1]} only."
        )
    return plan.to_fix(summary, [*warnings, *extra])


def _secret_values(inv: LaunchCommand) -> tuple[str, ...]:
    out = [v for f in inv.flags if is_secret_flag(f.name) for v in f.values if not v.startswith("$")]
    out += [v for k, v in inv.environment if is_secret_flag(k) and not v.startswith("$")]
    return tuple(out)


def _script_command(inv: LaunchCommand) -> str:
    """The command as written in the script, on one line."""
    raws = [re.sub(r"\\\n[ \t]*", "", inv.text[w.start : w.end]) for w in inv.words]
    return " ".join(raws)


def _script_commands(unit: str, path: str, old: str, new: str) -> tuple[list[str], list[str]]:
    q = shlex.quote(path)
    backup = shlex.quote(path + BACKUP_SUFFIX)
    sed = " ".join(["sed -i", *(f"-e {shlex.quote(e)}" for e in sed_expressions(old, new)), q])
    shell = "sh" if re.match(r"#!\s*\S*/(?:env\s+)?(?:sh|dash)\b", old) else "bash"
    apply = [
        f"cp -a {q} {backup}",
        sed,
        f"{shell} -n {q}",
        f"systemctl reset-failed {unit}",
        f"systemctl restart {unit}",
    ]
    rollback = [f"cp -a {backup} {q}", f"systemctl reset-failed {unit}", f"systemctl restart {unit}"]
    return apply, rollback


def _drop_in(
    unit: str,
    argv: Sequence[str] | None,
    changes: Sequence[FlagChange],
    args: int,
    env_changes: Sequence[FlagChange] = (),
) -> str:
    """The override: the unit's environment changes (systemd passes them to whatever ExecStart runs) and,
    when flags change, a new ExecStart."""
    what = "; ".join(describe(c) for c in changes)
    lines = [
        f"# Written by crashdoc for {unit}: {what}",
        f"# To undo: remove this file, then systemctl daemon-reload && systemctl restart {unit}",
        "[Service]",
    ]
    for c in env_changes:
        if c.action == "remove":
            lines.append(f"UnsetEnvironment={c.flag}")
        else:
            assignment = f"{c.flag}={c.value or ''}"
            lines.append(f"Environment={systemd_quote(assignment)}")
    if argv is not None:
        lines += ["ExecStart=", exec_start_line(argv, break_from=args)]
    return "\n".join(lines) + "\n"


def _script_environment(inv: LaunchCommand, env_changes: Sequence[FlagChange]) -> tuple[str, list[str]]:
    """The script with its environment changed: an existing `export NAME=...` line before the command is
    edited (or deleted), else `export NAME=value` / `unset NAME` goes on a line of its own just before it."""
    text = inv.file_text
    notes: list[str] = []
    first = _command_line_start(inv, text)
    for c in env_changes:
        start = first + len(text) - len(inv.file_text)  # every edit is above the command: it only moves down
        assigned = None
        for m in _assignment_line(c.flag).finditer(text[:start]):
            assigned = m
        indent = re.match(r"[ \t]*", text[start:])
        pad = indent[0] if indent else ""
        if c.action == "remove":
            if assigned is not None:
                text = text[: assigned.start()] + text[assigned.end() :]
            else:
                text = text[:start] + f"{pad}unset {c.flag}\n" + text[start:]
            continue
        value = shlex.quote(c.value or "")
        if assigned is not None:
            if c.action == "add":
                notes.append(f"{c.flag} is already set in {inv.path}: left as it is.")
                continue
            line = f"{assigned[1]}{assigned[2] or 'export '}{c.flag}={value}\n"
            text = text[: assigned.start()] + line + text[assigned.end() :]
        else:
            text = text[:start] + f"{pad}export {c.flag}={value}\n" + text[start:]
    return text, notes


def _assignment_line(name: str) -> re.Pattern[str]:
    """A line that only assigns `name` (`export NAME=value`, `NAME="a b"  # why`), not `NAME=x cmd`."""
    value = r"""(?:'[^'\n]*'|"(?:[^"\\\n]|\\.)*"|[^\s'";&|#]*)"""
    return re.compile(rf"(?m)^([ \t]*)((?:export[ \t]+)?){re.escape(name)}={value}[ \t]*(?:#[^\n]*)?(?:\n|\Z)")


def _command_line_start(inv: LaunchCommand, file_text: str) -> int:
    """Where the line that starts SGLang's command begins in the script (for SCRIPT_SHELL, the line of the
    `sh -c` string)."""
    # SCRIPT: `text` is the whole script, so the first word's offset is one in the file
    first_word = inv.words[0].start if inv.words else 0
    at = inv.outer[0] if inv.where is Where.SCRIPT_SHELL else first_word
    return file_text.rfind("\n", 0, at) + 1


def _drop_in_commands(unit: str, path: str, old: str, new: str) -> tuple[list[str], list[str]]:
    q = shlex.quote(path)
    directory = shlex.quote(path.rsplit("/", 1)[0])
    backup = shlex.quote(path + BACKUP_SUFFIX)
    apply = [f"mkdir -p {directory}"]
    if old:
        apply.append(f"cp -a {q} {backup}")
    apply += [
        f"cat > {q} <<'{HEREDOC}'\n{new}{HEREDOC}",
        "systemctl daemon-reload",
        f"systemctl reset-failed {unit}",
        f"systemctl restart {unit}",
    ]
    rollback = [
        f"cp -a {backup} {q}" if old else f"rm {q}",
        "systemctl daemon-reload",
        f"systemctl reset-failed {unit}",
        f"systemctl restart {unit}",
    ]
    return apply, rollback
