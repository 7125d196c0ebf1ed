"""bench/coverage.py: each flag-naming check of a release in every shape an operator meets it (launcher and
rank tracebacks, the prefix on every line, the exception line alone, the message alone), answered per message.

Runs on a small wheel made of real files of SGLang 0.5.23 (`.cache/sglang-0.5.23`, unpacked by `make test`);
skipped when they are absent.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from bench.coverage import SHAPES, release_row

from crashdoc.commands.pipeline import load_library_or_fail
from crashdoc.matching.derived import load_shipped
from crashdoc.matching.matcher import Matcher

TREE = Path(__file__).parents[2] / ".cache" / "sglang-0.5.23" / "sglang"
FILES = ("srt/arg_groups/kv_cache_hook.py", "srt/arg_groups/speculative_hook.py", "srt/server_args.py")

if not all((TREE / f).is_file() for f in FILES):
    pytest.skip(f"SGLang 0.5.23's source is not unpacked at {TREE} (scripts/fetch-sglang.sh)", allow_module_level=True)


@pytest.fixture(scope="module")
def row(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    wheel = tmp_path_factory.mktemp("wheel") / "sglang-0.5.23-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in FILES:
            z.write(TREE / name, f"sglang/{name}")
    library = load_library_or_fail(None)
    return release_row("0.5.23", wheel, library, Matcher(library, load_shipped()))


def test_every_message_is_tried_in_every_shape_and_answered(row: dict[str, object]) -> None:
    messages = int(row["messages"])  # type: ignore[call-overload]
    assert messages >= 40  # these two hooks name flags in dozens of checks
    by_shape = row["by_shape"]
    assert set(by_shape) == {shape for shape, _ in SHAPES}  # type: ignore[arg-type]
    for shape, answered in by_shape.items():  # type: ignore[attr-defined]
        assert answered >= 0.95 * messages, (shape, row["misses"])
    assert float(row["share"]) >= 0.95  # type: ignore[arg-type]
    assert int(row["answered"]) <= min(by_shape.values())  # type: ignore[attr-defined, call-overload]


def test_the_misses_name_the_shape_and_the_message(row: dict[str, object]) -> None:
    for shape, signature, message in row["misses"]:  # type: ignore[attr-defined]
        assert shape in {s for s, _ in SHAPES}
        assert signature and message


def test_the_issues_scope_is_counted_apart(row: dict[str, object]) -> None:
    answered, total = row["srt"]  # type: ignore[misc]
    assert 0 < answered <= total  # raises of srt/ naming a flag or a variable


def test_a_check_of_one_variable_changes_that_variable() -> None:
    from crashdoc.matching.derived import variable_fix

    changes, said = variable_fix("SGLANG_X_DTYPE", "SGLANG_X_DTYPE must be one of 'bf16', 'mxfp8', got {}.")
    assert [(c.action, c.flag, c.value) for c in changes] == [("set", "SGLANG_X_DTYPE", "bf16")]
    changes, said = variable_fix("SGLANG_USE_MLX", "SGLANG_USE_MLX requires an available MLX Metal device")
    assert [(c.action, c.flag) for c in changes] == [("remove", "SGLANG_USE_MLX")]
    assert "unset SGLANG_USE_MLX" in said


def test_the_literal_piece_a_lone_line_must_hold_is_in_the_message() -> None:
    """A derived pattern that begins with a hole is tried only on lines holding its longest literal piece: that
    piece must be literal text of SGLang's template, or a lone line of that check would be missed."""
    from crashdoc.matching.derived_index import PrefixIndex, needle

    derived = load_shipped()
    index = PrefixIndex(derived.signature(i).pattern for i in range(len(derived)))
    assert index.short
    for _, at, piece in index.short:
        template = derived.signature(at).template
        assert any(piece in part for part in template.split("{}")), (piece, template)
    assert needle(r"(?P<a>.+?) must be (?:on|off)") == ""  # alternatives: no piece is sure
    assert needle(r"(?P<a>.+?) is \(not\) supported\.") == " is (not) supported."
