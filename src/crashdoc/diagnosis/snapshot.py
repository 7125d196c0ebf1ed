"""The engine's saved state: versioned JSON with a schema of its own, not the in-memory classes.

A snapshot is `{"schema": "crashdoc-engine", "version": N, "data": ...}`. Each saved record is written as
`{"__type__": NAME, FIELD: value, ...}` with the names `SCHEMA` gives it, not its class's: renaming a class or
an attribute changes the table, not the file, and a field added to a class is saved only once the schema
lists it (tests/unit/test_state.py fails until each field is listed or said to be left out). Records are
rebuilt only from the classes the schema names: a state file someone else wrote can fail to load, but cannot
make crashdoc run code. A field the file lacks gets its class's default, a field the schema does not know is
dropped, so an upgrade (or a downgrade) keeps counters, loops and the tracebacks in progress. A change that
defaults cannot express gets a migration in `MIGRATIONS` (version N -> N+1).

crashdoc 0.1.0 saved a pickle; `from_legacy_pickle` reads it into today's classes once, so the first start
after the upgrade resumes where the old daemon stopped.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from crashdoc.assembly.traceback import _Pending
from crashdoc.diagnosis.configchange import FileChange
from crashdoc.diagnosis.crashloop import Crash, LoopState, LoopTracker, Transition
from crashdoc.diagnosis.gpustate import GpuRecord
from crashdoc.diagnosis.rootcause import Finding
from crashdoc.diagnosis.run import Handled, LineHit, Run
from crashdoc.diagnosis.unitrecord import UnitRecord
from crashdoc.diagnosis.views import EngineEvent
from crashdoc.events import (
    Diagnosis,
    ExceptionInfo,
    Fix,
    FixTarget,
    FlagChange,
    Frame,
    GpuEvent,
    GpuInfo,
    GpuMap,
    LaunchFacts,
    Lifecycle,
    LogLine,
    Marker,
    Match,
    RootCause,
    Thresholds,
    Traceback,
    UnitState,
)
from crashdoc.matching.derived import DerivedMatch, DerivedSignature

SCHEMA_NAME = "crashdoc-engine"
VERSION = 2


@dataclass(slots=True)
class EngineState:
    """What a snapshot holds: the units, the tracebacks being assembled, counters and the outbox."""

    units: dict[str, UnitRecord]
    pending: Any  # TracebackAssembler.export()
    synthetic: int = 0
    seq: int = 0
    now: float = 0.0
    events: list[EngineEvent] = dataclasses.field(default_factory=list)
    gpus: GpuRecord = dataclasses.field(default_factory=GpuRecord)  # the kernel's GPU faults (an older state: none)


@dataclass(frozen=True, slots=True)
class Record:
    """One saved record: its name in the file, the class it is rebuilt as, the fields saved (named as in the
    file) and where a file name differs from the attribute."""

    name: str
    cls: type
    fields: tuple[str, ...]
    attributes: dict[str, str] = dataclasses.field(default_factory=dict)  # name in the file -> attribute
    left_out: tuple[str, ...] = ()  # attributes deliberately not saved (rebuilt on restore)

    def attribute(self, name: str) -> str:
        return self.attributes.get(name, name)


def _record(name: str, cls: type, fields: str, left_out: str = "", **attributes: str) -> Record:
    return Record(name, cls, tuple(fields.split()), attributes, tuple(left_out.split()))


# The schema of version 2. Field names are the file's; `sglang_version=` says which attribute a file name holds.
# The GPU records (`gpus` of the engine, `hardware` of a crash, `environment` of a unit state) came later within
# version 2: a file without them loads with their defaults (no GPU fault seen), so they need no migration.
SCHEMA: tuple[Record, ...] = (
    _record("engine", EngineState, "units pending synthetic seq now events gpus"),
    _record(
        "unit",
        UnitRecord,
        "name role loop runs current restarts_total n_restarts state crashes_by_signature crashes_total "
        "last_crash_at diagnosis last_diagnosis last_good file_changes line_failures warnings_by_kind pending_end "
        "sglang stop_seen_at launches",
        left_out="late unjudged",  # verdicts due: taken before every snapshot
    ),
    _record(
        "run",
        Run,
        "unit id started_at ended_at first_line_at last_line_at lines tracebacks tracebacks_dropped line_hits "
        "markers ready_at sglang server_flags cmdline exit_code exit_status result oom_killed core_dumped "
        "n_restarts start_limit_hit deactivated oom_message good flags ended_by_input handled handled_total "
        "open_tracebacks worded tore_down sglang_release sglang_release_from logged_release serving_seq last_batch "
        "loose lone",
    ),
    _record("line_hit", LineHit, "match line seq"),
    _record("handled", Handled, "traceback reason how count kind kept fingerprint processes request"),
    _record(
        "loop",
        LoopTracker,
        "unit state crashes startup_streak loop_started_at loop_crashes loop_crash_count recovered_at last_crash_at",
        left_out="thresholds",  # the configuration's, set again on restore
    ),
    _record("crash", Crash, "invocation at before_ready finding exit lifetime hardware"),
    _record(
        "finding",
        Finding,
        "kind fingerprint type message line match traceback category_guess evidence timestamp processes derived",
    ),
    _record("event", EngineEvent, "kind unit at diagnosis"),
    _record(
        "diagnosis",
        Diagnosis,
        "unit signature title category severity root_cause flags fix fingerprint evidence restarts invocation "
        "captures confidence crashes exit timestamp config_change derived subsystem kind handled sglang_version "
        "sglang_version_from version_note target",
        sglang_version="sglang_release",
        sglang_version_from="sglang_release_from",
    ),
    _record("root_cause", RootCause, "type message line"),
    _record("fix", Fix, "summary changes command diff apply rollback warnings why verified"),
    _record("flag_change", FlagChange, "action flag value new_flag placeholder"),
    _record(
        "fix_target",
        FixTarget,
        "cmdline exec_start drop_in_paths numa_policy numa_mask cpu_affinity safety kv_cache",
    ),
    _record("launch", LaunchFacts, "unit cmdline flags sglang_release sglang_release_from"),
    _record(
        "traceback",
        Traceback,
        "unit pid chain timestamp invocation wrapper rank header text truncated seq logged_with",
    ),
    _record("exception", ExceptionInfo, "type message frames line"),
    _record("frame", Frame, "file line function code"),
    _record("marker", Marker, "unit pid kind text timestamp invocation seq rank"),
    _record("match", Match, "signature_id captures line score"),
    _record("log_line", LogLine, "unit pid text timestamp invocation cmdline"),
    _record(
        "unit_state",
        UnitState,
        "unit active_state sub_state result n_restarts exec_main_status exec_main_code invocation exec_start "
        "fragment_path drop_in_paths environment_files numa_policy numa_mask cpu_affinity loaded "
        "active_enter_timestamp timestamp environment",
    ),
    _record("derived_match", DerivedMatch, "signature captures in_release known"),
    _record(
        "derived_signature",
        DerivedSignature,
        "id exception_type template pattern flags env condition fix summary sites releases kind",
    ),
    _record(
        "pending_traceback",
        _Pending,
        "unit pid invocation timestamp wrapper rank header chain frames frames_dropped exc_type exc_line message "
        "phase blank_lines text text_chars truncated last_seen seq logged_with fatal threads in_current",
    ),
    _record("file_change", FileChange, "path at"),
    _record(
        "gpu_record",
        GpuRecord,
        "host visible visible_from learned events xids",
        left_out="dirty kept pruned_at",  # made again from the events (dirty: units to refresh, judged first)
    ),
    _record(
        "gpu_event",
        GpuEvent,
        "kind timestamp bus_id code pid process detail severity recovery uuid uptime text",
    ),
    _record("gpu_map", GpuMap, "gpus problems"),
    _record("gpu_info", GpuInfo, "index bus_id uuid minor model"),
)
ENUMS: dict[str, type[Enum]] = {"loop_state": LoopState}


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 (crashdoc up to main 74b936a) saved the in-memory classes field by field, tagged with their
    class names, and the engine's state as a plain dict. Its tags become the schema's record names, its field
    names are version 2's but for a unit's `invocations`, now `runs` (an invocation is systemd's ID of a run),
    and the dict becomes an `engine` record; what version 2 does not save (a loop's thresholds, an event's
    transition) is dropped on load. Its diagnoses carry the fix as the engine then applied it to
    the unit's command: without a `target` they are final, and the remedy stage hands them on as they are."""
    names = {
        "UnitRecord": "unit",
        "Run": "run",
        "LineHit": "line_hit",
        "Handled": "handled",
        "LoopTracker": "loop",
        "Crash": "crash",
        "Finding": "finding",
        "EngineEvent": "event",
        "Diagnosis": "diagnosis",
        "RootCause": "root_cause",
        "Fix": "fix",
        "FlagChange": "flag_change",
        "Traceback": "traceback",
        "ExceptionInfo": "exception",
        "Frame": "frame",
        "Marker": "marker",
        "Match": "match",
        "LogLine": "log_line",
        "UnitState": "unit_state",
        "DerivedMatch": "derived_match",
        "DerivedSignature": "derived_signature",
        "_Pending": "pending_traceback",
        "FileChange": "file_change",
    }
    enums = {"LoopState": "loop_state"}

    def walk(value: Any) -> Any:
        if isinstance(value, list):
            return [walk(v) for v in value]
        if not isinstance(value, dict):
            return value
        out = {k: walk(v) for k, v in value.items()}
        if "__type__" in out:
            out["__type__"] = names.get(str(out["__type__"]), f"v1:{out['__type__']}")  # v1:X: none of ours
            if out["__type__"] == "unit" and "invocations" in out:
                out["runs"] = out.pop("invocations")
        if "__enum__" in out:
            out["__enum__"] = enums.get(str(out["__enum__"]), f"v1:{out['__enum__']}")
        return out

    top = walk(data)
    if not isinstance(top, dict) or not isinstance(top.get("__dict__"), dict):
        raise SnapshotError("damaged snapshot: version 1 data is not a mapping")
    return {"__type__": "engine", **top["__dict__"]}


