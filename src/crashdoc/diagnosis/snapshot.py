"""The engine's saved state: versioned JSON with a schema of its own, not the in-memory classes.

A snapshot is `{"schema": "crashdoc-engine", "version": N, "data": ...}`. Each saved record is written as
`{"__type__": NAME, FIELD: value, ...}` with the names `SCHEMA` gives it, not its class's: renaming a class or
an attribute changes the table, not the file, and a field added to a class is saved only once the schema
lists it (tests/unit/test_state.py fails until each field is listed or said to be left out). Records are
rebuilt only from the classes the schema names: a state file someone else wrote can fail to load, but cannot
make crashdoc run code. A field the file lacks gets its class's default, a field the schema does not know is
dropped, so an upgrade (or a downgrade) keeps counters, loops and the tracebacks in progress. A change that
defaults cannot express gets a migration in `MIGRATIONS` (version N -> N+1).

Each object is saved once per unit: a run or traceback a unit's records hold again (its current run, the traceback
of a crash's finding) is `{"__ref__": N}`, the Nth such record saved before it in that unit, and a loop's crashes
are how many of the unit's latest crashes it holds. `SavedText` keeps each unit's JSON text (compressed) and encodes
again only the units the engine changed since (crashdoc 0.1.0's pickle: `snapshot_pickle`).
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from crashdoc.assembly.traceback import _Pending
from crashdoc.diagnosis.configchange import FileChange
from crashdoc.diagnosis.crashloop import LoopState, LoopTracker
from crashdoc.diagnosis.failures import Crash, Handled, LineHit
from crashdoc.diagnosis.gpustate import GpuRecord
from crashdoc.diagnosis.rootcause import Finding
from crashdoc.diagnosis.run import Run
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
    LogLine,
    Marker,
    Match,
    RootCause,
    Traceback,
    UnitState,
)
from crashdoc.matching.derived import DerivedMatch, DerivedSignature

SCHEMA_NAME = "crashdoc-engine"
VERSION = 3


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
    shared: bool = False  # held more than once in a unit's records: saved once, then as {"__ref__": N}
    tails: dict[str, str] = dataclasses.field(default_factory=dict)  # a deque saved as the count of another's last

    def attribute(self, name: str) -> str:
        return self.attributes.get(name, name)


def _record(
    name: str,
    cls: type,
    fields: str,
    left_out: str = "",
    shared: bool = False,
    tails: dict[str, str] | None = None,
    **attributes: str,
) -> Record:
    return Record(name, cls, tuple(fields.split()), attributes, tuple(left_out.split()), shared, tails or {})


# The schema of version 3 (version 2 saved a loop's crashes and shared records again in full). Field names are
# the file's; `sglang_version=` says which attribute a file name holds.
# The GPU records (`gpus` of the engine, `hardware` of a crash, `environment` of a unit state) came later within
# version 2: a file without them loads with their defaults (no GPU fault seen), so they need no migration.
SCHEMA: tuple[Record, ...] = (
    _record("engine", EngineState, "units pending synthetic seq now events gpus"),
    _record(
        "unit",
        UnitRecord,
        "name role runs current loop restarts_total n_restarts state crashes_by_signature crashes_total "
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
        shared=True,
    ),
    _record("line_hit", LineHit, "match line seq"),
    _record("handled", Handled, "traceback reason how count kind kept fingerprint processes request"),
    _record(
        "loop",
        LoopTracker,
        "unit state crashes startup_streak loop_started_at loop_crashes loop_crash_count recovered_at last_crash_at",
        left_out="thresholds",  # the configuration's, set again on restore
        tails={"loop_crashes": "crashes"},  # the loop's are always the unit's latest crashes, the same objects
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
        shared=True,
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


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 (crashdoc up to main da78ce8) saved each loop's crashes twice, in `crashes` and again in
    `loop_crashes`; in the engine they are the same objects, the loop's the unit's latest (a loop begins with the
    latest crashes and every crash while it lasts goes to both). Version 3 saves how many of them the loop holds,
    and they are the same objects again once loaded. (Records a unit holds twice, saved in full twice by version
    2, load as two copies: version 3 writes them once at the next save.)"""
    units = data.get("units")
    for unit in units.get("__dict__", {}).values() if isinstance(units, dict) else ():
        loop = unit.get("loop") if isinstance(unit, dict) else None
        if not isinstance(loop, dict) or "loop_crashes" not in loop:
            continue
        held, crashes = loop["loop_crashes"], loop.get("crashes")
        if not isinstance(held, dict) or not isinstance(held.get("__deque__"), list):
            raise SnapshotError("damaged snapshot: a loop's crashes are not a list")
        latest = crashes.get("__deque__", []) if isinstance(crashes, dict) else []
        loop["loop_crashes"] = min(len(held["__deque__"]), len(latest))
    return data


