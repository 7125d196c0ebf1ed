"""A daemon built as `crashdoc run` builds it, reading a folder of journal files, without D-Bus; its HTTP server
is closed (tests read its view directly) and its loop is not started (tests drive `_drain`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crashdoc.commands.pipeline import daemon_engine
from crashdoc.config import Config
from crashdoc.events import WatchRule
from crashdoc.runtime.build import build
from crashdoc.runtime.daemon import Daemon
from support.e2e import free_port


def file_daemon(journal: Path, state: Path, **settings: Any) -> Daemon:
    """`settings`: more of the configuration (GPU folder, Alertmanager, ...) beside the journal and state folders."""
    config = Config(
        units=(WatchRule("sglang*.service", "any"),),
        listen=f"127.0.0.1:{free_port()}",
        state_directory=str(state),
        journal_directory=str(journal),
        dbus=False,
        **settings,
    )
    d, http = build(config, daemon_engine)
    http.server.server_close()  # only the view is read here
    return d
