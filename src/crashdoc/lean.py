"""Imports that keep the daemon small: what it loads only to reach something else, it does not keep.

- Digests (SHA-1, SHA-256, BLAKE2b) come from the interpreter's own hash modules, not `hashlib`: `hashlib` loads
  OpenSSL's `_hashlib` at its import, and with it libcrypto (~3.5 MB of the daemon's RSS). The algorithms are
  standard, so the digests are the same bytes (fingerprints and record ids are saved data); a Python built without
  those modules gets `hashlib`'s.
- `ssl` is loaded at its first use (`ssl_at_first_use`): `http.server` imports `http.client`, and `http.client`
  imports `ssl` (libssl and libcrypto, ~5 MB) only to offer HTTPS. A daemon without a TLS web configuration or an
  HTTPS Alertmanager never touches it, so never loads it.
- `package_modules` imports a package's modules without running its `__init__`, for packages whose `__init__`
  imports much that crashdoc never uses (pystemd's unit objects and lxml; prometheus_client's exposition, its
  HTTP servers and `ssl`).
"""

from __future__ import annotations

import _thread
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class Hasher(Protocol):
    """What crashdoc uses of a hash object (`hashlib`'s and the builtin modules' alike)."""

    def update(self, data: bytes, /) -> None: ...
    def digest(self) -> bytes: ...
    def hexdigest(self) -> str: ...


def sha1(data: bytes = b"") -> Hasher:
    try:
        from _sha1 import sha1 as builtin  # type: ignore[import-not-found, unused-ignore]
    except ImportError:  # a Python built without it
        from hashlib import sha1 as builtin
    return builtin(data)  # type: ignore[no-any-return, unused-ignore]


def sha256(data: bytes = b"") -> Hasher:
    try:
        from _sha256 import sha256 as builtin  # type: ignore[import-not-found, unused-ignore]
    except ImportError:  # Python 3.12 and later name it _sha2; or a Python built without it
        try:
            from _sha2 import sha256 as builtin  # type: ignore[import-not-found, no-redef, unused-ignore]
        except ImportError:
            from hashlib import sha256 as builtin  # type: ignore[assignment, unused-ignore]
    return builtin(data)  # type: ignore[no-any-return, unused-ignore]


def blake2b(data: bytes = b"", *, digest_size: int) -> Hasher:
    try:
        from _blake2 import blake2b as builtin
    except ImportError:
        from hashlib import blake2b as builtin
    return builtin(data, digest_size=digest_size)


class _AtFirstUse(types.ModuleType):
    """Stands in `sys.modules` for a module not yet run: the first name read from it imports the real one, which
    takes its place in `sys.modules` and lends this one its names (so `ssl.SSLError` is the same class through
    either). Not `importlib.util.LazyLoader`: Python 3.11's `import` reads the module's `__spec__`, which runs a
    LazyLoader's module at the very `import ssl` it was meant to defer."""

    _lock = _thread.allocate_lock()  # (not threading's: `explain` imports this module and no threading)

    def __getattr__(self, name: str) -> Any:
        with self._lock:
            if sys.modules.get(self.__name__) is self:
                import importlib

                del sys.modules[self.__name__]
                try:
                    real = importlib.import_module(self.__name__)
                except BaseException:
                    sys.modules[self.__name__] = self
                    raise
                vars(self).update(vars(real))
        return getattr(sys.modules[self.__name__], name)


def ssl_at_first_use() -> None:
    """Put a stand-in in `sys.modules["ssl"]` that imports `ssl` when one of its names is first read: `import ssl`
    (`http.client`'s, `urllib.request`'s) costs nothing until HTTPS is used. An `ssl` already imported stays."""
    if "ssl" in sys.modules:
        return
    import importlib.util

    spec = importlib.util.find_spec("ssl")
    if spec is None:
        return
    stand_in = _AtFirstUse("ssl")
    # what tools read of every module in sys.modules (`inspect.getmodule` reads `__file__`) answers without a load
    stand_in.__spec__, stand_in.__loader__, stand_in.__file__ = spec, spec.loader, spec.origin
    stand_in.__package__ = spec.parent
    sys.modules["ssl"] = stand_in


@contextmanager
def package_modules(package: str) -> Iterator[None]:
    """Within the block, `from <package>.<module> import ...` imports that module (and what it imports) without
    the package's `__init__`; after it, a later `import <package>` runs the package's own `__init__`, which finds
    the modules imported here already loaded (the same classes). A package already imported is used as it is."""
    if package in sys.modules:
        yield
        return
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"No module named {package!r}")
    stub = types.ModuleType(package)
    stub.__path__ = list(spec.submodule_search_locations)
    sys.modules[package] = stub  # its modules import under it
    try:
        yield
    finally:
        if sys.modules.get(package) is stub:
            del sys.modules[package]
