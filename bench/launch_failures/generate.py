"""Make a set of real SGLang launch failures: random flag combinations run through the real launcher.

    python -m bench.launch_failures.generate --python VENV/bin/python --out bench/launch_failures/set --count 80

Each command is `python3 -m sglang.launch_server --model-path <tiny local Llama config> --device cpu` plus 1-4
options drawn from the release's own argument facts, with values drawn by their type and choices (sometimes one the
release does not accept). SGLang's own argument checks (crashdoc's checker: `prepare_server_args`, then
`resolve_once()`) say which commands fail; one command is kept per distinct error message (numbers and quoted
values masked), and the real launcher (`python -m sglang.launch_server`, CPU, offline) is then run on it for the
log. Each log file holds the command above the launcher's output, as a user would paste it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

from crashdoc.remedy.argfacts import UNKNOWN, ArgFacts, Option
from crashdoc.remedy.checker import Request, SGLangChecker, child_environment
from crashdoc.remedy.commandline import join_argv

MODEL_DIR = Path("/var/tmp/crashdoc-launch-failures/tiny-llama")
BASE = ("--model-path", str(MODEL_DIR), "--device", "cpu")
# options that would not make a launch failure of the release's checks: what it is, where it listens, files it reads
SKIP = {
    "model_path", "device", "help", "version", "config", "host", "port", "nccl_port", "dist_init_addr",
    "api_key", "admin_api_key", "ssl_keyfile", "ssl_certfile", "ssl_ca_certs", "log_requests", "log_level",
    "served_model_name", "tokenizer_path", "node_rank", "dist_timeout",
}  # fmt: skip
INTS = ("0", "1", "2", "3", "4", "8", "16", "-1", "7", "1024")
FLOATS = ("0", "0.1", "0.5", "0.9", "1.0", "1.5", "-0.5", "2")
STRINGS = ("none", "auto", "x", "/tmp/crashdoc-missing", "{}", '{"a": 1}', "not-json", "default")


def tiny_model(folder: Path = MODEL_DIR) -> Path:
    """The tiny local Llama config.json the set's commands name (written as the tests write theirs)."""
    tests = str(Path(__file__).resolve().parents[2] / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from support.sglang_env import tiny_model as write  # type: ignore[import-not-found]

    return Path(write(folder))


def value_for(option: Option, rng: random.Random) -> list[str]:
    if option.switch:
        return []
    choices = option.choices if isinstance(option.choices, tuple) else ()
    if choices and rng.random() < 0.9:
        words = [str(rng.choice(choices))]
    elif option.type == "int" or option.type == "human_readable_int":
        words = [rng.choice(INTS)]
    elif option.type == "float":
        words = [rng.choice(FLOATS)]
    else:
        words = [rng.choice(STRINGS)]
    if option.many and rng.random() < 0.5:
        words.append(words[0])
    return words


def random_command(facts: ArgFacts, rng: random.Random) -> list[str]:
    options = [o for o in facts.options if o.dest not in SKIP and o.choices is not UNKNOWN and not o.required]
    picked = rng.sample(options, rng.choice((1, 2, 2, 3, 3, 4)))
    args = list(BASE)
    for option in picked:
        flag = option.flags[0]
        if option.action == "boolean-optional" and rng.random() < 0.3:
            flag = next((f for f in option.flags if f.startswith("--no-")), flag)
        args += [flag, *value_for(option, rng)]
    return args


def error_key(text: str) -> str:
    """The error with what varies masked: numbers, quoted values, paths, lists."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "Q", text)
    text = re.sub(r"\[[^\]]*\]|\{[^}]*\}", "L", text)
    text = re.sub(r"/[\w./-]+", "P", text)
    return re.sub(r"-?\d+(?:\.\d+)?", "N", text)[:300]


def launcher_log(python: str, args: list[str], timeout: float) -> str:
    env = child_environment(base=os.environ)
    done = subprocess.run(
        [python, "-m", "sglang.launch_server", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd="/var/tmp",
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return (done.stdout + done.stderr).strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--python", required=True, help="an interpreter with SGLang 0.5.23 (tests/support/sglang_env.py)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--count", type=int, default=80, help="distinct failures to keep")
    p.add_argument("--tries", type=int, default=3000, help="random commands to check at most")
    p.add_argument("--seed", type=int, default=23)
    p.add_argument("--facts-from", default=".cache/sglang-0.5.23", help="the release's source (for its options)")
    a = p.parse_args(argv)
    from crashdoc.authoring.argfacts import facts_of
    from crashdoc.authoring.mine.tree import locate

    facts = facts_of(locate(a.facts_from), "0.5.23")
    rng = random.Random(a.seed)
    tiny_model()
    a.out.mkdir(parents=True, exist_ok=True)
    kept: dict[str, list[str]] = {}
    tried = 0
    with SGLangChecker(a.python, parallel=2, timeout=60) as checker:
        while len(kept) < a.count and tried < a.tries:
            batch = [random_command(facts, rng) for _ in range(20)]
            tried += len(batch)
            for args, answer in zip(batch, checker.check([Request(tuple(b)) for b in batch]), strict=True):
                if answer.status != "rejected":
                    continue
                key = error_key(answer.error)
                if key not in kept and len(kept) < a.count:
                    kept[key] = args
            print(f"{tried} commands, {len(kept)} distinct failures", file=sys.stderr)
    index = []
    for n, args in enumerate(kept.values(), 1):
        started = time.monotonic()
        try:
            log = launcher_log(a.python, args, 300)
        except subprocess.TimeoutExpired:
            print(f"{n}: the launcher did not stop in 300 s: skipped", file=sys.stderr)
            continue
        command = join_argv(["python3", "-m", "sglang.launch_server", *args])
        name = f"{n:03d}.log"
        (a.out / name).write_text(f"$ {command}\n{log}\n", encoding="utf-8")
        index.append({"file": name, "args": args, "launcher_seconds": round(time.monotonic() - started, 1)})
        print(f"{name}: {log.splitlines()[-1][:120] if log else '(no output)'}", file=sys.stderr)
    (a.out / "index.json").write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
