"""What the HTTP server shows: metrics, diagnoses, the on-call pages and health. The engine's views are read
under the daemon's lock (the engine is only ever changed by the loop's thread); their fixes come from the
remedy stage's worker, outside it."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any

from crashdoc.authoring.hostrelease import HostReleases
from crashdoc.config import Config
from crashdoc.diagnosis.engine import Engine
from crashdoc.events import Diagnosis
from crashdoc.matching.library import Signature
from crashdoc.matching.reload import LibraryHolder
from crashdoc.outputs import html as pages
from crashdoc.outputs.gpu_runbooks import family_signature
from crashdoc.outputs.metrics import Health, exposition
from crashdoc.outputs.render import diagnoses_json
from crashdoc.runtime.remedies import RemedyWorker
from crashdoc.sources.cursor import CursorStore
from crashdoc.sources.units import UnitWatcher

PUBLISH_WAIT = 2.0  # seconds a page waits for the fix of a diagnosis it shows first (reading a launch script)


@dataclass(slots=True)
class HttpView:
    engine: Engine
    holder: LibraryHolder
    lock: threading.Lock
    health: Health
    store: CursorStore
    watcher: UnitWatcher | None
    config: Config
    registry: Any = None  # the prometheus_client registry, made when the daemon prepares
    scheme: str = "http"  # of the default links: "https" when the web configuration turns TLS on
    remedies: RemedyWorker | None = None  # the fixes applied to the units' commands, and SGLang's verdicts
    releases: HostReleases | None = None  # the units' SGLang releases and the trees derived for them

    def metrics(self) -> bytes:
        return exposition(self.registry)

    def diagnoses_json(self, unit: str | None) -> str:
        units = [unit] if unit else None
        with self.lock:
            found, warnings = self.engine.diagnoses(units), self.engine.warnings(units)
        shown = self._published([*found, *warnings])
        return diagnoses_json(shown[: len(found)], warnings=shown[len(found) :])

    def unit_page(self, unit: str) -> bytes | None:
        with self.lock:
            rec = self.engine.units().get(unit)
            warnings = self.engine.warnings([unit]) if rec is not None else []
        if rec is None:
            return None
        last = rec.diagnosis or rec.last_diagnosis
        shown = self._published([last, *warnings] if last is not None else warnings)
        d, warnings = (shown[0], shown[1:]) if last is not None else (None, shown)
        sig = self._signature(d.signature) if d is not None and d.signature else None
        return pages.unit_page(rec, d, sig, warnings)

    def runbook_page(self, signature: str) -> bytes | None:
        sig = self._signature(signature)
        if sig is None:
            return None
        with self.lock:
            units = [(rec, rec.diagnosis or rec.last_diagnosis) for rec in self.engine.units().values()]
        with_one = [(rec, d) for rec, d in units if d is not None and d.signature == signature]
        shown = self._published([d for _, d in with_one if d is not None])
        return pages.runbook_page(sig, [(rec, d) for (rec, _), d in zip(with_one, shown, strict=True)])

    def _published(self, diagnoses: list[Diagnosis]) -> list[Diagnosis]:
        """The diagnoses with their fixes as the remedy stage left them (a new one is waited for a moment)."""
        if self.remedies is None:
            return diagnoses
        return self.remedies.publish(diagnoses, wait=PUBLISH_WAIT)

    def _signature(self, signature: str) -> Signature | None:
        """A reviewed signature, a derived one seen as a signature (its runbook says it was derived), or the page of
        an Xid family a hardware diagnosis names (`gpu-fault-bus`: NVIDIA's catalog, the checks, drain)."""
        with self.lock:
            sig = self.holder.library.get(signature)
        if sig is not None:
            return self.holder.shown(sig)  # its runbook text read from its file, outside the lock
        derived = self.holder.derived
        if derived is not None and signature.startswith("derived-"):
            found = derived.get(signature)
            if found is not None:
                return found.as_signature("other", derived.releases)
        if signature.startswith("gpu-fault-"):
            return family_signature(signature)
        return None

    def index_page(self) -> bytes:
        with self.lock:
            return pages.index_page(self.engine.units().values())

    def health_status(self) -> tuple[bool, dict[str, object]]:
        h = self.health
        detail: dict[str, object] = {
            "dbus_up": h.dbus_up,
            "journal_lag_seconds": h.journal_lag_seconds,
            "journal_last_entry_timestamp": h.journal_last_entry_timestamp,
            "journal_entries_skipped": h.journal_entries_skipped,
            "journal_read_errors": h.journal_read_errors,
            "signatures_loaded": h.signatures_loaded,
            "state_writable": h.state_writable,
            "last_state_error": self.store.last_error,
            "last_dbus_error": self.watcher.last_error if self.watcher else "disabled",
        }
        if self.releases is not None:
            # a tree that cannot be read or derived is a warning here, never a failed check: shipped ones answer
            detail["sglang_trees"] = [
                {"release": t.release, "source": t.source, "status": t.status, "signatures": t.signatures}
                | ({"problem": t.problem} if t.problem else {})
                for t in self.releases.tree_states()
            ]
            detail["sglang_warnings"] = self.releases.warning_list()
        return True, detail

    def runbook_url(self, signature: str | None, unit: str) -> str:
        """The link an alert or journal record carries: the runbook page, or the unit's page."""
        base = (self.config.runbook_base_url or f"{self.scheme}://{display_host(self.config.listen)}").rstrip("/")
        return f"{base}/runbook/{signature}" if signature else f"{base}/units/{unit}"


def display_host(listen: str) -> str:
    host, _, port = listen.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = socket.gethostname()
    return f"{host}:{port}"
