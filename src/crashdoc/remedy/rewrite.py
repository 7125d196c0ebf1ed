"""A launch command rewritten: flag changes turned into edits of its words (argv) and of its shell text (a
script, a `bash -c` string), then read back to check that the new text says what was asked.

Only the words that change are touched, so continuations, quoting, comments and `$VARIABLES` stay as written;
a value is quoted the way the word it replaces was. `remedy.fix` turns the result into the diff and the
commands a human runs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from crashdoc.events import FlagChange
from crashdoc.matching.flagnames import canonical, spellings
from crashdoc.remedy.commandline import Flag, LaunchCommand, Where, Word, is_flag, parse_argv, parse_text

ACTIONS: tuple[str, ...] = ("replace", "remove", "add", "set")
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
    quote = plain_quote(file_text[s:e], inner)
    if not quote:
        quoted = _quote(new_inner)
        return file_text[:s] + quoted + file_text[e:], s + len(quoted)
    shifted = [_Span(s + 1 + sp.start, s + 1 + sp.end, _escape_in(quote, sp.text)) for sp in spans]
    new_file = _apply_spans(file_text, shifted)
    return new_file, e + len(new_file) - len(file_text)


def plain_quote(raw: str, inner: str) -> str:
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
