"""Turns flag changes into the corrected command, a minimal diff and the commands a human runs.

crashdoc never applies a fix: it shows one. The diff is of the file the human edits: the launch script when
SGLang is started from one (only the words that change are touched, so continuations, quoting, comments and
`$VARIABLES` stay as written), else a drop-in that overrides the unit's ExecStart. The apply commands edit
only the changed words (`sed`), so they stay usable after `outputs.redact` has masked the secrets that the
diff shows: a `patch` of the redacted diff would not apply.
"""

from __future__ import annotations

import difflib
import itertools
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from crashdoc.events import Fix, FlagChange
from crashdoc.matching.flagnames import canonical, spellings
from crashdoc.matching.templates import placeholder_note
from crashdoc.redact import REDACTED, Redactor, is_secret_flag, redact
from crashdoc.remedy.commandline import (
    Flag,
    LaunchCommand,
    Located,
    Reader,
    Where,
    Word,
    find_invocation,
    is_flag,
    join_argv,
    parse_argv,
    parse_text,
    read_text_file,
)

ACTIONS: tuple[str, ...] = ("replace", "remove", "add", "set")
DROP_IN_DIR = "/etc/systemd/system"
DROP_IN_NAME = "crashdoc-fix.conf"
BACKUP_SUFFIX = ".crashdoc-bak"
HEREDOC = "CRASHDOC_EOF"
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def change_values(value: str | None) -> tuple[str, ...]:
    """The argument words of a change's value: none for a boolean flag, several for a list of numbers.

    A value is one argument (a path with spaces, a JSON object), except whitespace-separated numbers, which
    are a list (`--cuda-graph-bs 1 2 4 8`).
    """
    if value is None:
        return ()
    parts = value.split()
    if len(parts) > 1 and all(_NUMBER.fullmatch(p) for p in parts):
        return tuple(parts)
    return (value,)


def reads_as_option(value: str) -> bool:
    """argparse takes a word that starts with `-` (`--tp-size`, `-x`, `-1h`) for an option, unless it is `-` or a
    negative number: such a value must be written `--flag=value` to stay the flag's one literal word."""
    return value.startswith("-") and value != "-" and not _NUMBER.fullmatch(value)


def flag_words(flag: str, values: tuple[str, ...]) -> tuple[str, ...]:
    """The words of `flag values` on a command line: `--flag=value` when the value reads as an option."""
    if len(values) == 1 and reads_as_option(values[0]):
        return (f"{flag}={values[0]}",)
    return (flag, *values)


_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def is_environment(name: str) -> bool:
    """`SGLANG_WARMUP_TIMEOUT` is a process environment variable, not a command-line flag."""
    return bool(_ENV_NAME.fullmatch(name))


def describe(change: FlagChange) -> str:
    """A change as a human reads it: `--hicache-size -> --hicache-ratio 2.0`, `SGLANG_X=1`."""
    if is_environment(change.flag):
        return f"unset {change.flag}" if change.action == "remove" else f"{change.flag}={change.value or ''}"
    value = "" if change.value is None else f" {change.value}"
    if change.value is not None and reads_as_option(change.value):
        value = f"={change.value}"
    if change.action == "replace":
        return f"{change.flag} -> {change.new_flag or change.flag}{value}"
    if change.action == "remove":
        return f"remove {change.flag}"
    return f"{change.action} {change.flag}{value}"


# --- edits on words ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Replace:
    index: int
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Delete:
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class _Insert:
    after: int
    values: tuple[str, ...]
    group: bool = False  # a whole new flag: may go on its own continued line


_Op = _Replace | _Delete | _Insert


def _normalise(flag: str) -> str:
    return flag if flag.startswith("-") else "--" + flag


def _plan(inv: LaunchCommand, change: FlagChange) -> tuple[list[_Op], list[str]]:
    """The word edits that make `inv` satisfy `change`, plus notes for the human."""
    if is_environment(change.flag):
        return _plan_environment(inv, change)
    flag = _normalise(change.flag)
    values = change_values(change.value)
    occurrences = inv.occurrences(*spellings(flag))
    ops: list[_Op] = []
    notes: list[str] = []
    if change.action == "replace":
        target = _normalise(change.new_flag or flag)
        if occurrences:
            ops += _rewrite(occurrences[0], target, values)
            ops += [_drop(f) for f in occurrences[1:]]
            if canonical(target) != canonical(flag):
                ops += [_drop(f) for f in inv.occurrences(*spellings(target))]
        else:
            notes.append(f"{flag} is not in the command; {target} is set instead.")
            ops += _set(inv, target, values)
    elif change.action == "remove":
        if not occurrences:
            notes.append(f"{flag} is not in the command: nothing to remove.")
        ops += [_drop(f) for f in occurrences]
    elif change.action == "add":
        if occurrences:
            notes.append(f"{flag} is already in the command: left as it is.")
        else:
            ops.append(_Insert(len(inv.words) - 1, flag_words(flag, values), group=True))
    elif change.action == "set":
        ops += _set(inv, flag, values)
    else:
        notes.append(f"unknown change action {change.action!r} for {flag}: expected one of {', '.join(ACTIONS)}.")
    if not occurrences and inv.expansions and change.action in ("replace", "remove", "set"):
        notes.append(
            f"The command also passes {', '.join(inv.expansions)}, which crashdoc cannot see into: check that it "
            f"does not set {flag}."
        )
    return ops, notes


