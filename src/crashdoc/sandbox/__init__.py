"""A private systemd (PID 1 of new namespaces) with journald and D-Bus, for tests and the demo.

``systemd`` boots and stops it (``PrivateSystemd``), with its parts: the new namespaces and their mounts
(``namespaces``), the private unit folder (``units``), its cgroups (``cgroups``), PID 1's console
(``console``), commands run inside (``inside``), what a sandbox leaves on the host and the sweep of it
(``leftovers``), what the host must offer (``host``), host processes by PID (``processes``).
``fake_sglang`` is the SGLang stand-in its units run, ``demo`` holds the units of ``crashdoc demo``. Names
are loaded lazily so that fake_sglang's spawned ranks, which import this package, start fast and register
nothing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PrivateSystemd", "SandboxError", "make_workdir", "unavailable_reason"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from crashdoc.sandbox import systemd

        return getattr(systemd, name)
    raise AttributeError(f"module 'crashdoc.sandbox' has no attribute {name!r}")
