"""The daemon's library is checked against the JSON Schema in a throw-away child (`validate_apart`): the problems
a user reads are the same words, files and lines as in process, and the daemon never keeps jsonschema."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crashdoc.matching import validate
from crashdoc.matching.library import FileCache, LibraryError, load_library
from support.signature_texts import EXTRA

FIXTURES = Path(__file__).parent.parent / "fixtures" / "signatures"
GOOD = EXTRA
BROKEN = {
    "unknown-key.yaml": GOOD.replace("    severity: critical\n", "    severity: critical\n    colour: red\n"),
    "missing.yaml": GOOD.replace("    title: An error added by a live edit\n", "").replace("test-extra", "test-miss"),
    "enum.yaml": GOOD.replace("severity: critical", "severity: apocalyptic").replace("test-extra", "test-enum"),
    "types.yaml": GOOD.replace("exception: [KeyError]", "exception: 12").replace("test-extra", "test-types"),
    "date.yaml": GOOD.replace("title: An error added by a live edit", "title: 2026-12-05").replace("extra", "date"),
    "keys.yaml": "signatures:\n  - {1: x, true: y, null: z}\n",
    "yaml-error.yaml": "signatures:\n  - id: [unclosed\n",
    "empty.yaml": "",
    "not-a-list.yaml": "signatures: 3\n",
}


def _problems(folder: Path, cache: FileCache | None) -> list[str]:
    with pytest.raises(LibraryError) as caught:
        load_library([folder], cache)
    return [str(p) for p in caught.value.problems]


def test_the_problems_found_in_a_child_are_those_found_in_process(tmp_path: Path) -> None:
    folder = tmp_path / "sigs"
    shutil.copytree(FIXTURES, folder)
    for name, text in BROKEN.items():
        (folder / name).write_text(text)
    in_process = _problems(folder, None)
    assert any("unknown key(s)" in p for p in in_process) and any("is not one of" in p for p in in_process)
    assert _problems(folder, FileCache(matching_only=True, validate_apart=True)) == in_process
    answered = validate.apart({str(folder / name): text for name, text in BROKEN.items()})
    assert answered is not None and answered[str(folder / "enum.yaml")], "the child answered (no fallback)"
    assert _problems(folder, FileCache(validate_apart=False)) == in_process


def test_a_good_library_loads_the_same_signatures_either_way(tmp_path: Path) -> None:
    folder = tmp_path / "sigs"
    shutil.copytree(FIXTURES, folder)
    (folder / "extra.yaml").write_text(GOOD)
    apart = load_library([folder], FileCache(validate_apart=True))
    assert apart == load_library([folder]) and "test-extra-error" in {s.id for s in apart.signatures}


_CHILD = """
import sys
from pathlib import Path
from crashdoc.matching.reload import LibraryHolder
holder = LibraryHolder([Path(sys.argv[1])], log=lambda _: None, matching_only=True, validate_apart=sys.argv[2] == "1")
print(len(holder.library), sorted(m for m in sys.modules if m.split(".")[0] in ("jsonschema", "referencing", "rpds")))
"""


@pytest.mark.parametrize("apart", [True, False])
def test_a_library_validated_apart_leaves_jsonschema_out_of_the_daemon(tmp_path: Path, apart: bool) -> None:
    folder = tmp_path / "sigs"
    shutil.copytree(FIXTURES, folder)
    argv = [sys.executable, "-c", _CHILD, str(folder), "1" if apart else "0"]
    said = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout.split(" ", 1)
    assert int(said[0]) == len(load_library([folder]))
    assert (said[1].strip() == "[]") == apart, said[1]
