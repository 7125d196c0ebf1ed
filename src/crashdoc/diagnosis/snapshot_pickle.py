"""crashdoc 0.1.0 saved its engine as a pickle: `from_legacy_pickle` reads it into today's classes once, so the first
start after the upgrade resumes where the old daemon stopped (read by name, never by running what it names)."""

from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict, deque
from enum import Enum
from typing import Any

from crashdoc.diagnosis.crashloop import LoopState
from crashdoc.diagnosis.failures import Transition
from crashdoc.diagnosis.snapshot import SCHEMA, EngineState, SnapshotError, build, checked
from crashdoc.events import Lifecycle, Thresholds

# where 0.1.0 kept the classes that are elsewhere (or renamed) now
_LEGACY_NAMES: dict[tuple[str, str], str] = {
    ("crashdoc.diagnosis.invocation", "Invocation"): "Run",
    ("crashdoc.diagnosis.invocation", "LineHit"): "LineHit",
    ("crashdoc.diagnosis.crashloop", "Thresholds"): "Thresholds",
}
# fields 0.1.0 named otherwise: class -> {its name: today's}
_LEGACY_FIELDS: dict[str, dict[str, str]] = {"UnitRecord": {"invocations": "runs"}}
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


# the classes 0.1.0 pickled: today's saved records, and two that version 2 no longer saves
_LEGACY_CLASSES: dict[str, type] = {r.cls.__name__: r.cls for r in SCHEMA if r.cls is not EngineState} | {
    "Thresholds": Thresholds,
    "Transition": Transition,
}
_LEGACY_ENUMS: dict[str, type[Enum]] = {"LoopState": LoopState, "Lifecycle": Lifecycle}


def from_legacy_pickle(blob: bytes) -> EngineState:
    """0.1.0's engine state (a pickle whose version named the package version) as today's state."""
    import io  # only for this one-time upgrade: not on every start of `explain`
    import pickle

    loose: dict[str, type[_Loose]] = {}

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if (module, name) in _CONTAINERS:
                return _CONTAINERS[(module, name)]
            if "." not in name and module.startswith(_LEGACY_MODULES):
                if name in _LEGACY_ENUMS:
                    return _LEGACY_ENUMS[name]
                target = _LEGACY_CLASSES.get(_LEGACY_NAMES.get((module, name), name))
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
    return checked(_realise(state, {}))


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
        renamed = _LEGACY_FIELDS.get(value.target.__name__, {})
        values = {renamed.get(k, k): _realise(v, seen) for k, v in raw.items() if renamed.get(k, k) in names}
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
