"""The state file's engine part as the daemon saves it (`diagnosis.engine.snapshot_text`): every record saved once,
only the units that changed since the last save encoded again, and always the same state a full snapshot gives."""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path
from typing import Any

import pytest

from crashdoc.commands.pipeline import build_engine
from crashdoc.diagnosis import snapshot
from crashdoc.diagnosis.crashloop import KEEP_TRACEBACKS
from crashdoc.diagnosis.engine import Engine, snapshot_parts, snapshot_text
from crashdoc.events import Lifecycle, LifecycleRecord, LogLine, Thresholds, UnitState
from crashdoc.matching.library import load_library
from crashdoc.matching.matcher import Matcher
from crashdoc.sources.cursor import CursorStore
from support.journal_files import DSV4, TRACEBACK

FIXTURES = Path(__file__).parent.parent / "fixtures"
HANDLED = [
    "[2026-05-01 12:00:10 TP0] load-publisher disabled: Traceback (most recent call last):",
    '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 10, in f',
    "    raise RuntimeError(x)",
    "RuntimeError: connection refused",
    "[2026-05-01 12:00:11 TP0] Decode batch. #running-req: 1, #token: 100",
]
READY = "[2026-05-01 12:00:09] The server is fired up and ready to roll!"


def new_engine() -> Engine:
    return build_engine(Matcher(load_library([FIXTURES / "signatures"])), thresholds=Thresholds(recovery=10))


class Units:
    """Units fed the way the daemon feeds them, each with its own runs, on one clock."""

    def __init__(self, engine: Engine) -> None:
        self.e, self.t, self.runs = engine, 1_800_000_000.0, {}

    def inv(self, unit: str) -> str:
        return f"{zlib.crc32(unit.encode()):08x}{self.runs.get(unit, 0):024x}"

    def start(self, unit: str) -> None:
        self.runs[unit] = self.runs.get(unit, 0) + 1
        self.e.on_lifecycle(LifecycleRecord(unit, Lifecycle.STARTED, self.t, invocation=self.inv(unit)))

    def lines(self, unit: str, texts: list[str]) -> None:
        for text in texts:
            self.e.on_line(LogLine(unit, 100 + self.runs.get(unit, 0), text, self.t, self.inv(unit)))

    def crash(self, unit: str, restart: bool = True) -> None:
        self.t += 0.2
        inv = self.inv(unit)
        self.e.on_lifecycle(
            LifecycleRecord(unit, Lifecycle.EXITED, self.t, inv, exit_code="killed", exit_status="KILL")
        )
        self.e.on_lifecycle(LifecycleRecord(unit, Lifecycle.FAILED, self.t, inv, result="signal"))
        if restart:
            self.t += 1
            n = self.runs.get(unit, 0)
            self.e.on_lifecycle(LifecycleRecord(unit, Lifecycle.RESTART_SCHEDULED, self.t, inv, n_restarts=n))

    def tick(self, seconds: float) -> None:
        self.t += seconds
        self.e.tick(self.t)

    def looping(self, unit: str, crashes: int) -> None:
        for _ in range(crashes):
            self.start(unit)
            self.lines(unit, TRACEBACK)
            self.crash(unit)
            self.tick(0.5)


def saved(text: str) -> dict[str, Any]:
    doc = json.loads(text)
    assert doc["schema"] == "crashdoc-engine" and doc["version"] == snapshot.VERSION
    return doc


def records(value: Any, name: str) -> list[dict[str, Any]]:
    """The saved records of one kind anywhere in `value` (references not followed)."""
    if isinstance(value, list):
        return [r for v in value for r in records(v, name)]
    if not isinstance(value, dict):
        return []
    found = [value] if value.get("__type__") == name else []
    return found + [r for v in value.values() for r in records(v, name)]


