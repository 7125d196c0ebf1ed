"""The release's own argument facts: read from its source with ast, shipped per release, loaded lazily.

Regenerating 0.5.23's facts from its source (.cache/sglang-0.5.23, `scripts/fetch-sglang.sh`) must give exactly
the shipped ones; with the real SGLang 0.5.23 environment (tests/support/sglang_env.py) every fact is compared with
the parser SGLang itself builds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crashdoc.authoring.argfacts import extract, facts_of
from crashdoc.authoring.mine.tree import locate
from crashdoc.remedy.argfacts import UNKNOWN, ArgFacts, Option, dumps, load_shipped, loads, merge
from support.sglang_env import sglang_python

ROOT = Path(__file__).resolve().parents[2]
REAL = Path(os.environ.get("CRASHDOC_SGLANG_SRC", ROOT / ".cache/sglang-0.5.23/sglang"))
needs_source = pytest.mark.skipif(not (REAL / "srt" / "server_args.py").exists(), reason=f"no SGLang source at {REAL}")

OLD_STYLE = """
import argparse
from dataclasses import dataclass, field
from sglang.srt.choices import LOAD_FORMATS

ATTENTION = ["triton", "flashinfer"]

@dataclass
class ServerArgs:
    model_path: str
    tp_size: int = 1
    mem_fraction_static: float = None
    attention_backend: str = "flashinfer"
    load_format: str = "auto"
    cuda_graph_bs: list = field(default_factory=list)

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", type=str, required=True)
        parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=ServerArgs.tp_size,
                            dest="tp_size")
        parser.add_argument("--mem-fraction-static", type=float, default=ServerArgs.mem_fraction_static)
        parser.add_argument("--attention-backend", choices=ATTENTION + ["torch_native"],
                            default=ServerArgs.attention_backend)
        parser.add_argument("--load-format", choices=LOAD_FORMATS, default=ServerArgs.load_format)
        parser.add_argument("--reasoning-parser", choices=list(REGISTRY.keys()))
        parser.add_argument("--disable-radix-cache", action="store_true")
        parser.add_argument("--cuda-graph-bs", type=int, nargs="+")
