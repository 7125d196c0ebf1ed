"""What the HTTP server shows: metrics, diagnoses, the on-call pages and health, read under the
daemon's lock (the engine is only ever changed by the loop's thread)."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any

from crashdoc.authoring.hostrelease import HostReleases
from crashdoc.config import Config
from crashdoc.diagnosis.engine import Engine
from crashdoc.matching.library import Signature
from crashdoc.matching.reload import LibraryHolder
from crashdoc.outputs import html as pages
from crashdoc.outputs.metrics import Health, exposition
from crashdoc.outputs.render import diagnoses_json
from crashdoc.remedy.verify import FixVerifier
from crashdoc.sources.cursor import CursorStore
from crashdoc.sources.units import UnitWatcher


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
    verifier: FixVerifier | None = None  # fix.verified, from SGLang's argument checks run on their own thread
    releases: HostReleases | None = None  # the units' SGLang releases and the trees derived for them

    def metrics(self) -> bytes:
        return exposition(self.registry)

    def diagnoses_json(self, unit: str | None) -> str:
        with self.lock:
            units = [unit] if unit else None
            found = self.engine.diagnoses(units)
            if self.verifier is not None:
                found = self.verifier.annotate(found, self.engine.units())
            return diagnoses_json(found, warnings=self.engine.warnings(units))

    def unit_page(self, unit: str) -> bytes | None:
        with self.lock:
            rec = self.engine.units().get(unit)
            if rec is None:
                return None
            d = rec.diagnosis or rec.last_diagnosis
            sig = self._signature(d.signature) if d is not None and d.signature else None
            return pages.unit_page(rec, sig, self.engine.warnings([unit]))

    def runbook_page(self, signature: str) -> bytes | None:
        with self.lock:
            sig = self._signature(signature)
            return None if sig is None else pages.runbook_page(sig, self.engine.units().values())

    def _signature(self, signature: str) -> Signature | None:
        """A reviewed signature, or a derived one seen as a signature (its runbook says it was derived)."""
        sig = self.holder.library.get(signature)
        derived = self.holder.derived
        if sig is None and derived is not None and signature.startswith("derived-"):
            found = derived.get(signature)
            if found is not None:
                return found.as_signature("other", derived.releases)
        return sig

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
