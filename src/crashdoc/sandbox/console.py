"""PID 1's console: a pty the sandbox owns, bound on /dev/console inside.

Why: a systemd that finds the host's console resets it; on a pty of its own it cannot, and what it and the
boot script print is kept (the last 256 KiB, and all of it in ``console.log``) for the messages of a failed
boot. The pty is drained for as long as it lives: PID 1 blocks when its console is full.
"""

from __future__ import annotations

import contextlib
import os
import pty
import threading
from pathlib import Path

_CONSOLE_LIMIT = 256 * 1024


class Console:
    """The pty PID 1 writes its console to, and what it printed."""

    def __init__(self) -> None:
        self._master_fd: int | None = None
        self.slave_fd: int | None = None  # the launcher's stdout and stderr
        self.tty = ""  # the pty's path, bound on /dev/console
        self._output = bytearray()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def output(self) -> str:
        """What PID 1 (and the boot script) printed on its console."""
        with self._lock:
            text = self._output.decode("utf-8", "replace")
        return text.replace("\r\n", "\n").replace("\r", "")  # the pty turns \n into \r\n

    def keep(self, text: str) -> None:
        """Set what ``output`` says: a failed boot keeps what it reported after the sandbox is taken down."""
        with self._lock:
            self._output[:] = text.encode()

    def open(self, log: Path) -> None:
        """Open the pty and drain it into ``log`` and ``output`` on a thread of its own."""
        master, slave = pty.openpty()
        self._master_fd, self.slave_fd = master, slave
        self.tty = os.ttyname(slave)
        self._thread = threading.Thread(
            target=self._pump, args=(master, log), name="crashdoc-sandbox-console", daemon=True
        )
        self._thread.start()

    def _pump(self, fd: int, log: Path) -> None:
        """Drain the console pty for as long as it lives: PID 1 blocks when its console is full."""
        with open(log, "ab") as sink:
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                sink.write(chunk)
                sink.flush()
                with self._lock:
                    self._output += chunk
                    if len(self._output) > _CONSOLE_LIMIT:
                        del self._output[: len(self._output) - _CONSOLE_LIMIT]

    def close(self) -> None:
        for attr in ("slave_fd", "_master_fd"):
            fd = getattr(self, attr)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, attr, None)
        if self._thread is not None:
            self._thread.join(2)
