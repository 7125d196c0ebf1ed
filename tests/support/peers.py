"""Bare TCP peers for the clients' tests: a listening socket whose connections a thread hands to the test."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


def accept_in_thread(server: socket.socket, handle: Callable[[socket.socket], None]) -> None:
    """Hand each connection `server` accepts to `handle`, in a daemon thread, until the socket is closed."""

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            handle(conn)

    threading.Thread(target=accept, daemon=True).start()
