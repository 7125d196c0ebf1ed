"""Finds the SGLang launch command behind a unit's ExecStart, wherever it hides (`find_launch_command`).

A fix names a flag; to show the corrected command and a minimal diff, crashdoc must know where the flag is
written: directly in ExecStart, in a `bash -c` string, or in the launch script ExecStart runs (through
wrappers such as numactl, env, taskset, docker). Scripts are read by `remedy.shell`, which keeps the byte
offsets of every word, so that `remedy.fix` can edit only the words that change. Nothing here runs anything,
and nothing raises on bad input: unreadable files and unparsable text are reported in `Located.problems`.
"""

from __future__ import annotations

import bisect
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType

from crashdoc.remedy.shell import Word, scan_shell

# What starts SGLang: `python -m <module>` for these modules, or `<program> <subcommand>`.
# `crashdoc.sandbox.fake_sglang` is crashdoc's own stand-in for SGLang in the demo sandbox, started the same way.
SGLANG_MODULES: frozenset[str] = frozenset(
    {
        "sglang.launch_server",
        "sglang_router.launch_server",
        "sglang_router.launch_router",
        "crashdoc.sandbox.fake_sglang",
    }
)
SGLANG_PROGRAMS: Mapping[str, str] = MappingProxyType({"sglang": "serve"})
# Python's own options that take a value (`python -X faulthandler -m sglang.launch_server`).
PYTHON_OPTIONS_WITH_VALUE: frozenset[str] = frozenset({"-W", "-X", "--check-hash-based-pycs"})
SHELLS: frozenset[str] = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
# Shell options that take a value: `bash -o pipefail script.sh`, `bash --rcfile f -c '...'`.
SHELL_OPTIONS_WITH_VALUE: frozenset[str] = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
MAX_SCRIPT_BYTES = 1 << 20
MAX_DEPTH = 4  # a unit runs a script that execs a script that runs `bash -c`: deeper is not a launch path


@dataclass(frozen=True, slots=True)
class WrapperSpec:
    """How a wrapper program's own arguments end and the wrapped command begins."""

    options_with_value: frozenset[str] = frozenset()
    positionals: int = 0  # arguments before the command: taskset's mask, timeout's duration
    assignments: bool = False  # env: NAME=VALUE words before the command
    opaque: bool = False  # too many options to model (docker, uv run): everything up to the launcher is its
    subcommand: str = ""  # `uv run`, `conda run`, `docker run`


def _options(spec: str) -> frozenset[str]:
    return frozenset(spec.split())


# Read-only: the table is data, not a registry to extend at run time.
WRAPPERS: Mapping[str, WrapperSpec] = MappingProxyType(
    {
        "exec": WrapperSpec(_options("-a")),
        "env": WrapperSpec(_options("-u --unset -C --chdir -S --split-string"), assignments=True),
        "numactl": WrapperSpec(
            _options(
                "-m --membind -N --cpunodebind -C --physcpubind -i --interleave -p --preferred -P --preferred-many "
                "-w --weighted-interleave"
            )
        ),
        "taskset": WrapperSpec(positionals=1),
        "nice": WrapperSpec(_options("-n --adjustment")),
        "ionice": WrapperSpec(_options("-c --class -n --classdata -p --pid -P -u")),
        "chrt": WrapperSpec(positionals=1),
        "stdbuf": WrapperSpec(_options("-i -o -e --input --output --error")),
        "timeout": WrapperSpec(_options("-s --signal -k --kill-after"), positionals=1),
        "nohup": WrapperSpec(),
        "setsid": WrapperSpec(),
        "sudo": WrapperSpec(_options("-u -g -C -D -h -p -r -t -U"), assignments=True),
        "runuser": WrapperSpec(_options("-u -g -G")),
        "prlimit": WrapperSpec(_options("-p --pid")),
        "srun": WrapperSpec(
            _options(
                "-n --ntasks -N --nodes -c --cpus-per-task -p --partition -w --nodelist -J --job-name -t --time "
                "-G --gpus -A --account --gres --mem --container-image --container-mounts -o --output -e --error"
            )
        ),
        "mpirun": WrapperSpec(_options("-n -np -H --host -x --map-by --bind-to")),
        "systemd-run": WrapperSpec(_options("-u --unit -p --property -E --setenv --slice -M --machine")),
        "systemd-inhibit": WrapperSpec(_options("--what --who --why --mode")),
        "torchrun": WrapperSpec(opaque=True),
        "uv": WrapperSpec(opaque=True, subcommand="run"),
        "conda": WrapperSpec(opaque=True, subcommand="run"),
        "micromamba": WrapperSpec(opaque=True, subcommand="run"),
        "poetry": WrapperSpec(opaque=True, subcommand="run"),
        "docker": WrapperSpec(opaque=True, subcommand="run"),
        "podman": WrapperSpec(opaque=True, subcommand="run"),
        "nvidia-docker": WrapperSpec(opaque=True, subcommand="run"),
        "apptainer": WrapperSpec(opaque=True, subcommand="exec"),
        "singularity": WrapperSpec(opaque=True, subcommand="exec"),
        "enroot": WrapperSpec(opaque=True, subcommand="start"),
    }
)
CONTAINER_ENGINES: frozenset[str] = frozenset(
    {"docker", "podman", "nvidia-docker", "apptainer", "singularity", "enroot"}
)

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=", re.S)
_PYTHON = re.compile(r"(?:python|pypy)(?:\d+(?:\.\d+)*)?[tdm]?(?:\.exe)?")
_SHORT_FLAG = re.compile(r"-[A-Za-z]")