"""


def _tree(tmp_path: Path, server_args: str, extra: dict[str, str] | None = None) -> Path:
    srt = tmp_path / "sglang" / "srt"
    srt.mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (srt / "server_args.py").write_text(server_args)
    for name, text in (extra or {}).items():
        (srt / name).write_text(text)
    return tmp_path / "sglang"


def test_add_argument_declarations_are_read_with_their_names_defaults_and_choices(tmp_path: Path) -> None:
    tree = _tree(tmp_path, OLD_STYLE, {"choices.py": 'LOAD_FORMATS = ("auto", "pt", "dummy")\n'})
    facts = ArgFacts("0.4.9", extract(locate(str(tree))))
    tp = facts.option("--tensor-parallel-size")
    assert tp == Option("tp_size", ("--tp-size", "--tensor-parallel-size"), "int", None, 1)
    assert facts.by_dest("attention_backend").choices == ("triton", "flashinfer", "torch_native")  # type: ignore[union-attr]
    assert facts.option("--load-format").choices == ("auto", "pt", "dummy")  # type: ignore[union-attr]
    assert facts.option("--reasoning-parser").choices is UNKNOWN  # type: ignore[union-attr]  # filled at run time
    radix = facts.option("--disable-radix-cache")
    assert radix is not None and radix.switch and radix.default is False
    assert facts.option("--cuda-graph-bs").many  # type: ignore[union-attr]
    assert facts.option("--model-path").required  # type: ignore[union-attr]
    assert facts.option("--mem-frac") is facts.by_dest("mem_fraction_static")  # a prefix argparse takes


def test_what_argparse_would_take_is_said_from_the_facts() -> None:
    backend = Option("attention_backend", ("--attention-backend",), "str", ("triton", "fa3"), None)
    assert backend.accepts("fa3") is True and backend.accepts("none") is False
    tp = Option("tp_size", ("--tp-size",), "int", None, 1)
    assert tp.accepts("2") is True and tp.accepts("two") is False
    parser = Option("reasoning_parser", ("--reasoning-parser",), "str", UNKNOWN, None)
    assert parser.accepts("anything") is True  # a string; its registry is not known before run time


def test_releases_are_stored_once_per_distinct_declaration() -> None:
    a = ArgFacts("0.5.1", [Option("tp_size", ("--tp-size",), "int", None, 1), Option("x", ("--x",), "str", None, None)])
    b = ArgFacts("0.5.2", [Option("tp_size", ("--tp-size",), "int", None, 1), Option("x", ("--x",), "int", None, 0)])
    library = loads(dumps(merge([b, a], lambda r: tuple(int(p) for p in r.split(".")))))
    assert library.releases == ("0.5.1", "0.5.2")
    assert len(library.rows) == 3  # tp_size once, --x twice (its type changed)
    assert library.get("0.5.2").option("--x").type == "int"  # type: ignore[union-attr]
    assert library.get("0.5.1").option("--x").type == "str"  # type: ignore[union-attr]
    assert library.releases_with("--tp-size") == ("0.5.1", "0.5.2")
    assert library.get("0.9.9") is None


def test_the_shipped_facts_are_read_on_first_use_only() -> None:
    code = (
        "import crashdoc.commands.explain, crashdoc.remedy.argfacts as a, sys\n"
        "lib = a.load_shipped()\n"
        "print(lib._loader is not None)\n"
        "print(len(lib.releases) > 50, lib.get('0.5.23').option('--tp').dest)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "tp_size"]


@needs_source
def test_regenerating_0_5_23_gives_the_shipped_facts() -> None:
    shipped = load_shipped().get("0.5.23")
    assert shipped is not None
    fresh = facts_of(locate(str(REAL)), "0.5.23")
    assert {o.dest: o for o in fresh.options} == {o.dest: o for o in shipped.options}
    assert len(fresh) > 500


DUMP_PARSER = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
out = []
for a in parser._actions:
    if not a.option_strings or a.dest == "help":
        continue
    kind = type(a).__name__
    default = a.default
    try:
        json.dumps(default)
    except TypeError:
        default = repr(default)
    choices = sorted(map(str, a.choices)) if a.choices is not None else None
    out.append(dict(dest=a.dest, flags=a.option_strings, nargs=a.nargs, kind=kind, default=default, choices=choices))
print(json.dumps(out))
"""

SGLANG, SGLANG_WHY = sglang_python()


@needs_source
@pytest.mark.skipif(SGLANG is None, reason=SGLANG_WHY)
def test_the_facts_agree_with_the_parser_sglang_builds() -> None:
    """Every option SGLang 0.5.23's own parser has, with the same flags, switches, nargs, choices and defaults
    (where the source states them as literals)."""
    env = {"PATH": os.environ.get("PATH", ""), "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([str(SGLANG), "-c", DUMP_PARSER], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    real = {a["dest"]: a for a in json.loads(done.stdout.strip().splitlines()[-1])}
    facts = load_shipped().get("0.5.23")
    assert facts is not None
    ours = {o.dest: o for o in facts.options}
    assert set(real) - set(ours) == set()
    for dest, action in real.items():
        option = ours[dest]
        assert set(option.flags) == set(action["flags"]), dest
        switch = action["kind"] in ("_StoreTrueAction", "_StoreFalseAction", "BooleanOptionalAction")
        switch = switch or action["kind"] == "DeprecatedStoreTrueAction"  # SGLang's deprecated switches
        assert option.switch == switch, dest
        if option.choices is not UNKNOWN:
            assert (sorted(map(str, option.choices)) if option.choices else None) == action["choices"], dest
        if option.default is not UNKNOWN:
            assert option.default == action["default"], dest
        if action["nargs"] in ("+", "*", "?"):
            assert option.nargs == action["nargs"], dest
