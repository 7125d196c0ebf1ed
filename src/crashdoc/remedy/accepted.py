"""The remedy stage after the engine: each diagnosis's fix searched for one SGLang accepts.

The engine diagnoses; this stage takes its diagnoses and the command that failed (a unit's, a pasted one, or
`--command`) and replaces each flag fix by what `search.accepted_fix` found: checked by SGLang when an
interpreter may be run, ranked with the release's argument facts when not. The engine's own records are never
touched: diagnoses are copied.
"""

from __future__ import annotations

import ast
import queue
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from crashdoc.diagnosis.engine import UnitRecord
from crashdoc.events import Diagnosis, FlagChange
from crashdoc.matching.derived import DerivedLibrary, release_key
from crashdoc.remedy.argfacts import ArgFacts, FactsLibrary
from crashdoc.remedy.candidates import Failure
from crashdoc.remedy.commandline import LaunchCommand, Reader, find_invocation, read_text_file
from crashdoc.remedy.fix import describe
from crashdoc.remedy.search import DEFAULT_BUDGET, Budget, SearchResult, Understand, accepted_fix

# a usage error of SGLang's argparse: `launch_server.py: error: argument --x: invalid choice: ...`
_USAGE = re.compile(
    r"(?:^|\s)(?:[\w./-]+: )?error: (?P<what>(?:argument |unrecognized arguments|ambiguous option|the following).*)"
)


def facts_for(library: FactsLibrary, release: str | None) -> tuple[ArgFacts | None, str]:
    """The release's facts; an unknown or unshipped release gets the nearest older shipped one, said so."""
    releases = library.releases
    if not releases:
        return None, "crashdoc ships no argument facts"
    if release and release in releases:
        return library.get(release), ""
    if release:
        older = [r for r in releases if release_key(r) <= release_key(release)]
        chosen = older[-1] if older else releases[0]
        return library.get(chosen), f"SGLang {release} is not shipped: the facts of {chosen} were used"
    return library.get(releases[-1]), f"the release is unknown: the facts of {releases[-1]} (the newest) were used"


def understand_with(derived: DerivedLibrary | None, release: str | None) -> Understand:
    """An error's failure as crashdoc reads it: with the derived check's condition when one matches."""

    def understand(kind: str, message: str, curated: Sequence[FlagChange] = ()) -> Failure:
        usage = _USAGE.search(message)
        if kind == "SystemExit" or usage:
            return Failure(
                "SystemExit", usage.group("what") if usage else message, stage="parse", curated=tuple(curated)
            )
        match = derived.match(message.split("\n", 1)[0], kind, release) if derived is not None else None
        if match is None:
            return Failure(kind, message, curated=tuple(curated))
        sig = match.signature
        return Failure(kind, message, sig.condition, sig.kind, tuple(curated) or sig.fix, stage="resolve")

    return understand


def searchable(d: Diagnosis) -> bool:
    """A failure a change of SGLang's arguments may fix: not a runtime failure whose action crashdoc computed
    from the run's own numbers, nor one of the hardware or of resources (no flag makes a GPU healthy)."""
    if d.fix.why or d.kind in ("resource", "hardware-network") or d.signature == "unexplained":
        return False
    return bool(d.root_cause.type or d.root_cause.line)


def release_checks(derived: DerivedLibrary | None, release: str) -> list[Failure]:
    """The release's checks that crashdoc read from its source, with their conditions (for `search._ahead`)."""
    if derived is None or not release:
        return []
    return [
        Failure(sig.exception_type, sig.template, sig.condition, sig.kind, sig.fix, stage="resolve")
        for sig in derived.signatures()
        if sig.condition and release in sig.releases
    ]


_ASSERT_FRAME = re.compile(r'^[ \t]*File "[^"\n]+", line \d+, in [^\n]+\n[ \t]+(assert\b[^\n]*)$', re.M)


def assert_condition(text: str) -> str:
    """The condition of the last `assert` a pasted traceback shows (for an AssertionError without a message)."""
    found = _ASSERT_FRAME.findall(text)
    if not found:
        return ""
    try:
        node = ast.parse(found[-1].strip()).body[0]
    except (SyntaxError, ValueError, IndexError, RecursionError):
        return ""  # an assert over several lines: its first line alone does not parse
    return ast.unparse(node.test) if isinstance(node, ast.Assert) else ""


def failure_of(d: Diagnosis, understand: Understand, asserted: str = "") -> Failure:
    curated = tuple(c for c in d.fix.changes if not c.placeholder)
    line = d.root_cause.line
    usage = _USAGE.search(line) or _USAGE.search(d.root_cause.message)
    if usage:
        reviewed = d.signature is not None and not d.derived
        return Failure("SystemExit", usage.group("what"), stage="parse", curated=curated, reviewed=reviewed)
    failure = understand(d.root_cause.type.rsplit(".", 1)[-1], d.root_cause.message)
    reviewed = bool(curated) and d.signature is not None and not d.derived
    if asserted and not failure.condition and d.root_cause.type.endswith("AssertionError"):
        failure = replace(failure, condition=asserted, kind="assert")
    return replace(failure, curated=curated or failure.curated, reviewed=reviewed)


