"""The fix SGLang itself accepts: candidates checked by the release's own argument checks, searched on.

`accepted_fix` takes one failure and the command that failed. With an interpreter (the unit's own, or the one
the operator names with `explain --sglang-python`; never a path read from a log) every candidate command is
checked by that SGLang in throw-away children (`verify.SGLangChecker`), in parallel. A candidate that gets past
this check and fails at the next one is searched on from there (bounded depth, number of checks and time). The
answer is the smallest change set that passes every check, said as "passes SGLang 0.5.23's argument checks
(N candidates, 4.2 s)", with the candidates that failed and why. Without an interpreter the candidates are
ranked with the release's argument facts and the answer says "not checked against SGLang".
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from crashdoc.events import FlagChange
from crashdoc.remedy import conditions
from crashdoc.remedy.argfacts import ArgFacts
from crashdoc.remedy.candidates import Candidate, apply_values, candidates
from crashdoc.remedy.commandline import LaunchCommand, join_argv
from crashdoc.remedy.failing import Current, Failure
from crashdoc.remedy.rewrite import apply_changes, describe, is_environment

if TYPE_CHECKING:  # the child processes' machinery (subprocess, tempfile, ...): imported when SGLang is asked
    from crashdoc.remedy.checker import Answer, Request, SGLangChecker

PER_FAILURE = 8  # candidates checked for one failure at a time
FOLLOW = 3  # candidates that got further, searched on from, per level
MAX_TRIED_SHOWN = 6


@dataclass(frozen=True, slots=True)
class Budget:
    """How far a search may go: seconds in all, levels of "it got further", checks, children at once."""

    seconds: float = 90.0
    depth: int = 3
    checks: int = 48
    parallel: int = 2
    check_timeout: float = 30.0
    start_timeout: float = 120.0


DEFAULT_BUDGET = Budget()


@dataclass(slots=True)
class SearchResult:
    """What to present: the changes (empty: none found), how sure, and what was tried."""

    changes: tuple[FlagChange, ...]
    status: str  # passed | partial | ranked | rejected | unchecked | none
    verified: str  # the line shown as fix.verified
    why: str = ""  # where the chosen change comes from
    tried: list[str] = field(default_factory=list)
    command: str | None = None  # the corrected command, when there is a command to correct
    checked: int = 0
    seconds: float = 0.0


# Reads a new error the way the log's error was read (its derived condition): error text -> Failure
Understand = Callable[[str, str], Failure]


def _failure_text(failure: Failure) -> str:
    return f"{failure.exception_type}: {failure.message}"


def same_error(a: str, b: str) -> bool:
    """Two reports of one error (the log's and the check's): type and message, whitespace and length aside."""

    def norm(text: str) -> str:
        text = re.sub(r"^(?:SystemExit: )?(?:[\w.]+: )?(?:error: )?", "", text.strip())
        return " ".join(text.split())[:160]

    return bool(norm(a)) and norm(a) == norm(b)


def split_error(text: str) -> tuple[str, str]:
    """`ValueError: msg` -> (ValueError, msg); argparse's exit -> (SystemExit, its line)."""
    m = re.match(r"([\w.]+): (.*)", text, re.S)
    return (m.group(1), m.group(2)) if m else ("", text)


def corrected(command: LaunchCommand, changes: Sequence[FlagChange]) -> LaunchCommand:
    return apply_changes(command, [c for c in changes if not is_environment(c.flag)]).after


def request_for(command: LaunchCommand, changes: Sequence[FlagChange]) -> Request:
    from crashdoc.remedy.checker import Request

    after = corrected(command, changes)
    env = [(c.flag, c.value or "") for c in changes if is_environment(c.flag) and c.action != "remove"]
    unset = [c.flag for c in changes if is_environment(c.flag) and c.action == "remove"]
    return Request(tuple(after.sglang_args), tuple(env), tuple(unset))


def merged(applied: Sequence[FlagChange], more: Sequence[FlagChange]) -> tuple[FlagChange, ...]:
    """`applied` then `more`, a later change of the same flag replacing the earlier one."""
    out = [c for c in applied if all((c.new_flag or c.flag) != m.flag and c.flag != m.flag for m in more)]
    return (*out, *more)


def shown(changes: Sequence[FlagChange]) -> str:
    """Changes as code (`remove --api-key`): a secret flag's redaction then masks its value, not the prose after."""
    return ", ".join(f"`{describe(c)}`" for c in changes) or "no change"


