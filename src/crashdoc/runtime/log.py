"""What the daemon says about itself: one redacted line on stderr (journald, under systemd)."""

from __future__ import annotations

import os
import sys

from crashdoc.redact import redact


def log(message: str) -> None:
    print(f"crashdoc: {redact(message)}", file=sys.stderr, flush=True)


def stderr_is_journal() -> bool:
    """Under systemd, stderr goes to journald ($JOURNAL_STREAM names it): a record already says it all."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return stream == f"{st.st_dev}:{st.st_ino}"
