"""What the daemon keeps after a long run: derived signatures and RE2 programs it used once are not all
kept (memory that grew with the journal's length), and matching answers the same without them."""

from __future__ import annotations

import re

import pytest
import re2

from crashdoc.matching.derived import DerivedLibrary, _head, _read_shipped, load_shipped
from crashdoc.matching.library import builtin_signature_dirs, load_library
from crashdoc.matching.matcher import Matcher, _budgets, _PatternSet
from crashdoc.matching.programs import COLD_MAX_MEM, HOT_MAX_MEM, KeptPrograms, LazyRegex, re2_options
from crashdoc.remedy.accepted import release_checks


def test_a_releases_checks_leave_the_derived_signatures_unbuilt():
    shipped = DerivedLibrary([], (), loader=_read_shipped)  # nothing built yet (not the shared one)
    again = DerivedLibrary([], (), loader=_read_shipped)
    for release in (shipped.releases[-1], shipped.releases[0], "0.0.1"):  # the newest, the oldest, one not shipped
        checks = release_checks(shipped, release)
        kept = [
            (s.exception_type, s.template, s.condition, s.kind, s.fix)
            for s in again.signatures()
            if s.condition and release in s.releases
        ]
        assert [(c.exception_type, c.message, c.condition, c.kind, c.curated) for c in checks] == kept
    assert release_checks(shipped, shipped.releases[-1]), "the shipped library has checks for its newest release"
    assert shipped._built == {}  # none kept: the checks are all the caller keeps


def test_programs_of_patterns_searched_long_ago_are_dropped_and_built_again_on_use():
    kept = KeptPrograms(size=4)
    regexes = [LazyRegex(rf"^error {i}: (?P<what>\w+)$", kept) for i in range(10)]
    for i, regex in enumerate(regexes):
        assert regex.search(f"error {i}: boom") is not None
    assert sum(r._compiled is not None for r in regexes) == 4  # the last four used
    assert regexes[0]._compiled is None
    m = regexes[0].search("error 0: again")
    assert m is not None and m.group("what") == "again"
    assert regexes[0]._compiled is not None and regexes[5]._compiled is None
    assert regexes[0].search("error 1: other") is None


def test_every_shipped_derived_pattern_compiles_at_the_budget_of_a_pattern_searched_once_per_crash():
    rows = load_shipped()._rows
    assert len(rows) > 1000
    for row in rows:
        re2.compile(_head(row)[2], re2_options(COLD_MAX_MEM))  # raises re2.error on a program over the budget


def test_the_derived_programs_kept_stay_few_after_many_distinct_messages_and_match_the_same():
    few = DerivedLibrary([], (), loader=_read_shipped)
    few._kept.size = 4
    every = DerivedLibrary([], (), loader=_read_shipped)
    every._kept.size = 1 << 20  # none dropped: what matching answered before programs were let go
    messages = [
        (sig.exception_type, re.sub(r"\{[^{}]*\}", "7", sig.template) + f" (run {i})")
        for i, sig in enumerate(load_shipped().signatures())
    ][:400]
    answers = []
    for type_, message in messages * 2:  # twice: a program dropped is compiled again and answers the same
        found = few.match(message, type_)
        expected = every.match(message, type_)
        assert (found and (found.signature.id, found.captures)) == (
            expected and (expected.signature.id, expected.captures)
        )
        answers.append(found is not None)
    assert sum(answers) > 300, "most messages made from the templates are recognised"
    assert len(few._kept) <= 4 and sum(r._compiled is not None for r in few._programs.values()) <= 4
    assert sum(r._compiled is not None for r in every._programs.values()) > 300


def test_a_set_too_large_for_its_budget_gets_a_little_more_and_finds_the_same():
    library = load_library(builtin_signature_dirs())
    messages = Matcher(library)._message_set
    messages.compile()
    assert messages.budget == COLD_MAX_MEM, "the built-in library's message set compiles at the budget it is given"
    patterns = [s.message for s in library.signatures if s.kind == "traceback" and s.message]
    small = _PatternSet(patterns, 1 << 20)  # a quarter of what the set needs
    small.compile()
    steps = list(_budgets(1 << 20))
    assert small.budget < 8 << 20 and steps.index(small.budget) > 0, "more than it was given, far less than 64 MB"
    below = re2.Set.SearchSet(re2_options(steps[steps.index(small.budget) - 1]))
    for pattern in patterns:
        below.Add(pattern)
    with pytest.raises(re2.error):
        below.Compile()  # the step before was too small: the first budget that compiles is taken
    most = _PatternSet(patterns, HOT_MAX_MEM)
    texts = [e.text for s in library.signatures for e in (*s.examples, *s.near_misses)]
    assert sum(bool(most.hits(text)) for text in texts) > 200, "the examples are recognised"
    for text in texts * 3:  # three passes: the small set's DFA is spent and rebuilt on the way
        assert small.hits(text) == most.hits(text)


def test_a_search_reads_the_derived_data_the_matcher_has_not_read_for_itself_and_lets_it_go_with_it():
    from crashdoc.remedy.accepted import FixSearch

    unread = DerivedLibrary([], (), loader=_read_shipped)
    search = FixSearch(derived=lambda: unread)
    own = search._derived()
    assert own is not None and own is not unread and search._derived() is own  # one copy per search object
    assert len(own) == len(load_shipped()) and unread.unread_copy() is not None  # the matcher's is still unread
    read = DerivedLibrary([], (), loader=_read_shipped)
    assert len(read) and FixSearch(derived=read)._derived() is read  # read already: shared


_DBUS_CHILD = """
import sys
from crashdoc.sources.units import pystemd_dbus
DBus = pystemd_dbus()
alone = sorted(m for m in sys.modules if m.split(".")[0] in ("pystemd", "lxml"))
from pystemd.dbuslib import DBus as imported
import pystemd  # the package's own __init__ still runs for whoever imports it
print(alone, DBus is imported, hasattr(pystemd, "systemd1"), "lxml" in sys.modules)
"""


def test_the_unit_watcher_gets_pystemds_dbus_without_lxml():
    import subprocess
    import sys

    said = subprocess.run([sys.executable, "-c", _DBUS_CHILD], capture_output=True, text=True, check=True, timeout=60)
    alone, same, package, lxml_later = said.stdout.strip().rsplit(" ", 3)
    assert "lxml" not in alone and "pystemd.base" not in alone and "'pystemd.dbuslib'" in alone
    assert (same, package, lxml_later) == ("True", "True", "True")