def accepted_fix(
    failure: Failure,
    command: LaunchCommand | None,
    release: str | None,
    facts: ArgFacts | None,
    interpreter: str | None,
    budget: Budget = DEFAULT_BUDGET,
    *,
    logged: Mapping[str, str] | None = None,
    understand: Understand | None = None,
    checks: Iterable[Failure] = (),
    unchecked: str = "",
) -> SearchResult:
    """The fix to present for one failure of `command` (None: only the log's values are known). `checks` are the
    release's other checks (derived, with their conditions): without SGLang to ask, a change that a later check
    is known to refuse is followed by the change that check wants."""
    started = time.monotonic()
    if facts is None:
        return SearchResult((), "none", "not checked against SGLang: crashdoc has no argument facts for this release")
    flags = [(f.name, f.values) for f in command.flags] if command is not None else []
    current = Current.of(flags, facts, logged, command.environment if command is not None else ())
    ranked = candidates(failure, current, facts)
    if interpreter is None or command is None:
        if command is not None:  # the log's resolved values are not what the user set: only a command's
            ranked = _ahead(ranked, current, facts, checks)
        return _ranked(ranked, command, release, facts, interpreter, started, unchecked)
    return _searched(failure, current, command, ranked, facts, interpreter, budget, understand, started)


def _ranked(
    ranked: Sequence[Candidate],
    command: LaunchCommand | None,
    release: str | None,
    facts: ArgFacts,
    interpreter: str | None,
    started: float,
    unchecked: str = "",
) -> SearchResult:
    """The best-ranked candidate, unchecked; `unchecked` says why no SGLang was asked (default: explain's)."""
    why_unchecked = unchecked or (
        "no SGLang to ask (`explain --sglang-python PATH` checks it)"
        if interpreter is None
        else "no command to check (`explain --command '...'` gives it)"
    )
    about = f"ranked with SGLang {facts.release}'s argument facts"
    if not ranked:
        return SearchResult((), "none", f"not checked against SGLang: {why_unchecked}; no change can be justified")
    best = ranked[0]
    certainty = "the failing check's condition is false after it" if best.resolves else "not certain"
    return SearchResult(
        best.changes,
        "ranked",
        f"not checked against SGLang: {why_unchecked}; {about}, {certainty}",
        best.why,
        [],
        join_argv(corrected(command, best.changes).argv) if command is not None else None,
        0,
        time.monotonic() - started,
    )


AHEAD = 2  # later checks a ranked fix is carried past, without SGLang


def _ahead(
    ranked: Sequence[Candidate], current: Current, facts: ArgFacts, checks: Iterable[Failure]
) -> list[Candidate]:
    """The best candidate carried past the release's later checks that its result is known to fail (the check's
    condition decided by the command's values, and false when the options the command sets are at their
    defaults: a check the command's own settings fire, not one a guard the facts cannot see keeps away)."""
    if not ranked or not checks:
        return list(ranked)
    best = ranked[0]
    for _ in range(AHEAD):
        values = apply_values(best.changes, current.values(facts), facts)
        if values is None:
            break
        now = after_changes(current, best.changes, facts)
        failing = next((f for f in checks if _fires(f, values, now, facts)), None)
        if failing is None:
            break
        here = after_changes(current, best.changes, facts)
        later = [k for k in candidates(failing, here, facts) if k.resolves]
        if not later:
            break
        best = Candidate(
            merged(best.changes, later[0].changes),
            f"{best.why}; then {later[0].why}",
            best.score,
            best.resolves,
        )
    return [best, *ranked[1:]]


def after_changes(current: Current, changes: Sequence[FlagChange], facts: ArgFacts) -> Current:
    """The command's options once the changes are made (the environment and logged values as they were)."""
    present = dict(current.present)
    for change in changes:
        old = facts.option(change.flag)
        if old is None:
            continue
        if change.action == "remove":
            present.pop(old.dest, None)
            continue
        target = change.new_flag if change.action == "replace" and change.new_flag else change.flag
        option = facts.option(target) or old
        if option.dest != old.dest:
            present.pop(old.dest, None)
        words = tuple(change.value.split()) if change.value and option.many else (change.value,) if change.value else ()
        present[option.dest] = (target, words)
    return Current(present, current.logged, current.environment)


def _fires(check: Failure, values: Mapping[str, object], current: Current, facts: ArgFacts) -> bool:
    if not check.condition or not any(d in check.condition for d in current.present):
        return False
    fails = check.kind != "assert"
    if conditions.evaluate(check.condition, values, facts) is not fails:
        return False
    defaults = {d: v for d, v in values.items() if d not in current.present}
    return conditions.evaluate(check.condition, defaults, facts) is not fails


