"""What systemd says about the watched units, over D-Bus (pystemd; a unit's properties through busread.c when
it is built: the GIL released while PID 1 answers).

The journal says what happened; D-Bus says what is true now: NRestarts (which a manual
restart resets), ActiveState/SubState, Result, the real ExecStart argv and the files the
unit is made of. The watcher subscribes to PropertiesChanged instead of polling, and when
the bus goes away it says so (crashdoc_dbus_up 0), lets crashdoc carry on from the journal
alone, and reconnects with backoff.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crashdoc.events import UnitState
from crashdoc.lean import package_modules
from crashdoc.sources.journal import UnitFilter

if TYPE_CHECKING:
    from crashdoc.sources.busread import BusReader

SYSTEMD = b"org.freedesktop.systemd1"
MANAGER_PATH = b"/org/freedesktop/systemd1"
MANAGER_IFACE = b"org.freedesktop.systemd1.Manager"
UNIT_IFACE = b"org.freedesktop.systemd1.Unit"
SERVICE_IFACE = b"org.freedesktop.systemd1.Service"
PROPS_IFACE = b"org.freedesktop.DBus.Properties"


_STRING = ord("s")  # the D-Bus type of GetAll's argument, as pystemd's call_method takes it


def pystemd_dbus() -> Any:
    """pystemd's `DBus` class, without running the package's `__init__`: that imports its unit objects and with
    them lxml (5.6 MB of the daemon's RSS, 3.5 MB of it lxml's shared library; 130 ms), which the D-Bus module does
    not need and crashdoc never uses. A pystemd already imported is used as it is."""
    with package_modules("pystemd"):
        from pystemd.dbuslib import DBus
    return DBus


# the variables of a unit's environment crashdoc keeps (which host GPU a CUDA device is); the others may hold
# secrets (API keys, tokens) and are never read into crashdoc's records
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
# the properties `state` reads, of the Unit and Service interfaces (busread.c converts only these)
PROPERTIES = frozenset(
    b"LoadState ActiveState SubState InvocationID FragmentPath DropInPaths ActiveEnterTimestamp Result NRestarts"
    b" ExecMainStatus ExecMainCode ExecStart EnvironmentFiles Environment NUMAPolicy NUMAMask CPUAffinity".split()
)
# NUMAPolicy's values are the kernel's MPOL_* numbers; systemd says -1 when the unit sets none
_NUMA_POLICIES = {0: "default", 1: "preferred", 2: "bind", 3: "interleave", 4: "local"}


def unit_path(name: str) -> bytes:
    """systemd's object path for a unit: every byte outside [A-Za-z0-9] becomes _XX."""
    escaped = "".join(ch if ch.isascii() and ch.isalnum() else f"_{ord(ch):02x}" for ch in name)
    return b"/org/freedesktop/systemd1/unit/" + escaped.encode()


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


