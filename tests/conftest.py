"""Shared fixtures.

Tests marked ``@pytest.mark.sandbox`` boot real private systemds (``crashdoc.sandbox``); they are
skipped, with the reason, where that cannot work (not root, no unshare/nsenter, no systemd).

Property tests (hypothesis) draw the same cases on every run: the "repeatable" profile derandomizes them (a
seed derived from each test) and keeps no example database, so `make test` never turns red by chance. Every
case they ever found is an explicit ``@example`` of its test. ``CRASHDOC_HYPOTHESIS=explore`` draws new cases
(and keeps the ones that fail in ``.hypothesis/``) for a hunt outside `make test`; add what it finds as an
``@example`` and fix the code.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import settings

from crashdoc.sandbox.systemd import PrivateSystemd, make_workdir, unavailable_reason
from support.e2e import PATIENCE
from support.golden import Golden
from support.sandboxes import SandboxFactory

settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("CRASHDOC_HYPOTHESIS", "repeatable"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/golden/ from what crashdoc prints now (review `git diff tests/golden` after)",
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    """Compares output with tests/golden/NAME; `pytest --update-golden` rewrites the files."""
    return Golden(bool(request.config.getoption("--update-golden")))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"cannot boot a private systemd here: {reason}")
    for item in items:
        if "sandbox" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def sandbox_workdir() -> Iterator[Path]:
    """A work folder the sandbox can see (outside /tmp, unlike ``tmp_path``); removed afterwards."""
    path = make_workdir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sandbox_factory() -> Iterator[SandboxFactory]:
    """``make(units, workdir=None, start_units=None, timeout=30, visible=())`` boots a private systemd; every
    sandbox made through it is stopped when the test ends, whatever happened. The boot's bound is scaled by
    CRASHDOC_TEST_PATIENCE like every wait (a loaded host boots slowly)."""
    booted: list[PrivateSystemd] = []

    def make(
        units: Mapping[str, str] | None = None,
        *,
        workdir: Path | None = None,
        start_units: Sequence[str] | None = None,
        timeout: float = 30.0,
        visible: Sequence[Path] = (),
    ) -> PrivateSystemd:
        sandbox = PrivateSystemd(units, workdir, start_units=start_units, visible=visible)
        booted.append(sandbox)
        return sandbox.start(timeout=timeout * PATIENCE)

    try:
        yield make
    finally:
        for sandbox in booted:
            sandbox.stop()
