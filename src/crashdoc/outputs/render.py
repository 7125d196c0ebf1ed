"""Diagnoses as JSON (the stable contract) and as text for a terminal at 3 a.m.

Everything passes through secret redaction on the way out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # printed once something failed: a healthy log's answer builds no diagnosis
    from crashdoc.diagnosis_records import Diagnosis

# `crashdoc.redact` is imported where a diagnosis is printed: "No failure found." has nothing to redact (~1.4 ms of
# `explain`'s start: its patterns and the shared redactor's class)


def diagnosis_dict(d: Diagnosis) -> dict[str, Any]:
    """The `--json` object; field names and meanings are a public interface."""
    data: dict[str, Any] = {
        "unit": d.unit,
        "signature": d.signature,
        "title": d.title,
        "category": d.category,
        "subsystem": d.subsystem or d.category,
        "kind": d.kind,
        "severity": d.severity,
        "root_cause": {"type": d.root_cause.type, "message": d.root_cause.message, "line": d.root_cause.line},
        "flags": list(d.flags),
        "fix": {
            "summary": d.fix.summary,
            "changes": [
                {"action": c.action, "flag": c.flag, "value": c.value, "new_flag": c.new_flag}
                | ({"placeholder": True} if c.placeholder else {})  # a value the operator fills in
                for c in d.fix.changes
            ],
            "command": d.fix.command,
            "diff": d.fix.diff,
            "apply": list(d.fix.apply),
            "rollback": list(d.fix.rollback),
            "warnings": list(d.fix.warnings),
            "why": list(d.fix.why),
            "verified": d.fix.verified,
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
        "sglang_version": d.sglang_release,
        "sglang_version_from": d.sglang_release_from,
        "version_note": d.version_note,
    }
    if d.handled:
        data["handled"] = d.handled
    return redact_data(data)


def sglang_release_text(d: Diagnosis) -> str:
    """ "0.5.23 (from /opt/venv/bin/python: .../sglang/_version.py)", or "unknown" with what would tell."""
    if not d.sglang_release:
        return "unknown (no interpreter or log line says; --sglang-version or --sglang-source tells crashdoc)"
    return f"{d.sglang_release} (from {d.sglang_release_from})" if d.sglang_release_from else d.sglang_release


def redact_data(value: Any) -> Any:
    """Redact every string inside JSON-like data."""
    from crashdoc.redact import REDACTED, is_secret_flag, redact

    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: REDACTED if is_secret_flag(str(k)) and v else redact_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_data(v) for v in value]
    return value


def diagnoses_json(diagnoses: Sequence[Diagnosis], warnings: Sequence[Diagnosis] | None = None, **extra: Any) -> str:
    """`{"diagnoses": [...]}`, with `"warnings"` (tracebacks the server survived) when they were looked for."""
    doc: dict[str, Any] = {**extra, "diagnoses": [diagnosis_dict(d) for d in diagnoses]}
    if warnings is not None:
        doc["warnings"] = [diagnosis_dict(w) for w in warnings]
    return json.dumps(doc, ensure_ascii=False)


def diagnoses_text(diagnoses: Sequence[Diagnosis], *, warnings: Sequence[Diagnosis] = (), color: bool = False) -> str:
    out = "\n".join(diagnosis_text(d, color=color) for d in diagnoses) if diagnoses else "No failure found.\n"
    if warnings:
        out += f"\nWarnings: {len(warnings)} error(s) that SGLang survived (no crash, no alert):\n"
        out += "\n".join(warning_text(w, color=color) for w in warnings)
    return out


MAX_ROOT_CAUSE_LINES = 12


def root_cause_rest(d: Diagnosis) -> list[str]:
    """The lines of the root cause's message besides the printed root-cause line, as the JSON holds them: a
    NCCL error's "Last error:" lines, an OOM's "Try to allocate" line (bounded; the JSON has them all)."""
    first = d.root_cause.line.strip()
    rest = [line.rstrip() for line in d.root_cause.message.split("\n")]
    out = [line for line in rest if line.strip() and line.strip() != first and not first.endswith(line.strip())]
    if len(out) > MAX_ROOT_CAUSE_LINES:
        out = [*out[:MAX_ROOT_CAUSE_LINES], f"... ({len(out) - MAX_ROOT_CAUSE_LINES} more lines in --json)"]
    return out


def warning_text(w: Diagnosis, *, color: bool = False) -> str:
    """A handled traceback: what it was, why it is no crash, and the signature's advice if one knows it."""
    yellow, dim, reset = ("\x1b[33m", "\x1b[2m", "\x1b[0m") if color else ("", "", "")
    unit = w.unit or "(pasted log)"
    times = f"   seen: {w.crashes} times" if w.crashes > 1 else ""
    lines = [
        f"{yellow}{unit}: warning: {w.title}{reset}",
        f"  signature: {w.signature or 'unknown'}   subsystem: {w.subsystem or w.category}   kind: {w.kind}{times}",
        f"  error: {w.root_cause.line}",
        f"  handled: {w.handled}",
        f"  advice: {w.fix.summary}",
    ]
    lines.extend(f"  {dim}  - {e}{reset}" for e in w.evidence if not e.startswith("handled: "))
    from crashdoc.redact import redact

    return redact("\n".join(lines)) + "\n"


def diagnosis_text(d: Diagnosis, *, color: bool = False) -> str:
    bold, red, dim, reset = ("\x1b[1m", "\x1b[31m", "\x1b[2m", "\x1b[0m") if color else ("", "", "", "")
    unit = d.unit or "(pasted log)"
    lines = [
        f"{bold}{unit}: {d.title}{reset}",
        f"  signature: {d.signature or 'unknown'}   category: {d.category}   kind: {d.kind or 'unknown'}"
        f"   severity: {red}{d.severity}{reset}" + (f"   fingerprint: {d.fingerprint}" if d.signature is None else ""),
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
    lines.append(f"  sglang: {sglang_release_text(d)}")
    if d.version_note:
        lines.append(f"  {red}version:{reset} {d.version_note}")
    lines.append(f"  root cause: {d.root_cause.line}")
    lines.extend(f"              {extra}" for extra in root_cause_rest(d))
    lines.append(f"  fix: {d.fix.summary}")
    for reason in d.fix.why:
        lines.append(f"    why: {reason}")
    if d.fix.verified:
        lines.append(f"  verified: {d.fix.verified}")
    for warning in d.fix.warnings:
        lines.append(f"  {red}warning:{reset} {warning}")
    if d.fix.command:
        lines.append("  corrected command:")
        lines.append(f"    {d.fix.command}")
    if d.fix.diff:
        lines.append("  change to make:")
        lines.extend("    " + line for line in d.fix.diff.rstrip("\n").split("\n"))
    if d.fix.apply:
        what = "to check and recover" if d.kind == "hardware" else "to apply"  # a GPU fault has no change to apply
        lines.append(f"  {what} (crashdoc changes nothing itself):")
        lines.extend(f"    $ {cmd}" for cmd in d.fix.apply)
    if d.fix.rollback:
        lines.append("  to roll back:")
        lines.extend(f"    $ {cmd}" for cmd in d.fix.rollback)
    if d.evidence:
        lines.append(f"  {dim}evidence:{reset}")
        lines.extend(f"  {dim}  - {e}{reset}" for e in d.evidence)
    from crashdoc.redact import redact

    return redact("\n".join(lines)) + "\n"
