"""The daemon's remedy worker is bounded, and the daemon goes on reading and detecting while SGLang's checks run.

SGLang's checks take seconds to minutes (a search imports SGLang, then forks a check per candidate): at most
`checkers` run at once, at most `waiting` wait for a thread, one more is said to be busy (and asked again
later), and none of it runs on the daemon's reading thread or under its lock. The checks here are held open
by the test (a stand-in for SGLang's slowest answer) so that what the daemon does meanwhile can be seen.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from crashdoc.config import SglangChecksConfig
from crashdoc.events import Diagnosis, Fix, FixTarget, FlagChange, RootCause
from crashdoc.remedy.stage import RemedyStage, with_verified
from crashdoc.runtime.daemon import Daemon
from crashdoc.runtime.remedies import CHECKS_OFF, PENDING, RemedyWorker
from support.file_daemon import file_daemon
from support.journal_files import UNIT, crash_loop_entries, needs_journal_remote, write_journal

OTHER = "sglang-decode.service"


class HeldChecks(RemedyStage):
    """The remedy stage with each check held until the test lets it go (SGLang at its slowest); counts how many
    run at once."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.running = self.most = 0
        self.checked: list[str] = []
        self._count = threading.Lock()

    def wants_check(self, d: Diagnosis) -> bool:
        return True

    def searches(self, d: Diagnosis) -> bool:
        return False

    def check(self, d: Diagnosis, *, run: bool = True, unrun: str = "") -> Diagnosis:
        if not run:
            return with_verified(d, unrun)
        with self._count:
            self.running += 1
            self.most = max(self.most, self.running)
        self.gate.wait(60)
        with self._count:
            self.running -= 1
            self.checked.append(d.unit)
        return with_verified(d, f"checked for {d.unit}")


