"""The daemon's state saves (`runtime.saving.StateSaver`): written on a thread of their own, the ones the ordering
needs (before effects, the last one) on disk when `save` returns, the newest state written when several wait."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from crashdoc.outputs.metrics import Health
from crashdoc.runtime import saving
from crashdoc.runtime.saving import StateSaver
from crashdoc.sources.cursor import STATE_FILE, CursorStore, Payload


def _on_disk(folder: Path) -> tuple[str, dict]:
    doc = json.loads((folder / STATE_FILE).read_text())
    return doc["cursor"], doc["engine"]


def _saver(folder: Path, said: list[str] | None = None) -> StateSaver:
    return StateSaver(CursorStore(folder), Health(), say=(said if said is not None else []).append)


def test_a_save_that_waits_is_on_disk_when_it_returns(tmp_path: Path) -> None:
    saver = _saver(tmp_path)
    saver.dirty = True
    saver.save("s=1;i=1", lambda: {"n": 1}, force=True)
    assert _on_disk(tmp_path) == ("s=1;i=1", {"n": 1})
    assert saver.store.last_saved == "s=1;i=1" and not saver.dirty


def test_a_save_that_does_not_wait_is_written_before_the_next_one_that_waits(tmp_path: Path) -> None:
    saver = _saver(tmp_path)
    saver.dirty = True
    saver.save("s=1;i=1", lambda: {"n": 1}, force=True, wait=False)
    saver.save("s=1;i=1", lambda: {"n": 2}, force=True)  # not dirty: nothing new to save, but it waits
    assert _on_disk(tmp_path) == ("s=1;i=1", {"n": 1})
    saver.dirty = True
    saver.save("s=1;i=2", lambda: {"n": 2}, wait=False)  # within SAVE_INTERVAL and not forced: not saved
    saver.save("s=1;i=2", lambda: {"n": 3}, force=True)
    assert _on_disk(tmp_path) == ("s=1;i=2", {"n": 3})


def test_states_waiting_behind_a_slow_write_are_replaced_by_the_newest(tmp_path: Path) -> None:
    saver = _saver(tmp_path)
    written: list[str] = []
    writing, release = threading.Event(), threading.Event()
    write = saver.store.write

    def slow(cursor: str | None, payload: Payload) -> bool:
        writing.set()
        release.wait(10)
        written.append(json.loads("".join(payload))["cursor"])
        return write(cursor, payload)

    saver.store.write = slow  # type: ignore[method-assign]
    for i in range(1, 5):
        saver.dirty = True
        saver.save(f"s=1;i={i}", lambda i=i: {"n": i}, force=True, wait=False)  # type: ignore[misc]
        if i == 1:  # the writer is busy with the first (on a loaded host it may start late): the rest wait
            assert writing.wait(10)
    release.set()
    saver.save("s=1;i=4", dict, force=True)
    assert written == ["s=1;i=1", "s=1;i=4"], written
    assert _on_disk(tmp_path) == ("s=1;i=4", {"n": 4})


def test_a_folder_that_cannot_take_the_state_is_said_once_and_the_state_stays_to_save(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    said: list[str] = []
    saver = _saver(blocker / "state", said)
    for i in range(2):
        saver.dirty = True
        saver.save(f"s=1;i={i}", dict, force=True, wait=False)
        saver.save(f"s=1;i={i}", dict)
    assert saver.health.state_writable is False and saver.health.state_write_errors == 2
    assert saver.dirty  # saved again at the next chance
    assert len(said) == 1 and "cannot save state in" in said[0] and "diagnosing in memory only" in said[0]


def test_a_costly_snapshot_is_taken_less_often_unless_forced(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    clock = [1000.0]
    monkeypatch.setattr(saving.time, "monotonic", lambda: clock[0])
    taken: list[float] = []

    def costly() -> dict:  # a state of megabytes: 0.2 s of the reading thread's time
        taken.append(clock[0])
        clock[0] += 0.2
        return {"n": len(taken)}

    saver = _saver(tmp_path)
    for step in (0.0, 1.5, 2.5, 1.0):  # 1.5 s and 4.0 s after a 0.2 s snapshot (next: 20 x 0.2 = 4 s later)
        clock[0] += step
        saver.dirty = True
        saver.save("s=1;i=1", costly)
    assert taken == [1000.0, 1004.2]
    saver.dirty = True
    saver.save("s=1;i=2", costly, force=True)  # before effects: always
    assert len(taken) == 3 and _on_disk(tmp_path) == ("s=1;i=2", {"n": 3})