def with_result(d: Diagnosis, result: SearchResult, note: str = "") -> Diagnosis:
    """A copy of the diagnosis presenting the search's answer (the diagnosis itself when the search had nothing
    to say: no change, no command, nothing checked)."""
    fix = d.fix
    before = [(c.action, c.flag, c.value, c.new_flag) for c in fix.changes]
    after = [(c.action, c.flag, c.value, c.new_flag) for c in result.changes]
    if not result.checked and result.command is None and (not result.changes or after == before):
        return d  # nothing checked, nothing to correct, nothing new: the diagnosis says it already
    warnings = list(fix.warnings)
    summary = fix.summary
    changes = list(fix.changes)
    if result.changes and after != before:
        changes = list(result.changes)
        summary = f"{'; '.join(f'`{describe(c)}`' for c in result.changes)}: {result.why}."
        if not fix.changes and not result.checked:  # the diagnosis's own advice, unchecked: keep it beside
            summary = f"{summary} {fix.summary}"
        gone = {c.flag for c in fix.changes} - {c.flag for c in result.changes}
        warnings = [w for w in warnings if not any(flag in w for flag in gone)]
        if fix.changes:
            warnings.append(f"crashdoc's first answer was {'; '.join(f'`{describe(c)}`' for c in fix.changes)}")
    elif not result.changes and result.status == "none" and result.checked:
        changes = []  # SGLang was asked, and rejected every change crashdoc could justify: none is shown
    if note:
        warnings.append(note)
    return replace(
        d,
        fix=replace(
            fix,
            summary=summary,
            changes=changes,
            command=result.command if result.command else fix.command,
            verified=result.verified,
            why=[*fix.why, *result.tried],
            warnings=list(dict.fromkeys(warnings)),
            diff=fix.diff if changes == list(fix.changes) else None,
            apply=list(fix.apply) if changes == list(fix.changes) else [],
            rollback=list(fix.rollback) if changes == list(fix.changes) else [],
        ),
    )


def accept_fixes(
    diagnoses: Sequence[Diagnosis],
    command: LaunchCommand | None,
    *,
    facts: FactsLibrary,
    derived: DerivedLibrary | None,
    interpreter: str | None = None,
    budget: Budget = DEFAULT_BUDGET,
    logged: Mapping[str, str] | None = None,
    asserted: str = "",
) -> list[Diagnosis]:
    """Each searchable diagnosis with the fix the search found; the others as they are. `asserted`: the
    condition of the `assert` the log shows, for an AssertionError that says nothing else."""
    out = []
    checks: dict[str, list[Failure]] = {}
    for d in diagnoses:
        if not searchable(d) or (command is None and any(not c.placeholder for c in d.fix.changes)):
            out.append(d)  # without the command, what it sets is unknown: a fix the diagnosis has stands
            continue
        release = d.sglang_version or None
        chosen, note = facts_for(facts, release)
        understand = understand_with(derived, release)
        if chosen is not None and chosen.release not in checks and interpreter is None:
            checks[chosen.release] = release_checks(derived, chosen.release)
        result = accepted_fix(
            failure_of(d, understand, asserted), command, release, chosen, interpreter, budget, logged=logged,
            understand=understand, checks=checks.get(chosen.release, []) if chosen is not None else [],
        )  # fmt: skip
        out.append(with_result(d, result, note if result.changes else ""))
    return out


def logged_arguments(text: str) -> dict[str, str]:
    """The last `server_args=ServerArgs(...)` (or `server_args={...}`) a log shows: flag -> value."""
    from crashdoc.assembly.markers import parse_server_args

    found: dict[str, str] = {}
    for line in text.splitlines():
        if "server_args=" in line:
            found = parse_server_args(line) or found
    return found


def accept_pasted(
    text: str,
    diagnoses: Sequence[Diagnosis],
    *,
    command_text: str | None,
    interpreter: str | None,
    facts: FactsLibrary,
    derived: DerivedLibrary | None,
    budget: Budget = DEFAULT_BUDGET,
) -> list[Diagnosis]:
    """`explain`: the command from `--command` or the paste, the values the log shows, then `accept_fixes`."""
    from crashdoc.remedy.pasted import command_in_paste, parse_command

    if not any(searchable(d) for d in diagnoses):
        return list(diagnoses)
    pasted = parse_command(command_text) if command_text is not None else command_in_paste(text)
    logged = logged_arguments(text)
    note = ""
    if pasted.command is None and (command_text is not None or pasted.text):
        note = f"crashdoc could not read the launch command ({pasted.problem}); the diagnosis stands"
    found = accept_fixes(
        diagnoses, pasted.command, facts=facts, derived=derived, interpreter=interpreter, budget=budget,
        logged=logged, asserted=assert_condition(text),
    )  # fmt: skip
    if note:
        found = [
            replace(d, fix=replace(d.fix, warnings=[*d.fix.warnings, note])) if searchable(d) else d for d in found
        ]
    return found