def diagnosis(unit: str) -> Diagnosis:
    argv = ("/opt/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "m")
    cause = RootCause("ValueError", "x", "ValueError: x")
    fix = Fix("s", [FlagChange("set", "--mem-fraction-static", "0.8")])
    return Diagnosis(
        unit, None, "t", "memory", "critical", cause, [], fix, unit, target=FixTarget(argv, exec_start=argv)
    )


def until(condition, seconds: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_checks_run_a_few_at_a_time_a_few_wait_and_the_rest_are_said_busy_then_asked_again() -> None:
    stage = HeldChecks()
    worker = RemedyWorker(stage, checks=SglangChecksConfig(at_once=2, waiting=3))
    first = [diagnosis(f"sglang-{i}.service") for i in range(2)]
    for d in first:
        worker.request(d, check=True)
    until(lambda: stage.running == 2)
    later = [diagnosis(f"sglang-{i}.service") for i in range(2, 8)]
    for d in later:
        worker.request(d, check=True)
    shown = [worker.published(d).fix.verified or "" for d in first + later]
    assert shown[:5] == [PENDING] * 5, shown
    assert all(s.startswith("not verified yet: crashdoc's SGLang checks are busy (3 waiting)") for s in shown[5:])
    stage.gate.set()
    until(lambda: len(stage.checked) == 5)
    for d in later[3:]:  # the daemon asks again (the unit restarted): now there is room
        worker.request(d, check=True)
    worker.stop(wait=30)
    assert stage.most == 2, "never more than `checkers` checks at once"
    assert sorted(stage.checked) == sorted(d.unit for d in first + later)
    assert [worker.published(d).fix.verified for d in later] == [f"checked for {d.unit}" for d in later]


def _looping(d: Daemon, unit: str) -> bool:
    for family in text_string_to_metric_families(d.view.metrics().decode()):
        for s in family.samples:
            if s.name == "crashdoc_unit_crashloop" and s.labels.get("unit") == unit:
                return s.value == 1.0
    return False


def _renamed(entries: list[dict[str, str | bytes]], unit: str) -> list[dict[str, str | bytes]]:
    return [{k: v.replace(UNIT, unit) if isinstance(v, str) else v for k, v in e.items()} for e in entries]


@needs_journal_remote
def test_the_daemon_reads_and_detects_while_twenty_checks_are_held(tmp_path: Path) -> None:
    journal, state = tmp_path / "journal", tmp_path / "state"
    journal.mkdir()
    write_journal(journal, crash_loop_entries())
    daemon = file_daemon(journal, state)
    stage = HeldChecks()
    daemon.remedies = daemon.view.remedies = RemedyWorker(stage, checks=SglangChecksConfig(at_once=2, waiting=32))
    daemon.prepare()
    daemon.source.fileno()  # watch the folder (inotify), as the daemon's loop does
    daemon.source.seek_head()
    try:
        assert daemon._drain()
        assert _looping(daemon, UNIT)
        for i in range(20):  # other loops' checks, held open beside the first one's
            daemon.remedies.request(diagnosis(f"sglang-held-{i}.service"), check=True)
        until(lambda: stage.running == 2)

        write_journal(journal, _renamed(crash_loop_entries(), OTHER), name="later.journal", first_ms=60_000)
        caught_up = threading.Event()

        def drain() -> None:
            while not _looping(daemon, OTHER):
                daemon.source.process()  # what the daemon's loop does when the journal's fd is readable
                daemon._drain()
                time.sleep(0.05)
            caught_up.set()

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        assert caught_up.wait(30), "the daemon stopped reading while SGLang's checks ran"
        assert stage.running == 2 and not stage.checked, "the checks were still held while the loop was found"
        [other] = [d for d in daemon.view.remedies.publish(daemon.engine.diagnoses()) if d.unit == OTHER]
        assert other.fix.verified == PENDING, "its check waits its turn"
    finally:
        stage.gate.set()
        daemon.remedies.stop(wait=30)
    assert stage.most == 2
    [mine] = [d for d in daemon.remedies.publish(daemon.engine.diagnoses()) if d.unit == UNIT]
    assert mine.fix.verified == f"checked for {UNIT}"


def test_checks_turned_off_in_the_configuration_run_no_sglang_and_say_why() -> None:
    """`sglang_checks: {enabled: false}`: the stage is asked without running SGLang, and the fix says why."""
    stage = HeldChecks()
    worker = RemedyWorker(stage, checks=SglangChecksConfig(enabled=False))
    d = diagnosis("sglang-a.service")
    worker.request(d, check=True)
    until(lambda: worker.published(d).fix.verified not in ("", PENDING))
    assert worker.published(d).fix.verified == CHECKS_OFF
    assert CHECKS_OFF.startswith("not asked to (sglang_checks: enabled: false")
    assert stage.most == 0  # the held check never ran
    worker.stop(wait=5)


def test_the_fix_searchs_data_is_let_go_once_no_check_runs_or_waits() -> None:
    """The fix search loads every release's argument facts and a release's checks (MBs): the daemon keeps them
    while checks run or wait, and lets them go when the last one is done (the next search loads them again)."""
    stage = HeldChecks()
    worker = RemedyWorker(stage, checks=SglangChecksConfig(at_once=2, waiting=3))
    search = stage.fix_search
    first, second = diagnosis("sglang-a.service"), diagnosis("sglang-b.service")
    worker.request(first, check=True)
    worker.request(second, check=True)
    until(lambda: stage.running == 2)
    assert stage.fix_search is search  # checks run: kept
    stage.gate.set()
    until(lambda: all(worker.published(d).fix.verified not in ("", PENDING) for d in (first, second)))
    until(lambda: stage._search is None)
    assert stage.fix_search is not search  # a new search builds its own
    worker.stop(wait=5)


def test_the_daemon_takes_its_check_settings_from_the_configuration(tmp_path: Path) -> None:
    settings = SglangChecksConfig(enabled=False, at_once=3, waiting=5)
    (tmp_path / "journal").mkdir()
    daemon = file_daemon(tmp_path / "journal", tmp_path / "state", sglang_checks=settings)
    assert daemon.remedies.checks == settings
