"""An engine fed the way the journal source feeds it (PID 1's records, a unit's lines), on a clock the
test moves: exact event sequences without a systemd."""

from __future__ import annotations

from pathlib import Path

from crashdoc.diagnosis.engine import Engine, UnitRecord
from crashdoc.diagnosis.report import DiagnosisBuilder
from crashdoc.events import Lifecycle, LifecycleRecord, LogLine, Thresholds
from crashdoc.matching.library import load_library
from crashdoc.matching.matcher import Matcher
from crashdoc.remedy.fixes import unit_flags
from support.journal_files import TRACEBACK as DSV4_TRACEBACK

LIBRARY = load_library([Path(__file__).parent.parent / "fixtures" / "signatures"])
UNIT = "sglang-prefill.service"
SCRIPT = "/opt/sglang/prefill.sh"


class Host:
    """Feeds an engine the way the journal source would, with a clock."""

    def __init__(
        self, thresholds: Thresholds | None = None, files: dict[str, str] | None = None, unit: str = UNIT
    ) -> None:
        self.unit = unit
        self.files = files or {}
        builder = DiagnosisBuilder(flags_of=lambda argv: unit_flags(argv, self.read))
        self.engine = Engine(Matcher(LIBRARY), thresholds=thresholds or Thresholds(recovery=10), builder=builder)
        self.t = 1_800_000_000.0
        self.runs = 0
        self.restarts = 0

    def read(self, path: str) -> str:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    def pid1(self, kind: Lifecycle, **fields: object) -> None:
        self.engine.on_lifecycle(LifecycleRecord(self.unit, kind, self.t, invocation=f"inv{self.runs}", **fields))

    def start(self) -> None:
        self.runs += 1
        self.pid1(Lifecycle.STARTED)

    def line(self, text: str, pid: int = 100) -> None:
        self.engine.on_line(LogLine(self.unit, pid + self.runs, text, self.t, f"inv{self.runs}"))

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
    def rec(self) -> UnitRecord:
        return self.engine.units()[self.unit]

    def kinds(self) -> list[str]:
        return [e.kind for e in self.engine.events()]
