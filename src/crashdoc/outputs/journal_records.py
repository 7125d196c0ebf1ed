"""Diagnoses, loop starts and recoveries written to the journal as structured records.

Fixed MESSAGE_IDs let an engineer list them (`journalctl MESSAGE_ID=e5f9680e...`) and let
other tools key on them. crashdoc never reads these back as input: they come from
crashdoc's own unit, which is not a watched unit, and the journal source ignores it.
Each record carries CRASHDOC_EVENT_ID, stable for one event, so a restarted crashdoc that
re-reads its last entries does not write the same record twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from crashdoc.diagnosis.views import EngineEvent
from crashdoc.events import HARDWARE, Diagnosis
from crashdoc.lean import sha1
from crashdoc.outputs.alerts import GPU_LABELS
from crashdoc.redact import redact

MESSAGE_ID_LOOP_STARTED = "e5f9680e52774903bd4465732f57a1a4"
MESSAGE_ID_DIAGNOSIS = "7c8ef035a6534e30ad5edf56eb4f94a9"
MESSAGE_ID_RECOVERED = "4afcbf8af7bc4226b9d6f71640b16277"
MESSAGE_ID_FAILED = "28eba4b413844984b283a18e44d25db9"
MESSAGE_ID_FIX_CHECKED = "291f4d9b598449b9bf786971b239f6ce"  # a loop's fix, once SGLang's checks have spoken
OWN_MESSAGE_IDS = frozenset(
    {MESSAGE_ID_LOOP_STARTED, MESSAGE_ID_DIAGNOSIS, MESSAGE_ID_RECOVERED, MESSAGE_ID_FAILED, MESSAGE_ID_FIX_CHECKED}
)

_KIND_TO_ID = {
    "loop-started": MESSAGE_ID_LOOP_STARTED,
    "loop-updated": MESSAGE_ID_DIAGNOSIS,
    "failed": MESSAGE_ID_FAILED,
    "recovered": MESSAGE_ID_RECOVERED,
    "stopped": MESSAGE_ID_RECOVERED,
}
_PRIORITY = {"loop-started": 2, "failed": 2, "loop-updated": 3, "recovered": 5, "stopped": 5}  # crit, err, notice

Send = Callable[..., None]


def _journal_send(**fields: str) -> None:
    """One record through systemd-python's C `sendv` (sd_journal_sendv): its `journal` module, a wrapper that also
    adds CODE_FILE/LINE/FUNC naming this function, imports uuid, logging and traceback (~0.25 MB kept in the daemon)."""
    from systemd._journal import sendv

    sendv(*(f"{name}={value}" for name, value in fields.items()))


@dataclass(slots=True)
class JournalRecorder:
    send: Send = _journal_send
    runbook_url: Callable[[str | None, str], str] = lambda signature, unit: ""
    written: int = 0
    errors: int = 0
    last_error: str = ""
    seen: set[str] = field(default_factory=set)  # event ids written (or found in the journal)

    def record(self, event: EngineEvent) -> bool:
        """Write one record for a loop event; crashes and line failures are not recorded one by one."""
        message_id = _KIND_TO_ID.get(event.kind)
        if message_id is None:
            return False
        d = event.diagnosis
        event_id = _event_id(event)
        if event_id in self.seen:
            return False
        fields = {
            "MESSAGE_ID": message_id,
            "PRIORITY": str(_PRIORITY.get(event.kind, 5)),
            "SYSLOG_IDENTIFIER": "crashdoc",
            "CRASHDOC_EVENT": event.kind,
            "CRASHDOC_EVENT_ID": event_id,
            "CRASHDOC_UNIT": event.unit,
        }
        if d is not None:
            fields.update(self._diagnosis_fields(event.unit, d))
        fields["MESSAGE"] = _message(event)
        return self._send(event_id, fields)

    def record_checked(self, unit: str, d: Diagnosis) -> bool:
        """A loop's fix once SGLang's checks (and the search for a fix they accept) have spoken: it comes
        seconds after the loop's own record, which says the check was pending."""
        event_id = sha1(
            "|".join(["fix-checked", unit, d.fingerprint, d.fix.command or "", d.fix.verified or ""]).encode()
        ).hexdigest()[:20]
        if event_id in self.seen or not d.fix.verified:
            return False
        fields = {
            "MESSAGE_ID": MESSAGE_ID_FIX_CHECKED,
            "PRIORITY": "5",
            "SYSLOG_IDENTIFIER": "crashdoc",
            "CRASHDOC_EVENT": "fix-checked",
            "CRASHDOC_EVENT_ID": event_id,
            "CRASHDOC_UNIT": unit,
            **self._diagnosis_fields(unit, d),
            "MESSAGE": f"{unit}: fix {d.fix.verified} -- {d.fix.summary}",
        }
        return self._send(event_id, fields)

    def _diagnosis_fields(self, unit: str, d: Diagnosis) -> dict[str, str]:
        fields = {
            "CRASHDOC_SIGNATURE": d.signature or "unknown",
            "CRASHDOC_CATEGORY": d.category,
            "CRASHDOC_KIND": d.kind or "bug",
            "CRASHDOC_SEVERITY": d.severity,
            "CRASHDOC_ROOT_CAUSE": d.root_cause.line[:2000],
            "CRASHDOC_FIX": d.fix.summary,
            "CRASHDOC_FINGERPRINT": d.fingerprint,
            "CRASHDOC_CONFIDENCE": f"{d.confidence:.2f}",
            "CRASHDOC_CRASHES": str(d.crashes),
            "CRASHDOC_RUNBOOK_URL": self.runbook_url(d.signature, unit),
        }
        if d.restarts is not None:
            fields["CRASHDOC_NRESTARTS"] = str(d.restarts)
        if d.fix.command:
            fields["CRASHDOC_FIXED_COMMAND"] = d.fix.command
        if d.fix.verified:  # what SGLang's checks said of it (or that they are running)
            fields["CRASHDOC_FIX_VERIFIED"] = d.fix.verified
        tried = [w for w in d.fix.why if w.startswith("tried: ")]
        if tried:  # the candidates the search checked and SGLang refused, and why
            fields["CRASHDOC_FIX_TRIED"] = "\n".join(tried)
        if d.sglang_release:
            fields["CRASHDOC_SGLANG_VERSION"] = d.sglang_release
        if d.version_note:
            fields["CRASHDOC_VERSION_NOTE"] = d.version_note
        if d.kind == HARDWARE:  # the GPU that failed, and what the hardware on-call does (ACTION=drain: gone)
            for name in GPU_LABELS:
                if d.captures.get(name):
                    fields[f"CRASHDOC_{name.upper()}"] = d.captures[name]
        return fields

    def _send(self, event_id: str, fields: dict[str, str]) -> bool:
        fields = {k: redact(v) for k, v in fields.items()}
        try:
            self.send(**fields)
        except OSError as exc:
            self.errors += 1
            self.last_error = f"cannot write to the journal: {exc}"
            return False
        self.seen.add(event_id)
        if len(self.seen) > 10_000:
            self.seen.clear()
        self.written += 1
        return True