class Where(StrEnum):
    """Where the SGLang command is written, which decides what a human edits."""

    ARGV = "argv"  # directly in the unit's ExecStart: a drop-in overrides it
    ARGV_SHELL = "argv-shell"  # in a `bash -c '...'` string of ExecStart: a drop-in overrides it
    SCRIPT = "script"  # in a script the unit runs: the script is edited
    SCRIPT_SHELL = "script-shell"  # in a `bash -c '...'` string inside such a script: the script is edited


@dataclass(frozen=True, slots=True)
class Flag:
    """One occurrence of a flag with the values argparse would give it."""

    name: str  # "--hicache-size"
    values: tuple[str, ...]  # ("150",); () for a boolean flag
    index: int  # position of the flag's word in LaunchCommand.words
    nwords: int  # words it occupies: 1 + len(values), or 1 for --flag=value
    inline: bool = False  # written as --flag=value


@dataclass(frozen=True, slots=True)
class Wrapper:
    """A program that runs the next one: `numactl --membind=0`, `env A=B`, `docker run ... image`."""

    name: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LaunchCommand:
    """The SGLang command of a unit: its words, its flags in order, and where it is written."""

    where: Where
    exec_start: tuple[str, ...]
    words: tuple[Word, ...]  # the whole simple command: assignments, wrappers, launcher, arguments
    launcher: int  # index of the word that starts SGLang (`python`, `sglang`)
    args: int  # index of SGLang's first argument
    flags: tuple[Flag, ...]
    positionals: tuple[int, ...] = ()  # indexes of arguments that belong to no flag (`sglang serve MODEL`)
    wrappers: tuple[Wrapper, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()  # NAME=VALUE set on the command line (env, prefixes)
    text: str = ""  # the shell text holding the words (script or -c string); "" for ARGV
    path: str = ""  # the script (SCRIPT, SCRIPT_SHELL)
    file_text: str = ""  # the whole script
    argv_index: int = -1  # ARGV_SHELL: the ExecStart element that holds `text`
    outer: tuple[int, int] = (-1, -1)  # SCRIPT_SHELL: span in file_text of the quoted word holding `text`
    lines: tuple[int, int] = (0, 0)  # first and last line (1-based) of the command in `text`
    command_index: int = 0  # which simple command of `text` it is (to find it again after an edit)

    @property
    def argv(self) -> tuple[str, ...]:
        """The command as the shell would pass it (variables unexpanded)."""
        return tuple(w.value for w in self.words)

    @property
    def sglang_args(self) -> tuple[str, ...]:
        return tuple(w.value for w in self.words[self.args :])

    @property
    def snippet(self) -> str:
        """The lines of `text` that hold the command, as written; the shell-quoted argv for ARGV."""
        if self.where is Where.ARGV:
            return join_argv(self.exec_start)
        lines = self.text.split("\n")  # as `lines` counts them: only \n ends a line
        return "\n".join(lines[self.lines[0] - 1 : self.lines[1]])

    @property
    def container(self) -> str:
        """The container engine SGLang runs in (`docker`), or ""."""
        return next((w.name for w in self.wrappers if w.name in CONTAINER_ENGINES), "")

    @property
    def expansions(self) -> tuple[str, ...]:
        """Arguments that may expand to flags crashdoc cannot see (`$EXTRA_ARGS`, `"$@"`)."""
        out = []
        owned = {i for f in self.flags for i in range(f.index, f.index + f.nwords)}
        for i in range(self.args, len(self.words)):
            w = self.words[i]
            if w.multi or (w.bare and i not in owned):
                out.append(w.value)
        return tuple(out)

    def occurrences(self, *names: str) -> tuple[Flag, ...]:
        return tuple(f for f in self.flags if f.name in names)

    def has(self, *names: str) -> bool:
        return any(f.name in names for f in self.flags)

    def values(self, *names: str) -> tuple[str, ...] | None:
        """The values of the last occurrence of any of `names` (argparse: the last one wins); None if absent.

        Pass every spelling of one option: `values("--tp-size", "--tp", "--tensor-parallel-size")`.
        """
        found = self.occurrences(*names)
        return found[-1].values if found else None

    def value(self, *names: str) -> str | None:
        """Like `values`, joined by spaces: "150" for `--hicache-size 150`, "" for a boolean flag."""
        v = self.values(*names)
        return None if v is None else " ".join(v)


@dataclass(frozen=True, slots=True)
class Located:
    """The result of a search: the launch command crashdoc will fix, others it saw, and what it could not read."""

    command: LaunchCommand | None
    others: tuple[LaunchCommand, ...] = ()
    problems: tuple[str, ...] = ()


Reader = Callable[[str], str]


def read_text_file(path: str) -> str:
    """Reads a script byte-exactly (undecodable bytes survive a round trip), refusing binaries and huge files."""
    with Path(path).open("rb") as f:
        data = f.read(MAX_SCRIPT_BYTES + 1)
    if b"\x00" in data[:4096]:
        return "\x00"  # a binary program: the caller skips it
    if len(data) > MAX_SCRIPT_BYTES:
        raise OSError(f"{path} is larger than {MAX_SCRIPT_BYTES} bytes, not a launch script")
    return data.decode("utf-8", "surrogateescape")


def join_argv(argv: Sequence[str]) -> str:
    """Shell-quote an argv for display, leaving `$VAR` references and `<redacted>` readable."""
    return " ".join(quote_word(a) for a in argv)


def quote_word(value: str) -> str:
    """Quote one argument for a POSIX shell: bare when safe, else single quotes (double for `$VAR` words)."""
    if value == "<redacted>":
        return value
    if value and re.fullmatch(r"[\w@%+=:,./-]+", value):
        return value
    if value and re.fullmatch(r"[\w@%+=:,./${}-]+", value) and "$" in value:
        return '"' + value + '"'
    return "'" + value.replace("'", "'\"'\"'") + "'"


# --- the command -------------------------------------------------------------------------------------


def is_flag(word: str) -> bool:
    """An option word as argparse sees it: `--x`, `-x`; negative numbers (`-1`, `-0.5`) are values."""
    return (word.startswith("--") and len(word) > 2) or bool(_SHORT_FLAG.match(word))


def find_launcher(values: Sequence[str]) -> tuple[int, int] | None:
    """(index of the launcher word, index of SGLang's first argument), or None when SGLang is not started."""
    n = len(values)
    for k, v in enumerate(values):
        if v == "-m" and k + 1 < n and values[k + 1] in SGLANG_MODULES:
            return _python_start(values, k), k + 2
        if v.startswith("-m") and v[2:] in SGLANG_MODULES:
            return _python_start(values, k), k + 1
        base = posixpath.basename(v)
        if base in SGLANG_PROGRAMS and k + 1 < n and values[k + 1] == SGLANG_PROGRAMS[base]:
            return k, k + 2
        if v.endswith(("sglang/launch_server.py", "sglang_router/launch_server.py")) and k > 0:
            return _python_start(values, k), k + 1
    return None


def _python_start(values: Sequence[str], k: int) -> int:
    """Walk back from `-m` over python's own options to the interpreter word."""
    j = k - 1
    while j > 0 and (values[j].startswith("-") or values[j - 1] in PYTHON_OPTIONS_WITH_VALUE):
        j -= 1
    return max(j, 0)


def parse_flags(words: Sequence[Word], start: int) -> tuple[tuple[Flag, ...], tuple[int, ...]]:
    """Group the arguments from `start` into flags with their values (argparse semantics, nargs unknown).

    A value is every following word that is not an option; `--` ends the options. `"$@"` and variables named
    like argument lists (`$EXTRA_ARGS`) end the values: they may hold further flags. Other variables are
    values (`--model-path $MODEL`).
    """
    flags: list[Flag] = []
    positionals: list[int] = []
    i, n = start, len(words)
    while i < n:
        v = words[i].value
        if v == "--":
            positionals.extend(range(i + 1, n))
            break
        if is_flag(v) and not words[i].multi:
            if v.startswith("--") and "=" in v:
                name, _, value = v.partition("=")
                flags.append(Flag(name, (value,), i, 1, inline=True))
                i += 1
                continue
            j = i + 1
            while j < n and not is_flag(words[j].value) and not words[j].multi and words[j].value != "--":
                j += 1
            flags.append(Flag(v, tuple(w.value for w in words[i + 1 : j]), i, j - i))
            i = j
        else:
            positionals.append(i)
            i += 1
    return tuple(flags), tuple(positionals)


def parse_wrappers(values: Sequence[str]) -> tuple[tuple[Wrapper, ...], tuple[tuple[str, str], ...]]:
    """Split the words before the launcher into wrapper programs and NAME=VALUE assignments."""
    wrappers: list[Wrapper] = []
    env: list[tuple[str, str]] = []
    i, n = 0, len(values)
    while i < n and _ASSIGNMENT.match(values[i]):
        name, _, val = values[i].partition("=")
        env.append((name.rstrip("+"), val))
        i += 1
    while i < n:
        name = posixpath.basename(values[i])
        spec = WRAPPERS.get(name)
        j = i + 1
        if spec is None or spec.opaque:
            wrappers.append(Wrapper(name, tuple(values[j:])))
            break
        if spec.subcommand and j < n and values[j] == spec.subcommand:
            j += 1
        positionals = spec.positionals
        while j < n:
            v = values[j]
            if v == "--":
                j += 1
                break
            if v.startswith("-") and len(v) > 1:
                j += 2 if v in spec.options_with_value else 1
            elif spec.assignments and _ASSIGNMENT.match(v):
                k, _, val = v.partition("=")
                env.append((k, val))
                j += 1
            elif positionals:
                positionals -= 1
                j += 1
            else:
                break
        wrappers.append(Wrapper(name, tuple(values[i + 1 : j])))
        i = j
    return tuple(wrappers), tuple(env)


# --- the search --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Search:
    exec_start: tuple[str, ...]
    read: Reader
    working_directory: str
    found: list[LaunchCommand] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def in_argv(self) -> None:
        argv = self.exec_start
        words = tuple(Word(a) for a in argv)
        hit = find_launcher(argv)
        if hit:
            self.found.append(_launch_command(Where.ARGV, self.exec_start, words, hit))
            return
        shell_c = _shell_command_string(argv)
        if shell_c is not None:
            index, text = shell_c
            self.in_text(text, Where.ARGV_SHELL, depth=1, argv_index=index)
            if self.found:
                return
        for candidate in _script_candidates(argv):
            self.in_file(candidate, depth=1)
            if self.found:
                return

    def in_file(self, path: str, depth: int) -> None:
        if not path.startswith("/"):
            path = posixpath.normpath(posixpath.join(self.working_directory, path))
        if path in self.seen or depth > MAX_DEPTH:
            return
        self.seen.add(path)
        try:
            text = self.read(path)
        except (OSError, UnicodeError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.problems.append(f"cannot read {path}: {reason}")
            return
        if "\x00" in text[:4096]:
            return  # a binary (the interpreter itself): not a script
        self.in_text(text, Where.SCRIPT, depth=depth, path=path)

    def in_text(
        self,
        text: str,
        where: Where,
        depth: int,
        *,
        path: str = "",
        argv_index: int = -1,
        file_text: str = "",
        outer: tuple[int, int] = (-1, -1),
    ) -> None:
        commands, problems = scan_shell(text)
        label = path or "the ExecStart command string"
        self.problems.extend(f"{label}: {p}" for p in problems)
        starts = _line_starts(text)
        for index, command in enumerate(commands):
            values = [w.value for w in command.words]
            hit = find_launcher(values)
            if hit:
                first = bisect.bisect_right(starts, command.words[0].start)
                last = bisect.bisect_right(starts, max(command.words[-1].end - 1, 0))
                self.found.append(
                    _launch_command(
                        where,
                        self.exec_start,
                        tuple(command.words),
                        hit,
                        text=text,
                        path=path,
                        file_text=file_text or (text if where is Where.SCRIPT else ""),
                        argv_index=argv_index,
                        outer=outer,
                        lines=(first, last),
                        command_index=index,
                    )
                )
                continue
            if depth >= MAX_DEPTH:
                continue
            shell_c = _shell_command_string(values)
            if shell_c is not None and where is Where.SCRIPT:
                k, inner = shell_c
                w = command.words[k]
                self.in_text(inner, Where.SCRIPT_SHELL, depth + 1, path=path, file_text=text, outer=(w.start, w.end))
                continue
            for candidate in _script_candidates(values, in_script=True):
                self.in_file(candidate, depth + 1)


def _line_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in re.finditer("\n", text))]


