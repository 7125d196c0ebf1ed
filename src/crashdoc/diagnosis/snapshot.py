"""The engine's saved state as versioned JSON, not a pickle tied to crashdoc's version.

A snapshot is `{"schema": "crashdoc-engine", "version": N, "data": ...}`. Records are data classes,
written as `{"__type__": "Run", ...fields}` and rebuilt only from the classes named in `CLASSES`:
a state file someone else wrote can fail to load, but cannot make crashdoc run code. A field a
newer crashdoc added gets its default when an older snapshot is read, and a field an older
crashdoc does not know is dropped, so an upgrade (or a downgrade) keeps counters, loops and
the tracebacks in progress. A change that defaults cannot express gets a migration in
`MIGRATIONS` (version N -> N+1).

crashdoc 0.1.0 saved a pickle; `from_legacy_pickle` reads it into today's classes once, so the
first start after the upgrade resumes where the old daemon stopped.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from enum import Enum
from typing import Any

from crashdoc.assembly.traceback import _Pending
from crashdoc.diagnosis.configchange import ConfigChange, FileChange
from crashdoc.diagnosis.crashloop import Crash, LoopState, LoopTracker, Transition
from crashdoc.diagnosis.rootcause import Finding
from crashdoc.diagnosis.run import Handled, LineHit, Run
from crashdoc.events import (
    Diagnosis,
    ExceptionInfo,
    Fix,
    FlagChange,
    Frame,
    Lifecycle,
    LifecycleRecord,
    LogLine,
    Marker,
    Match,
    RootCause,
    Thresholds,
    Traceback,
    UnitState,
)
from crashdoc.matching.derived import DerivedMatch, DerivedSignature
from crashdoc.matching.matcher import Facts

SCHEMA = "crashdoc-engine"
VERSION = 1
# version N -> N+1, applied in order to the "data" of an older snapshot
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}

_RECORDS: tuple[type, ...] = (
    Run,
    LineHit,
    Handled,
    LoopTracker,
    Crash,
    Transition,
    Finding,
    FileChange,
    ConfigChange,
    Thresholds,
    Traceback,
    ExceptionInfo,
    Frame,
    Marker,
    Match,
    LogLine,
    LifecycleRecord,
    UnitState,
    Diagnosis,
    RootCause,
    Fix,
    FlagChange,
    Facts,
    DerivedMatch,
    DerivedSignature,
    _Pending,
)
_ENUMS: tuple[type[Enum], ...] = (LoopState, Lifecycle)


class SnapshotError(ValueError):
    """The snapshot cannot be used (damaged, foreign, or from a newer schema)."""


class Codec:
    """Data classes and containers <-> JSON values, for a fixed set of classes.

    `extra` adds the engine's own record classes (UnitRecord, EngineEvent), which live in the
    module that imports this one.
    """

    def __init__(self, extra: tuple[type, ...] = ()) -> None:
        self.classes: dict[str, type] = {cls.__name__: cls for cls in (*_RECORDS, *extra)}
        self.enums: dict[str, type[Enum]] = {cls.__name__: cls for cls in _ENUMS}

    def encode(self, value: Any) -> Any:
        if isinstance(value, Enum):  # before str: the loop states are StrEnums
            return {"__enum__": type(value).__name__, "value": value.value}
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            name = type(value).__name__
            if self.classes.get(name) is not type(value):
                raise SnapshotError(f"{type(value).__module__}.{name} is not part of a snapshot")
            out: dict[str, Any] = {"__type__": name}
            for f in dataclasses.fields(value):
                out[f.name] = self.encode(getattr(value, f.name))
            return out
        if isinstance(value, Counter):
            return {"__counter__": [[self.encode(k), v] for k, v in value.items()]}
        if isinstance(value, OrderedDict):
            return {"__odict__": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value):
                return {"__dict__": {k: self.encode(v) for k, v in value.items()}}
            return {"__pairs__": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        if isinstance(value, deque):
            return {"__deque__": [self.encode(v) for v in value], "maxlen": value.maxlen}
        if isinstance(value, tuple):
            return {"__tuple__": [self.encode(v) for v in value]}
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        if isinstance(value, frozenset | set):
            tag = "__frozenset__" if isinstance(value, frozenset) else "__set__"
            return {tag: [self.encode(v) for v in value]}
        raise SnapshotError(f"cannot save a {type(value).__name__} in a snapshot")

    def decode(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "__type__" in value:
            return self._record(value)
        if "__enum__" in value:
            enum = self.enums.get(str(value["__enum__"]))
            if enum is None:
                raise SnapshotError(f"unknown enumeration {value['__enum__']!r}")
            return enum(value["value"])
        if "__dict__" in value:
            return {k: self.decode(v) for k, v in value["__dict__"].items()}
        if "__pairs__" in value:
            return {self._key(k): self.decode(v) for k, v in value["__pairs__"]}
        if "__odict__" in value:
            return OrderedDict((self._key(k), self.decode(v)) for k, v in value["__odict__"])
        if "__counter__" in value:
            return Counter({self._key(k): int(v) for k, v in value["__counter__"]})
        if "__deque__" in value:
            return deque((self.decode(v) for v in value["__deque__"]), maxlen=value.get("maxlen"))
        if "__tuple__" in value:
            return tuple(self.decode(v) for v in value["__tuple__"])
        if "__set__" in value:
            return {self._key(v) for v in value["__set__"]}
        if "__frozenset__" in value:
            return frozenset(self._key(v) for v in value["__frozenset__"])
        raise SnapshotError(f"unknown value in a snapshot: keys {sorted(value)[:5]}")

    def _key(self, value: Any) -> Any:
        key = self.decode(value)
        return tuple(key) if isinstance(key, list) else key

    def _record(self, value: dict[str, Any]) -> Any:
        name = str(value["__type__"])
        cls = self.classes.get(name)
        if cls is None:
            raise SnapshotError(f"{name} is not part of a crashdoc snapshot")
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {k: self.decode(v) for k, v in value.items() if k in known}
        return build(cls, kwargs)


def build(cls: type, values: dict[str, Any], obj: Any = None) -> Any:
    """An instance of data class `cls` from field values; missing fields get their defaults.

    Built without calling __init__ (a record may have fields that __init__ does not take), so a
    field that has no default and no value is an error: the snapshot is not from this schema.
    """
    obj = object.__new__(cls) if obj is None else obj
    for f in dataclasses.fields(cls):
        if f.name in values:
            value = values[f.name]
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            raise SnapshotError(f"{cls.__name__}.{f.name} is missing")
        object.__setattr__(obj, f.name, value)
    return obj


def dump(state: dict[str, Any], codec: Codec) -> dict[str, Any]:
    return {"schema": SCHEMA, "version": VERSION, "data": codec.encode(state)}


def load(doc: Any, codec: Codec) -> dict[str, Any]:
    """The state a `dump` made, migrated to this version; SnapshotError when it cannot be used."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise SnapshotError("not a crashdoc engine snapshot")
    version = doc.get("version")
    if not isinstance(version, int) or version < 1:
        raise SnapshotError(f"unknown snapshot version {version!r}")
    if version > VERSION:
        raise SnapshotError(f"snapshot version {version} is newer than this crashdoc reads ({VERSION})")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise SnapshotError("the snapshot holds no data")
    for step in range(version, VERSION):
        data = MIGRATIONS[step](data)
    try:
        state = codec.decode(data)
    except (KeyError, TypeError, ValueError, RecursionError) as exc:
        raise SnapshotError(f"damaged snapshot: {type(exc).__name__}: {exc}") from exc
    if not isinstance(state, dict):
        raise SnapshotError("the snapshot holds no state")
    return state


