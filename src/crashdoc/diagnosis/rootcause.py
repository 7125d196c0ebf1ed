"""Choosing the root cause of one crash.

SGLang's failures arrive with a lot of company: every TP rank raises the same error, the
launcher raises "Rank N scheduler died" after a child dies, sibling ranks throw NCCL and
TCPStore errors once a peer is gone. The root cause is the first failing traceback of the
run, among those logged shortly before it died; consequences of a child's death and
interrupts never win. Without any traceback, a line-level signature or the way the process
ended (OOM kill, core dump, signal) is the best evidence there is.

A native crash dump (faulthandler's `Fatal Python error: Aborted`) is how a process dies after
something else went wrong: when a critical line came first (NCCL's watchdog timeout, `terminate
called after throwing ...`), that line is the root cause and the dump its consequence.
Tracebacks the run survived (`Run.handled`) are never a cause, except one SGLang logged as
handled when the run died with nothing else to show.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crashdoc.assembly.fingerprint import fingerprint_text, fingerprint_traceback
from crashdoc.assembly.logline import split_prefix
from crashdoc.assembly.traceback import FATAL_TYPE, TRACEBACK_HEAD
from crashdoc.diagnosis.category import guess_category
from crashdoc.diagnosis.failures import LineHit
from crashdoc.diagnosis.run import Run
from crashdoc.events import ExceptionInfo, Match, Traceback
from crashdoc.matching.derived import DerivedMatch
from crashdoc.matching.matcher import Facts, Matcher
from crashdoc.sources.routerlog import parse_router_line, worker_urls
from crashdoc.text import LazyPattern

ROOT_WINDOW_SECONDS = 120.0
_CONSEQUENCE_TYPES = ("KeyboardInterrupt", "SystemExit", "CancelledError", "BrokenPipeError")
_CONSEQUENCE_MESSAGES = (
    LazyPattern(r"scheduler died during initialization"),
    LazyPattern(r"kill_process_tree: \d+ process\(es\) not reaped"),
    LazyPattern(r"^Initialization failed\. Please see the error messages above"),
)
_TEARDOWN_FRAMES = "multiprocessing/resource_tracker.py"
_THREAD_HEADER = "Exception in thread"
_EMBEDDED_ERROR = LazyPattern(r"^\s*(?P<type>[A-Za-z_][\w.]*(?:Error|Exception))(?:\(|: )")


@dataclass(slots=True)
class Finding:
    """The root cause of a crash, or a failure that a line-level signature saw."""

    kind: str  # traceback | line | exit
    fingerprint: str
    type: str
    message: str
    line: str
    match: Match | None = None
    traceback: Traceback | None = None
    category_guess: str = "other"
    evidence: list[str] = field(default_factory=list)
    timestamp: float = 0.0
    processes: list[str] = field(default_factory=list)  # the ranks or PIDs that raised it
    derived: DerivedMatch | None = None  # a derived signature, when no reviewed one matched

    @property
    def signature_id(self) -> str | None:
        if self.match is not None:
            return self.match.signature_id
        return self.derived.signature.id if self.derived is not None else None


def is_consequence(tb: Traceback) -> bool:
    """Errors that follow from a failure elsewhere, or from the teardown after it."""
    exc = tb.final
    if exc.short_type in _CONSEQUENCE_TYPES:
        return True
    if any(_TEARDOWN_FRAMES in f.file for f in exc.frames):
        return True  # multiprocessing's resource tracker complains when the tree is SIGKILLed
    return any(p.search(exc.message) for p in _CONSEQUENCE_MESSAGES)


def traceback_finding(tb: Traceback, matcher: Matcher, facts: Facts) -> Finding:
    matches = matcher.match_traceback(tb, facts)
    exc = tb.final
    match = matches[0] if matches else None
    line = match.line if match else _key_line(exc)
    return Finding(
        kind="traceback",
        fingerprint=fingerprint_traceback(tb),
        type=exc.type,
        message=exc.message,
        line=line,
        match=match,
        traceback=tb,
        category_guess=guess_category(exc),
        timestamp=tb.timestamp,
    )


def root_cause(inv: Run, matcher: Matcher, facts: Facts) -> Finding | None:
    """The finding that best explains why this run died (None when nothing says)."""
    teardown = next((m.timestamp for m in inv.markers if m.kind == "kill-tree" and m.timestamp), None)
    pool = list(inv.tracebacks)
    if not pool and inv.crashed:
        # died with nothing but a traceback SGLang said it handled ("...; retrying."): the retries ran out
        pool = [h.traceback for h in inv.handled if h.how == "logged"]
    candidates = [
        tb
        for tb in pool
        if not is_consequence(tb) and (teardown is None or not tb.timestamp or tb.timestamp <= teardown)
    ]
    if not candidates and not inv.oom_killed:
        candidates = list(pool)  # "Rank 0 scheduler died" is all there is: better than nothing
    # an exception in a thread does not end the process: it explains a crash only when nothing else does
    candidates = [tb for tb in candidates if not tb.header.startswith(_THREAD_HEADER)] or candidates
    if candidates:
        last = max(tb.timestamp for tb in candidates)
        if last:
            candidates = [tb for tb in candidates if tb.timestamp >= last - ROOT_WINDOW_SECONDS] or candidates
        first = candidates[0]
        if first.final.type == FATAL_TYPE:
            cause = _line_before(inv, matcher, first)
            if cause is not None:
                return cause
        chosen = traceback_finding(first, matcher, facts)
        if chosen.match is None:
            # a later traceback of the same burst may be the one a signature knows (e.g. the
            # launcher's own error after an unknown child failure): prefer knowledge over order
            # only when it is the same failure seen from another process
            for tb in candidates[1:]:
                other = traceback_finding(tb, matcher, facts)
                if other.match is not None and other.fingerprint == chosen.fingerprint:
                    chosen = other
                    break
        if chosen.traceback is not None and (chosen.match is None or facts.sglang_release):
            # also behind a reviewed answer when the unit's release is known: its version note needs it
            chosen.derived = matcher.match_derived(chosen.traceback, facts)
        _add_traceback_evidence(chosen, inv)
        return chosen
    critical = [h for h in inv.line_hits if _severity(matcher, h.match) == "critical"]
    if critical:
        finding = _line_finding(_best(critical))
        _add_exit_evidence(finding, inv)
        return finding
    if inv.lone:  # a pasted log whose failure is a lone message line: read like a traceback without frames
        chosen = traceback_finding(inv.lone[0], matcher, facts)
        if chosen.match is None or facts.sglang_release:
            chosen.derived = matcher.match_derived(inv.lone[0], facts)
        _add_traceback_evidence(chosen, inv)
        return chosen
    if not inv.crashed or (inv.exit_code is None and not inv.oom_killed and not inv.result):
        return None
    status = inv.exit_status
    result = "oom-kill" if inv.oom_killed else inv.result
    matches = matcher.match_exit(inv.exit_code, status, result)
    exit_text = inv.exit_text() or (f"result {inv.result}" if inv.result else "ended")
    finding = Finding(
        kind="exit",
        fingerprint=fingerprint_text("exit", inv.exit_code or "", status or "", result or ""),
        # the launcher's "Rank N scheduler died ... exit code: -9" is what the OOM kill looks like from inside
        type="",
        message=f"the main process {exit_text} without logging a traceback",
        line=exit_text,
        match=matches[0] if matches else None,
        category_guess="memory" if inv.oom_killed else "other",
        timestamp=inv.ended_at or 0.0,
    )
    if inv.oom_killed:
        finding.line = "a process of the unit was killed by the kernel's OOM killer"
        finding.message = finding.line
        if inv.oom_message:
            finding.evidence.append(f"kernel: {inv.oom_message[:300]}")
        for tb in inv.tracebacks[:1]:
            finding.evidence.append(f"then the launcher reported: {tb.final.line or tb.final.message[:200]}")
    _add_exit_evidence(finding, inv)
    return finding


def _line_finding(hit: LineHit) -> Finding:
    """A failure a line-level signature saw, as a root cause: the line is its evidence."""
    said = line_message(hit.match.line)
    finding = Finding(
        kind="line",
        fingerprint=fingerprint_text(hit.match.signature_id, hit.match.line),
        type="",
        message=said,
        line=said,
        match=hit.match,
        category_guess=_line_category(hit.match.line),
        timestamp=hit.line.timestamp,
    )
    finding.evidence.append(hit.line.text.strip()[:300])
    return finding


def line_message(line: str) -> str:
    """What a failure line says, without the writer's stamp: SGLang's `[time rank] ` prefix, or the router
    record's time, level, module and source file (the evidence keeps the whole line)."""
    prefixed, _, body = split_prefix(line)
    if prefixed:
        return body.strip() or line
    record = parse_router_line(line)
    return record.message.strip() if record is not None and record.message.strip() else line


