"""What the daemon keeps after a long run: derived signatures and RE2 programs it used once are not all
kept (memory that grew with the journal's length), and matching answers the same without them."""

from __future__ import annotations

from crashdoc.matching.derived import DerivedLibrary, _read_shipped, load_shipped
from crashdoc.matching.matcher import _KeptPrograms, _LazyRegex
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
    kept = _KeptPrograms(size=4)
    regexes = [_LazyRegex(rf"^error {i}: (?P<what>\w+)$", kept) for i in range(10)]
    for i, regex in enumerate(regexes):
        assert regex.search(f"error {i}: boom") is not None
    assert sum(r._compiled is not None for r in regexes) == 4  # the last four used
    assert regexes[0]._compiled is None
    m = regexes[0].search("error 0: again")
    assert m is not None and m.group("what") == "again"
    assert regexes[0]._compiled is not None and regexes[5]._compiled is None
    assert regexes[0].search("error 1: other") is None


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
