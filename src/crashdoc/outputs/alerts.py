"""Direct push of crash-loop alerts to Alertmanager (API v2), for sites without Prometheus rules.

One alert per looping unit. Alertmanager keeps an alert only until its `endsAt`, so active alerts
are re-sent every `resend_interval` with `endsAt` a few intervals ahead (as Prometheus does): if
crashdoc dies, the alerts expire instead of firing forever. Recovery sends the alert once more with
`endsAt` set to the recovery time, which resolves it.

The daemon's loop must never wait for Alertmanager: `update()` only records the latest state (a
snapshot per unit, so nothing queues up while Alertmanager is down) and wakes a sender thread, which
does the HTTP with a timeout and retries with exponential backoff. Every label and annotation goes
through `outputs.redact`.

The connection takes the client settings of Prometheus' `alertmanager_config` (`HttpClientConfig`):
a CA, a client certificate, basic auth with a password file, a bearer token file, a proxy. Files are
read again for every delivery, so rotated passwords and certificates are used without a restart, and
a missing or unreadable one is a failed delivery with a line that names it (the firing state is kept
and sent once it can be).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeGuard

from crashdoc.events import HARDWARE

# the client settings live in outputs.httpclient (the configuration reads them without this module); named here too
from crashdoc.outputs.httpclient import ClientSetupError as ClientSetupError
from crashdoc.outputs.httpclient import HttpClientConfig as HttpClientConfig
from crashdoc.redact import redact

if TYPE_CHECKING:  # imported where used (urllib, prometheus_client): the daemon sends alerts, no other command
    import ssl

    from crashdoc.events import Diagnosis
    from crashdoc.outputs.metrics import Health


def _new_health() -> Health:
    from crashdoc.outputs.metrics import Health

    return Health()


ALERTNAME = "CrashdocCrashLoop"
EXPIRY_INTERVALS = 4  # endsAt of an active alert: this many resend intervals ahead (Prometheus does 4x)
BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 30.0
MAX_RESOLVED = 1000  # undelivered resolutions kept while Alertmanager is down (oldest dropped first)
MAX_DESCRIPTION = 4000
MAX_COMMAND = 1000

RunbookUrl = Callable[[str | None, str], str]
Post = Callable[[str, bytes, float], None]


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# a hardware diagnosis' captures the alert carries as labels: Alertmanager routes on them (oncall="hardware")
GPU_LABELS = ("gpu", "bus_id", "xid", "rank", "action")


def alert_labels(unit: str, d: Diagnosis, instance: str) -> dict[str, str]:
    """The alert's identity in Alertmanager: a new signature for the unit is a new alert. A GPU fault (kind
    hardware) is the hardware on-call's, not the service owner's: `oncall="hardware"`, and which GPU and what to
    do (action="drain" for a GPU that is gone), as the Prometheus rule SGLangGPUFault labels it."""
    labels = {
        "alertname": ALERTNAME,
        "unit": unit,
        "signature": d.signature or "unknown",
        "severity": d.severity,
        "instance": instance,
        "subsystem": d.subsystem or d.category,
        "kind": d.kind or "bug",
    }
    if d.kind == HARDWARE:
        labels["oncall"] = "hardware"
        labels |= {name: d.captures[name] for name in GPU_LABELS if d.captures.get(name)}
    return {k: redact(v) for k, v in labels.items()}


def alert_annotations(unit: str, d: Diagnosis, runbook_url: str) -> dict[str, str]:
    """What the on-call engineer reads in the notification: what broke, why, and what to change.

    Counters (restarts, crashes) stay out: they change with every crash and would re-send the alert
    each time; the runbook page shows them live."""
    lines = [f"Root cause: {d.root_cause.line or d.root_cause.message or d.title}", f"Fix: {d.fix.summary}"]
    if d.fix.command:
        lines.append(f"Corrected command: {_cut(d.fix.command, MAX_COMMAND)}")
    if d.fix.verified:  # what SGLang's own checks said of it (the search's count and time), or that they run
        lines.append(f"Checked: {d.fix.verified}")
    lines.extend(f"Tried: {w.removeprefix('tried: ')}" for w in d.fix.why if w.startswith("tried: "))
    lines.extend(f"Warning: {w}" for w in d.fix.warnings)
    if d.exit:
        lines.append(f"Main process: {d.exit}")
    if d.sglang_release:
        lines.append(f"SGLang: {d.sglang_release}" + (f" ({d.version_note})" if d.version_note else ""))
    summary = f"{unit} is crash-looping: {d.title}"
    if d.kind == HARDWARE and d.captures.get("action"):
        from crashdoc.diagnosis.hardware import action_words  # only for a GPU fault: not on every import

        summary = f"{unit}: {action_words(d.captures['action'])}: {d.title}"  # "drain the node: Xid 79 ..."
    annotations = {
        "summary": summary,
        "description": _cut("\n".join(lines), MAX_DESCRIPTION),
        "runbook_url": runbook_url,
    }
    return {k: redact(v) for k, v in annotations.items()}


def _key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


@dataclass(slots=True)
class _Active:
    labels: dict[str, str]
    annotations: dict[str, str]
    generator_url: str
    starts_at: float


@dataclass(slots=True)
class _Resolved:
    alert: _Active
    ends_at: float


def urllib_post(url: str, body: bytes, timeout: float) -> None:
    """POST JSON; raises OSError (URLError, HTTPError, timeouts) when Alertmanager does not take it."""
    import urllib.request

    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json", "User-Agent": "crashdoc"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read(65536)


@dataclass(slots=True)
class AlertSender:
    """The daemon calls `update()` after engine events, `tick()` every loop iteration, `stop()` at the end;
    none of them does network I/O."""

    url: str  # Alertmanager's base URL (".../api/v2/alerts" is added when missing)
    instance: str
    runbook_url: RunbookUrl
    health: Health = field(default_factory=_new_health)
    resend_interval: float = 60.0
    timeout: float = 5.0
    backoff_initial: float = BACKOFF_INITIAL
    backoff_max: float = BACKOFF_MAX
    post: Post = urllib_post
    clock: Callable[[], float] = time.time
    log: Callable[[str], None] = lambda message: None
    last_error: str = ""
    _active: dict[str, _Active] = field(default_factory=dict)  # unit -> its firing alert
    _resolved: dict[tuple[tuple[str, str], ...], _Resolved] = field(default_factory=dict)
    _dirty: bool = False  # something changed since the last delivery: send now
    _next_send: float = 0.0  # monotonic: when the thread sends next without a change
    _backoff: float = 0.0
    _failing: bool = False
    _stopped: bool = False
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        base = self.url.rstrip("/")
        return base if base.endswith("/api/v2/alerts") else base + "/api/v2/alerts"

    # --- called by the daemon's loop (no I/O) ---------------------------------------------------

    def update(self, active: Mapping[str, Diagnosis]) -> None:
        """The diagnoses of the units that are crash-looping now; units missing from it have recovered."""
        now = self.clock()
        with self._cond:
            for unit, d in active.items():
                labels = alert_labels(unit, d, self.instance)
                annotations = alert_annotations(unit, d, self.runbook_url(d.signature, unit))
                current = self._active.get(unit)
                if current is not None and current.labels == labels:
                    if current.annotations != annotations:
                        current.annotations = annotations
                        self._dirty = True
                    continue
                if current is not None:  # another root cause: the old alert ends, a new one starts
                    self._resolve(current, now)
                self._active[unit] = _Active(labels, annotations, redact(self.runbook_url(None, unit)), now)
                self._resolved.pop(_key(labels), None)
                self._dirty = True
            for unit in [u for u in self._active if u not in active]:
                self._resolve(self._active.pop(unit), now)
                self._dirty = True
            if self._dirty:
                self._cond.notify()
        self._ensure_thread()

    def tick(self) -> None:
        """Keeps the sender thread alive (it times resends itself); cheap enough for every loop turn."""
        if self._active or self._resolved:
            self._ensure_thread()

    def stop(self, wait: float | None = None) -> None:
        """Stop the thread, giving an undelivered change one last attempt (bounded by the timeout)."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        thread = self._thread
        if thread is not None:
            thread.join(self.timeout + 1.0 if wait is None else wait)

    def firing(self) -> dict[str, dict[str, str]]:
        """unit -> labels of the alert being sent for it (for tests and the status page)."""
        with self._cond:
            return {unit: dict(a.labels) for unit, a in self._active.items()}

    # --- internals ------------------------------------------------------------------------------

    def _resolve(self, alert: _Active, now: float) -> None:
        self._resolved[_key(alert.labels)] = _Resolved(alert, now)
        while len(self._resolved) > MAX_RESOLVED:
            self._resolved.pop(next(iter(self._resolved)))

    def _ensure_thread(self) -> None:
        if self._stopped or (self._thread is not None and self._thread.is_alive()):
            return
        self._thread = threading.Thread(target=self._run, name="crashdoc-alerts", daemon=True)
        self._thread.start()

    def _payload(self, now: float) -> tuple[bytes, list[tuple[tuple[tuple[str, str], ...], float]]]:
        """The JSON body (every active alert and every undelivered resolution) and the resolutions in it."""
        alerts = []
        expires = now + EXPIRY_INTERVALS * self.resend_interval
        for a in self._active.values():
            alerts.append(self._alert_json(a, expires))
        sent = []
        for key, r in self._resolved.items():
            alerts.append(self._alert_json(r.alert, r.ends_at))
            sent.append((key, r.ends_at))
        return json.dumps(alerts).encode(), sent

    @staticmethod
    def _alert_json(a: _Active, ends_at: float) -> dict[str, object]:
        return {
            "labels": a.labels,
            "annotations": a.annotations,
            "startsAt": rfc3339(a.starts_at),
            "endsAt": rfc3339(max(ends_at, a.starts_at)),
            "generatorURL": a.generator_url,
        }

    def _due(self) -> bool:
        if not self._active and not self._resolved:
            return False
        if self._failing:
            return time.monotonic() >= self._next_send
        return self._dirty or time.monotonic() >= self._next_send

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and not self._due():
                    wait = self._next_send - time.monotonic() if (self._active or self._resolved) else None
                    self._cond.wait(None if wait is None else max(wait, 0.01))
                if self._stopped and not (self._dirty or self._resolved):
                    return
                body, resolutions = self._payload(self.clock())
                self._dirty = False
                stopping = self._stopped
            ok = self._deliver(body)
            with self._cond:
                if ok:
                    for key, ends_at in resolutions:
                        r = self._resolved.get(key)
                        if r is not None and r.ends_at == ends_at:
                            del self._resolved[key]
                    self._next_send = time.monotonic() + self.resend_interval
                else:
                    self._next_send = time.monotonic() + self._backoff
                if stopping or self._stopped:
                    return

    def _deliver(self, body: bytes) -> bool:
        """One POST. Any failure (refused, timeout, HTTP error, a bug) is counted, never raised."""
        import urllib.error

        try:
            self.post(self.endpoint, body, self.timeout)
        except ClientSetupError as exc:
            return self._failed(str(exc))
        except urllib.error.HTTPError as exc:
            detail = exc.read(300).decode("utf-8", "replace").strip()
            return self._failed(f"HTTP {exc.code} {detail}")
        except Exception as exc:  # the thread must survive anything: the daemon never sees it
            reason = getattr(exc, "reason", None) or exc
            if self.endpoint.startswith("https://") and _tls_error(reason):
                return self._failed(f"TLS: {str(reason.reason or reason).replace('_', ' ').lower()}")
            return self._failed(f"{type(exc).__name__}: {reason}")
        self.health.alerts_sent += 1
        if self._failing:
            self.log(f"Alertmanager at {self.endpoint} takes alerts again")
        self._failing = False
        self._backoff = 0.0
        self.last_error = ""
        return True

    def _failed(self, why: str) -> bool:
        self.health.alert_errors += 1
        self._backoff = min(self._backoff * 2 if self._backoff else self.backoff_initial, self.backoff_max)
        self.last_error = redact(f"cannot send alerts to {self.endpoint}: {why}")
        if not self._failing:
            self.log(f"{self.last_error}; retrying with backoff (up to {self.backoff_max:g} s)")
        self._failing = True
        return False


def _tls_error(reason: object) -> TypeGuard[ssl.SSLError]:
    """Whether a failed send to an HTTPS Alertmanager failed in TLS (only HTTPS sends load `ssl`: a failed send to a
    plain one never does, see `lean.ssl_at_first_use`)."""
    import ssl

    return isinstance(reason, ssl.SSLError)
