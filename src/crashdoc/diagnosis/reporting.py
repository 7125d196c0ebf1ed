"""What the engine reports about a unit: the facts its runs are matched with, and the diagnoses its records
give (its loop's, each distinct crash's, each line failure's, and the tracebacks its runs survived).

Pure: the records in, `Diagnosis` records out (built by `report.DiagnosisBuilder`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from crashdoc.assembly.fingerprint import fingerprint_traceback
from crashdoc.diagnosis.run import Run
from crashdoc.diagnosis.unitrecord import UnitRecord
from crashdoc.events import BAD_REQUEST
from crashdoc.matching.matcher import Facts, Matcher

if TYPE_CHECKING:  # imported where they are made or first used: `explain` of a healthy log needs none of them
    from crashdoc.diagnosis.failures import Handled
    from crashdoc.diagnosis.report import DiagnosisBuilder, UnitContext
    from crashdoc.diagnosis.rootcause import Finding
    from crashdoc.diagnosis.views import RunView
    from crashdoc.diagnosis_records import Diagnosis

# (release, where it came from) when no option, log line or interpreter says
NO_RELEASE = ("", "")


def sglang_release(option: tuple[str, str] | None, run: Run | None) -> tuple[str, str]:
    """Which SGLang release a run runs, and where that was read: the one rule. An option given to crashdoc
    (`--sglang-version`, `--sglang-source`) first, then what the run's own output named ("sglang version:"),
    then what its interpreter's files said when it began (read by the runtime: `LaunchFacts`)."""
    if option is not None:
        return option
    if run is not None and run.logged_release:
        return run.logged_release, "the unit's log"
    if run is not None and run.sglang_release:
        return run.sglang_release, run.sglang_release_from
    return NO_RELEASE


def default_builder() -> DiagnosisBuilder:
    """A builder without a fix refiner; `report.py` is imported with the first diagnosis (a healthy log has none)."""
    from crashdoc.diagnosis.report import DiagnosisBuilder

    return DiagnosisBuilder()


