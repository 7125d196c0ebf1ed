"""Progress of a long journal read on a terminal: entries read, rate, time left.

`diagnose` over a day of a busy host's journal reads for minutes; without a word the engineer
cannot tell a slow read from a hang. The line is drawn on stderr only when stderr is a
terminal, only once the read has taken longer than `after` seconds (a short read shows
nothing), at most every `every` seconds, and erased when the read ends, so that the diagnosis
prints on a clean screen. Piped or redirected, nothing is written.

Time left comes from the journal's clock: how far the entry being read is between the first
and the newest entry's timestamps, at the rate so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    def __init__(
        self,
        stream: TextIO,
        start: float | None,
        end: float | None,
        *,
        after: float = 1.0,
        every: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        try:
            self.enabled = stream.isatty()
        except (AttributeError, ValueError, OSError):
            self.enabled = False
        self.stream = stream
        self.start, self.end = start, end
        self.after, self.every = after, every
        self.clock = clock
        self.began = clock()
        self._last_draw = 0.0
        self.drawn = False

    def update(self, entries: int, position: float | None) -> None:
        """`entries` read so far; `position`: the realtime (epoch s) of the newest entry read."""
        if not self.enabled:
            return
        now = self.clock()
        elapsed = now - self.began
        if elapsed < self.after or (self.drawn and now - self._last_draw < self.every):
            return
        self._last_draw = now
        self.drawn = True
        rate = entries / elapsed if elapsed > 0 else 0.0
        text = f"crashdoc: reading the journal: {entries:,} entries, {rate:,.0f}/s"
        left = self.time_left(elapsed, position)
        if left is not None:
            text += f", about {_duration(left)} left"
        self._write("\r" + text + "\x1b[K")

    def time_left(self, elapsed: float, position: float | None) -> float | None:
        if position is None or self.start is None or self.end is None or self.end <= self.start:
            return None
        done = (min(max(position, self.start), self.end) - self.start) / (self.end - self.start)
        if done <= 0.0:
            return None
        return elapsed * (1.0 - done) / done

    def finish(self) -> None:
        """Erase the line (the diagnosis follows on a clean screen)."""
        if self.drawn:
            self._write("\r\x1b[K")
            self.drawn = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.enabled = False  # the terminal went away: keep reading, stop drawing


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