def _line_category(line: str) -> str:
    """Where a failure line happened, from what it says (a native error names its extension's file)."""
    return guess_category(ExceptionInfo(type="", message=line))


def _line_before(inv: Run, matcher: Matcher, dump: Traceback) -> Finding | None:
    """The first critical line-level failure logged before a native crash dump: what made it abort."""
    if not dump.seq:
        return None
    before = [h for h in inv.line_hits if h.seq and h.seq < dump.seq and _severity(matcher, h.match) == "critical"]
    if not before:
        return None
    finding = _line_finding(_best(before))
    where = _innermost(dump)
    finding.evidence.append(
        f"then the process died natively ({dump.final.line}{where}): a consequence, the dump is not the cause"
    )
    _add_exit_evidence(finding, inv)
    return finding


def _best(hits: list[LineHit]) -> LineHit:
    """The most specific failure line (a generic `terminate called ...` loses to the NCCL timeout it
    reports), the first of equals: later lines of the same failure follow from it."""
    return max(enumerate(hits), key=lambda item: (item[1].match.score, -item[0]))[1]


def _innermost(tb: Traceback) -> str:
    frames = tb.final.frames
    if not frames:
        return ""
    f = frames[-1]
    return f", in {f.function} at {f.file}:{f.line}"


def line_findings(inv: Run, matcher: Matcher) -> list[Finding]:
    """Non-fatal failures a line-level signature saw, one per signature."""
    seen: dict[str, Finding] = {}
    for hit in inv.line_hits:
        sig_id = hit.match.signature_id
        if sig_id in seen:
            seen[sig_id].processes.append(str(hit.line.pid))
            continue
        if sig_id.startswith(_ROUTER):
            workers = _router_workers(inv)
        said = line_message(hit.match.line)
        seen[sig_id] = Finding(
            kind="line",
            fingerprint=fingerprint_text(sig_id, hit.match.line),
            type="",
            message=said,
            line=said,
            match=hit.match,
            category_guess=_line_category(hit.match.line),
            timestamp=hit.line.timestamp,
            evidence=[hit.line.text.strip()],
            processes=[str(hit.line.pid)],
        )
        if sig_id.startswith(_ROUTER) and workers:
            seen[sig_id].evidence.append(f"workers the router's log names as failing: {', '.join(workers)}")
    return list(seen.values())


