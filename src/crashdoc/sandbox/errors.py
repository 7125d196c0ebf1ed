"""The sandbox's one error: what cannot be booted or used, and why (with what PID 1 printed, for a boot)."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """The private systemd cannot be booted or used; the message says why and what PID 1 printed."""