# version N -> N+1, applied in order to the "data" of an older snapshot
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2, 2: _v2_to_v3}


class SnapshotError(ValueError):
    """The snapshot cannot be used (damaged, foreign, or from a newer schema)."""


_PLAIN = frozenset({str, int, float, bool, type(None)})


class Codec:
    """Saved records and containers <-> JSON values, by `SCHEMA`."""

    def __init__(self, schema: tuple[Record, ...] = SCHEMA, enums: dict[str, type[Enum]] = ENUMS) -> None:
        self.by_name: dict[str, Record] = {r.name: r for r in schema}
        self.by_class: dict[type, Record] = {r.cls: r for r in schema}
        self.enums = enums
        self.enum_names: dict[type[Enum], str] = {cls: name for name, cls in enums.items()}

    def encode(self, value: Any, memo: dict[int, int] | None = None) -> Any:
        """`value` as JSON values; `memo`: the shared records of the unit being saved, by id, and their numbers."""
        if type(value) in _PLAIN:  # most values: before the checks their subclasses (StrEnum) need
            return value
        if isinstance(value, Enum):  # before str: the loop states are StrEnums
            name = self.enum_names.get(type(value))
            if name is None:
                raise SnapshotError(f"{type(value).__name__} is not part of a snapshot")
            return {"__enum__": name, "value": value.value}
        if value is None or isinstance(value, bool | int | float | str):
            return value
        record = self.by_class.get(type(value))
        if record is not None:
            if record.cls is UnitRecord:
                memo = {}  # what is saved once is saved once per unit
            elif record.shared and memo is not None and id(value) in memo:
                return {"__ref__": memo[id(value)]}
            out: dict[str, Any] = {"__type__": record.name}
            for name in record.fields:
                field = getattr(value, record.attribute(name))
                out[name] = len(field) if name in record.tails else self.encode(field, memo)
            if record.shared and memo is not None:  # numbered once saved, as `_record` numbers them once built
                memo[id(value)] = len(memo)
            return out
        if isinstance(value, Counter):
            return {"__counter__": [[self.encode(k, memo), v] for k, v in value.items()]}
        if isinstance(value, OrderedDict):
            return {"__odict__": [[self.encode(k, memo), self.encode(v, memo)] for k, v in value.items()]}
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value):
                return {"__dict__": {k: self.encode(v, memo) for k, v in value.items()}}
            return {"__pairs__": [[self.encode(k, memo), self.encode(v, memo)] for k, v in value.items()]}
        if isinstance(value, deque):
            return {"__deque__": [self.encode(v, memo) for v in value], "maxlen": value.maxlen}
        if isinstance(value, tuple):
            return {"__tuple__": [self.encode(v, memo) for v in value]}
        if isinstance(value, list):
            return [self.encode(v, memo) for v in value]
        if isinstance(value, frozenset | set):
            tag = "__frozenset__" if isinstance(value, frozenset) else "__set__"
            return {tag: [self.encode(v, memo) for v in value]}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            raise SnapshotError(f"{type(value).__module__}.{type(value).__name__} is not part of a snapshot")
        raise SnapshotError(f"cannot save a {type(value).__name__} in a snapshot")

    def decode(self, value: Any, memo: list[Any] | None = None) -> Any:
        """The records and containers `encode` saved; `memo`: the unit's shared records built so far, in order."""
        if isinstance(value, list):
            return [self.decode(v, memo) for v in value]
        if not isinstance(value, dict):
            return value
        if "__type__" in value:
            return self._record(value, memo)
        if "__ref__" in value:
            n = value["__ref__"]
            if memo is None or not isinstance(n, int) or not 0 <= n < len(memo):
                raise SnapshotError(f"damaged snapshot: a reference to no record saved before it ({n!r})")
            return memo[n]
        if "__enum__" in value:
            enum = self.enums.get(str(value["__enum__"]))
            if enum is None:
                raise SnapshotError(f"unknown enumeration {value['__enum__']!r}")
            return enum(value["value"])
        if "__dict__" in value:
            return {k: self.decode(v, memo) for k, v in value["__dict__"].items()}
        if "__pairs__" in value:
            return {self._key(k, memo): self.decode(v, memo) for k, v in value["__pairs__"]}
        if "__odict__" in value:
            return OrderedDict((self._key(k, memo), self.decode(v, memo)) for k, v in value["__odict__"])
        if "__counter__" in value:
            return Counter({self._key(k, memo): int(v) for k, v in value["__counter__"]})
        if "__deque__" in value:
            return deque((self.decode(v, memo) for v in value["__deque__"]), maxlen=value.get("maxlen"))
        if "__tuple__" in value:
            return tuple(self.decode(v, memo) for v in value["__tuple__"])
        if "__set__" in value:
            return {self._key(v, memo) for v in value["__set__"]}
        if "__frozenset__" in value:
            return frozenset(self._key(v, memo) for v in value["__frozenset__"])
        raise SnapshotError(f"unknown value in a snapshot: keys {sorted(value)[:5]}")

    def _key(self, value: Any, memo: list[Any] | None) -> Any:
        key = self.decode(value, memo)
        return tuple(key) if isinstance(key, list) else key

    def _record(self, value: dict[str, Any], memo: list[Any] | None) -> Any:
        name = str(value["__type__"])
        record = self.by_name.get(name)
        if record is None:
            raise SnapshotError(f"{name} is not part of a crashdoc snapshot")
        if record.cls is UnitRecord:
            memo = []
        kwargs = {
            record.attribute(k): self.decode(v, memo)
            for k, v in value.items()
            if k in record.fields and k not in record.tails
        }
        for name, of in record.tails.items():
            if name in value:
                held, items = value[name], kwargs.get(record.attribute(of))
                if not isinstance(held, int) or not isinstance(items, deque) or not 0 <= held <= len(items):
                    raise SnapshotError(f"damaged snapshot: {record.name}.{name} is not a count of its {of}")
                kwargs[record.attribute(name)] = deque(list(items)[len(items) - held :], maxlen=items.maxlen)
        obj = build(record.cls, kwargs)
        if record.shared and memo is not None:
            memo.append(obj)
        return obj


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