def accept_unit_fixes(
    diagnoses: Sequence[Diagnosis],
    units: Mapping[str, UnitRecord],
    *,
    facts: FactsLibrary,
    derived: DerivedLibrary | None,
    check: bool = True,
    budget: Budget = DEFAULT_BUDGET,
    read: Reader = read_text_file,
) -> list[Diagnosis]:
    """`diagnose` (synchronous) and, later, the daemon's remedy stage: each unit's failure searched on the
    unit's own command (its ExecStart from D-Bus) and checked by the unit's own interpreter, the fix then
    applied to the unit's files as any fix is (drop-in or script, diff, apply and rollback)."""
    from crashdoc.remedy.fix import synthesize_fix
    from crashdoc.remedy.verify import interpreter_of, unit_cmdline, unsafe_to_run

    out = []
    for d in diagnoses:
        rec = units.get(d.unit)
        cmdline = unit_cmdline(rec, d.invocation) if rec is not None else ()
        if not searchable(d) or not cmdline:
            out.append(d)
            continue
        command = find_invocation(cmdline, read).invocation
        interpreter = None
        if command is not None and check:
            interpreter, _ = interpreter_of(command, read)
            if interpreter is not None and (unsafe_to_run(interpreter) or command.expansions):
                interpreter = None
        chosen, note = facts_for(facts, d.sglang_version or None)
        understand = understand_with(derived, d.sglang_version or None)
        result = accepted_fix(
            failure_of(d, understand), command, d.sglang_version or None, chosen, interpreter, budget,
            understand=understand,
        )  # fmt: skip
        found = with_result(d, result, note if result.changes else "")
        if found is not d and found.fix.changes and found.fix.changes != d.fix.changes:
            drop_ins = rec.state.drop_in_paths if rec is not None and rec.state is not None else ()
            made = synthesize_fix(d.unit, cmdline, found.fix.changes, found.fix.summary, read=read,
                                  drop_in_paths=drop_ins, warnings=found.fix.warnings)  # fmt: skip
            found = replace(found, fix=replace(found.fix, command=made.command, diff=made.diff, apply=made.apply,
                                               rollback=made.rollback, warnings=made.warnings))  # fmt: skip
        out.append(found)
    return out


class FixSearcher:
    """The daemon's remedy stage, ready to wire: a loop's diagnosis is queued (`request`, from the engine's thread:
    no waiting), searched on a worker thread of its own (the SGLang checks run in child processes, never under the
    daemon's lock nor on its reading thread), and the answer served by `annotate` to /diagnoses, alerts and pages.
    Results are kept by the unit's command and the failure's fingerprint."""

    def __init__(
        self,
        *,
        facts: FactsLibrary,
        derived: DerivedLibrary | None,
        budget: Budget = DEFAULT_BUDGET,
        on_done: Callable[[str, Diagnosis], None] = lambda unit, d: None,
        size: int = 256,
        read: Reader = read_text_file,
    ) -> None:
        self._facts, self._derived, self._budget, self._on_done, self._size = facts, derived, budget, on_done, size
        self._read = read
        self._results: OrderedDict[tuple[object, ...], Diagnosis | None] = OrderedDict()
        self._queue: queue.Queue[tuple[tuple[object, ...], Diagnosis, UnitRecord] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _key(d: Diagnosis, rec: UnitRecord) -> tuple[object, ...]:
        cmdline = rec.state.exec_start if rec.state is not None else ()
        return (d.unit, tuple(cmdline), d.fingerprint)

    def request(self, d: Diagnosis, rec: UnitRecord) -> None:
        """Queue a search for this diagnosis (a copy of the unit's record's state is all it reads)."""
        if not searchable(d) or rec.state is None or not rec.state.exec_start:
            return
        key = self._key(d, rec)
        with self._lock:
            if key in self._results:
                return
            self._results[key] = None  # pending
            while len(self._results) > self._size:
                self._results.popitem(last=False)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="crashdoc-search", daemon=True)
                self._thread.start()
        self._queue.put((key, d, rec))

    def annotate(self, diagnoses: Sequence[Diagnosis], units: Mapping[str, UnitRecord]) -> list[Diagnosis]:
        out = []
        for d in diagnoses:
            rec = units.get(d.unit)
            with self._lock:
                found = self._results.get(self._key(d, rec)) if rec is not None else None
            out.append(found if found is not None else d)
        return out

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=timeout)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            key, d, rec = item
            try:
                [found] = accept_unit_fixes(
                    [d], {d.unit: rec}, facts=self._facts, derived=self._derived, budget=self._budget, read=self._read
                )
            except Exception as exc:  # never let a search take the daemon down
                note = f"the search for a fix SGLang accepts failed: {type(exc).__name__}: {exc}"
                found = replace(d, fix=replace(d.fix, warnings=[*d.fix.warnings, note]))
            with self._lock:
                self._results[key] = found
            self._on_done(d.unit, found)
