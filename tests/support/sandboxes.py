"""The type of the `sandbox_factory` fixture (tests/conftest.py), for tests that annotate it."""

from __future__ import annotations

from collections.abc import Callable

from crashdoc.sandbox.systemd import PrivateSystemd

SandboxFactory = Callable[..., PrivateSystemd]