def _plan_environment(inv: LaunchCommand, change: FlagChange) -> tuple[list[_Op], list[str]]:
    """A variable assigned on SGLang's own command line (`NAME=x python ...`, `env NAME=x`) wins over the
    unit's and the script's environment, so it is edited there; any other is left to `plan_fix`."""
    at = next(
        (i for i, w in enumerate(inv.words[: inv.launcher]) if w.value.startswith(change.flag + "=")),
        None,
    )
    if at is None:
        return [], []
    if change.action == "remove":
        return [_Delete(at, at)], []
    if change.action == "add":
        return [], [f"{change.flag} is already set on the command: left as it is."]
    return [_Replace(at, (f"{change.flag}={change.value or ''}",))], []


def _set(inv: LaunchCommand, flag: str, values: tuple[str, ...]) -> list[_Op]:
    found = inv.occurrences(*spellings(flag))
    if not found:
        return [_Insert(len(inv.words) - 1, flag_words(flag, values), group=True)]
    # keep the spelling the script already uses (`--tp 8` stays `--tp`)
    return [*(_drop(f) for f in found[:-1]), *_rewrite(found[-1], found[-1].name, values)]


def _drop(f: Flag) -> _Delete:
    return _Delete(f.index, f.index + f.nwords - 1)


def _rewrite(f: Flag, name: str, values: tuple[str, ...]) -> list[_Op]:
    """Edit one occurrence in place so that it reads `name values`, touching as few words as possible."""
    if len(values) == 1 and reads_as_option(values[0]):  # one word, `--flag=--value`, or argparse misreads it
        if f.inline and (f.name, f.values) == (name, values):
            return []
        inline: list[_Op] = [_Replace(f.index, flag_words(name, values))]
        return [*inline, _Delete(f.index + 1, f.index + f.nwords - 1)] if f.nwords > 1 else inline
    if f.inline:
        if len(values) > 1:
            return [_Replace(f.index, (name, *values))]
        word = name + ("=" + values[0] if values else "")
        return [] if (f.name, f.values) == (name, values) else [_Replace(f.index, (word,))]
    ops: list[_Op] = []
    if f.name != name:
        ops.append(_Replace(f.index, (name,)))
    old = f.values
    for t in range(min(len(old), len(values))):
        if old[t] != values[t]:
            ops.append(_Replace(f.index + 1 + t, (values[t],)))
    if len(old) > len(values):
        ops.append(_Delete(f.index + 1 + len(values), f.index + len(old)))
    elif len(values) > len(old):
        ops.append(_Insert(f.index + len(old), values[len(old) :]))
    return ops


def _merge_deletes(ops: list[_Op]) -> list[_Op]:
    """Adjacent deletions become one, so that the layout rules see the whole removed run."""
    deletes = sorted((op for op in ops if isinstance(op, _Delete)), key=lambda d: d.first)
    merged: list[_Delete] = []
    for d in deletes:
        if merged and d.first <= merged[-1].last + 1:
            merged[-1] = _Delete(merged[-1].first, max(merged[-1].last, d.last))
        else:
            merged.append(d)
    return [*(op for op in ops if not isinstance(op, _Delete)), *merged]


def _edit_argv(words: Sequence[str], ops: list[_Op]) -> list[str]:
    replaced = {op.index: op.values for op in ops if isinstance(op, _Replace)}
    deleted = {i for op in ops if isinstance(op, _Delete) for i in range(op.first, op.last + 1)}
    inserts: dict[int, list[str]] = {}
    for op in ops:
        if isinstance(op, _Insert):
            inserts.setdefault(op.after, []).extend(op.values)
    out: list[str] = []
    for i, w in enumerate(words):
        if i not in deleted:
            out.extend(replaced.get(i, (w,)))
        out.extend(inserts.get(i, ()))
    return out


