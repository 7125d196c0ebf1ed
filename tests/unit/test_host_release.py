"""The host's own SGLang release at run time: deriving an unshipped tree, its cache, broken trees, the version
note, and `explain --sglang-version / --sglang-source`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crashdoc.authoring.derive import DeriveError, derive_source
from crashdoc.authoring.hostrelease import CACHE_SCHEMA, HostReleases, cache_file, derive_in_child, tree_digest
from crashdoc.commands.pipeline import build_engine, explain_text, load_library_or_fail
from crashdoc.diagnosis.views import EngineEvent
from crashdoc.matching.derived import DerivedLibrary, load_shipped, release_range
from crashdoc.matching.matcher import Matcher
from crashdoc.outputs.alerts import alert_annotations
from crashdoc.outputs.journal_records import JournalRecorder
from support.engine_driver import Host
from support.journal_files import TRACEBACK, UNIT, line, needs_journal_remote, pid1, write_journal
from support.sglang_trees import VERSION_FILES, make_venv, set_release, unpack

CHECK_FILE = "sglang/srt/arg_groups/validation_hook.py"
# a real check of SGLang 0.5.23's validation_hook.py, as the launcher prints it
MESSAGE = "--sampling-mask-max-tokens must be positive (got 0)."
# a real check of SGLang 0.5.10-0.5.12.post1 (layers/attention/linear/gdn_backend.py), gone in later releases
OLD_MESSAGE = "CuTe DSL backend only supports decode, not prefill. Use --linear-attn-prefill-backend triton instead."
LIBRARY = load_library_or_fail(None)


def traceback_log(message: str, kind: str = "ValueError") -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/sglang/launch_server.py", line 30, in <module>\n'
        "    server_args = prepare_server_args(sys.argv[1:])\n"
        f"{kind}: {message}\n"
    )


class Counting:
    """derive_source in this process, counted: the cache must spare a second derivation."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, source: Path, release: str, out: Path) -> DerivedLibrary:
        self.calls += 1
        return derive_source(source, release=release)


def venv_with_release(root: Path, release: str) -> tuple[str, Path]:
    site = make_venv(root)
    unpack(site, (*VERSION_FILES, CHECK_FILE))
    set_release(site, release)
    return str(root / "bin/python"), site


def test_unshipped_release_is_derived_once_and_cached(tmp_path: Path) -> None:
    python, site = venv_with_release(tmp_path / "venv", "0.5.99")
    shipped = load_shipped()
    assert "0.5.99" not in shipped.releases
    derive = Counting()
    changes: list[DerivedLibrary] = []
    host = HostReleases(shipped, tmp_path / "cache", derive=derive, on_change=changes.append)
    found = host.sglang_release((python, "-m", "sglang.launch_server", "--tp", "2"))
    assert found is not None and found[0] == "0.5.99" and found[1].startswith(f"{python}: ")
    assert derive.calls == 1 and len(changes) == 1
    match = changes[0].match(MESSAGE, "ValueError", "0.5.99")
    assert match is not None and match.in_release is True  # the tree's own check, now known for 0.5.99
    assert shipped.match(MESSAGE, "ValueError", "0.5.99").in_release is False  # type: ignore[union-attr]

    (cached,) = (tmp_path / "cache").glob("derived-0.5.99-*.json")
    body = json.loads(cached.read_text())
    assert (body["schema"], body["version"], body["release"]) == (CACHE_SCHEMA, 1, "0.5.99")
    assert body["digest"] == tree_digest(site / "sglang")

    again = HostReleases(shipped, tmp_path / "cache", derive=derive)  # a restarted daemon
    again.sglang_release((python, "-m", "sglang.launch_server"))
    assert derive.calls == 1
    assert [t.status for t in again.tree_states()] == ["cached"]

    (site / CHECK_FILE).write_text((site / CHECK_FILE).read_text() + "\n# patched on this host\n")
    HostReleases(shipped, tmp_path / "cache", derive=derive).sglang_release((python, "-m", "sglang.launch_server"))
    assert derive.calls == 2  # another tree under the same version: derived again
    assert len(list((tmp_path / "cache").glob("derived-0.5.99-*.json"))) == 2


def test_shipped_release_is_not_derived(tmp_path: Path) -> None:
    site = make_venv(tmp_path / "venv")
    release = unpack(site)
    derive = Counting()
    host = HostReleases(load_shipped(), tmp_path / "cache", derive=derive)
    assert host.sglang_release((str(tmp_path / "venv/bin/python"), "-m", "sglang.launch_server"))[0] == release  # type: ignore[index]
    assert derive.calls == 0 and not (tmp_path / "cache").exists()


