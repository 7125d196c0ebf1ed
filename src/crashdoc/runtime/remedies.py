"""The daemon's remedy stage, on threads of its own: the loop hands diagnoses in and reads back what is ready.

The stage reads files (`apply`: milliseconds) and runs SGLang's checks in child processes (`check`: seconds;
for a flag failure, the search for a fix SGLang accepts: candidates checked in parallel children, searched on,
bounded in depth and time), so it never runs on the loop's thread nor under its lock: one thread applies
fixes, a few others check them (a slow check never holds up the next fix). The checks are bounded: at most
`checkers` run at once (each starts one SGLang child, which forks `Budget.parallel` checks: at most
`checkers * (1 + parallel)` processes), each within its own time (the search's `Budget.seconds`, a check's
timeout), and at most `waiting` wait for a thread; one more is not queued but said to be busy, and asked again
when the daemon next asks (the unit's next restart or state change). Results are kept by what they depend
on (the diagnosis's changes and target; for a check the command and changes, and for a search the unit and
the failure), so the engine's diagnoses, made again at every request, find them; each new result wakes the
loop, which publishes it, and a loop's finished check is handed to the loop once (`take_checked`) for its
journal record.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from crashdoc.config import SglangChecksConfig
from crashdoc.events import Diagnosis, Fix
from crashdoc.remedy.stage import CheckKey, RemedyStage, check_key, with_verified

PENDING = "verification pending: SGLang's argument checks are running"
SEARCHING = "search pending: candidate fixes are being checked by SGLang's argument checks"
BUSY = "not verified yet: crashdoc's SGLang checks are busy ({waiting} waiting); asked again at the unit's next restart"
NOTHING = ""  # the applied fix changes no flag: nothing to check
CHECKS_OFF = "not asked to (sglang_checks: enabled: false in crashdoc's configuration)"
DEFAULT_CHECKS = SglangChecksConfig()  # frozen: one shared default
KEEP = 256  # results kept (the oldest go first)


def remedy_key(d: Diagnosis) -> tuple[Any, ...]:
    """What `RemedyStage.apply` depends on (not the restart count or the evidence, which move on)."""
    fix = d.fix
    changes = tuple((c.action, c.flag, c.value, c.new_flag, c.placeholder) for c in fix.changes)
    return (d.unit, changes, fix.summary, tuple(fix.warnings), d.target)


class RemedyWorker:
    def __init__(
        self,
        stage: RemedyStage,
        *,
        wake: Callable[[], None] = lambda: None,
        on_checked: Callable[[str, str], None] = lambda unit, text: None,
        size: int = KEEP,
        checks: SglangChecksConfig = DEFAULT_CHECKS,
    ) -> None:
        """`checks`: whether the units' SGLang is run, how many searches at once (each one SGLang child and the
        checks it forks) and how many may wait; more are said busy and asked again at the next restart."""
        self.stage = stage
        self.wake = wake  # tells the loop that something is ready
        self._on_checked = on_checked
        self._size = size
        self.checks = checks
        self._run = checks.enabled
        self._checkers, self._limit = max(1, checks.at_once), max(1, checks.waiting)
        self._waiting = 0  # checks queued and not yet started
        self._running = 0  # checks started and not yet done
        self._applied: OrderedDict[tuple[Any, ...], Fix] = OrderedDict()
        self._checked: OrderedDict[CheckKey, Fix | str] = OrderedDict()  # a search's fix, a check's line, PENDING
        self._finished: deque[Diagnosis] = deque(maxlen=size)  # checks done, for the loop's journal records
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._asked: set[tuple[Any, ...]] = set()
        self._apply_queue: queue.Queue[tuple[Diagnosis, bool] | None] = queue.Queue()
        self._check_queue: queue.Queue[tuple[CheckKey, Diagnosis] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self.changed = False  # a result came in since the loop last looked (set here, cleared by the loop)

    def request(self, d: Diagnosis, *, check: bool = False) -> None:
        """Apply the diagnosis's fix (and check it, `check`) on the worker threads, unless that is done or asked."""
        if self._nothing_to_do(d):
            return
        key = remedy_key(d)
        with self._lock:
            said = self._checked.get(check_key(d))
            check = check and self.stage.wants_check(d) and (said is None or _busy(said))
            if check and self._waiting >= self._limit:  # said so, not queued: the daemon asks again later
                self._checked[check_key(d)] = BUSY.format(waiting=self._waiting)
                _bound(self._checked, self._size)
                check = False
            if check:
                self._checked[check_key(d)] = SEARCHING if self.stage.searches(d) else PENDING
                _bound(self._checked, self._size)
                self._waiting += 1
            elif key in self._asked or key in self._applied:
                return
            self._asked.add(key)
            self._start()
        self._apply_queue.put((d, check))

    def ready(self, d: Diagnosis) -> bool:
        """Whether the fix is applied (or there is nothing to apply)."""
        with self._lock:
            return self._nothing_to_do(d) or remedy_key(d) in self._applied

    def published(self, d: Diagnosis) -> Diagnosis:
        """The diagnosis with its fix as far as the stage got: applied, and what the check said (or that it runs);
        a search's fix, once found, in place of the engine's."""
        if self._nothing_to_do(d):
            return d
        with self._lock:
            fix = self._applied.get(remedy_key(d))
            checked = self._checked.get(check_key(d))
        if isinstance(checked, Fix):
            return replace(d, fix=checked)
        shown = replace(d, fix=fix) if fix is not None else d
        return with_verified(shown, checked) if checked else shown

    def take_checked(self) -> list[Diagnosis]:
        """The checks finished since the last call (the loop writes each one's journal record)."""
        with self._lock:
            done = list(self._finished)
            self._finished.clear()
        return done

    def publish(self, diagnoses: Iterable[Diagnosis], wait: float = 0.0) -> list[Diagnosis]:
        """What to show for these diagnoses: each requested if new, waiting up to `wait` seconds for them."""
        found = list(diagnoses)
        for d in found:
            self.request(d)
        deadline = time.monotonic() + wait
        with self._done:
            while not all(self._nothing_to_do(d) or remedy_key(d) in self._applied for d in found):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._done.wait(left)
        return [self.published(d) for d in found]

    def stop(self, wait: float | None = None) -> None:
        """Finish what was asked (fixes first, then their checks), waiting up to `wait` seconds for each thread."""
        self._apply_queue.put(None)
        if self._threads:
            self._threads[0].join(wait)
        for _ in self._threads[1:]:
            self._check_queue.put(None)
        for thread in self._threads[1:]:
            thread.join(wait)

    def _nothing_to_do(self, d: Diagnosis) -> bool:
        return not self.stage.wants_check(d)

    # --- the threads --------------------------------------------------------------------

    def _start(self) -> None:
        if not self._threads:
            loops = [(self._apply_loop, "crashdoc-remedy")]
            loops += [(self._check_loop, f"crashdoc-verify-{i}") for i in range(self._checkers)]
            for target, name in loops:
                thread = threading.Thread(target=target, name=name, daemon=True)
                self._threads.append(thread)
                thread.start()

    def _apply_loop(self) -> None:
        while (item := self._apply_queue.get()) is not None:
            d, check = item
            key, checking = remedy_key(d), check_key(d)  # the check is kept under the engine's diagnosis's key
            try:
                applied = self.stage.apply(d)
            except Exception as exc:  # never let a fix take the daemon down: the diagnosis stays described
                applied = replace(d, fix=replace(d.fix, warnings=[*d.fix.warnings, f"no fix applied: {exc!r}"]))
            with self._done:
                self._applied[key] = applied.fix
                self._asked.discard(key)
                _bound(self._applied, self._size)
                self.changed = True
                self._done.notify_all()
            self.wake()
            if check and self.stage.wants_check(applied):
                self._check_queue.put((checking, applied))
            elif check:  # the safety check left nothing to put to SGLang
                with self._lock:
                    self._waiting -= 1
                    self._checked[checking] = NOTHING
                    self._release_if_idle()

    def _release_if_idle(self) -> None:
        """With the lock held: no check runs or waits, so the fix search's data goes (~MBs, built again)."""
        if not self._running and not self._waiting:
            self.stage.release_search()

    def _check_loop(self) -> None:
        while (item := self._check_queue.get()) is not None:
            key, d = item
            with self._lock:
                self._waiting -= 1
                if self._checked.get(key, PENDING) not in (PENDING, SEARCHING):
                    self._release_if_idle()
                    continue  # checked already (the same command and changes for another diagnosis)
                self._running += 1
            try:
                done = self.stage.check(d, run=self._run, unrun=CHECKS_OFF)
            except Exception as exc:  # never let a check take the daemon down
                done = with_verified(d, f"not verified: {type(exc).__name__}: {exc}")
            result: Fix | str = done.fix if self.stage.searches(d) else done.fix.verified or ""
            with self._lock:
                self._checked[key] = result
                self._finished.append(done)
                self.changed = True
                self._running -= 1
                self._release_if_idle()
            self._on_checked(d.unit, done.fix.verified or "")
            self.wake()


def _busy(said: Fix | str) -> bool:
    return isinstance(said, str) and said.startswith(BUSY.split("(", 1)[0])


def _bound(results: OrderedDict[Any, Any], size: int) -> None:
    while len(results) > size:
        results.popitem(last=False)
