"""Matching failures against the library with RE2.

RE2 runs in linear time, so a careless pattern cannot hang the daemon, and an RE2 `Set`
tests every pattern of a kind in one pass: the cost per line stays flat as the library
grows. Only the few patterns the set reports are run again, alone, for their captures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import re2

from crashdoc.assembly.markers import MARKERS
from crashdoc.matching.library import Library, Signature
from crashdoc.matching.programs import COLD_MAX_MEM, HOT_MAX_MEM, KeptPrograms, LazyRegex, re2_options

if TYPE_CHECKING:
    from crashdoc.failure_records import ExceptionInfo, Match, Traceback
    from crashdoc.matching.derived import DerivedLibrary, DerivedMatch

_LITERAL_WEIGHT_CAP = 60
_MARKER_LITERALS = tuple(literal for _, literal in MARKERS)  # after the line signatures in the scan set


@dataclass(frozen=True, slots=True)
class Facts:
    """What is known about the unit when matching: flags, model, role, platform."""

    flags: Mapping[str, str] = field(default_factory=dict)
    model: str = ""
    disaggregation_mode: str = ""
    role: str = ""
    platform: str = ""
    sglang_release: str = ""  # the SGLang release the unit runs, when known: derived matches prefer it

    def get(self, key: str) -> str:
        return str(getattr(self, key, "") or "")


class _Compiled:
    """A signature with its message and frame patterns, compiled on first use. A plain class: one per signature
    is built with every matcher, and nothing compares, hashes or prints them (a frozen dataclass cost ~0.5 ms of
    generated methods at import and an `object.__setattr__` per field at each build)."""

    __slots__ = ("frame", "message", "model", "signature")

    def __init__(
        self, signature: Signature, message: LazyRegex | None, frame: LazyRegex | None, model: LazyRegex | None
    ) -> None:
        self.signature = signature
        self.message = message
        self.frame = frame
        self.model = model

    @property
    def specificity(self) -> int:
        """Weighed only for the few candidates a set pass finds: counting the literals of every
        pattern when the matcher is built cost ~5 ms of each `explain`."""
        sig = self.signature
        return min(_literal_chars(sig.message or sig.line or ""), _LITERAL_WEIGHT_CAP) // 3


def _budgets(start: int) -> Iterator[int]:
    """The budgets a set is compiled at, smallest first: `start`, then a quarter more each time, up to HOT_MAX_MEM.

    An RE2 set's DFA grows to nearly all of its budget (the states of the texts it has seen), and its program needs
    a quarter of it to compile: a set a little over `start` gets a little more, not the most (jumping from 4 MB to
    64 MB left the message set 5.7 MB of DFA after 360 messages). A failed compile costs ~8 ms, once per library."""
    budget = start
    while budget < HOT_MAX_MEM:
        yield budget
        budget += budget // 4
    yield HOT_MAX_MEM


class _PatternSet:
    """One RE2 Set over many patterns, plus each pattern compiled alone for captures.

    The set is compiled on its first use: `explain` on a log without a traceback never pays for
    the traceback set (most of a large library)."""

    def __init__(self, patterns: list[str], max_mem: int = HOT_MAX_MEM) -> None:
        self.size = len(patterns)
        self._patterns = patterns
        self._max_mem = max_mem
        self.budget = 0  # what the set was compiled at (`_budgets`), once compiled
        self._set: re2.Set | None = None
        self._match = self._compile_and_match if patterns else None

    def _compile_and_match(self, data: bytes) -> list[int] | None:
        for max_mem in _budgets(self._max_mem):  # a program too large for the budget gets a little more
            compiled = re2.Set.SearchSet(re2_options(max_mem))
            for pattern in self._patterns:
                compiled.Add(pattern)
            try:
                compiled.Compile()
                break
            except re2._re2.Error:
                if max_mem >= HOT_MAX_MEM:
                    raise
        self._set, self.budget = compiled, max_mem
        # the compiled set itself: re2.Set.Match only encodes the str and wraps the call,
        # two Python frames that cost as much as the match on a typical line
        self._match = getattr(compiled, "_set", compiled).Match
        return self._match(data)

    def compile(self) -> None:
        if self._set is None and self._patterns:
            self._compile_and_match(b"")

    def hits(self, text: str) -> list[int]:
        match = self._match
        if match is None:
            return []
        return match(text.encode("utf-8")) or []


def shipped_derived() -> DerivedLibrary:
    """The package's derived signatures (`derived.load_shipped`), for a matcher to call at its first traceback no
    reviewed signature answers: a log without one never imports them (the module, its records: ~3 ms of `explain`)."""
    from crashdoc.matching.derived import load_shipped

    return load_shipped()


class Matcher:
    """Finds the signatures that recognise a traceback, a log line or an exit."""

    def __init__(self, library: Library, derived: DerivedLibrary | Callable[[], DerivedLibrary] | None = None) -> None:
        self.library = library
        # answers only what no reviewed signature matches; a callable (`shipped_derived`) is called when first needed
        self.derived = derived
        self._traceback: list[_Compiled] = []
        self._by_type: list[_Compiled] = []  # exception-type-only signatures (no message pattern)
        self._line: list[_Compiled] = []
        self._exit: list[Signature] = []
        kept = KeptPrograms()
        for sig in library.signatures:
            compiled = _Compiled(
                sig,
                LazyRegex(sig.message or sig.line or "", kept) if (sig.message or sig.line) else None,
                LazyRegex(sig.frame, kept) if sig.frame else None,
                LazyRegex(sig.context["model"], kept) if "model" in sig.context else None,
            )
            if sig.kind == "line":
                self._line.append(compiled)
            elif sig.kind == "traceback":
                (self._traceback if sig.message else self._by_type).append(compiled)
            else:
                self._exit.append(sig)
        self._message_set = _PatternSet([c.signature.message or "" for c in self._traceback], COLD_MAX_MEM)
        self._line_set = _PatternSet([c.signature.line or "" for c in self._line])
        # the engine's per-line pass: the line signatures and the marker literals in one RE2 set
        self._scan_set = _PatternSet(
            [c.signature.line or "" for c in self._line] + [re2.escape(literal) for _, literal in MARKERS]
        )

    def compile(self) -> Matcher:
        """Compile the RE2 sets now (they are compiled on first use otherwise): the daemon does it
        before swapping a reloaded library in, so that a set RE2 cannot build is a rejected reload."""
        self._message_set.compile()
        self._line_set.compile()
        self._scan_set.compile()
        return self

    @property
    def has_line_signatures(self) -> bool:
        return bool(self._line)

    # --- tracebacks ----------------------------------------------------------------------

    def match_traceback(self, tb: Traceback, facts: Facts | None = None) -> list[Match]:
        """Every signature that recognises one exception of the chain, best first.

        The exception that was finally raised weighs more than the ones it was chained from.
        """
        facts = facts or Facts()
        found: dict[str, Match] = {}
        last = len(tb.chain) - 1
        for index, exc in enumerate(tb.chain):
            base = 100 if index == last else 60
            for match in self.match_exception(exc, facts, base):
                best = found.get(match.signature_id)
                if best is None or match.score > best.score:
                    found[match.signature_id] = match
        return sorted(found.values(), key=lambda m: -m.score)

    def match_exception(self, exc: ExceptionInfo, facts: Facts, base: int = 100) -> list[Match]:
        matches: list[Match] = []
        message = exc.message
        for index in self._message_set.hits(message):
            compiled = self._traceback[index]
            m = self._confirm(compiled, exc, facts, base)
            if m is not None:
                matches.append(m)
        for compiled in self._by_type:
            m = self._confirm(compiled, exc, facts, base)
            if m is not None:
                matches.append(m)
        return matches

    def _confirm(self, compiled: _Compiled, exc: ExceptionInfo, facts: Facts, base: int) -> Match | None:
        sig = compiled.signature
        score = base + sig.priority + compiled.specificity
        if sig.exception_types:
            if exc.type:
                if not any(_type_matches(exc.type, t) for t in sig.exception_types):
                    return None
                score += 15
            elif compiled.message is None:
                return None  # a bare line names no type: a signature that is only a type says nothing of it
        context_score = self._context_score(compiled, facts)
        if context_score is None:
            return None
        score += context_score
        if compiled.frame is not None:
            if not exc.frames and compiled.message is not None:
                score -= 30  # a lone line: no frame contradicts the message, but one that asks for none wins
            elif not any(compiled.frame.search(f"{f.file}:{f.function}") for f in exc.frames):
                return None
            else:
                score += 10
        captures: dict[str, str] = {}
        line = exc.line or f"{exc.type}: {exc.message.split(chr(10), 1)[0]}"
        if compiled.message is not None:
            m = compiled.message.search(exc.message)
            if m is None:
                return None
            captures = {k: v for k, v in m.groupdict().items() if v is not None}
            line = _line_at(exc, m.start())
        from crashdoc.failure_records import Match  # a log nothing matches never builds the records' classes

        return Match(sig.id, captures, line, score)

    def _context_score(self, compiled: _Compiled, facts: Facts) -> int | None:
        """Known facts that contradict the signature's context reject it; agreeing ones add weight."""
        score = 0
        for key, wanted in compiled.signature.context.items():
            known = facts.get(key)
            if not known:
                continue
            if key == "model":
                assert compiled.model is not None
                if compiled.model.search(known) is None:
                    return None
            elif known != wanted:
                return None
            score += 10
        return score

    def match_derived(self, tb: Traceback, facts: Facts | None = None) -> DerivedMatch | None:
        """The derived signature for the exception finally raised (or one it was chained from)."""
        derived = self.derived_library()
        if derived is None:
            return None
        release = facts.sglang_release if facts is not None and facts.sglang_release else None
        for exc in reversed(tb.chain):
            found = derived.match(exc.message, exc.type, release)
            if found is not None:
                return found
        return None

    def knows_message(self, text: str) -> bool:
        """Whether a reviewed or derived signature knows `text` as an exception message: a lone line of a
        pasted log (no traceback, no exception type) that states a failure SGLang raises."""
        from crashdoc.failure_records import ExceptionInfo

        exc = ExceptionInfo(type="", message=text, line=text.split("\n", 1)[0])
        if self.match_exception(exc, Facts()):
            return True
        derived = self.derived_library()
        return derived is not None and derived.match(text, "") is not None

    def derived_library(self) -> DerivedLibrary | None:
        """The derived signatures, read (when given as a callable) at their first use."""
        derived = self.derived
        if callable(derived):
            derived = self.derived = derived()  # one attribute: another thread sees the callable or the library
        return derived

    # --- lines ---------------------------------------------------------------------------

    def match_line(self, text: str) -> Match | None:
        """The best line-level signature for one log line; the hot path, so one Set pass."""
        hits = self._line_set.hits(text)
        return self._best_line(text, hits) if hits else None

    def scan_line(self, text: str) -> tuple[str | None, Match | None]:
        """(marker literal, best line-level signature) for one line: the engine's per-line work in one
        RE2 pass, where `find_marker`'s literal search and `match_line` took two (~1 us each per line).

        The literal is None when no marker literal is in the line, the literal itself when exactly one
        is (`find_marker` need not search), and "" when several are (`find_marker` finds the leftmost)."""
        match = self._scan_set._match  # `hits` inlined: a Python frame per line costs as much as half the match
        hits = match(text.encode("utf-8")) if match is not None else None
        if not hits:
            return None, None
        n = len(self._line)
        if len(hits) == 1:  # the common hit: one marker (SGLang's batch and access lines), or one signature
            return (_MARKER_LITERALS[hits[0] - n], None) if hits[0] >= n else (None, self._best_line(text, hits))
        line_hits = [i for i in hits if i < n]
        markers = len(hits) - len(line_hits)
        literal = None if not markers else (_MARKER_LITERALS[max(hits) - n] if markers == 1 else "")
        return literal, (self._best_line(text, line_hits) if line_hits else None)

    def _best_line(self, text: str, hits: list[int]) -> Match | None:
        best: Match | None = None
        for index in hits:
            compiled = self._line[index]
            assert compiled.message is not None
            m = compiled.message.search(text)
            if m is None:
                continue
            score = 50 + compiled.signature.priority + compiled.specificity
            if best is None or score > best.score:
                from crashdoc.failure_records import Match

                captures = {k: v for k, v in m.groupdict().items() if v is not None}
                best = Match(compiled.signature.id, captures, text.strip(), score)
        return best

    # --- exits ---------------------------------------------------------------------------

    def match_exit(self, exit_code: str | None, exit_status: str | None, result: str | None) -> list[Match]:
        """Signatures about how the process ended, for crashes that left no traceback or line."""
        from crashdoc.failure_records import Match

        matches: list[Match] = []
        observed = {"code": exit_code, "status": exit_status, "result": result}
        for sig in self._exit:
            if all(observed.get(key) in wanted for key, wanted in sig.exit.items()):
                detail = ", ".join(f"{k}={v}" for k, v in observed.items() if v)
                matches.append(Match(sig.id, {}, detail, 20 + sig.priority + 5 * len(sig.exit)))
        return sorted(matches, key=lambda m: -m.score)


def _type_matches(actual: str, wanted: str) -> bool:
    return actual == wanted or actual.endswith("." + wanted) or (wanted.endswith("." + actual) and "." not in actual)


def _line_at(exc: ExceptionInfo, offset: int) -> str:
    """The printed line where a match begins: the exception line, or a later line of its message."""
    before = exc.message.count("\n", 0, offset)
    if before == 0:
        return exc.line or f"{exc.type}: {exc.message.split(chr(10), 1)[0]}"
    return exc.message.split("\n")[before].strip()


def _literal_chars(pattern: str) -> int:
    """A rough count of literal characters: more literal text means a more specific signature."""
    count = 0
    escaped = False
    for ch in pattern:
        if escaped:
            count += 1 if not ch.isalpha() else 0
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch.isalnum() or ch in " -_:;,'\"=/":
            count += 1
    return count
