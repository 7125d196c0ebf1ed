"""Fixtures of the end-to-end tests that talk to a real Alertmanager (tests/support/monitoring.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.monitoring import Alertmanager, Webhook


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    """Where Alertmanager sends its notifications; closed after the test."""
    hook = Webhook()
    yield hook
    hook.close()


@pytest.fixture
def alertmanager(tmp_path: Path, webhook: Webhook) -> Iterator[Alertmanager]:
    """A real Alertmanager notifying `webhook` (not started: `.start()`); stopped after the test."""
    am = Alertmanager(tmp_path / "alertmanager", webhook)
    yield am
    am.stop()