@pytest.mark.parametrize("seed", range(6))
def test_the_saved_text_is_always_the_full_snapshot_whatever_changed_between_saves(seed: int) -> None:
    """Crashes, loops, recoveries, handled tracebacks, half-read tracebacks, D-Bus states, file changes and time
    passing, on several units in any order: each save (kept units' text reused) says what a full snapshot says,
    and restored, the engine shows the same."""
    rng = random.Random(seed)
    e = new_engine()
    host = Units(e)
    names = [f"sglang-{n}.service" for n in ("prefill", "decode", "router", "worker")]
    for step in range(160):
        unit = rng.choice(names)
        what = rng.randrange(9)
        if what == 0:
            host.start(unit)
        elif what == 1:
            host.lines(unit, TRACEBACK[: rng.randrange(1, len(TRACEBACK) + 1)])
        elif what == 2:
            host.crash(unit, restart=rng.random() < 0.8)
        elif what == 3:
            host.lines(unit, [READY])
        elif what == 4:
            host.lines(unit, HANDLED)
        elif what == 5:
            host.tick(rng.choice([0.3, 1.5, 4.0, 12.0]))
        elif what == 6:
            active = rng.choice(["active", "activating", "inactive"])
            e.on_unit_state(UnitState(unit, active_state=active, invocation=host.inv(unit), timestamp=host.t))
        elif what == 7:
            e.on_file_changed(unit, "/opt/sglang/launch.sh", host.t)
        else:
            e.events()
        if rng.random() < 0.3:
            text = snapshot_text(e)
            assert saved(text)["data"] == e.snapshot()["data"], f"seed {seed}, step {step}"
    text = snapshot_text(e)
    assert saved(text)["data"] == e.snapshot()["data"]
    again = new_engine()
    again.restore(json.loads(text))
    assert again.units() == e.units()
    assert [(d.unit, d.signature, d.crashes) for d in again.diagnoses()] == [
        (d.unit, d.signature, d.crashes) for d in e.diagnoses()
    ]


def test_each_crash_and_traceback_is_saved_once_and_restored_as_one_object() -> None:
    """A loop's crashes are the unit's latest (saved as how many), a finding's traceback and the current run are
    the run's own (saved as references): restored, they are again the same objects, so the loop goes on as one."""
    e = new_engine()
    host = Units(e)
    host.looping("sglang-prefill.service", 8)
    host.start("sglang-prefill.service")
    host.lines("sglang-prefill.service", TRACEBACK[:3])  # a run in progress, its traceback half read
    text = snapshot_text(e)
    unit = saved(text)["data"]["units"]["__dict__"]["sglang-prefill.service"]
    assert unit["loop"]["loop_crashes"] == 8 and len(unit["loop"]["crashes"]["__deque__"]) == 8
    tracebacks = records(unit, "traceback")
    assert len(tracebacks) == 8 and all(DSV4 in tb["text"] for tb in tracebacks)
    assert len({tb["invocation"] for tb in tracebacks}) == 8, "each run's traceback saved once"
    kept = [c["finding"]["traceback"] for c in unit["loop"]["crashes"]["__deque__"][-KEEP_TRACEBACKS:]]
    assert all(list(tb) == ["__ref__"] for tb in kept), "the findings' tracebacks are their runs'"
    assert list(unit["current"]) == ["__ref__"]

    again = new_engine()
    again.restore(json.loads(text))
    clock = host.t
    for resumed in (e, again):
        host.e, host.t = resumed, clock
        host.lines("sglang-prefill.service", TRACEBACK[3:])
        host.crash("sglang-prefill.service")
        host.tick(2)
        [d] = resumed.diagnoses(["sglang-prefill.service"])
        assert d.crashes == 9 and d.signature == "dsv4-hicache-size-unsupported"
    assert saved(snapshot_text(again))["data"] == saved(snapshot_text(e))["data"]