# --- crashdoc 0.1.0's pickle ------------------------------------------------------------------

# where 0.1.0 kept the classes that are elsewhere (or renamed) now
_LEGACY_NAMES: dict[tuple[str, str], str] = {
    ("crashdoc.diagnosis.invocation", "Invocation"): "Run",
    ("crashdoc.diagnosis.invocation", "LineHit"): "LineHit",
    ("crashdoc.diagnosis.crashloop", "Thresholds"): "Thresholds",
}
_LEGACY_MODULES = ("crashdoc.events", "crashdoc.diagnosis.", "crashdoc.assembly.", "crashdoc.matching.matcher")
_CONTAINERS = {
    ("collections", "Counter"): Counter,
    ("collections", "OrderedDict"): OrderedDict,
    ("collections", "deque"): deque,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
}


class _Loose:
    """Stands in for a pickled data class. 0.1.0 pickled its frozen slotted data classes as the list of
    their field values in field order (mapped to today's fields by position), the others as
    `(None, {slot: value})` (mapped by name)."""

    target: type

    def __setstate__(self, state: Any) -> None:
        self.state = state


def from_legacy_pickle(blob: bytes, codec: Codec) -> dict[str, Any]:
    """0.1.0's engine state (a pickle whose version named the package version) as today's state."""
    import io  # only for this one-time upgrade: not on every start of `explain`
    import pickle

    loose: dict[str, type[_Loose]] = {}

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if (module, name) in _CONTAINERS:
                return _CONTAINERS[(module, name)]
            if "." not in name and module.startswith(_LEGACY_MODULES):
                if name in codec.enums:
                    return codec.enums[name]
                target = codec.classes.get(_LEGACY_NAMES.get((module, name), name))
                if target is not None:
                    if name not in loose:
                        loose[name] = type(f"Loose{name}", (_Loose,), {"target": target})
                    return loose[name]
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a crashdoc snapshot")

    try:
        state = Unpickler(io.BytesIO(blob)).load()
    except Exception as exc:
        raise SnapshotError(f"unreadable 0.1.0 snapshot: {type(exc).__name__}: {exc}") from exc
    if not isinstance(state, dict) or not str(state.get("version", "")).startswith("crashdoc-engine-1/"):
        raise SnapshotError("not a crashdoc 0.1.0 engine snapshot")
    return _realise(state, {})