@dataclass(slots=True)
class UnitWatcher:
    units: UnitFilter
    reconnect_after: float = 1.0  # seconds; doubles up to reconnect_max while the bus is gone
    reconnect_max: float = 30.0
    up: bool = False
    last_error: str = ""
    bus: Any = None  # pystemd's DBus (untyped)
    _paths: dict[bytes, str] = field(default_factory=dict)  # object path -> unit name
    _dirty: set[str] = field(default_factory=set)
    _next_attempt: float = 0.0
    _backoff: float = 1.0
    _clock: Callable[[], float] = time.monotonic
    _callbacks: tuple[object, ...] = ()
    # where busread.c is built: a unit's properties are then read with the GIL released (None: through pystemd)
    build_dir: Path | None = None
    fast_bus: BusReader | None = None
    fast_reads: str = "not asked for (no folder to build it in)"  # "" when busread.c reads the properties

    # --- connection ----------------------------------------------------------------------

    def connect(self) -> bool:
        """Open the system bus and subscribe; False (with `last_error`) when there is no bus."""
        try:
            DBus = pystemd_dbus()
        except ImportError as exc:  # pragma: no cover - a broken install
            self.last_error = f"pystemd is not usable: {exc}"
            return False
        self.close()
        try:
            bus = DBus()
            bus.open()

            # pystemd stores metadata on the callback object and keeps only a C pointer to it:
            # plain functions (not bound methods), and a reference held here
            def on_changed(msg: object, error: object = None, userdata: object = None) -> None:
                self._on_properties_changed(msg)

            def on_new(msg: object, error: object = None, userdata: object = None) -> None:
                self._on_unit_new(msg)

            self._callbacks = (on_changed, on_new)
            bus.match_signal(SYSTEMD, None, PROPS_IFACE, b"PropertiesChanged", on_changed)
            bus.match_signal(SYSTEMD, MANAGER_PATH, MANAGER_IFACE, b"UnitNew", on_new)
            bus.call_method(SYSTEMD, MANAGER_PATH, MANAGER_IFACE, b"Subscribe", [])
        except Exception as exc:
            self.up = False
            self.last_error = f"D-Bus unavailable: {exc}"
            self._schedule_retry()
            return False
        self.bus = bus
        if self.build_dir is not None:
            from crashdoc.sources.busread import open_bus

            self.fast_bus, self.fast_reads = open_bus(self.build_dir)
        self.up = True
        self.last_error = ""
        self._backoff = self.reconnect_after
        return True

    def maybe_reconnect(self) -> bool:
        """Called on a timer: reconnect when the bus was lost and the backoff has passed."""
        if self.up or self._clock() < self._next_attempt:
            return False
        return self.connect()

    def close(self) -> None:
        fast, self.fast_bus = self.fast_bus, None
        if fast is not None:
            fast.close()
        bus, self.bus = self.bus, None
        if bus is not None:
            try:
                bus.close()
            except Exception:
                pass

    def _schedule_retry(self) -> None:
        self._next_attempt = self._clock() + self._backoff
        self._backoff = min(self._backoff * 2, self.reconnect_max)

    def _lost(self, exc: BaseException) -> None:
        self.up = False
        self.last_error = f"D-Bus connection lost: {exc}"
        self.close()
        self._schedule_retry()

    def fileno(self) -> int | None:
        if self.bus is None:
            return None
        try:
            fd = int(self.bus.get_fd())
        except Exception as exc:
            self._lost(exc)
            return None
        if fd < 0:  # sd-bus answers -errno once the connection is gone (-107: ENOTCONN)
            self._lost(OSError(-fd, os.strerror(-fd)))
            return None
        return fd

    # --- discovery and state -------------------------------------------------------------

    def discover(self) -> list[str]:
        """Loaded units whose names the configuration watches."""
        if self.bus is None:
            return []
        try:
            reply = self.bus.call_method(SYSTEMD, MANAGER_PATH, MANAGER_IFACE, b"ListUnits", []).body
        except Exception as exc:
            self._lost(exc)
            return []
        names = []
        rows = reply[0] if reply and isinstance(reply[0], list) else (reply or [])
        for row in rows:
            name = _text(row[0])
            if self.units.role_of(name) is not None:
                names.append(name)
                self._paths[bytes(row[6]) if isinstance(row[6], bytes) else unit_path(name)] = name
        return sorted(names)

    def states(self, units: list[str]) -> dict[str, UnitState | None]:
        """`state` of each unit; through busread.c all their GetAll calls are answered in one round trip."""
        fetched: dict[str, dict[bytes, dict[bytes, Any] | OSError]] = {unit: {} for unit in units}
        if self.fast_bus is not None and len(units) > 1:
            asked = [
                (unit, iface)
                for unit in units
                for iface in ((UNIT_IFACE, SERVICE_IFACE) if unit.endswith(".service") else (UNIT_IFACE,))
            ]
            try:
                replies = self.fast_bus.get_many(tuple((unit_path(u), i) for u, i in asked), PROPERTIES)
            except OSError as exc:
                self._lost(exc)
                return dict.fromkeys(units)
            for (unit, iface), reply in zip(asked, replies, strict=True):
                fetched[unit][iface] = reply
        return {unit: self.state(unit, fetched[unit]) for unit in units}

    def state(self, unit: str, fetched: dict[bytes, dict[bytes, Any] | OSError] | None = None) -> UnitState | None:
        """The unit's properties right now; None when the bus is gone. `fetched`: GetAll's replies already
        read (`states`), by interface."""
        if self.bus is None:
            return None
        path = unit_path(unit)
        self._paths[path] = unit

        bus, fast = self.bus, self.fast_bus
        # Two GetAll round trips, not one Get per property: pystemd holds the GIL while it waits for PID 1, and a
        # PID 1 busy restarting units answers each call late, so seventeen waits stalled every thread of the daemon
        # (reading, /metrics) for tens of milliseconds per refresh. busread.c's calls release the GIL meanwhile.
        values = dict(fetched or {})

        def prop(iface: bytes, name: bytes) -> Any:  # pystemd's values, typed by the D-Bus signature
            if iface not in values:
                if fast is not None:
                    values[iface] = fast.get_all(path, iface, PROPERTIES)
                else:
                    body = bus.call_method(SYSTEMD, path, PROPS_IFACE, b"GetAll", [(_STRING, iface)]).body
                    values[iface] = body if isinstance(body, dict) else {}
            got = values[iface]
            if isinstance(got, OSError):  # its call's D-Bus error, as a call of its own would raise it
                raise got
            try:
                return got[name]
            except KeyError:  # what Get says of a property this systemd does not have
                raise LookupError(f"org.freedesktop.DBus.Error.UnknownProperty: {name.decode()}") from None

        try:
            load_state = _text(prop(UNIT_IFACE, b"LoadState"))
            st = UnitState(unit=unit, timestamp=time.time(), loaded=load_state == "loaded")
            st.active_state = _text(prop(UNIT_IFACE, b"ActiveState"))
            st.sub_state = _text(prop(UNIT_IFACE, b"SubState"))
            invocation = prop(UNIT_IFACE, b"InvocationID")
            st.invocation = bytes(invocation).hex() if isinstance(invocation, bytes | list) else ""
            st.fragment_path = _text(prop(UNIT_IFACE, b"FragmentPath"))
            st.drop_in_paths = tuple(_text(p) for p in prop(UNIT_IFACE, b"DropInPaths") or [])
            st.active_enter_timestamp = int(prop(UNIT_IFACE, b"ActiveEnterTimestamp") or 0) / 1e6
            if unit.endswith(".service") and st.loaded:
                st.result = _text(prop(SERVICE_IFACE, b"Result"))
                st.n_restarts = int(prop(SERVICE_IFACE, b"NRestarts"))
                st.exec_main_status = int(prop(SERVICE_IFACE, b"ExecMainStatus"))
                st.exec_main_code = int(prop(SERVICE_IFACE, b"ExecMainCode"))
                exec_start = prop(SERVICE_IFACE, b"ExecStart") or []
                if exec_start:
                    st.exec_start = tuple(_text(a) for a in exec_start[0][1])
                env_files = prop(SERVICE_IFACE, b"EnvironmentFiles") or []
                st.environment_files = tuple(_text(row[0]) for row in env_files)
                st.environment = gpu_entries(_text(e) for e in prop(SERVICE_IFACE, b"Environment") or [])
                self._read_numa(st, prop)
        except Exception as exc:
            text = str(exc)
            if "NoSuchUnit" in text or "UnknownObject" in text or "not loaded" in text:
                return UnitState(unit=unit, loaded=False, timestamp=time.time())
            self._lost(exc)
            return None
        return st

    @staticmethod
    def _read_numa(st: UnitState, prop: Callable[[bytes, bytes], Any]) -> None:
        """NUMAPolicy=, NUMAMask=, CPUAffinity= (for the HiCache host-memory check); systemd before 243 has
        none of them, which must not count as a lost bus."""
        try:
            policy = int(prop(SERVICE_IFACE, b"NUMAPolicy"))
            mask = prop(SERVICE_IFACE, b"NUMAMask")
            affinity = prop(SERVICE_IFACE, b"CPUAffinity")
        except Exception as exc:
            if "UnknownProperty" in str(exc) or "InvalidArgs" in str(exc):
                return
            raise
        st.numa_policy = _NUMA_POLICIES.get(policy, "")
        st.numa_mask = bitmask_list(mask)
        st.cpu_affinity = bitmask_list(affinity)

    # --- signals -------------------------------------------------------------------------

    def process(self) -> set[str]:
        """Dispatch pending bus messages; returns the watched units that changed."""
        if self.bus is None:
            return set()
        try:
            for _ in range(10_000):
                msg = self.bus.process()
                if msg.is_empty():
                    break
        except Exception as exc:
            self._lost(exc)
        changed, self._dirty = self._dirty, set()
        return changed

    def _on_properties_changed(self, msg: Any) -> None:
        try:
            path = bytes(msg.get_path())
        except Exception:
            return
        unit = self._paths.get(path)
        if unit is None:
            name = _unescape(path)
            if name is None or self.units.role_of(name) is None:
                return
            unit = self._paths[path] = name
        self._dirty.add(unit)

    def _on_unit_new(self, msg: Any) -> None:
        try:
            msg.process_reply(False)
            name = _text(msg.body[0])
        except Exception:
            return
        # Only a unit never seen before is news. A known unit is loaded again whenever its
        # properties are read after systemd garbage-collected it (stopped, unreferenced): marking it
        # changed made crashdoc read it again, which loaded it again, hundreds of times a second.
        # A real start of a known unit changes its ActiveState: PropertiesChanged on its own path.
        if self.units.role_of(name) is not None and unit_path(name) not in self._paths:
            self._dirty.add(name)


