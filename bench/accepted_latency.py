"""Detection latency while the daemon searches fixes with SGLang's checks, side by side with none (issue 26, 5).

    python -m bench.accepted_latency [--crashes N] [--checks 20] [--python PATH]

`bench.latency.measure` three times in one run, on a private systemd: first as it is (two fake-SGLang units crash
every 0.3 s; the time from a crash's last log line to crashdoc showing it); then with `--checks` more units that
loop on the same replayed failure under an interpreter without SGLang (the loops' own cost, nothing to check);
then the same with `--checks` more
units that crash-loop on a real SGLang 0.5.23 launch failure (`bench/launch_failures/set/064.log`,
`--dllm-algorithm none`). Each of those units runs a launch script that names the failing command with SGLang
0.5.23's own interpreter (the test environment `make test` builds) and replays that command's real output
(so a restart costs no SGLang import); crashdoc finds each loop and its remedy worker searches each unit's fix
with real SGLang 0.5.23 children: twenty searches, two at a time (the worker's bound), the rest waiting. The
measured units start once the loops are found and the searches run; at the end the bench says how many
searches were still running or waiting, so the crashes it measured came while checks ran.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import ROOT, log

FAILURE = ROOT / "bench" / "launch_failures" / "set" / "064.log"  # RuntimeError: Unknown diffusion LLM algorithm
OPTIONS = "--dllm-algorithm none"
PENDING = ("search pending", "verification pending")
NO_SGLANG = "/usr/bin/python3"  # the host's Python: no SGLang in it, so no check can run
RESULTS = ROOT / "bench" / "results" / "accepted_latency.json"


def replay_units(python: str, count: int) -> Callable[[Path], dict[str, str]]:
    """`count` units whose launch script names SGLang 0.5.23's command and replays its real output."""

    def make(workdir: Path) -> dict[str, str]:
        from bench.launch_failures.generate import tiny_model
        from crashdoc.sandbox.demo import sglang_unit

        model = tiny_model()
        output = workdir / "sglang-0.5.23-output.log"
        output.write_text(FAILURE.read_text().split("\n", 1)[1])  # the log without the pasted command above it
        units = {}
        for i in range(count):
            script = workdir / f"launch-{i}.sh"
            command = f"{shlex.quote(python)} -m sglang.launch_server --model-path {model} --device cpu {OPTIONS}"
            script.write_text(
                "#!/bin/sh\n"
                "# SGLang 0.5.23's own output of the command below (a real run), replayed; it fails as that run did\n"
                f"while IFS= read -r line; do printf '%s\\n' \"$line\"; done < {output}  # the shell's own lines\n"
                "exit 1\n"
                f"exec {command} --port {30100 + i}\n"
            )
            script.chmod(0o755)
            units[f"sglang-check-{i:02d}.service"] = sglang_unit(
                f"SGLang 0.5.23 launch failure, replayed ({i})", f"/bin/sh {script}", workdir=workdir, restart_sec=5
            )
        return units

    return make


def _diagnoses(base: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(base + "/diagnoses", timeout=5) as r:
        return list(json.loads(r.read())["diagnoses"])


def _searches(base: str) -> dict[str, int]:
    """The replayed units' fixes: how many are still pending (running or waiting) and how many are checked."""
    mine = [d for d in _diagnoses(base) if d["unit"].startswith("sglang-check-")]
    pending = sum(1 for d in mine if (d["fix"].get("verified") or "").startswith(PENDING))
    passed = sum(1 for d in mine if (d["fix"].get("verified") or "").startswith("passes SGLang"))
    return {"loops": len(mine), "pending": pending, "passed": passed}


def start_checks(count: int, searching: bool = True) -> Callable[[Any, Any], Callable[[], dict[str, Any]]]:
    """Start the `count` replayed units; with `searching`, wait until their searches run, else only their loops."""

    def beside(sandbox: Any, cd: Any) -> Callable[[], dict[str, Any]]:
        names = [f"sglang-check-{i:02d}.service" for i in range(count)]
        sandbox.systemctl("start", *names, check=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            seen = _searches(cd.base)
            if seen["loops"] >= count and (seen["pending"] >= 1 or not searching):
                break
            time.sleep(0.5)
        began = {**_searches(cd.base), "at": time.time()}
        log(f"accepted_latency: {began['loops']} loops found, {began['pending']} searches running or waiting")

        def after() -> dict[str, Any]:
            ended = {**_searches(cd.base), "at": time.time()}
            finish = time.monotonic() + 600  # then the searches are let finish: real SGLang checks, that pass
            while time.monotonic() < finish and _searches(cd.base)["pending"]:
                time.sleep(1)
            done = {**_searches(cd.base), "at": time.time()}
            sandbox.systemctl("stop", *names)
            return {"began": began, "ended": ended, "done": done}

        return after

    return beside


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.accepted_latency", description=__doc__.split("\n\n")[0])
    p.add_argument("--crashes", type=int, default=50, help="measured crashes per side")
    p.add_argument("--checks", type=int, default=20, help="units whose fix crashdoc searches beside them")
    p.add_argument("--python", help="SGLang 0.5.23's interpreter (default: the test environment, built if missing)")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    from bench.latency import measure, summarize
    from support.sglang_env import ensure_sglang_venv  # type: ignore[import-not-found]

    python = a.python or str(ensure_sglang_venv())
    out: dict[str, Any] = {}
    # The middle side has the same looping units, but their scripts name an interpreter without SGLang: crashdoc
    # finds the loops and diagnoses them as often, and has nothing to check. Against it, the last side shows what
    # the checks themselves cost the detection; against the first, what twenty more looping units cost it.
    for side, beside, units in (
        ("no checks", None, None),
        (f"{a.checks} loops, no checks", start_checks(a.checks, searching=False), replay_units(NO_SGLANG, a.checks)),
        (f"{a.checks} searches", start_checks(a.checks), replay_units(python, a.checks)),
    ):
        log(f"accepted_latency: {a.crashes} crashes, {side} ...")
        res = measure(a.crashes, dbus=True, beside=beside, beside_units=units)
        out[side] = {"summary": summarize(res, a.crashes), "beside": res["beside"], "samples": res["samples"]}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    print("| side | crashes | p50 | p99 | max | searches pending at start -> end of the measure | passed |")
    print("|---|---|---|---|---|---|---|")
    for side, got in out.items():
        s, b = got["summary"], got["beside"]
        during, passed = "-", "-"
        if b:
            during = f"{b['began']['pending']} -> {b['ended']['pending']} of {b['began']['loops']}"
            took = b["done"]["at"] - b["began"]["at"]
            passed = f"{b['done']['passed']} of {b['done']['loops']} ({took:.0f} s after the start)"
        print(
            f"| {side} | {s['n']} | {s['p50'] * 1000:.0f} ms | {s['p99'] * 1000:.0f} ms | {s['max'] * 1000:.0f} ms "
            f"| {during} | {passed} |"
        )
    print("target (issue 26, 5): p50 <= 300 ms, p99 <= 600 ms while the checks run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