def _launch_command(
    where: Where, exec_start: tuple[str, ...], words: tuple[Word, ...], hit: tuple[int, int], **kw: object
) -> LaunchCommand:
    launcher, args = hit
    values = [w.value for w in words]
    flags, positionals = parse_flags(words, args)
    wrappers, env = parse_wrappers(values[:launcher])
    return LaunchCommand(where, exec_start, words, launcher, args, flags, positionals, wrappers, env, **kw)  # type: ignore[arg-type]


def _program_index(values: Sequence[str]) -> int:
    """Index of the first word that is a program, skipping assignments and known wrappers."""
    wrappers, _ = parse_wrappers(values)
    i = 0
    while i < len(values) and _ASSIGNMENT.match(values[i]):
        i += 1
    for w in wrappers:
        if w.name in WRAPPERS and not WRAPPERS[w.name].opaque:
            i += 1 + len(w.args)
        else:
            break
    return i


def _shell_command_string(values: Sequence[str]) -> tuple[int, str] | None:
    """(index, text) of the command string of `sh -c '...'` in these words, if they run a shell that way."""
    i = _program_index(values)
    if i >= len(values) or posixpath.basename(values[i]) not in SHELLS:
        return None
    j = i + 1
    has_c = False
    while j < len(values):
        v = values[j]
        if v in SHELL_OPTIONS_WITH_VALUE:
            j += 2
            continue
        if v.startswith(("-", "+")) and len(v) > 1 and v != "--":
            has_c = has_c or (not v.startswith("--") and "c" in v[1:])
            j += 1
            continue
        break
    if has_c and j < len(values):
        return j, values[j]
    return None


