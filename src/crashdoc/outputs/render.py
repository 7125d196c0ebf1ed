"""Diagnoses as JSON (the stable contract) and as text for a terminal at 3 a.m.

Everything passes through secret redaction on the way out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from crashdoc.events import Diagnosis
from crashdoc.redact import REDACTED, is_secret_flag, redact


def diagnosis_dict(d: Diagnosis) -> dict[str, Any]:
    """The `--json` object; field names and meanings are a public interface."""
    data: dict[str, Any] = {
        "unit": d.unit,
        "signature": d.signature,
        "title": d.title,
        "category": d.category,
        "severity": d.severity,
        "root_cause": {"type": d.root_cause.type, "message": d.root_cause.message, "line": d.root_cause.line},
        "flags": list(d.flags),
        "fix": {
            "summary": d.fix.summary,
            "changes": [
                {"action": c.action, "flag": c.flag, "value": c.value, "new_flag": c.new_flag} for c in d.fix.changes
            ],
            "command": d.fix.command,
            "diff": d.fix.diff,
            "apply": list(d.fix.apply),
            "rollback": list(d.fix.rollback),
            "warnings": list(d.fix.warnings),
        },
        "fingerprint": d.fingerprint,
        "evidence": list(d.evidence),
        "restarts": d.restarts,
        "invocation": d.invocation or None,
        "captures": dict(d.captures),
        "confidence": d.confidence,
        "crashes": d.crashes,
        "exit": d.exit,
        "timestamp": d.timestamp or None,
        "config_change": d.config_change,
        "derived": d.derived,
    }
    return redact_data(data)


def redact_data(value: Any) -> Any:
    """Redact every string inside JSON-like data."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: REDACTED if is_secret_flag(str(k)) and v else redact_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_data(v) for v in value]
    return value


def diagnoses_json(diagnoses: Sequence[Diagnosis], **extra: Any) -> str:
    return json.dumps({**extra, "diagnoses": [diagnosis_dict(d) for d in diagnoses]}, ensure_ascii=False)


def diagnoses_text(diagnoses: Sequence[Diagnosis], *, color: bool = False) -> str:
    if not diagnoses:
        return "No failure found.\n"
    return "\n".join(diagnosis_text(d, color=color) for d in diagnoses)


def diagnosis_text(d: Diagnosis, *, color: bool = False) -> str:
    bold, red, dim, reset = ("\x1b[1m", "\x1b[31m", "\x1b[2m", "\x1b[0m") if color else ("", "", "", "")
    unit = d.unit or "(pasted log)"
    lines = [
        f"{bold}{unit}: {d.title}{reset}",
        f"  signature: {d.signature or 'unknown'}   category: {d.category}   severity: {red}{d.severity}{reset}"
        + (f"   fingerprint: {d.fingerprint}" if d.signature is None else ""),
    ]
    if d.derived:
        lines.append(f"  derived from SGLang's source (not reviewed), confidence {d.confidence:.2f}")
    status = []
    if d.restarts is not None:
        status.append(f"restarts (NRestarts): {d.restarts}")
    if d.crashes > 1:
        status.append(f"crashes: {d.crashes}")
    if d.invocation:
        status.append(f"invocation: {d.invocation}")
    if d.exit:
        status.append(f"exit: {d.exit}")
    if status:
        lines.append("  " + "   ".join(status))
    lines.append(f"  root cause: {d.root_cause.line}")
    lines.append(f"  fix: {d.fix.summary}")
    for warning in d.fix.warnings:
        lines.append(f"  {red}warning:{reset} {warning}")
    if d.fix.command:
        lines.append("  corrected command:")
        lines.append(f"    {d.fix.command}")
    if d.fix.diff:
        lines.append("  change to make:")
        lines.extend("    " + line for line in d.fix.diff.rstrip("\n").split("\n"))
    if d.fix.apply:
        lines.append("  to apply (crashdoc changes nothing itself):")
        lines.extend(f"    $ {cmd}" for cmd in d.fix.apply)
    if d.fix.rollback:
        lines.append("  to roll back:")
        lines.extend(f"    $ {cmd}" for cmd in d.fix.rollback)
    if d.evidence:
        lines.append(f"  {dim}evidence:{reset}")
        lines.extend(f"  {dim}  - {e}{reset}" for e in d.evidence)
    return redact("\n".join(lines)) + "\n"