# version N -> N+1, applied in order to the "data" of an older snapshot
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


class SnapshotError(ValueError):
    """The snapshot cannot be used (damaged, foreign, or from a newer schema)."""


class Codec:
    """Saved records and containers <-> JSON values, by `SCHEMA`."""

    def __init__(self, schema: tuple[Record, ...] = SCHEMA, enums: dict[str, type[Enum]] = ENUMS) -> None:
        self.by_name: dict[str, Record] = {r.name: r for r in schema}
        self.by_class: dict[type, Record] = {r.cls: r for r in schema}
        self.enums = enums
        self.enum_names: dict[type[Enum], str] = {cls: name for name, cls in enums.items()}

    def encode(self, value: Any) -> Any:
        if isinstance(value, Enum):  # before str: the loop states are StrEnums
            name = self.enum_names.get(type(value))
            if name is None:
                raise SnapshotError(f"{type(value).__name__} is not part of a snapshot")
            return {"__enum__": name, "value": value.value}
        if value is None or isinstance(value, bool | int | float | str):
            return value
        record = self.by_class.get(type(value))
        if record is not None:
            out: dict[str, Any] = {"__type__": record.name}
            for name in record.fields:
                out[name] = self.encode(getattr(value, record.attribute(name)))
            return out
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            raise SnapshotError(f"{type(value).__module__}.{type(value).__name__} is not part of a snapshot")
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
        record = self.by_name.get(name)
        if record is None:
            raise SnapshotError(f"{name} is not part of a crashdoc snapshot")
        kwargs = {record.attribute(k): self.decode(v) for k, v in value.items() if k in record.fields}
        return build(record.cls, kwargs)


