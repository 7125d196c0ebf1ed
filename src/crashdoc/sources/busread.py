"""A unit's D-Bus properties read without the GIL (busread.c): built on first use, loaded with ctypes.

pystemd keeps the GIL while PID 1 answers; a PID 1 busy restarting looping units answers late, and every
thread of the daemon (the HTTP server's included) waited as long. busread.c makes the GetAll calls with the
GIL released, on a connection of its own. It is built like fastread.c (a C compiler, Python's headers,
libsystemd-dev) into the same cache folder; without it `open_bus` says why and units.py reads through pystemd:
the same values.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path
from typing import Any

from crashdoc.sources.fastread import built_library

SOURCE = Path(__file__).with_name("busread.c")
# calls awaiting their reply at once: the system bus's dbus-daemon allows a connection 128 (max_replies_per_connection)
AT_ONCE = 64


class BusReader:
    """GetAll of a systemd object's interfaces over the system bus, the GIL released while PID 1 answers.
    One thread at a time (sd-bus is not thread-safe)."""

    def __init__(self, lib: Any) -> None:
        self._open, self._close = lib.crashdoc_bus_open, lib.crashdoc_bus_close
        self._open.argtypes, self._open.restype = (ctypes.POINTER(ctypes.c_void_p),), ctypes.c_int
        self._close.argtypes, self._close.restype = (ctypes.c_void_p,), None
        self._get_all = lib.crashdoc_bus_get_all
        self._get_all.argtypes = (ctypes.c_void_p, *(ctypes.py_object,) * 2)
        self._get_all.restype = ctypes.py_object
        self._bus: int | None = None

    def open(self) -> None:
        """Connect to the system bus; OSError when there is none."""
        self.close()
        bus = ctypes.c_void_p()
        r = self._open(ctypes.byref(bus))
        if r < 0:
            raise OSError(-r, f"cannot open the system bus: {os.strerror(-r)}")
        self._bus = bus.value

    def get_all(self, path: bytes, iface: bytes, wanted: frozenset[bytes] | None = None) -> dict[bytes, Any]:
        """The properties of `iface` on `path` ({name: value}, only `wanted` ones); OSError naming the D-Bus
        error (org.freedesktop.systemd1.NoSuchUnit: ...) or the lost connection."""
        got = self.get_many(((path, iface),), wanted)[0]
        if isinstance(got, OSError):
            raise got
        return got

    def get_many(
        self, calls: tuple[tuple[bytes, bytes], ...], wanted: frozenset[bytes] | None = None
    ) -> tuple[dict[bytes, Any] | OSError, ...]:
        """GetAll for each (path, interface), sent together and answered in one round trip: for each, its
        properties or the OSError of its D-Bus error. A lost connection raises OSError."""
        got: tuple[dict[bytes, Any] | OSError, ...] = ()
        for at in range(0, len(calls), AT_ONCE):
            if self._bus is None:
                raise OSError(errno.ENOTCONN, "the bus is closed")
            got += self._get_all(self._bus, calls[at : at + AT_ONCE], wanted)
        return got

    def close(self) -> None:
        bus, self._bus = self._bus, None
        if bus is not None:
            self._close(bus)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at the interpreter's exit, ctypes may be gone first
            pass


def open_bus(folder: Path | None) -> tuple[BusReader | None, str]:
    """`(a connected BusReader, "")`, or `(None, why not)`: no folder to build it in, no build, no bus."""
    if folder is None:
        return None, "no cache folder to build it in"
    library, why = built_library(folder, SOURCE)
    if library is None:
        return None, why
    try:
        reader = BusReader(ctypes.PyDLL(str(library)))
        reader.open()
    except (OSError, AttributeError) as exc:
        return None, f"cannot use {library}: {exc}"
    return reader, ""