def gpu_entries(entries: Iterable[str]) -> tuple[str, ...]:
    """The `NAME=VALUE` entries of GPU_VARIABLES, in order (the last one of a name wins, as in systemd)."""
    return tuple(e for e in entries if e.partition("=")[0] in GPU_VARIABLES)


def environment_file_entries(text: str) -> list[str]:
    """`NAME=VALUE` entries of an EnvironmentFile= as systemd reads it: blank lines and `#`/`;` comments skipped,
    one pair of quotes around a value removed (a shell-style `export` is tolerated)."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        name, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out.append(f"{name.strip()}={value}")
    return out


def bitmask_list(mask: object) -> str:
    """systemd's CPU/NUMA bit mask (`ay`, bit i of byte k is CPU or node 8k+i) as a Linux list: \"0-3,8\"."""
    data = bytes(mask) if isinstance(mask, bytes | bytearray | list | tuple) else b""
    bits = [8 * k + i for k, byte in enumerate(data) for i in range(8) if byte >> i & 1]
    runs: list[list[int]] = []
    for bit in bits:
        if runs and bit == runs[-1][1] + 1:
            runs[-1][1] = bit
        else:
            runs.append([bit, bit])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _unescape(path: bytes) -> str | None:
    prefix = b"/org/freedesktop/systemd1/unit/"
    if not path.startswith(prefix):
        return None
    raw = path[len(prefix) :].decode("ascii", "replace")
    out = []
    i = 0
    while i < len(raw):
        if raw[i] == "_" and i + 2 < len(raw) + 0 and all(c in "0123456789abcdef" for c in raw[i + 1 : i + 3]):
            out.append(chr(int(raw[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return "".join(out)