class SavedText:
    """`dump` as the state file's JSON text, made where the engine is current (the reading thread, under the
    daemon's lock): each unit's text is kept and made again only when the engine changed the unit since, so a save
    while twenty units loop encodes the one or two that crashed, not megabytes. A unit's text is kept compressed
    (zlib, level 1: ~2 ms and an eighth of the size for a unit of sixteen runs): a 2M-entry catch-up's kept texts
    were 0.75 MB of the daemon's heap, all the time. Pure: no I/O."""

    def __init__(self) -> None:
        self._units: dict[str, bytes] = {}

    def parts(self, state: EngineState, changed: set[str]) -> list[str | bytes]:
        """The JSON text of `dump(state)` in pieces, in order, not joined (`joined` joins them); `changed`: the units
        to encode again (the others have not changed since the last call), emptied. Each unit's piece is the
        compressed text kept for it (bytes: zlib of the UTF-8 text, `sources.cursor.Payload`), so the pieces cost
        the few bytes between them (a joined copy of a 2M-entry catch-up's state was 0.8 MB, and its encoded bytes
        0.8 MB more, at every save)."""
        kept, units = self._units, {}
        for name, rec in state.units.items():
            packed = kept.get(name)
            if packed is None or name in changed:
                packed = _packed(json.dumps(_CODEC.encode(rec), separators=(",", ":")))
            units[name] = packed
        self._units = units
        changed.clear()
        rest = _CODEC.encode(dataclasses.replace(state, units={}))
        del rest["__type__"], rest["units"]
        head = json.dumps({"schema": SCHEMA_NAME, "version": VERSION}, separators=(",", ":"))[:-1]
        out: list[str | bytes] = [f'{head},"data":{{"__type__":"engine","units":{{"__dict__":{{']
        for i, (name, packed) in enumerate(units.items()):
            out += [f"{',' if i else ''}{json.dumps(name)}:", packed]
        out.append(f"}}}},{json.dumps(rest, separators=(',', ':'))[1:]}}}")
        return out


def _packed(text: str, block: int = 1 << 16) -> bytes:
    """zlib (level 1) of the text's UTF-8, encoded a block at a time: no copy of a unit's text as bytes (0.4 MB of a
    2M-entry catch-up's state) beside the text at a save."""
    pack = zlib.compressobj(1)
    out = [pack.compress(text[at : at + block].encode()) for at in range(0, len(text), block)]
    out.append(pack.flush())
    return b"".join(out)


def joined(parts: list[str | bytes]) -> str:
    """`SavedText.parts` as one text (a compressed piece inflated)."""
    return "".join(p if isinstance(p, str) else zlib.decompress(p).decode() for p in parts)


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