def _script_candidates(values: Sequence[str], *, in_script: bool = False) -> list[str]:
    """Words that may name the launch script: a shell's script argument, or the program itself."""
    i = _program_index(values)
    if i >= len(values):
        return []
    out: list[str] = []
    if posixpath.basename(values[i]) in SHELLS:
        j = i + 1
        while j < len(values) and values[j].startswith(("-", "+")) and len(values[j]) > 1:
            j += 2 if values[j] in SHELL_OPTIONS_WITH_VALUE else 1
        if j < len(values):
            out.append(values[j])
    else:
        program = values[i]
        base = posixpath.basename(program)
        script_like = program.endswith(".sh") or not in_script
        if script_like and not _PYTHON.fullmatch(base) and base not in WRAPPERS and "$" not in program:
            out.append(program)
    return out


def find_launch_command(
    exec_start: Sequence[str], read: Reader = read_text_file, *, working_directory: str = "/"
) -> Located:
    """Find the SGLang command a unit runs, from its ExecStart argv (systemd's D-Bus `ExecStart` argv).

    Looks directly in the argv, in a `sh -c` string, and in the scripts it runs (up to MAX_DEPTH deep).
    When a script starts SGLang in several places (if/else branches), the last one is the launch command and the
    rest are `others`. Never raises: unreadable files and shell syntax problems land in `problems`.
    """
    search = _Search(tuple(exec_start), read, working_directory)
    if not exec_start:
        return Located(None, problems=("the unit has no ExecStart command",))
    try:
        search.in_argv()
    except RecursionError:
        search.problems.append("scripts nest too deep")
    if not search.found:
        problems = list(search.problems)
        problems.append(
            f"no SGLang launch (python -m sglang.launch_server, sglang serve) found in {join_argv(exec_start)}"
        )
        return Located(None, problems=tuple(problems))
    return Located(search.found[-1], tuple(search.found[:-1]), tuple(search.problems))


def parse_text(
    text: str,
    where: Where = Where.SCRIPT,
    *,
    exec_start: Sequence[str] = (),
    path: str = "",
    argv_index: int = -1,
    file_text: str = "",
    outer: tuple[int, int] = (-1, -1),
) -> list[LaunchCommand]:
    """Every SGLang launch command written directly in a shell text (no files are read)."""
    search = _Search(tuple(exec_start), _no_files, "/")
    search.in_text(text, where, depth=MAX_DEPTH, path=path, argv_index=argv_index, file_text=file_text, outer=outer)
    return search.found


def parse_argv(exec_start: Sequence[str]) -> LaunchCommand | None:
    """The SGLang launch command written directly in an argv, or None."""
    words = tuple(Word(a) for a in exec_start)
    hit = find_launcher(tuple(exec_start))
    return _launch_command(Where.ARGV, tuple(exec_start), words, hit) if hit else None


def _no_files(path: str) -> str:
    raise OSError(f"{path}: not read")
