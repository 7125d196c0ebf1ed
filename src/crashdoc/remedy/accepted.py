"""A diagnosis's fix searched for one SGLang accepts: what `RemedyStage.check` runs for a flag failure.

The engine diagnoses; the remedy stage hands each diagnosis and the command that failed (the unit's, found
behind its ExecStart; a pasted one, or `--command`) to `FixSearch`, which replaces the flag fix by what
`search.accepted_fix` found: checked by SGLang when an interpreter may be run (the unit's own, or the one the
operator names), ranked with the release's argument facts when not. Diagnoses are copied, never changed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from crashdoc.events import Diagnosis, FlagChange
from crashdoc.matching.derived import DerivedLibrary, fix_of, release_key
from crashdoc.matching.protection import protection_notes
from crashdoc.remedy.argfacts import ArgFacts, FactsLibrary, load_shipped
from crashdoc.remedy.commandline import LaunchCommand
from crashdoc.remedy.failing import Failure
from crashdoc.remedy.rewrite import describe, is_environment
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
    from the run's own numbers, nor one of the hardware or of resources (no flag makes a GPU healthy). An
    argparse usage error is always one, even when crashdoc computed its fix (the closest of the choices)."""
    if d.kind in ("resource", "hardware-network") or d.signature == "unexplained":
        return False
    if d.fix.why and not _USAGE.search(d.root_cause.line):
        return False
    if d.fix.changes and all(is_environment(c.flag) for c in d.fix.changes):
        return False  # the environment only (CUDA_HOME, a package): SGLang's argument checks cannot judge it
    return bool(d.root_cause.type or d.root_cause.line)


class ReleaseChecks:
    """The release's checks that crashdoc read from its source, with their conditions (for `search._ahead`): read
    anew from the derived records on each pass (~10 ms), not kept (a release's 1,100 checks hold 0.74 MB while a
    search lives). False when there can be none (no library, no release)."""

    def __init__(self, derived: DerivedLibrary | None, release: str) -> None:
        self._derived, self._release = derived, release

    def __bool__(self) -> bool:
        return self._derived is not None and bool(self._release) and len(self._derived) > 0

    def __iter__(self) -> Iterator[Failure]:
        if self._derived is None or not self._release:
            return
        for r in self._derived.records_in(self._release):  # from the records: no signature built
            if r.get("condition"):
                yield Failure(
                    r["type"], r["template"], r["condition"], r.get("kind", "raise"), fix_of(r), stage="resolve"
                )


def release_checks(derived: DerivedLibrary | None, release: str) -> list[Failure]:
    """The release's checks, read once (`ReleaseChecks`)."""
    return list(ReleaseChecks(derived, release))


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
        warnings.extend(protection_notes(result.changes))
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


def logged_arguments(text: str) -> dict[str, str]:
    """The last `server_args=ServerArgs(...)` (or `server_args={...}`) a log shows: flag -> value."""
    from crashdoc.assembly.markers import parse_server_args

    found: dict[str, str] = {}
    for line in text.splitlines():
        if "server_args=" in line:
            found = parse_server_args(line) or found
    return found


@dataclass(frozen=True, slots=True)
class Pasted:
    """What a pasted log tells beyond its diagnoses: the command that failed (None: not found or not readable,
    `note` says why), the values its logged `server_args` show, and the condition of the `assert` it shows."""

    command: LaunchCommand | None
    logged: Mapping[str, str]
    asserted: str = ""
    note: str = ""


def pasted_launch(text: str, command_text: str | None = None) -> Pasted:
    """`explain`: the command from `--command` or from the paste, with what the log shows of its values."""
    from crashdoc.remedy.pasted import command_in_paste, parse_command

    pasted = parse_command(command_text) if command_text is not None else command_in_paste(text)
    note = ""
    if pasted.command is None and (command_text is not None or pasted.text):
        note = f"crashdoc could not read the launch command ({pasted.problem}); the diagnosis stands"
    return Pasted(pasted.command, logged_arguments(text), assert_condition(text), note)


class FixSearch:
    """The search with what it needs besides the diagnosis: the releases' argument facts (loaded when first
    needed), the derived signatures (to read a new error as the log's was read, and the release's other checks),
    and how far a search may go."""

    def __init__(
        self,
        *,
        derived: DerivedLibrary | Callable[[], DerivedLibrary | None] | None = None,
        facts: FactsLibrary | None = None,
        budget: Budget = DEFAULT_BUDGET,
    ) -> None:
        # the daemon's derived library grows when a unit's unshipped release is derived: asked at each search
        self._derived_now = derived if callable(derived) else lambda: derived
        self._facts, self.budget = facts, budget
        self._own: tuple[DerivedLibrary, DerivedLibrary] | None = None

    def _derived(self) -> DerivedLibrary | None:
        """The derived library; one the matcher has not read yet is read for this search object alone, so the
        daemon lets it go with the search (~3 MB) instead of keeping it for the matcher's sake."""
        derived = self._derived_now()
        if derived is None:
            return None
        if self._own is None or self._own[0] is not derived:
            own = derived.unread_copy()
            if own is None:
                return derived
            self._own = (derived, own)
        return self._own[1]

    @property
    def facts(self) -> FactsLibrary:
        if self._facts is None:
            self._facts = load_shipped()
        return self._facts

    def prepare(self) -> None:
        """Read now the derived signatures' index a search matches with, when this search reads its own copy
        (`_derived`; a library the matcher shares is left to the matcher)."""
        derived = self._derived()
        if derived is not None and self._own is not None and derived is self._own[1]:
            len(derived)  # reads its index

    def search(
        self,
        d: Diagnosis,
        command: LaunchCommand | None,
        interpreter: str | None,
        *,
        logged: Mapping[str, str] | None = None,
        asserted: str = "",
        unchecked: str = "",
    ) -> Diagnosis:
        """The diagnosis with the fix the search found for `command` (a copy; the diagnosis itself when the
        search has nothing to add). `interpreter` None: ranked, not checked (`unchecked` says why)."""
        if not searchable(d) or (command is None and (d.fix.why or any(not c.placeholder for c in d.fix.changes))):
            return d  # without the command, what it sets is unknown: a fix the diagnosis has (or computed) stands
        release = d.sglang_release or None
        derived = self._derived()
        chosen, note = facts_for(self.facts, release)
        understand = understand_with(derived, release)
        checks = ReleaseChecks(
            derived if chosen is not None and interpreter is None else None, chosen.release if chosen else ""
        )
        result = accepted_fix(
            failure_of(d, understand, asserted), command, release, chosen, interpreter, self.budget, logged=logged,
            understand=understand, checks=checks, unchecked=unchecked,
        )  # fmt: skip
        return with_result(d, result, note if result.changes else "")

    def search_pasted(self, d: Diagnosis, pasted: Pasted, interpreter: str | None) -> Diagnosis:
        """`explain`: the search on the pasted command, the note when it could not be read."""
        found = self.search(d, pasted.command, interpreter, logged=pasted.logged, asserted=pasted.asserted)
        if pasted.note and searchable(d):
            found = replace(found, fix=replace(found.fix, warnings=[*found.fix.warnings, pasted.note]))
        return found
