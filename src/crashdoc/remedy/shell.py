"""A shell text read as a POSIX shell reads it, with the byte offsets of every word: quotes, escapes,
`$(...)` and backticks, here-documents, comments, operators and redirections. `remedy.commandline` finds the
SGLang command in what this reads, and `remedy.fix` edits only the words that change, leaving continuations,
quoting, comments and `$VARIABLES` exactly as written. Nothing here raises on bad input: syntax problems
are reported with the commands read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Words a shell reads before a command (`then exec python ...`): not part of the command.
SHELL_RESERVED: frozenset[str] = frozenset(
    {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time", "fi", "done", "}"}
)
# A word that may expand to several arguments: `$EXTRA_ARGS` unquoted, `"$@"`, `"${ARGS[@]}"`.
_MULTI_EXPANSION = re.compile(r'"?\$(?:@|\*|\{\w+\[[@*]\]\}|\{[@*]\})"?')
_BARE_EXPANSION = re.compile(r"\$(?:\w+|\{[^}]*\})")
# An unquoted variable named like a list of arguments (`$EXTRA_ARGS`, `${SGLANG_OPTS}`) holds flags; any other
# (`--model-path $MODEL`) is one value.
_ARGS_VARIABLE = re.compile(r"\$\{?\w*(?:ARGS|OPTS|OPTIONS|FLAGS|EXTRA|PARAMS)\w*", re.I)


@dataclass(frozen=True, slots=True)
class Word:
    """One shell word (or argv element) and where its source text is."""

    value: str  # after quote removal; `$VAR`, `${X:-8}`, `$(cmd)` are kept verbatim
    start: int = -1  # offsets of the raw text in LaunchCommand.text; -1 for an argv element
    end: int = -1
    multi: bool = False  # expands to several arguments (`"$@"`, `$EXTRA_ARGS`): flags may hide in it
    bare: bool = False  # an unquoted `$VAR` / `${VAR}`


@dataclass(slots=True)
class ShellCommand:
    """One simple command of a shell text, in order; `words` exclude redirections and leading keywords."""

    words: list[Word] = field(default_factory=list)


@dataclass(slots=True)
class _Scanner:
    """A POSIX-shell word reader that keeps offsets. Never raises: bad syntax ends the word or the text."""

    text: str
    problems: list[str] = field(default_factory=list)
    commands: list[ShellCommand] = field(default_factory=list)

    def scan(self) -> list[ShellCommand]:
        text, n = self.text, len(self.text)
        i = 0
        current = ShellCommand()
        heredocs: list[tuple[str, bool]] = []

        def finish() -> None:
            nonlocal current
            words = current.words
            while words and words[0].value in SHELL_RESERVED and words[0].end - words[0].start == len(words[0].value):
                words.pop(0)
            if words:
                self.commands.append(ShellCommand(words))
            current = ShellCommand()

        while i < n:
            c = text[i]
            if c in " \t\r":
                i += 1
            elif c == "\\" and text.startswith("\n", i + 1):
                i += 2
            elif c == "\n":
                finish()
                i += 1
                if heredocs:
                    i = self._skip_heredocs(i, heredocs)
                    heredocs = []
            elif c == "#":
                j = text.find("\n", i)
                i = n if j < 0 else j
            else:
                m = _REDIRECTION.match(text, i)
                if m:
                    i = self._skip_blanks(m.end())
                    if i < n and text[i] not in "\n;&|()<>":
                        target, i = self._word(i)
                        if m["op"] in ("<<", "<<-"):
                            heredocs.append((target.value, m["op"] == "<<-"))
                    continue
                op = next((o for o in _OPERATORS if text.startswith(o, i)), None)
                if op:
                    finish()
                    i += len(op)
                    continue
                word, i = self._word(i)
                current.words.append(word)
        finish()
        return self.commands

    def _skip_blanks(self, i: int) -> int:
        text = self.text
        while i < len(text):
            if text[i] in " \t":
                i += 1
            elif text.startswith("\\\n", i):
                i += 2
            else:
                break
        return i

    def _skip_heredocs(self, i: int, heredocs: list[tuple[str, bool]]) -> int:
        text = self.text
        for delimiter, strip_tabs in heredocs:
            while i < len(text):
                j = text.find("\n", i)
                line = text[i:] if j < 0 else text[i:j]
                i = len(text) if j < 0 else j + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
            else:
                self.problems.append(f"here-document {delimiter!r} is not terminated")
        return i

    def _word(self, i: int) -> tuple[Word, int]:
        text, n = self.text, len(self.text)
        start = i
        out: list[str] = []
        while i < n:
            c = text[i]
            if c in " \t\n\r;&|()<>":
                break
            if c == "\\":
                if i + 1 < n:
                    if text[i + 1] != "\n":
                        out.append(text[i + 1])
                    i += 2
                else:
                    out.append(c)
                    i += 1
            elif c == "'":
                j = text.find("'", i + 1)
                if j < 0:
                    self.problems.append(f"unterminated single quote at offset {i}")
                    j = n - 1
                out.append(text[i + 1 : j])
                i = j + 1
            elif c == '"':
                i = self._double_quoted(i + 1, out)
            elif c == "$" and text.startswith("$'", i):
                j = i + 2
                while j < n and text[j] != "'":
                    j += 2 if text[j] == "\\" else 1
                out.append(text[i : j + 1])
                i = min(j + 1, n)
            elif c == "$" or c == "`":
                i = self._kept_expansion(i, out)
            else:
                out.append(c)
                i += 1
        raw = text[start:i]
        value = "".join(out)
        bare = bool(_BARE_EXPANSION.fullmatch(raw))
        return (
            Word(
                value,
                start,
                i,
                multi=bool(_MULTI_EXPANSION.fullmatch(raw) or (bare and _ARGS_VARIABLE.match(raw))),
                bare=bare,
            ),
            i,
        )

    def _double_quoted(self, i: int, out: list[str]) -> int:
        text, n = self.text, len(self.text)
        while i < n:
            c = text[i]
            if c == '"':
                return i + 1
            if c == "\\" and i + 1 < n:
                nxt = text[i + 1]
                if nxt in '$`"\\':
                    out.append(nxt)
                elif nxt != "\n":
                    out.append(c + nxt)
                i += 2
            elif c == "$" or c == "`":
                i = self._kept_expansion(i, out)
            else:
                out.append(c)
                i += 1
        self.problems.append("unterminated double quote")
        return n

    def _kept_expansion(self, i: int, out: list[str]) -> int:
        """An expansion starting at i, kept as written (the shell would expand it at run time); where it ends."""
        j = self._expansion_end(i)
        out.append(self.text[i:j])
        return j

    def _expansion_end(self, i: int) -> int:
        """End of `$NAME`, `${...}`, `$(...)`, `$((...))` or a backquoted command starting at i."""
        text, n = self.text, len(self.text)
        if text[i] == "`":
            j = i + 1
            while j < n and text[j] != "`":
                j += 2 if text[j] == "\\" else 1
            return min(j + 1, n)
        if i + 1 >= n:
            return n
        nxt = text[i + 1]
        if nxt in "({":
            close = ")" if nxt == "(" else "}"
            depth, j = 0, i + 1
            while j < n:
                c = text[j]
                if c == "\\":
                    j += 2
                    continue
                if c == "'" and close == ")":
                    k = text.find("'", j + 1)
                    j = n if k < 0 else k + 1
                    continue
                if c == '"':
                    sink: list[str] = []
                    j = self._double_quoted(j + 1, sink)
                    continue
                if c == nxt:
                    depth += 1
                elif c == close:
                    depth -= 1
                    if depth == 0:
                        return j + 1
                j += 1
            self.problems.append(f"unterminated ${nxt} at offset {i}")
            return n
        m = re.compile(r"\$(?:[A-Za-z_]\w*|[0-9@*#?$!-])").match(text, i)
        return m.end() if m else i + 1


_REDIRECTION = re.compile(r"(?:\d+|\{\w+\})?(?P<op>&>>|&>|<<<|<<-|<<|<>|>>|>&|<&|>\||>|<)")


_OPERATORS = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")")


def scan_shell(text: str) -> tuple[list[ShellCommand], list[str]]:
    """The simple commands of a shell text, with word offsets; also the syntax problems met on the way."""
    scanner = _Scanner(text)
    try:
        commands = scanner.scan()
    except (IndexError, ValueError) as exc:  # a bug here must not cost the diagnosis
        return scanner.commands, [*scanner.problems, f"could not read the shell text: {exc}"]
    return commands, scanner.problems