def test_a_save_while_twenty_units_loop_encodes_only_the_units_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    e = new_engine()
    host = Units(e)
    names = [f"sglang-{n:02d}.service" for n in range(20)]
    for name in names:
        host.looping(name, 4)
    first = snapshot_text(e)
    encoded: list[str] = []
    codec = snapshot._CODEC
    plain = codec.encode

    def counting(value: Any, memo: Any = None) -> Any:
        if type(value).__name__ == "UnitRecord":
            encoded.append(value.name)
        return plain(value, memo)

    monkeypatch.setattr(codec, "encode", counting)
    assert snapshot_text(e) == first and encoded == [], "nothing changed: nothing encoded again"
    host.looping(names[3], 1)
    text = snapshot_text(e)
    assert encoded == [names[3]]
    assert saved(text)["data"] == e.snapshot()["data"]
    e.forget_loops()
    encoded.clear()
    snapshot_text(e)
    assert sorted(encoded) == names, "a change to every unit encodes every unit"


def test_the_state_file_holds_the_saved_text_as_it_is(tmp_path: Path) -> None:
    e = new_engine()
    Units(e).looping("sglang-prefill.service", 3)
    store = CursorStore(tmp_path)
    assert store.save("s=1;i=2", engine=snapshot_text(e))
    loaded = store.load()
    assert loaded.cursor == "s=1;i=2" and loaded.engine == e.snapshot()


def test_a_save_hands_the_writer_the_kept_unit_texts_not_a_joined_copy(tmp_path: Path) -> None:
    """The daemon's saves (`snapshot_parts`): the pieces make the text `snapshot_text` makes, each unit's piece the
    very compressed text the engine keeps for it (a joined copy and its bytes were 1.6 MB more at each save of a
    2M-entry catch-up's state, the kept texts 0.75 MB), and the file written from them piece by piece (pieces
    longer than one write too) is the state."""
    e = new_engine()
    host = Units(e)
    host.looping("sglang-prefill.service", 3)
    host.looping("sglang-décode.service", 2)
    parts = snapshot_parts(e)
    joined = "".join(p if isinstance(p, str) else zlib.decompress(p).decode() for p in parts)
    assert joined == snapshot_text(e) and json.loads(joined)["data"] == e.snapshot()["data"]
    kept = e._saved._units if e._saved is not None else {}
    assert sorted(kept) == ["sglang-décode.service", "sglang-prefill.service"]
    assert all(any(piece is text for piece in parts) for text in kept.values()), "a unit's text is not copied"
    assert sum(map(len, kept.values())) * 4 < len(joined), "kept compressed"
    store = CursorStore(tmp_path)
    payload = store.encode("s=1;i=2", engine=snapshot_parts(e))
    assert all(any(piece is text for piece in payload) for text in kept.values())
    assert store.write("s=1;i=2", payload)
    loaded = store.load()
    assert loaded.cursor == "s=1;i=2" and loaded.engine == e.snapshot()
    text = "é" * 100_000 + "ü"  # packed and written a block at a time, cut inside no character
    assert zlib.decompress(snapshot._packed(text)).decode() == text
    long = ("{", text, zlib.compress(text.encode(), 1), "}")
    assert store.write("s=1;i=3", long)
    assert (tmp_path / "state.json").read_bytes() == ("{" + text + text + "}").encode()


def test_a_reference_to_nothing_saved_before_it_is_a_damaged_snapshot() -> None:
    e = new_engine()
    Units(e).looping("sglang-prefill.service", 3)
    doc = json.loads(snapshot_text(e))
    unit = doc["data"]["units"]["__dict__"]["sglang-prefill.service"]
    unit["current"] = {"__ref__": 999}
    with pytest.raises(snapshot.SnapshotError, match="reference to no record"):
        new_engine().restore(doc)
    unit["current"] = None
    unit["loop"]["loop_crashes"] = 50
    with pytest.raises(snapshot.SnapshotError, match="loop_crashes is not a count"):
        new_engine().restore(doc)