def _realise(value: Any, seen: dict[int, Any]) -> Any:
    """Replace the stand-ins with today's records (shared objects stay shared)."""
    if id(value) in seen:
        return seen[id(value)]
    if isinstance(value, _Loose):
        fields = dataclasses.fields(value.target)
        state = value.state
        if isinstance(state, list):
            raw = {f.name: v for f, v in zip(fields, state, strict=False)}
        elif isinstance(state, tuple) and len(state) == 2:
            raw = {**(state[0] or {}), **(state[1] or {})}
        elif isinstance(state, dict):
            raw = state
        else:
            raise SnapshotError(f"{value.target.__name__}: unexpected pickled state")
        obj: Any = object.__new__(value.target)
        seen[id(value)] = obj  # before its fields, so that a cycle points at it
        names = {f.name for f in fields}
        values = {k: _realise(v, seen) for k, v in raw.items() if k in names}
        fp = values.get("fingerprint")
        if isinstance(fp, str) and len(fp) == 16:  # 0.1.0 wrote the same recipe without its version tag
            values["fingerprint"] = f"fp1-{fp}"
        return build(value.target, values, obj)
    if isinstance(value, Counter):
        return Counter({k: v for k, v in value.items()})
    if isinstance(value, OrderedDict):
        return OrderedDict((_realise(k, seen), _realise(v, seen)) for k, v in value.items())
    if isinstance(value, dict):
        return {_realise(k, seen): _realise(v, seen) for k, v in value.items()}
    if isinstance(value, deque):
        return deque((_realise(v, seen) for v in value), maxlen=value.maxlen)
    if isinstance(value, list):
        return [_realise(v, seen) for v in value]
    if isinstance(value, tuple):
        return tuple(_realise(v, seen) for v in value)
    if isinstance(value, frozenset | set):
        return type(value)(_realise(v, seen) for v in value)
    return value
