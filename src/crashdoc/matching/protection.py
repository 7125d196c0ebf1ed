"""What a fix would give up: a flag that protects the server taken away, or one that trusts outside code added.

A crash loop ends just as surely when `--ssl-certfile` or `--api-key` is dropped as when the certificate's path is
corrected, and SGLang's own checks accept both. At 3 a.m. the first is a trap: the server comes back serving
plain HTTP, or open to anyone who reaches its port. Such a change is never shown without saying so (`gives_up`),
and the fix search ranks it after any other change that would do (`remedy.candidates`).
"""

from __future__ import annotations

from collections.abc import Sequence

from crashdoc.events import FlagChange
from crashdoc.matching.flagnames import canonical

# removing the flag turns the protection off: what the server does without it, what to do instead
REMOVED: dict[str, tuple[str, str]] = {
    "--ssl-certfile": ("turns TLS off: the server answers in plain HTTP", "a certificate and key that exist"),
    "--ssl-keyfile": ("turns TLS off: the server answers in plain HTTP", "a certificate and key that exist"),
    "--ssl-ca-certs": (
        "stops checking client certificates: any client may connect",
        "a CA bundle that exists",
    ),
    "--api-key": (
        "turns the API key off: anyone who reaches the port can use the server",
        "the key, and change what conflicts with it",
    ),
    "--admin-api-key": (
        "turns the admin key off: the admin endpoints no longer ask for it",
        "the key, and change what conflicts with it",
    ),
}
# adding (or setting) the flag trusts code or content from outside the operator's hands
ADDED: dict[str, str] = {
    "--trust-remote-code": "runs Python code from the model's repository on this host; add it only for a model "
    "whose code you trust",
}


def gives_up(change: FlagChange) -> str | None:
    """What the change gives up, in words, or None for a change that weakens nothing."""
    flag = canonical(change.flag)
    if change.action == "remove" and flag in REMOVED:
        return REMOVED[flag][0]
    if change.action == "replace" and flag in REMOVED and canonical(change.new_flag or "") != flag:
        return REMOVED[flag][0]
    if change.action in ("add", "set") and flag in ADDED and (change.value or "").lower() not in ("false", "0"):
        return ADDED[flag]
    return None


def protection_notes(changes: Sequence[FlagChange]) -> list[str]:
    """One warning per change that weakens the server, saying what it gives up and what keeps the protection."""
    notes: list[str] = []
    for change in changes:
        lost = gives_up(change)
        if lost is None:
            continue
        flag = canonical(change.flag)
        keep = f" To keep it, give SGLang {REMOVED[flag][1]} instead." if flag in REMOVED else ""
        notes.append(f"Weakens the server: `{_said(change)}` {lost}.{keep}")
    return notes


def _said(change: FlagChange) -> str:
    if change.action == "remove":
        return f"remove {change.flag}"
    if change.action == "replace":
        return f"{change.flag} -> {change.new_flag}"
    if change.action == "set" and change.value is not None:
        return f"{change.flag} {change.value}"
    return f"{change.action} {change.flag}"