# --- edits on shell text -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int
    text: str


def _quote(value: str) -> str:
    return shlex.quote(value)


def _quote_like(raw: str, value: str) -> str:
    """Quote a new value the way the old word was quoted, when that is safe."""
    if raw.startswith('"') and raw.endswith('"') and not re.search(r'["\\$`]', value):
        return f'"{value}"'
    if raw.startswith("'") and raw.endswith("'") and "'" not in value:
        return f"'{value}'"
    return _quote(value)


def _delete_span(text: str, words: Sequence[Word], first: int, last: int) -> tuple[int, int]:
    """The text to cut to remove words[first..last] with the blanks, continuation or line they leave."""
    s, e = words[first].start, words[last].end
    ls = text.rfind("\n", 0, s) + 1
    le = text.find("\n", e)
    le = len(text) if le < 0 else le
    before, after = text[ls:s], text[e:le]
    if not before.strip(" \t"):
        if re.fullmatch(r"[ \t]*\\", after) and le < len(text):
            return ls, le + 1  # a whole continued line: drop it
        if not after.strip(" \t") and first > 0:
            p = words[first - 1].end
            if re.fullmatch(r"(?:[ \t]|\\\n)*", text[p:s]):
                return p, le  # the last line: drop it and the continuation that led to it
        return s, e + len(after) - len(after.lstrip(" \t"))
    return ls + len(before.rstrip(" \t")), e


def _text_spans(text: str, words: Sequence[Word], ops: list[_Op]) -> list[_Span]:
    """The character edits of `text` that carry out the word edits, sorted."""
    spans: list[_Span] = []
    for op in ops:
        if isinstance(op, _Replace):
            w = words[op.index]
            raw = text[w.start : w.end]
            first = _quote(op.values[0]) if is_flag(w.value) else _quote_like(raw, op.values[0])
            spans.append(_Span(w.start, w.end, " ".join([first, *map(_quote, op.values[1:])])))
        elif isinstance(op, _Delete):
            s, e = _delete_span(text, words, op.first, op.last)
            spans.append(_Span(s, e, ""))
        else:
            at = words[op.after].end
            sep = " "
            if op.group:
                sep = _group_separator(text, words)
            spans.append(_Span(at, at, sep + " ".join(_quote(v) for v in op.values)))
    spans.sort(key=lambda sp: (sp.start, sp.end))
    return spans


def _apply_spans(text: str, spans: Sequence[_Span]) -> str:
    out: list[str] = []
    pos = 0
    for sp in spans:
        if sp.start < pos:
            raise ValueError(f"overlapping edits at offset {sp.start}")
        out.append(text[pos : sp.start])
        out.append(sp.text)
        pos = sp.end
    out.append(text[pos:])
    return "".join(out)


def _edit_quoted_word(
    file_text: str, s: int, e: int, inner: str, spans: Sequence[_Span], new_inner: str
) -> tuple[str, int]:
    """Edit a `sh -c "..."` string in place when it is one plain quoted run (its text is the string itself),
    escaping the new words for those quotes, so `$VARS` keep being expanded where they were; else re-quote
    the whole word. Returns the new file text and the word's new end."""
    quote = _plain_quote(file_text[s:e], inner)
    if not quote:
        quoted = _quote(new_inner)
        return file_text[:s] + quoted + file_text[e:], s + len(quoted)
    shifted = [_Span(s + 1 + sp.start, s + 1 + sp.end, _escape_in(quote, sp.text)) for sp in spans]
    new_file = _apply_spans(file_text, shifted)
    return new_file, e + len(new_file) - len(file_text)


def _plain_quote(raw: str, inner: str) -> str:
    """The quote character of a word that is one quoted run holding exactly `inner`, else ""."""
    quote = raw[:1]
    if len(raw) < 2 or quote not in ("'", '"') or raw[-1] != quote or raw[1:-1] != inner:
        return ""
    return "" if quote == '"' and "\\" in raw else quote


def _escape_in(quote: str, text: str) -> str:
    """`text` written inside `quote` quotes so that the shell reads it back unchanged."""
    if quote == '"':
        return re.sub(r'(["\\$`])', r"\\\1", text)
    return text.replace("'", "'\"'\"'")


def _group_separator(text: str, words: Sequence[Word]) -> str:
    """A new continued line when the command is written one flag group per line, else a space."""
    last = words[-1]
    ls = text.rfind("\n", 0, last.start) + 1
    first_line_start = text.rfind("\n", 0, words[0].start) + 1
    if ls <= first_line_start:
        return " "
    # the group holding the last word starts a line: its indentation is the one to use
    i = len(words) - 1
    while i > 0 and not words[i].value.startswith("-"):
        i -= 1
    gs = text.rfind("\n", 0, words[i].start) + 1
    indent = text[gs : words[i].start]
    if indent.strip(" \t"):
        return " "
    return " \\\n" + indent


