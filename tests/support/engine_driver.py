"""An engine fed the way the daemon feeds it (PID 1's records, a unit's lines, D-Bus's unit states, each with
the launch facts a `LaunchReader` reads from the test's files first), on a clock the test moves: exact event
sequences without a systemd."""

from __future__ import annotations

from pathlib import Path

from crashdoc.commands.pipeline import build_engine
from crashdoc.diagnosis.engine import feed
from crashdoc.diagnosis.views import RunView, UnitView
from crashdoc.events import GpuEvent, HostGpus, Lifecycle, LifecycleRecord, LogLine, Thresholds, UnitDevices, UnitState
from crashdoc.matching.library import load_library
from crashdoc.matching.matcher import Matcher
from crashdoc.remedy.launch import LaunchReader, ReleaseResolver
from support.journal_files import TRACEBACK as DSV4_TRACEBACK

LIBRARY = load_library([Path(__file__).parent.parent / "fixtures" / "signatures"])
UNIT = "sglang-prefill.service"
SCRIPT = "/opt/sglang/prefill.sh"


class Host:
    """Feeds an engine the way the journal source would, with a clock."""

    def __init__(
        self,
        thresholds: Thresholds | None = None,
        files: dict[str, str] | None = None,
        unit: str = UNIT,
        *,
        sglang_release: ReleaseResolver | None = None,
    ) -> None:
        self.unit = unit
        self.files = files or {}
        self.launches = LaunchReader(read=self.read, sglang_release=sglang_release)
        self.engine = build_engine(Matcher(LIBRARY), thresholds=thresholds or Thresholds(recovery=10))
        self.t = 1_800_000_000.0
        self.runs = 0
        self.restarts = 0

    def read(self, path: str) -> str:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    def feed(self, *events: LogLine | LifecycleRecord | UnitState | GpuEvent) -> None:
        """Events with the launch facts they need read first, as the daemon feeds them."""
        feed(self.engine, self.launches.prepare(events))

    def facts(self, *facts: HostGpus | UnitDevices) -> None:
        """What the runtime read of the GPUs (the host's, a unit's CUDA_VISIBLE_DEVICES), handed in as it does."""
        feed(self.engine, facts)

    def pid1(self, kind: Lifecycle, **fields: object) -> None:
        self.feed(LifecycleRecord(self.unit, kind, self.t, invocation=f"inv{self.runs}", **fields))  # type: ignore[arg-type]

    def state(self, **fields: object) -> None:
        """What D-Bus says of the unit now."""
        self.feed(UnitState(self.unit, timestamp=self.t, **fields))  # type: ignore[arg-type]

    def start(self) -> None:
        self.runs += 1
        self.pid1(Lifecycle.STARTED)

    def line(self, text: str, pid: int = 100) -> None:
        self.feed(LogLine(self.unit, pid + self.runs, text, self.t, f"inv{self.runs}"))

    def ready(self) -> None:
        self.line("[2026-05-01 12:00:09] The server is fired up and ready to roll!")

    def crash(
        self,
        lines: list[str] = DSV4_TRACEBACK,
        code: str = "killed",
        status: str = "KILL",
        result: str = "signal",
        restart: bool = True,
    ) -> None:
        for text in lines:
            self.line(text, pid=200)
        self.t += 0.2
        self.pid1(Lifecycle.EXITED, exit_code=code, exit_status=status)
        self.pid1(Lifecycle.FAILED, result=result)
        if restart:
            self.t += 1
            self.restarts += 1
            self.pid1(Lifecycle.RESTART_SCHEDULED, n_restarts=self.restarts)

    def wait(self, seconds: float) -> None:
        end = self.t + seconds
        while self.t < end:
            self.t = min(end, self.t + 1)
            self.engine.tick(self.t)

    @property
    def rec(self) -> UnitView:
        return self.engine.units()[self.unit]

    def runs_seen(self) -> tuple[RunView, ...]:
        return self.engine.runs(self.unit)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.engine.events()]