class Reporter:
    """Builds a unit's diagnoses from the engine's records, with the current matcher."""

    def __init__(
        self,
        matcher: Callable[[], Matcher],
        builder: DiagnosisBuilder | Callable[[], DiagnosisBuilder] = default_builder,
        release_option: tuple[str, str] | None = None,
        units: Callable[[], Mapping[str, UnitRecord]] = dict,
        hardware: Callable[[str, RunView, Diagnosis], Diagnosis] | None = None,
    ) -> None:
        self.matcher = matcher
        self._builder = builder  # a callable: called at the first diagnosis
        self.units = units  # every watched unit: a unit's peers (a PD counterpart, a router's workers)
        self.release_option = release_option  # (release, "where from") that `--sglang-version` and the like said
        # a crash's diagnosis as the kernel's GPU faults leave it (gpustate.GpuRecord.judge): hardware or not
        self.hardware = hardware

    @property
    def builder(self) -> DiagnosisBuilder:
        builder = self._builder
        if callable(builder):
            builder = self._builder = builder()
        return builder

    def flags(self, run: Run) -> dict[str, str]:
        """The run's SGLang flags: its command line (script included, as read when the run began) over
        SGLang's own server_args line."""
        flags = dict(run.server_flags)
        flags.update(run.flags or {})
        return flags

    def facts(self, rec: UnitRecord, run: Run) -> Facts:
        flags = self.flags(run)
        return Facts(
            flags=flags,
            model=flags.get("--model-path", "") or flags.get("--model", ""),
            disaggregation_mode=flags.get("--disaggregation-mode", ""),
            role=rec.role if rec.role != "any" else "",
            sglang_release=sglang_release(self.release_option, run)[0],
        )

    def run_view(self, run: Run) -> RunView:
        from crashdoc.diagnosis.views import run_view  # made when asked for (a healthy paste asks for none)

        return run_view(run, self.flags(run))

    def context(self, rec: UnitRecord, run: Run | None) -> UnitContext:
        facts = self.facts(rec, run) if run is not None else Facts()
        cmdline = (run.cmdline if run is not None else ()) or (rec.state.exec_start if rec.state else ())
        change = None
        if rec.loop.looping and rec.loop.loop_started_at is not None:
            from crashdoc.diagnosis.configchange import correlate  # a loop's start: what changed before it

            good = rec.last_good
            change = correlate(
                rec.file_changes,
                rec.loop.loop_started_at,
                (good.started_at or good.first_line_at) if good is not None else None,
                good.flags if good is not None else None,
                (run.flags if run is not None and run.flags is not None else facts.flags),
            )
        release, release_from = sglang_release(self.release_option, run)
        from crashdoc.diagnosis.report import UnitContext  # with the first diagnosis

        return UnitContext(
            unit=rec.name,
            role=rec.role,
            n_restarts=rec.n_restarts,
            facts=facts,
            cmdline=cmdline,
            run=self.run_view(run) if run is not None else None,
            state=rec.state,
            config_change=change,
            sglang_release=release,
            sglang_release_from=release_from,
            peers=self.peers(rec),
        )

    def peers(self, rec: UnitRecord) -> tuple[tuple[str, dict[str, str]], ...]:
        """The other units' flags (their last run's): a PD unit's counterpart, the workers behind a router."""
        return tuple(
            (other.name, self.flags(other.current))
            for other in self.units().values()
            if other is not rec and other.current is not None
        )

    def build(self, rec: UnitRecord, run: Run | None, finding: Finding, crashes: int, confidence: float) -> Diagnosis:
        return self.builder.build(finding, self.context(rec, run), self.matcher().library, crashes, confidence)

    def crash(self, rec: UnitRecord, run: Run | None, finding: Finding, crashes: int, confidence: float) -> Diagnosis:
        """A crash's diagnosis: built from its finding, then put before the kernel's GPU faults (a GPU that failed
        just before the crash's first error line makes it a hardware diagnosis)."""
        d = self.build(rec, run, finding, crashes, confidence)
        if self.hardware is None or run is None:
            return d
        return self.hardware(rec.name, self.run_view(run), d)

    def loop_diagnosis(self, rec: UnitRecord) -> Diagnosis:
        """The loop's diagnosis: the root cause most of its crashes share (or, with none, what systemd saw)."""
        finding, confidence, crashes = rec.loop.dominant()
        run = _run_of(rec, finding)
        if finding is None:
            return self.builder.unexplained(rec.name, self.context(rec, run), crashes)
        return self.crash(rec, run, finding, crashes=crashes, confidence=confidence)

    def crash_diagnoses(self, rec: UnitRecord) -> list[Diagnosis]:
        """One diagnosis per distinct root cause among the unit's crashed runs (no loop)."""
        groups: dict[str, tuple[Finding, Run, int]] = {}
        crashed = [r for r in rec.runs.values() if r.crashed and (r.ended or r.ended_by_input)]
        if not crashed:
            return []
        from crashdoc.diagnosis.rootcause import root_cause  # a run crashed: the judgment's first use

        matcher = self.matcher()
        for run in crashed:
            finding = root_cause(run, matcher, self.facts(rec, run))
            if finding is None:
                continue
            key = finding.signature_id or finding.fingerprint
            count = groups[key][2] + 1 if key in groups else 1
            groups[key] = (finding, run, count)
        return [self.crash(rec, run, f, crashes=n, confidence=1.0) for f, run, n in groups.values()]

    def line_diagnoses(self, rec: UnitRecord) -> list[Diagnosis]:
        """Critical failures line-level signatures saw in runs they did not end (a router with no healthy worker
        left fails every request while it runs). A crashed run's critical lines are its root cause or its
        evidence; warning-level lines are `line_warnings`. The most specific first (a worker's registration that
        failed before the router's "no available workers"), then the first seen (the later ones follow from it)."""
        groups = sorted(self._line_groups(rec, True), key=lambda g: -(g[0].match.score if g[0].match else 0))
        return [self.build(rec, run, f, crashes=n, confidence=1.0) for f, run, n in groups]

    def line_warnings(self, rec: UnitRecord) -> list[Diagnosis]:
        """Warning-level failures that line signatures saw (one KV transfer that failed, a health check a busy
        server missed): the process carried on, so they are warnings like the tracebacks it survived, never a
        failure of the unit (`crashdoc_line_failures_total` counts them as they arrive)."""
        out: list[Diagnosis] = []
        for finding, run, count in self._line_groups(rec, False):
            d = self.build(rec, run, finding, crashes=count, confidence=1.0)
            how = LINE_CRASHED if run.crashed else LINE_WENT_ON
            out.append(replace(d, crashes=count, severity="warning", handled=how))
        return out

    def _line_groups(self, rec: UnitRecord, critical: bool) -> list[tuple[Finding, Run, int]]:
        """The unit's line findings of one severity class, one per signature: (finding, its run, times seen)."""
        found: dict[str, tuple[Finding, Run, int]] = {}
        runs = [run for run in rec.runs.values() if run.line_hits]
        if not runs:
            return []
        from crashdoc.diagnosis.rootcause import line_findings

        matcher = self.matcher()
        for run in runs:
            for finding in line_findings(run, matcher):
                sig = matcher.library.get(finding.match.signature_id) if finding.match is not None else None
                is_critical = sig is not None and sig.severity == "critical"
                if is_critical != critical or (critical and run.crashed):
                    continue
                key = finding.signature_id or finding.fingerprint
                count = found[key][2] + len(finding.processes) if key in found else len(finding.processes)
                found[key] = (finding, run, count)
        return list(found.values())

    def warnings(self, rec: UnitRecord) -> list[Diagnosis]:
        """The tracebacks the unit's runs survived, one per error, then its warning-level line failures. A
        traceback SGLang logged as handled is left out when its run then died with nothing else to show: it is
        that crash's root cause."""
        out: list[Diagnosis] = []
        matcher = self.matcher()
        groups: dict[str, tuple[Handled, Run, int, list[str]]] = {}
        for run in rec.runs.values():
            cause_of_crash = run.crashed and not run.tracebacks
            for h in run.handled:
                if cause_of_crash and h.how == "logged":
                    continue
                key = h.fingerprint or fingerprint_traceback(h.traceback)
                first, _, count, who = groups.get(key, (h, run, 0, []))
                who.extend(p for p in h.processes if p not in who)
                groups[key] = (first, run, count + h.count, who)
        if groups:
            from crashdoc.diagnosis.rootcause import traceback_finding
        for h, run, count, who in groups.values():
            finding = traceback_finding(h.traceback, matcher, self.facts(rec, run))
            finding.processes = who[:16]
            finding.evidence.append(f"handled: {h.reason}")
            if len(who) > 1:
                finding.evidence.append(f"the same error in {len(who)} processes: {', '.join(who[:16])}")
            if h.traceback.logged_with and h.how != "logged":
                finding.evidence.append(f"logged as: {h.traceback.logged_with[:200]}")
            frames = h.traceback.final.frames
            if frames:
                finding.evidence.append(f"raised at {frames[-1].file}:{frames[-1].line} in {frames[-1].function}")
            d = self.build(rec, run, finding, crashes=1, confidence=1.0)
            fix = d.fix
            if d.signature is None:
                fix.summary = (
                    "SGLang carried on after this error: nothing to do unless the part that failed "
                    "(see the root-cause line) is needed."
                )
            # crashes: times seen, not crashes of a loop
            kind = BAD_REQUEST if h.request else d.kind
            out.append(replace(d, crashes=count, severity="warning", handled=h.reason, kind=kind))
        return out + self.line_warnings(rec)


LINE_WENT_ON = "SGLang logged this failure and the process went on running"
LINE_CRASHED = "SGLang logged this failure and went on; it is not what ended the run"


def _run_of(rec: UnitRecord, finding: Finding | None) -> Run | None:
    """The run a finding came from: its traceback's, else the unit's latest crashed run, else its current."""
    if finding is not None and finding.traceback is not None:
        run = rec.runs.get(finding.traceback.invocation)
        if run is not None:
            return run
    for run in reversed(rec.runs.values()):
        if run.crashed:
            return run
    return rec.current