# --- the rewrite -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A command after changes: the new ExecStart argv, the new text of the file that holds it."""

    before: LaunchCommand
    after: LaunchCommand
    exec_start: tuple[str, ...]
    file_text: str  # the new script (SCRIPT, SCRIPT_SHELL); "" otherwise
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.after.argv != self.before.argv or self.exec_start != self.before.exec_start


def apply_changes(inv: LaunchCommand, changes: Sequence[FlagChange]) -> Rewrite:
    """Apply the changes in order to the command, in memory. Never raises: what fails becomes a note."""
    notes: list[str] = []
    current = inv
    for change in changes:
        ops, change_notes = _plan(current, change)
        notes += change_notes
        if not ops:
            continue
        try:
            current = _realise(current, _merge_deletes(ops))
        except (ValueError, IndexError) as exc:
            notes.append(f"crashdoc could not edit the command for {describe(change)}: {exc}")
    notes += _verify(current, changes)
    exec_start = current.exec_start
    file_text = current.file_text if current.where in (Where.SCRIPT, Where.SCRIPT_SHELL) else ""
    return Rewrite(inv, current, exec_start, file_text, tuple(dict.fromkeys(notes)))


def _realise(inv: LaunchCommand, ops: list[_Op]) -> LaunchCommand:
    if inv.where is Where.ARGV:
        argv = _edit_argv(inv.exec_start, ops)
        after = parse_argv(argv)
        if after is None:
            raise ValueError("the edited command no longer starts SGLang")
        return after
    spans = _text_spans(inv.text, inv.words, ops)
    new_text = _apply_spans(inv.text, spans)
    if inv.where is Where.ARGV_SHELL:
        argv = list(inv.exec_start)
        argv[inv.argv_index] = new_text
        found = parse_text(new_text, Where.ARGV_SHELL, exec_start=argv, argv_index=inv.argv_index)
    elif inv.where is Where.SCRIPT:
        found = parse_text(new_text, Where.SCRIPT, exec_start=inv.exec_start, path=inv.path, file_text=new_text)
    else:
        s, e = inv.outer
        file_text, end = _edit_quoted_word(inv.file_text, s, e, inv.text, spans, new_text)
        found = parse_text(
            new_text,
            Where.SCRIPT_SHELL,
            exec_start=inv.exec_start,
            path=inv.path,
            file_text=file_text,
            outer=(s, end),
        )
    same = [f for f in found if f.command_index == inv.command_index]
    if not same:
        raise ValueError("the edited text no longer starts SGLang at the same place")
    return same[0]


def _verify(inv: LaunchCommand, changes: Sequence[FlagChange]) -> list[str]:
    """Re-read the edited command and say so when a change did not take (it should always take)."""
    notes = []
    final: dict[str, tuple[str, ...] | None] = {}
    for c in changes:
        if is_environment(c.flag):
            continue  # variables are checked where they are written (command, script or drop-in)
        flag = _normalise(c.flag)
        if c.action == "replace":
            final[flag] = None
            final[_normalise(c.new_flag or flag)] = change_values(c.value)
        elif c.action == "remove":
            final[flag] = None
        elif c.action == "set":
            final[flag] = change_values(c.value)
    for flag, want in final.items():
        got = inv.values(*spellings(flag))
        if got != want:
            shown = "absent" if want is None else " ".join(flag_words(flag, want))
            notes.append(f"after the edit, {flag} should be {shown} but reads {got!r}: check the command.")
    return notes


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
    if inv.where is Where.SCRIPT_SHELL and rw.changed and not _plain_quote(inv.file_text[slice(*inv.outer)], inv.text):
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
    located: Located = find_invocation(exec_start, read, working_directory=working_directory)
    if located.invocation is None:
        return Fix(
            summary=redact(summary), changes=list(changes), warnings=[redact(w) for w in (*warnings, *located.problems)]
        )
    plan = plan_fix(unit, located.invocation, changes, read=read, drop_in_paths=drop_in_paths)
    extra = list(located.problems)
    if located.others:
        spans = ", ".join(f"lines {o.lines[0]}-{o.lines[1]}" for o in located.others)
        extra.append(
            f"{located.invocation.path} also starts SGLang at {spans}; crashdoc changed lines "
            f"{located.invocation.lines[0]}-{located.invocation.lines[1]} only."
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
