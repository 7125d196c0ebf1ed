"""The daemon's library reload runs on a thread of its own: its reading thread does not wait while edited files are
checked against the schema (in a child), and an edit made during a load is loaded by one more load after it."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from crashdoc.matching.reload import LibraryHolder
from support.signature_texts import EXTRA

FIXTURES = Path(__file__).parent.parent / "fixtures" / "signatures"


def test_a_reload_asked_while_one_runs_is_loaded_after_it_without_the_asker_waiting(tmp_path: Path) -> None:
    folder = tmp_path / "sigs"
    shutil.copytree(FIXTURES, folder)
    logged: list[str] = []
    holder = LibraryHolder([folder], log=logged.append, matching_only=True, validate_apart=True)
    before = len(holder.library)
    loading, go_on = threading.Event(), threading.Event()
    loads: list[int] = []
    real = holder.reload

    def held_reload() -> bool:  # the first load waits until the test lets it go on
        loading.set()
        if not loads:
            go_on.wait(30)
        changed = real()
        loads.append(len(holder.library))
        return changed

    holder.reload = held_reload  # type: ignore[method-assign]
    done: list[int] = []
    holder.reload_apart(lambda: done.append(1))
    assert loading.wait(30)
    asked = time.monotonic()
    (folder / "extra.yaml").write_text(EXTRA)  # an edit while the first load runs
    holder.reload_apart(lambda: done.append(2))
    assert time.monotonic() - asked < 1.0, "the asker waited for the load"
    assert loads == [] and done == []
    go_on.set()
    deadline = time.monotonic() + 60
    while len(done) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert done == [1, 2], "one more load after the one running, each followed by its asker's call"
    assert loads[-1] == before + 1 and len(holder.library) == before + 1
    assert holder.reloads == 2 and holder.errors == 0
    assert f"signature library reloaded: {before + 1} signatures (was {before})" in "\n".join(logged)
    deadline = time.monotonic() + 10
    while any(t.name == "crashdoc-library" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(t.name == "crashdoc-library" for t in threading.enumerate()), "the loader thread ends"
