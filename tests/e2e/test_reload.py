"""Hot reload of the signature library: good edits take effect, broken ones never do."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from crashdoc.events import ExceptionInfo, Traceback
from crashdoc.matching.reload import LibraryHolder, LibraryWatcher
from support.e2e import start_crashdoc, wait_for
from support.signature_texts import EXTRA

FIXTURES = Path(__file__).parent.parent / "fixtures" / "signatures"


def library_copy(tmp: Path) -> Path:
    folder = tmp / "sigs"
    shutil.copytree(FIXTURES, folder)
    return folder


def matches(holder: LibraryHolder, type_: str, message: str) -> list[str]:
    tb = Traceback("u", 1, (ExceptionInfo(type_, message, (), f"{type_}: {message}"),))
    return [m.signature_id for m in holder.matcher.match_traceback(tb)]


class Log(list):
    def __call__(self, message: str) -> None:
        self.append(message)


def test_good_edit_broken_edit_and_deleted_file(tmp_path: Path) -> None:
    folder = library_copy(tmp_path)
    log = Log()
    holder = LibraryHolder([folder], log=log)
    before = len(holder.library)

    (folder / "extra.yaml").write_text(EXTRA)
    assert holder.reload() and len(holder.library) == before + 1
    assert matches(holder, "KeyError", "'glm_moe_dsa'") == ["test-extra-error"]

    (folder / "extra.yaml").write_text(EXTRA.replace("message: 'glm_moe_dsa'", "message: '(?=lookahead)'"))
    assert not holder.reload()
    assert holder.errors == 1 and f"{folder / 'extra.yaml'}:6: match.message: bad RE2 pattern" in log[-1]
    assert matches(holder, "KeyError", "'glm_moe_dsa'") == ["test-extra-error"], "the last good library stays"

    (folder / "extra.yaml").write_text("signatures:\n  - id: [unclosed\n")
    assert not holder.reload() and holder.errors == 2 and "invalid YAML" in log[-1]

    (folder / "extra.yaml").unlink()
    assert holder.reload() and len(holder.library) == before
    assert matches(holder, "KeyError", "'glm_moe_dsa'") == []


def test_a_reload_reads_again_only_the_files_that_changed(tmp_path: Path) -> None:
    """Validating the whole library is most of a load: after one edit, the unchanged files' signatures are
    reused as they are and only the edited file is parsed and validated again."""
    folder = library_copy(tmp_path)
    (folder / "extra.yaml").write_text(EXTRA)
    holder = LibraryHolder([folder], log=Log())
    before = {s.id: s for s in holder.library.signatures}
    (folder / "extra.yaml").write_text(EXTRA.replace("upgrade transformers", "upgrade transformers to 4.57"))
    assert holder.reload()
    after = {s.id: s for s in holder.library.signatures}
    assert after.keys() == before.keys()
    assert all(after[i] is before[i] for i in after if i != "test-extra-error"), "unchanged files are reused"
    assert after["test-extra-error"] is not before["test-extra-error"]
    assert after["test-extra-error"].fix_summary == "upgrade transformers to 4.57"
    # a broken edit is never cached: putting the good text back loads it again
    (folder / "extra.yaml").write_text("signatures:\n  - id: [unclosed\n")
    assert not holder.reload()
    (folder / "extra.yaml").write_text(EXTRA)
    assert holder.reload() and holder.library.get("test-extra-error").fix_summary == "upgrade transformers"


def test_a_burst_of_edits_settles_into_one_reload(tmp_path: Path) -> None:
    folder = library_copy(tmp_path)
    holder = LibraryHolder([folder], log=Log())
    calls: list[float] = []
    watcher = LibraryWatcher([folder], lambda: (calls.append(time.monotonic()), holder.reload()), settle=0.3)
    watcher.start()
    try:
        for i in range(30):  # an editor saving repeatedly, or a git checkout
            (folder / "extra.yaml").write_text(EXTRA.replace("test-extra-error", f"test-extra-error-{i}"))
            time.sleep(0.01)
        deadline = time.monotonic() + 10
        while not calls and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.6)
    finally:
        watcher.stop()
    assert 1 <= len(calls) <= 3, f"{len(calls)} reloads for one burst"
    assert holder.library.get("test-extra-error-29") is not None


@pytest.mark.sandbox
def test_the_daemon_reloads_live_and_keeps_the_last_good_library(sandbox_factory, sandbox_workdir) -> None:
    folder = sandbox_workdir / "sigs"
    shutil.copytree(FIXTURES, folder)
    sandbox = sandbox_factory({}, workdir=sandbox_workdir)
    cd = start_crashdoc(sandbox, config=f"signatures: {{builtin: false, folders: [{folder}]}}\n")
    try:
        loaded = cd.metric("crashdoc_signatures_loaded")
        (folder / "extra.yaml").write_text(EXTRA)
        wait_for(lambda: cd.metric("crashdoc_signatures_loaded") == loaded + 1, 20, "the good edit", cd)
        (folder / "extra.yaml").write_text(EXTRA.replace("severity: critical", "severity: catastrophic"))
        wait_for(lambda: cd.metric("crashdoc_signature_reload_errors_total") == 1.0, 20, "the rejection", cd)
        assert cd.metric("crashdoc_signatures_loaded") == loaded + 1
        assert f"{folder / 'extra.yaml'}:5: signatures.0.severity: 'catastrophic' is not one of" in cd.log()
        status, page = cd.get("/runbook/test-extra-error")
        assert status == 200 and b"An error added by a live edit" in page, "the previous library is still active"
        (folder / "extra.yaml").unlink()
        wait_for(lambda: cd.metric("crashdoc_signatures_loaded") == loaded, 20, "the deletion", cd)
    finally:
        cd.stop()