_ROUTER = "router-"


def _router_workers(inv: Run) -> list[str]:
    """The workers the router's failure lines name (health checks, registrations), in order, once each."""
    found: list[str] = []
    for hit in inv.line_hits:
        if hit.match.signature_id.startswith(_ROUTER):
            found.extend(u for u in worker_urls(hit.match.line) if u not in found)
    return found[:16]


def _severity(matcher: Matcher, match: Match) -> str:
    sig = matcher.library.get(match.signature_id)
    return sig.severity if sig else "warning"


def _key_line(exc: ExceptionInfo) -> str:
    """The printed line that states the error; for compiler errors, the error embedded in the message."""
    if exc.short_type == "CompilationError" or not exc.type:
        for line in exc.message.split("\n")[1:]:
            if _EMBEDDED_ERROR.match(line):
                return line.strip()
    return exc.line or f"{exc.type}: {exc.message.split(chr(10), 1)[0]}"


def _add_traceback_evidence(finding: Finding, inv: Run) -> None:
    tb = finding.traceback
    assert tb is not None
    same = [t for t in inv.tracebacks if fingerprint_traceback(t) == finding.fingerprint]
    finding.processes = sorted({t.rank or f"pid {t.pid}" for t in same})
    who = f"{tb.wrapper} process" if tb.wrapper else "main process"
    where = f" ({tb.rank})" if tb.rank else ""
    finding.evidence.append(f"{who}{where} raised: {finding.line}")
    if tb.header and tb.header != finding.line:
        finding.evidence.append(f"logged as: {tb.header[:200]}")
    if len(finding.processes) > 1:
        names = ", ".join(finding.processes[:16])
        finding.evidence.append(f"the same error in {len(finding.processes)} processes: {names}")
    frames = tb.final.frames
    if tb.final.type == FATAL_TYPE:
        if frames:
            f = frames[-1]
            finding.evidence.append(f"the crashing thread was running {f.function} at {f.file}:{f.line}")
        finding.evidence.append("the other threads in the dump were waiting, not the cause")
    elif frames:
        f = frames[-1]
        finding.evidence.append(f"raised at {f.file}:{f.line} in {f.function}")
    if not any(e.frames for e in tb.chain) and tb.final.type != FATAL_TYPE:
        finding.evidence.append("no traceback given, matched on the message alone")
    elif TRACEBACK_HEAD not in tb.text and tb.final.type != FATAL_TYPE:
        finding.evidence.append(
            "the log starts mid-traceback (no `Traceback (most recent call last):` line): outer frames are missing"
        )
    for h in inv.handled[:3]:
        finding.evidence.append(f"handled earlier, not the cause: {h.traceback.final.line[:160]} ({h.reason})")
    others = {fingerprint_traceback(t) for t in inv.tracebacks} - {finding.fingerprint}
    if others:
        finding.evidence.append(f"{len(others)} other traceback(s) in this run treated as consequences")
    for marker in inv.markers:
        if marker.kind in ("sigquit", "child-crashed", "watchdog-timeout", "warmup-failed"):
            finding.evidence.append(marker.text[:200])
            break
    _add_exit_evidence(finding, inv)


def _add_exit_evidence(finding: Finding, inv: Run) -> None:
    exit_text = inv.exit_text()
    if exit_text:
        tb = finding.traceback
        if tb is not None and tb.wrapper and inv.exit_status in ("9", "KILL"):
            exit_text += " (SGLang's launcher kills its whole process tree after a child's exception)"
        finding.evidence.append(f"main process {exit_text}")
    if inv.result:
        finding.evidence.append(f"unit result: {inv.result}")
    if inv.lifetime is not None and inv.lifetime > 0:
        phase = "after SGLang reported ready" if inv.ready else "before SGLang reported ready"
        finding.evidence.append(f"died {inv.lifetime:.1f} s after start, {phase}")