def _event_id(event: EngineEvent) -> str:
    d = event.diagnosis
    parts = [event.kind, event.unit, f"{event.at:.6f}", (d.signature or d.fingerprint) if d else ""]
    return sha1("|".join(parts).encode()).hexdigest()[:20]


def _message(event: EngineEvent) -> str:
    d = event.diagnosis
    unit = event.unit
    if event.kind == "recovered":
        return f"{unit} recovered from its crash loop" + (f" ({d.signature or 'unknown'})" if d else "")
    if event.kind == "stopped":
        return f"{unit} was stopped; it is no longer crash-looping"
    if d is None:
        return f"{unit}: {event.kind}"
    prefix = {
        "loop-started": "is crash-looping",
        "failed": "failed (start limit hit)",
        "loop-updated": "crash loop diagnosis changed",
    }.get(event.kind, event.kind)
    return f"{unit} {prefix}: {d.root_cause.line or d.title} -- fix: {d.fix.summary}"


def recorded_event_ids(since: float, directory: str | None = None) -> set[str]:
    """CRASHDOC_EVENT_IDs already in the journal since `since`.

    crashdoc reads its own records only here, to avoid writing one twice after a restart
    (its cursor is saved after its effects, so the last effects before a kill may be redone);
    they never feed a diagnosis.
    """
    from crashdoc.sources.journal_files import open_reader, realtime_usec

    ids: set[str] = set()
    try:
        reader = open_reader(directory)  # systemd-python's C reader: its `journal` module is not imported for this
    except OSError:
        return ids
    try:
        for message_id in OWN_MESSAGE_IDS:
            reader.add_match(f"MESSAGE_ID={message_id}")
        reader.seek_realtime(realtime_usec(max(0.0, since)))
        while reader._next():
            try:
                ids.add(reader._get("CRASHDOC_EVENT_ID").decode("ascii", "replace"))
            except KeyError:
                continue
    except OSError:
        pass
    finally:
        reader.close()
    return ids