def test_cache_of_another_schema_is_derived_again(tmp_path: Path) -> None:
    python, site = venv_with_release(tmp_path / "venv", "0.5.98")
    digest = tree_digest(site / "sglang")
    path = cache_file(tmp_path / "cache", "0.5.98", digest)
    path.parent.mkdir()
    path.write_text(json.dumps({"schema": CACHE_SCHEMA, "version": 999, "release": "0.5.98", "digest": digest}))
    derive = Counting()
    HostReleases(load_shipped(), tmp_path / "cache", derive=derive).sglang_release(
        (python, "-m", "sglang.launch_server")
    )
    assert derive.calls == 1
    assert json.loads(path.read_text())["version"] == 1


def test_broken_tree_is_a_warning(tmp_path: Path) -> None:
    python, site = venv_with_release(tmp_path / "venv", "0.5.97")
    (site / "sglang/srt/broken.py").symlink_to(tmp_path / "gone.py")  # a dangling file: the tree cannot be read
    logged: list[str] = []
    shipped = load_shipped()
    host = HostReleases(shipped, tmp_path / "cache", log=logged.append)
    found = host.sglang_release((python, "-m", "sglang.launch_server"))
    assert found is not None and found[0] == "0.5.97"  # the release is still known and shown
    assert host.library is shipped  # the shipped signatures still answer
    (state,) = host.tree_states()
    assert state.status == "failed" and "cannot read" in state.problem
    assert logged == host.warning_list() and "0.5.97" in logged[0] and "cannot read" in logged[0]


def test_a_deriver_that_breaks_is_a_warning(tmp_path: Path) -> None:
    python, _ = venv_with_release(tmp_path / "venv", "0.5.96")

    def explode(source: Path, release: str, out: Path) -> DerivedLibrary:
        raise RecursionError("maximum recursion depth exceeded")

    host = HostReleases(load_shipped(), None, derive=explode, background=True)
    assert host.sglang_release((python, "-m", "sglang.launch_server")) is not None
    host.wait(30)
    assert [t.status for t in host.tree_states()] == ["failed"]
    assert "RecursionError" in host.warning_list()[0]


def test_derive_error_names_the_tree(tmp_path: Path) -> None:
    (tmp_path / "sglang").mkdir()
    with pytest.raises(DeriveError):
        tree_digest(tmp_path / "sglang")


def test_version_note_when_the_check_is_from_other_releases() -> None:
    shipped = load_shipped()
    latest = shipped.releases[-1]
    match = shipped.match(OLD_MESSAGE, "ValueError", latest)
    assert match is not None and match.in_release is False
    where = release_range(match.signature.releases, shipped.releases)
    (d,) = explain_text(traceback_log(OLD_MESSAGE), LIBRARY, Matcher(LIBRARY, shipped), (latest, "--sglang-version"))
    assert d.version_note is not None
    assert d.version_note.startswith(f"this check exists in {where}; the unit runs {latest}")
    assert d.version_note in d.evidence

    inside = match.signature.releases[0]
    (d,) = explain_text(traceback_log(OLD_MESSAGE), LIBRARY, Matcher(LIBRARY, shipped), (inside, "--sglang-version"))
    assert d.version_note is None and d.sglang_release == inside
    # a release nothing was read for: no claim either way
    (d,) = explain_text(traceback_log(OLD_MESSAGE), LIBRARY, Matcher(LIBRARY, shipped), ("0.5.99", "--sglang-version"))
    assert d.version_note is None
    (d,) = explain_text(traceback_log(OLD_MESSAGE), LIBRARY, Matcher(LIBRARY, shipped))
    assert d.version_note is None and d.sglang_release is None


def test_version_note_behind_a_reviewed_answer() -> None:
    """A reviewed signature answers; the note still says the message is not the unit's release's."""
    shipped = load_shipped()
    dsv4 = "DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."
    match = shipped.match(dsv4, "ValueError", "0.5.10")
    assert match is not None and match.in_release is False
    (d,) = explain_text(traceback_log(dsv4), LIBRARY, Matcher(LIBRARY, shipped), ("0.5.10", "--sglang-version"))
    assert d.signature is not None and not d.derived
    assert d.version_note is not None and d.version_note.startswith("this check exists in ")
    assert "the unit runs 0.5.10" in d.version_note


def crashdoc(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crashdoc", *args], input=stdin, capture_output=True, text=True, timeout=300
    )