_CODEC = Codec()


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


def dump(state: EngineState) -> dict[str, Any]:
    return {"schema": SCHEMA_NAME, "version": VERSION, "data": _CODEC.encode(state)}


def load(doc: Any) -> EngineState:
    """The state a `dump` made, migrated to this version; SnapshotError when it cannot be used."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA_NAME:
        raise SnapshotError("not a crashdoc engine snapshot")
    version = doc.get("version")
    if not isinstance(version, int) or version < 1:
        raise SnapshotError(f"unknown snapshot version {version!r}")
    if version > VERSION:
        raise SnapshotError(f"snapshot version {version} is newer than this crashdoc reads ({VERSION})")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise SnapshotError("the snapshot holds no data")
    try:
        for step in range(version, VERSION):
            data = MIGRATIONS[step](data)
        state = _CODEC.decode(data)
    except (KeyError, TypeError, ValueError, RecursionError) as exc:
        if isinstance(exc, SnapshotError):
            raise
        raise SnapshotError(f"damaged snapshot: {type(exc).__name__}: {exc}") from exc
    return checked(state)


def checked(state: Any) -> EngineState:
    """The state, if it has the shape the engine needs (a damaged or foreign file may not)."""
    if isinstance(state, dict):  # 0.1.0's pickle held a plain dict
        try:
            state = EngineState(
                dict(state["units"]),
                state["pending"],
                int(state["synthetic"]),
                int(state.get("seq", 0)),
                float(state["now"]),
                list(state.get("events", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotError(f"damaged snapshot: {exc}") from exc
    if not isinstance(state, EngineState):
        raise SnapshotError("the snapshot holds no engine state")
    if not isinstance(state.gpus, GpuRecord) or not all(isinstance(e, GpuEvent) for e in state.gpus.events):
        raise SnapshotError("damaged snapshot: the GPU faults are not GPU records")
    if not isinstance(state.units, dict) or not all(isinstance(r, UnitRecord) for r in state.units.values()):
        raise SnapshotError("damaged snapshot: units are not unit records")
    if not all(isinstance(e, EngineEvent) for e in state.events):
        raise SnapshotError("damaged snapshot: events are not engine events")
    return state


# --- crashdoc 0.1.0's pickle ------------------------------------------------------------------

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
