"""The SGLang router's and gateway's own log format (the Rust sgl-router / sgl-model-gateway).

The router logs through `tracing_subscriber::fmt` with file and line numbers (sgl-router src/logging.rs):

    2026-03-02 10:31:44  WARN sglang_router_rs::core::worker: src/core/worker.rs:617: Worker http://... failed

(time in UTC, the level right-aligned to five characters, the target module, optional span fields in braces,
the source file and line, then the message; ANSI colours unless disabled), or one JSON object per line with
`--log-json` (`{"timestamp":...,"level":"WARN","fields":{"message":...},"target":...}`, or flattened). The
first Python-launched releases (0.1.x) printed `[Router (Rust)] 2025-03-08 02:33:09 - INFO - message`.

A record is a `RouterLine`: time, level, target, message; `line()` writes a JSON record back in the text form,
so that the same signatures match whichever format the router was started with. Its messages name the workers
they are about (`Worker http://10.0.0.11:30001 health check failed`), which `worker_urls` extracts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_TRACING = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?Z?) +(?P<level>TRACE|DEBUG|INFO|WARN|ERROR) +"
    r"(?P<target>[A-Za-z_][\w]*(?:::[\w]+)*)(?P<spans>(?:[:\s]*\w+\{[^}]*\})*): (?:(?P<file>\S+\.rs):(?P<line>\d+): )?"
    r"(?P<msg>.*)$"
)
_LEGACY = re.compile(r"^\[Router \(Rust\)\] (?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) - (?P<level>[A-Z]+) - (?P<msg>.*)$")
_TARGETS = ("sglang_router", "sgl_model_gateway", "smg", "sgl_router", "vllm_router")
_URL = re.compile(r"\b(?:https?|grpc)://[\w.\-\[\]:]+(?:@\d+)?")


@dataclass(frozen=True, slots=True)
class RouterLine:
    """One record of the router's log."""

    timestamp: float
    level: str  # TRACE DEBUG INFO WARN ERROR
    target: str  # the Rust module that logged it ("" in the 0.1.x format)
    message: str
    text: str  # the record as a text line (a JSON record written back in the text form)


def parse_router_line(text: str) -> RouterLine | None:
    """The router record on this line, or None when the line is not the router's."""
    stripped = text.strip()
    if stripped.startswith("{"):
        return _json_record(stripped)
    if stripped.startswith("[Router (Rust)]"):
        m = _LEGACY.match(stripped)
        if m is None:
            return None
        return RouterLine(_seconds(m.group("ts")), _level(m.group("level")), "", m.group("msg"), stripped)
    m = _TRACING.match(stripped)
    if m is None or not m.group("target").startswith(_TARGETS):
        return None
    return RouterLine(_seconds(m.group("ts")), m.group("level"), m.group("target"), m.group("msg"), stripped)


def is_router_log(lines: list[str]) -> bool:
    """Whether most of a paste's lines are the router's (`tracing` text, JSON records or the 0.1.x form)."""
    sample = [line for line in lines[:200] if line.strip()][:60]
    if not sample:
        return False
    hits = sum(1 for line in sample if parse_router_line(line) is not None)
    return hits >= max(1, int(len(sample) * 0.6))


def worker_urls(message: str) -> list[str]:
    """The worker URLs a router message names, in order, once each (`http://10.0.0.11:30001`)."""
    return list(dict.fromkeys(u.rstrip(":/") for u in _URL.findall(message)))


def _json_record(text: str) -> RouterLine | None:
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or "level" not in doc:
        return None
    target = str(doc.get("target", ""))
    if not target.startswith(_TARGETS):
        return None
    nested = doc.get("fields")
    fields: dict[str, object] = nested if isinstance(nested, dict) else doc
    message = str(fields.get("message", ""))
    extra = " ".join(f"{k}={v}" for k, v in fields.items() if k not in ("message", "timestamp", "level", "target"))
    level = _level(str(doc.get("level", "")))
    where = f" {doc['filename']}:{doc['line_number']}:" if "filename" in doc and "line_number" in doc else ""
    ts = str(doc.get("timestamp", ""))
    body = message + (f" {extra}" if extra and fields is not doc else "")
    line = f"{ts[:19].replace('T', ' ')} {level:>5} {target}:{where} {body}"
    return RouterLine(_seconds(ts), level, target, body, line)


def _level(name: str) -> str:
    name = name.upper()
    return "WARN" if name == "WARNING" else name


def _seconds(ts: str) -> float:
    from datetime import UTC, datetime  # a router's log alone has its times read: 1 ms of every start spared

    try:
        when = datetime.fromisoformat(ts.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # tracing's ChronoUtc timer: the router logs UTC
    return when.timestamp()
