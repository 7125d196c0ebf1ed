"""Turning a finding into the diagnosis an on-call engineer reads.

The signature gives the title, category, severity and the structured fix; the unit gives
the real command line the fix is applied to and the restart count; the finding gives the
root-cause line and the evidence. Unknown failures still get a title, a guessed category
and a stable fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crashdoc.assembly.traceback import FATAL_TYPE
from crashdoc.events import FlagChange
from crashdoc.matching.flagnames import canonical
from crashdoc.matching.library import Library, Signature
from crashdoc.matching.matcher import Facts
from crashdoc.matching.protection import protection_notes
from crashdoc.matching.templates import placeholder, placeholder_note, render, render_text, with_current
from crashdoc.text import LazyPattern

if TYPE_CHECKING:  # imported where they are made or first used: `explain` of a healthy log needs none of them
    from crashdoc.diagnosis.configchange import ConfigChange
    from crashdoc.diagnosis.rootcause import Finding
    from crashdoc.diagnosis.views import RunView
    from crashdoc.diagnosis_records import Diagnosis, Fix, FixTarget
    from crashdoc.matching.derived import DerivedMatch
    from crashdoc.unit_records import UnitState

MAX_MESSAGE_CHARS = 4000
MAX_NAMED_FLAGS = 6
_FLAG_NAME = LazyPattern(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_ENV_NAME = LazyPattern(r"\bSGLANG_[A-Z0-9_]*[A-Z0-9]")
_UNSET = ("", "None", "False", "false", "[]", "{}")

# Computes a signature's action from the run's own numbers (remedy.actions): may replace the fix's changes and
# summary and say why. Pure: no I/O (the command, diff and checks come later, from the remedy stage).
FixRefiner = Callable[["Finding", "UnitContext", "Fix"], None]


@dataclass(slots=True)
class UnitContext:
    """What a diagnosis says about the unit beside the finding: its command, restarts, state, release, peers."""

    unit: str
    role: str = "any"
    n_restarts: int | None = None
    facts: Facts = field(default_factory=Facts)
    cmdline: tuple[str, ...] = ()
    run: RunView | None = None
    state: UnitState | None = None
    config_change: ConfigChange | None = None
    sglang_release: str = ""  # the release the unit runs ("" when unknown)
    sglang_release_from: str = ""  # where crashdoc read it
    peers: tuple[tuple[str, dict[str, str]], ...] = ()  # the other watched units and their flags


class DiagnosisBuilder:
    """Builds diagnoses from findings; the fix refiner (pure) is injected so the engine stays below remedy."""

    def __init__(self, refine: FixRefiner | None = None) -> None:
        self._refine = refine

    def build(
        self, finding: Finding, ctx: UnitContext, library: Library, crashes: int = 1, confidence: float = 1.0
    ) -> Diagnosis:
        from crashdoc.diagnosis.category import failure_kind
        from crashdoc.diagnosis_records import Diagnosis, Fix, RootCause

        sig = library.get(finding.signature_id) if finding.signature_id else None
        captures = dict(finding.match.captures) if finding.match else {}
        derived = finding.derived if sig is None else None
        if derived is not None:
            from crashdoc.matching.derived import CONFIDENCE as DERIVED_CONFIDENCE

            # no reviewed signature knows it: SGLang's own check, read from its source, answers
            sig = derived.signature.as_signature(finding.category_guess, derived.known)
            captures = dict(derived.captures)
            confidence = min(confidence, DERIVED_CONFIDENCE)
        if sig is not None:
            title, category, severity = sig.title, sig.category, sig.severity
            if category == "other" and finding.category_guess != "other":
                category = finding.category_guess  # a generic signature (illegal memory access): where it happened
            flags = list(sig.flags)
            fix = self._fix_from_signature(sig, captures, ctx, finding)
            safety = sig.safety or ""
        else:
            title = _unknown_title(finding)
            category = finding.category_guess
            severity = "critical" if finding.kind != "line" else "warning"
            flags = named_flags(finding.message) if finding.kind != "exit" else []
            fix = Fix(summary=_unknown_advice(finding, flags, ctx.facts.flags))
            safety = ""
        run = ctx.run
        evidence = list(finding.evidence)
        if ctx.config_change is not None:
            evidence.insert(0, ctx.config_change.summary())
        if derived is not None:
            evidence.append(derived.signature.evidence(derived.known))
        evidence.extend(peer_evidence([finding.line, *evidence], ctx.peers))
        note = version_note(finding.derived, ctx.sglang_release)
        if note is not None:
            evidence.append(note)
        # systemd's restart count is `restarts`, kept current; a copy here would go stale as the loop goes on
        if crashes > 1:
            evidence.append(f"{crashes} crashes in this loop share this root cause (confidence {confidence:.2f})")
        return Diagnosis(
            unit=ctx.unit,
            signature=sig.id if sig else None,
            title=title,
            category=category,
            severity=severity,
            root_cause=RootCause(
                type=finding.type,
                message=finding.message[:MAX_MESSAGE_CHARS],
                line=finding.line,
            ),
            flags=flags,
            fix=fix,
            fingerprint=finding.fingerprint,
            evidence=evidence,
            restarts=ctx.n_restarts,
            subsystem=category,
            kind=failure_kind(finding, sig),
            invocation=run.id if run is not None and not run.id.startswith("run-") else "",
            captures=captures,
            confidence=confidence,
            crashes=crashes,
            exit=run.exit if run is not None else None,
            timestamp=finding.timestamp,
            config_change=ctx.config_change.as_dict() if ctx.config_change is not None else None,
            derived=derived is not None,
            sglang_release=ctx.sglang_release or None,
            sglang_release_from=ctx.sglang_release_from or None,
            version_note=note,
            target=fix_target(ctx, safety),
        )

    def unexplained(self, unit: str, ctx: UnitContext, crashes: int) -> Diagnosis:
        """A loop whose crashes left nothing to go on: say so, with what systemd saw."""
        from crashdoc.diagnosis_records import Diagnosis, Fix, RootCause

        exit_text = ctx.run.exit if ctx.run is not None else None
        evidence = [f"main process {exit_text}"] if exit_text else []
        return Diagnosis(
            unit=unit,
            signature=None,
            title="Crash loop without a logged error",
            category="other",
            subsystem="other",
            kind="bug",
            severity="critical",
            root_cause=RootCause(type="", message="the unit's processes died without logging a traceback", line=""),
            flags=[],
            fix=Fix(
                summary="No error was logged. Check `journalctl -u UNIT -o verbose` around the exits, "
                "`dmesg -T | grep -i oom`, and `coredumpctl list UNIT`."
            ),
            fingerprint="unexplained",
            evidence=evidence,
            restarts=ctx.n_restarts,
            crashes=crashes,
            confidence=0.0,
            exit=exit_text,
            sglang_release=ctx.sglang_release or None,
            sglang_release_from=ctx.sglang_release_from or None,
            target=fix_target(ctx, ""),
        )

    def _fix_from_signature(
        self, sig: Signature, captures: dict[str, str], ctx: UnitContext, finding: Finding | None = None
    ) -> Fix:
        flags = ctx.facts.flags
        changes: list[FlagChange] = []
        warnings: list[str] = []
        for change in sig.changes:
            flag = change.flag
            if "${" in flag:  # the lever the message names (`Please check the ${flag} path`)
                flag = render(flag, captures, flags) or ""
                if not _FLAG_NAME.fullmatch(flag):
                    warnings.append("the message names no flag to change; change it by hand")
                    continue
            value, waits = change.value, change.placeholder
            if value is not None and "${" in value:
                rendered = render(value, with_current(captures, flags, flag), flags)
                if rendered is None:  # a named placeholder, never template text nor nothing
                    rendered, waits = placeholder(value, flag), True
                    warnings.append(
                        f"the value for {change.new_flag or change.flag} depends on something not in the log; "
                        f"choose it by hand ({rendered[1:-1]})"
                    )
                value = rendered
            changes.append(FlagChange(change.action, flag, value, change.new_flag, waits))
        waiting = [c for c in changes if c.placeholder]
        if waiting:  # a value only the operator knows: said even when no command line is at hand
            warnings.append(placeholder_note(waiting))
        warnings.extend(protection_notes(changes))
        lever = changes[0].flag if changes else ""
        summary = render_text(sig.fix_summary, with_current(captures, flags, lever), flags, lever)
        from crashdoc.diagnosis_records import Fix

        fix = Fix(summary=summary, changes=changes, warnings=warnings)
        if self._refine is not None and finding is not None:
            self._refine(finding, ctx, fix)
        return fix


def fix_target(ctx: UnitContext, safety: str) -> FixTarget:
    """Where the remedy stage applies the changes: the run's command and the unit's settings as seen now."""
    from crashdoc.diagnosis_records import FixTarget

    state = ctx.state
    markers = ctx.run.markers if ctx.run is not None else ()
    return FixTarget(
        cmdline=ctx.cmdline,
        exec_start=state.exec_start if state is not None else (),
        drop_in_paths=state.drop_in_paths if state is not None else (),
        numa_policy=state.numa_policy if state is not None else "",
        numa_mask=state.numa_mask if state is not None else "",
        cpu_affinity=state.cpu_affinity if state is not None else "",
        safety=safety,
        kv_cache=tuple((m.pid, m.text) for m in markers if m.kind == "kv-cache"),
    )


def version_note(match: DerivedMatch | None, release: str) -> str | None:
    """`this check exists in 0.5.10-0.5.14; the unit runs 0.5.23` (the range with an en dash) when the message
    that matched is raised only by other releases than the unit's: a clue in itself (a launch script or an
    install left from another release). Said only of a release the derived library knows (shipped, or
    derived from the host's tree): of one it has not read, nothing can be said."""
    if match is None or match.in_release is not False or not release:
        return None
    known = match.known or match.signature.releases
    if release not in known:
        return None
    from crashdoc.matching.derived import release_range

    where = release_range(match.signature.releases, known)
    return (
        f"this check exists in {where}; the unit runs {release} "
        "(a launch script or an install left from another release?)"
    )


_URL_PORT = LazyPattern(r"\b(?:https?|grpc)://(?P<host>[\w.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>\d+)")


def peer_evidence(texts: list[str], peers: tuple[tuple[str, dict[str, str]], ...]) -> list[str]:
    """Which watched unit a worker URL of the log is (`--port` and, when set, `--host`): a router's failure
    points at the worker units behind it."""
    out: list[str] = []
    seen: set[str] = set()
    for text in texts:
        for m in _URL_PORT.finditer(text):
            url = m.group(0)
            if url in seen:
                continue
            seen.add(url)
            for unit, flags in peers:
                host = flags.get("--host", "")
                if flags.get("--port") == m.group("port") and host in ("", "0.0.0.0", "::", m.group("host")):
                    out.append(f"the worker {url} is {unit} (--port {m.group('port')}): see its own diagnosis")
    return out[:8]


def _unknown_title(finding: Finding) -> str:
    if finding.type == FATAL_TYPE:
        return f"Native crash: {finding.line}"
    if finding.kind == "exit":
        return f"Crash without a traceback: {finding.line}"
    first = finding.line.strip() or f"{finding.type}: {finding.message.split(chr(10), 1)[0]}"
    return (first[:117] + "...") if len(first) > 120 else first


def named_flags(message: str) -> list[str]:
    """The flags and SGLANG_ variables an error message names (canonical, in order): SGLang's
    validation errors name the flag to change, so an unknown one still points at its levers."""
    found = [canonical(m) for m in _FLAG_NAME.findall(message)] + _ENV_NAME.findall(message)
    return list(dict.fromkeys(found))[:MAX_NAMED_FLAGS]


def _this_run(flags: list[str], current: Mapping[str, str]) -> str:
    """How the run that crashed set the named flags, written as on a command line (so redaction sees them)."""
    said = []
    for flag in flags:
        if not flag.startswith("--"):
            continue
        value = current.get(flag)
        if value is None or value in _UNSET:
            said.append(f"no {flag}")
        else:
            said.append(f"{flag} {value}" if value not in ("True", "true") else flag)
    return f" This run has {', '.join(said)}" if said and current else ""  # no period: a redacted value eats it


def _unknown_advice(finding: Finding, flags: list[str] | None = None, current: Mapping[str, str] | None = None) -> str:
    if finding.type == FATAL_TYPE:
        return (
            f"A native crash ({finding.line}): code outside Python (a CUDA kernel, NCCL, a compiled extension) "
            "took the process down, in the frame named in the evidence. Collect: the core dump "
            "(`coredumpctl info UNIT`; `LimitCORE=infinity` in the unit), the whole faulthandler dump "
            "(SGLang's scheduler enables it; `PYTHONFAULTHANDLER=1` for the other processes), and a run with "
            "`CUDA_LAUNCH_BLOCKING=1` to name the failing kernel; then report it upstream with the SGLang, torch, "
            "driver and GPU versions."
        )
    if finding.kind == "exit":
        return (
            "No signature knows this exit. If it was SIGKILL without a traceback, check the kernel OOM killer "
            "(`dmesg -T | grep -i oom`) and the unit's MemoryMax=; a core dump points at a native crash "
            "(`coredumpctl info`)."
        )
    known = (
        "No signature knows this error yet. The root-cause line and fingerprint identify it across restarts; "
        "`crashdoc signatures mine` and the runbook template help to add one."
    )
    if not flags:
        return known
    return (
        f"The error names {', '.join(flags)}: the setting to change is most likely among them. {known}"
        f"{_this_run(flags, current or {})}"
    )