def test_explain_options(tmp_path: Path) -> None:
    _, site = venv_with_release(tmp_path / "venv", "0.5.95")
    log = tmp_path / "crash.log"
    log.write_text(traceback_log(MESSAGE))
    r = crashdoc("explain", "--json", "--sglang-source", str(site / "sglang"), str(log))
    assert r.returncode == 1, r.stderr
    (d,) = json.loads(r.stdout)["diagnoses"]
    assert (d["sglang_version"], d["derived"], d["version_note"]) == ("0.5.95", True, None)
    assert d["sglang_version_from"] == f"--sglang-source {site / 'sglang'}"
    assert any("0.5.95" in e for e in d["evidence"])

    r = crashdoc("explain", "--sglang-version", "0.5.10", str(log))
    assert r.returncode == 1 and "  sglang: 0.5.10 (from --sglang-version)" in r.stdout
    assert "version: this check exists in " in r.stdout and "the unit runs 0.5.10" in r.stdout

    r = crashdoc("explain", "--sglang-source", str(tmp_path / "nowhere"), str(log))
    assert r.returncode == 4 and r.stderr.strip().endswith("no such file or folder") and "Traceback" not in r.stderr
    r = crashdoc("explain", "--sglang-version", "newest", str(log))
    assert r.returncode == 2 and "--sglang-version 'newest'" in r.stderr  # a malformed value: usage


def test_state_with_a_derived_answer_is_saved_and_restored() -> None:
    """The daemon saves its engine as JSON after every change: a loop answered by a derived signature (with the
    unit's release) must survive a restart like any other."""
    host = Host()
    matcher = Matcher(host.engine.matcher.library, load_shipped())
    host.engine = build_engine(matcher, thresholds=host.engine.thresholds, release=("0.5.23", "--sglang-version"))
    lines = [
        "Traceback (most recent call last):",
        '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/arg_groups/validation_hook.py", line 688, in f',
        "    raise ValueError(x)",
        f"ValueError: {MESSAGE}",
    ]
    for _ in range(2):
        host.start()
        host.crash(lines)
    (before,) = host.engine.diagnoses()
    assert before.derived and before.sglang_release == "0.5.23"
    saved = json.loads(json.dumps(host.engine.snapshot()))
    restored = build_engine(matcher)
    restored.restore(saved)
    (after,) = restored.diagnoses()
    assert (after.signature, after.derived, after.sglang_release, after.evidence) == (
        before.signature,
        True,
        "0.5.23",
        before.evidence,
    )


def test_derive_in_a_child_process(tmp_path: Path) -> None:
    _, site = venv_with_release(tmp_path / "venv", "0.5.94")
    library = derive_in_child(site / "sglang", "0.5.94", tmp_path / "cache/x.json")
    assert library.releases == ("0.5.94",)
    match = library.match(MESSAGE, "ValueError", "0.5.94")
    assert match is not None and match.in_release is True
    with pytest.raises(DeriveError, match="nowhere"):
        derive_in_child(tmp_path / "nowhere", "0.5.94", tmp_path / "cache/y.json")


@needs_journal_remote
def test_diagnose_journal_files_does_not_read_this_hosts_disk(tmp_path: Path) -> None:
    """Copied journal files come from another host: the interpreter their _CMDLINE names is not read here
    (this host may hold another SGLang at the same path); the log or --sglang-version still say the release."""
    python, _ = venv_with_release(tmp_path / "venv", "0.5.93")
    cmdline = f"{python} -m sglang.launch_server --model-path m --tp 2"
    entries: list[dict[str, str | bytes]] = [line(TRACEBACK[0], pid="101", _CMDLINE=cmdline)]
    entries += [line(text, pid="101") for text in TRACEBACK[1:]]
    entries.append(pid1(f"{UNIT}: Main process exited, code=exited, status=1/FAILURE", EXIT_CODE="exited"))
    journal = write_journal(tmp_path, entries)
    r = crashdoc("diagnose", "--file", str(journal), "--json")
    assert r.returncode == 1, r.stderr
    (d,) = json.loads(r.stdout)["diagnoses"]
    assert d["sglang_version"] is None
    r = crashdoc("diagnose", "--file", str(journal), "--json", "--sglang-version", "0.5.12")
    (d,) = json.loads(r.stdout)["diagnoses"]
    assert (d["sglang_version"], d["sglang_version_from"]) == ("0.5.12", "--sglang-version")


def test_release_in_alerts_and_journal_records() -> None:
    shipped = load_shipped()
    latest = shipped.releases[-1]
    (d,) = explain_text(traceback_log(OLD_MESSAGE), LIBRARY, Matcher(LIBRARY, shipped), (latest, "--sglang-version"))
    description = alert_annotations("sglang-prefill.service", d, "")["description"]
    assert f"SGLang: {latest} (this check exists in " in description
    sent: list[dict[str, str]] = []
    recorder = JournalRecorder(send=lambda **fields: sent.append(fields))
    recorder.record(EngineEvent("loop-started", "sglang-prefill.service", 1.0, d))
    assert sent[0]["CRASHDOC_SGLANG_VERSION"] == latest
    assert sent[0]["CRASHDOC_VERSION_NOTE"] == d.version_note