@dataclass(slots=True)
class _Node:
    applied: tuple[FlagChange, ...]
    failure: Failure
    score: float


def _searched(
    failure: Failure,
    current: Current,
    command: LaunchCommand,
    ranked: Sequence[Candidate],
    facts: ArgFacts,
    interpreter: str,
    budget: Budget,
    understand: Understand | None,
    started: float,
) -> SearchResult:
    from crashdoc.remedy.checker import SGLangChecker, child_environment

    deadline = started + budget.seconds
    tried: list[str] = []
    seen: set[tuple[object, ...]] = set()
    checked = 0
    env = child_environment(command.environment)
    best: tuple[tuple[FlagChange, ...], Answer, str] | None = None
    with SGLangChecker(
        interpreter,
        env,
        parallel=budget.parallel,
        timeout=budget.check_timeout,
        start_timeout=budget.start_timeout,
    ) as checker:
        # the command as it is: SGLang's own words for the failure to fix (and whether its checks fail at all)
        batch: list[tuple[tuple[FlagChange, ...], str, _Node | None]] = [((), "the command as it is", None)]
        batch += [(c.changes, c.why, _Node((), failure, c.score)) for c in ranked[:PER_FAILURE]]
        for _level in range(budget.depth):
            batch = [b for b in batch if _key(b[0]) not in seen][: max(0, budget.checks - checked)]
            if not batch or time.monotonic() >= deadline:
                break
            seen.update(_key(b[0]) for b in batch)
            answers = checker.check([request_for(command, b[0]) for b in batch], deadline=deadline)
            checked += len(batch)
            if checker.failure is not None and not any(a.passes or a.rejected for a in answers):
                return _could_not(checker.failure, ranked, command, tried, checked, started, facts)
            further: list[_Node] = []
            for (changes, why, node), answer in zip(batch, answers, strict=True):
                if node is None:  # the original command
                    if answer.passes:
                        return _beyond_checks(answer, ranked, command, checked, started)
                    if answer.rejected:
                        failure = replace(failure, stage=answer.stage)
                        if not same_error(answer.error, _failure_text(failure)):
                            failure = _relearn(answer, understand)
                        for _, _, other in batch:
                            if other is not None:
                                other.failure = failure
                    continue
                if answer.passes:
                    if best is None or _better(changes, answer, best):
                        best = (changes, answer, why)
                    continue
                if answer.rejected and node is not None:
                    if same_error(answer.error, _failure_text(node.failure)):
                        tried.append(f"tried: {shown(changes)} -> still fails: {answer.error[:200]}")
                    elif answer.stage == "parse" and node.failure.stage != "parse":  # an earlier check: worse
                        tried.append(f"tried: {shown(changes)} -> refused earlier: {answer.error[:200]}")
                    else:
                        tried.append(f"tried: {shown(changes)} -> passes this check, then fails: {answer.error[:200]}")
                        nxt = _relearn(answer, understand)
                        further.append(_Node(changes, nxt, node.score))
                else:
                    tried.append(f"tried: {shown(changes)} -> could not check: {answer.error[:200]}")
            if best is not None:
                break
            further.sort(key=lambda n: (len(n.applied), -n.score))
            by_error: dict[str, _Node] = {}  # one node per new error: three ways to meet one check are one lead
            for node in further:
                by_error.setdefault(_failure_text(node.failure)[:200], node)
            batch = []
            for node in list(by_error.values())[:FOLLOW]:
                flags = [(f.name, f.values) for f in corrected(command, node.applied).flags]
                here = Current.of(flags, facts, None, command.environment)
                touched = {c.flag for c in node.applied} | {c.new_flag for c in node.applied if c.new_flag}
                follow = [k for k in candidates(node.failure, here, facts) if not {c.flag for c in k.changes} & touched]
                for cand in follow[: max(2, PER_FAILURE // FOLLOW)]:
                    changes = merged(node.applied, cand.changes)
                    batch.append((changes, cand.why, _Node(changes, node.failure, node.score)))
        if best is not None:
            changes, answer, why = best
            changes, answer, extra = _smallest(checker, command, changes, answer, deadline, seen)
            checked += extra
    seconds = time.monotonic() - started
    tried_count = max(0, checked - 1)  # the command as it is was checked too: it is no candidate
    counted = f"{tried_count} candidate{'' if tried_count == 1 else 's'}, {seconds:.1f} s"
    if best is not None:
        version = answer.version or "?"
        said = f"passes SGLang {version}'s argument checks ({counted})"
        if answer.status == "partial":
            said += "; not checked here: " + "; ".join(" ".join(u.split())[:200] for u in answer.unchecked)
        return SearchResult(
            changes,
            answer.status,
            said,
            why,
            tried[:MAX_TRIED_SHOWN],
            join_argv(corrected(command, changes).argv),
            checked,
            seconds,
        )
    fallback = _ranked(ranked, command, None, facts, None, started)
    unanswered = [t.split(" -> could not check: ", 1)[1] for t in tried if " -> could not check: " in t]
    if tried and len(unanswered) == len(tried):  # no verdict at all (a starved or hung check): not a rejection
        fallback.status = "unchecked"
        fallback.verified = (
            f"SGLang's argument checks gave no verdict on any candidate ({counted}; {unanswered[0][:200]}); "
            "the best-ranked one is shown, not checked"
        )
    else:
        fallback.status = "rejected"
        fallback.verified = (
            f"no candidate passes SGLang's argument checks ({counted}); the best-ranked one is shown, not checked"
        )
    fallback.tried = tried[:MAX_TRIED_SHOWN]
    fallback.checked = checked
    # never present a change that SGLang was seen to reject with this same error
    rejected = {t.split(" -> ", 1)[0][len("tried: ") :] for t in tried if " -> still fails: " in t}
    if shown(fallback.changes) in rejected:
        fallback.changes, fallback.command, fallback.why = (), None, ""
        fallback.verified = f"no candidate passes SGLang's argument checks ({counted}); none is shown"
        fallback.status = "none"
    return fallback


def _key(changes: Sequence[FlagChange]) -> tuple[object, ...]:
    return tuple(sorted((c.action, c.flag, c.value or "", c.new_flag or "") for c in changes))


def _better(changes: Sequence[FlagChange], answer: Answer, best: tuple[tuple[FlagChange, ...], Answer, str]) -> bool:
    """Fewer changes first; a full pass before a partial one."""
    return (len(changes), answer.status != "passed") < (len(best[0]), best[1].status != "passed")


def _smallest(
    checker: SGLangChecker,
    command: LaunchCommand,
    changes: tuple[FlagChange, ...],
    answer: Answer,
    deadline: float,
    seen: set[tuple[object, ...]],
) -> tuple[tuple[FlagChange, ...], Answer, int]:
    """Drop each change that the command passes without (a search on may have stacked one too many)."""
    extra = 0
    while len(changes) > 1 and time.monotonic() < deadline:
        fewer = [tuple(c for j, c in enumerate(changes) if j != i) for i in range(len(changes))]
        fewer = [f for f in fewer if _key(f) not in seen]
        if not fewer:
            break
        seen.update(_key(f) for f in fewer)
        answers = checker.check([request_for(command, f) for f in fewer], deadline=deadline)
        extra += len(fewer)
        passing = [(f, a) for f, a in zip(fewer, answers, strict=True) if a.passes]
        if not passing:
            break
        changes, answer = passing[0]
    return changes, answer, extra


def _relearn(answer: Answer, understand: Understand | None) -> Failure:
    """The failure SGLang's check reported, read as crashdoc reads a logged one."""
    kind, message = split_error(answer.error)
    failure = understand(kind, message) if understand is not None else Failure(kind, message)
    return replace(failure, stage=answer.stage or failure.stage)


def _beyond_checks(
    answer: Answer, ranked: Sequence[Candidate], command: LaunchCommand, checked: int, started: float
) -> SearchResult:
    """The command as it is passes SGLang's argument checks: the failure is beyond them (the GPU, the model,
    the network); the ranked change stands, unchecked."""
    best = ranked[0] if ranked else None
    return SearchResult(
        best.changes if best else (),
        "unchecked",
        f"not checked: the command as it is passes SGLang {answer.version or '?'}'s argument checks, so this "
        "failure is beyond them (the GPU, the model, the network)",
        best.why if best else "",
        [],
        join_argv(corrected(command, best.changes).argv) if best else None,
        checked,
        time.monotonic() - started,
    )


def _could_not(
    failure: Answer,
    ranked: Sequence[Candidate],
    command: LaunchCommand,
    tried: list[str],
    checked: int,
    started: float,
    facts: ArgFacts,
) -> SearchResult:
    result = _ranked(ranked, command, facts.release, facts, None, started)
    result.status = "unchecked"
    result.verified = f"could not check against SGLang ({failure.error or failure.status}); " + result.verified
    result.tried, result.checked = tried[:MAX_TRIED_SHOWN], checked
    return result
