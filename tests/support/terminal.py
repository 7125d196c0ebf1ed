"""A program's output as a terminal (a pty) shows it: for tests of what a user sees at a terminal."""

from __future__ import annotations

import os
import select
import subprocess
import time


def read_pty(master: int, proc: subprocess.Popen[bytes], text: str | None = None, seconds: float = 180.0) -> str:
    """What the pty shows until `text` appears (None: until the program ends or closes it), within `seconds`."""
    seen = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text is not None and text.encode() in seen:
            break
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every end of the pty's other side is closed
                break
            if not data:
                break
            seen += data
        elif proc.poll() is not None:
            break
    return seen.decode(errors="replace").replace("\r\n", "\n")
