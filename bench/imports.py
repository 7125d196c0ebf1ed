"""Where a command's start-up goes: every module it imports, with the time and memory of importing it.

    python -m bench.imports explain          # `crashdoc explain` of a one-line log
    python -m bench.imports run              # the daemon, up to its first read of the journal
    python -m bench.imports diagnose         # `crashdoc diagnose` of an empty journal folder
    python -m bench.imports explain --top 40 --json

Each command runs in a fresh process (compiled bytecode in place, the library cache warm) with an
import hook that wraps every module's loading: its time (as `-X importtime` counts it) and the memory
it leaves allocated (tracemalloc), each "self" (its own code) and "cumulative" (with what it imports).
After the command: how the process's time splits into interpreter start-up, imports and the rest, and
which source files hold the memory still allocated (tracemalloc, by the innermost crashdoc or library
frame), so that what is imported or kept without being used shows up by name.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import PYTHON, ROOT, bytecode_env, median

# Runs inside the measured process: argv[1] = scenario, argv[2] = scratch folder, argv[3] = "time" or "memory"
# (tracemalloc slows every allocation down, so times are taken in runs without it).
_PROBE = r"""
import sys, time, tracemalloc
started = time.perf_counter()
if sys.argv[3] == "memory":
    tracemalloc.start(16)
import importlib.abc

records = {}  # module -> [cumulative s, cumulative bytes, s in the imports it made, bytes in them]
stack = [["<main>", 0.0, 0]]  # the imports under way: [name, their imports' s, their imports' bytes]


class Timed:
    def __init__(self, loader, name):
        self._loader, self._name = loader, name

    def __getattr__(self, attr):
        return getattr(self._loader, attr)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        frame = [self._name, 0.0, 0]
        stack.append(frame)
        t0, m0 = time.perf_counter(), tracemalloc.get_traced_memory()[0]
        try:
            self._loader.exec_module(module)
        finally:
            dt, dm = time.perf_counter() - t0, tracemalloc.get_traced_memory()[0] - m0
            stack.pop()
            records[self._name] = [dt, dm, frame[1], frame[2]]
            stack[-1][1] += dt
            stack[-1][2] += dm


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = Timed(spec.loader, name)
                return spec
        return None


sys.meta_path.insert(0, Finder())
# two costs every module pays at import: building dataclasses (generated methods, compiled with exec) and
# compiling `re` patterns
spent = {"dataclasses": [0.0, 0], "re.compile": [0.0, 0]}
import dataclasses, re


def timed(label, function):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label][0] += time.perf_counter() - t0
            spent[label][1] += 1
    return wrapper


dataclasses._process_class = timed("dataclasses", dataclasses._process_class)
_re_compile = re._compile
_re_timed = timed("re.compile", _re_compile)
re._compile = lambda pattern, flags: _re_compile(pattern, flags) if isinstance(pattern, re.Pattern) or (
    type(pattern), pattern, flags) in re._cache else _re_timed(pattern, flags)
scenario, scratch = sys.argv[1], sys.argv[2]
import contextlib, io, os
sink = io.StringIO()
if scenario == "explain":
    from crashdoc.cli import main
    with contextlib.redirect_stdout(sink):
        main(["explain", os.path.join(scratch, "one-line.log")])
elif scenario == "diagnose":
    from crashdoc.cli import main
    with contextlib.redirect_stdout(sink):
        main(["diagnose", "--json", "--directory", os.path.join(scratch, "journal")])
elif scenario == "run":
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from crashdoc.runtime.daemon import Daemon
    Daemon.run = lambda self, http: 0  # stop before the loop: start-up only
    from crashdoc.cli import main
    main(["run", "--directory", os.path.join(scratch, "journal"), "--state-directory", os.path.join(scratch, "state"),
          "--listen", f"127.0.0.1:{port}", "--config", os.path.join(scratch, "run.yaml")]) == 0 or sys.exit("failed")
elapsed = time.perf_counter() - started
held = {}
for trace in tracemalloc.take_snapshot().traces if tracemalloc.is_tracing() else ():
    where = "<python>"
    for frame in trace.traceback:  # innermost first
        f = frame.filename
        if not f.startswith("<") and "/importlib/" not in f and "tracemalloc" not in f:
            where = f
            break
    held[where] = held.get(where, 0) + trace.size
import json
print(json.dumps({"elapsed": elapsed, "modules": records, "held": held, "spent": spent,
                  "traced": tracemalloc.get_traced_memory()[0],
                  "rss_kib": int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])}))
"""


def scratch_folder() -> Path:
    from bench.common import JOURNAL_REMOTE

    work = Path(tempfile.mkdtemp(prefix="crashdoc-bench-imports-"))
    (work / "one-line.log").write_text(
        "[2026-12-01 10:00:00 TP0] Decode batch, #running-req: 12, #token: 40312, token usage: 0.21\n"
    )
    (work / "journal").mkdir()
    (work / "state").mkdir()
    (work / "run.yaml").write_text('units:\n  - {name: "sglang*.service", role: any}\ndbus: false\n')
    if JOURNAL_REMOTE is not None:  # one entry, so that the folder is a journal
        entry = b"__REALTIME_TIMESTAMP=1800000000000000\n__MONOTONIC_TIMESTAMP=1\n_BOOT_ID=" + b"0" * 32
        entry += b"\n_SYSTEMD_UNIT=sglang-decode.service\n_PID=7\nMESSAGE=ready\n\n"
        subprocess.run(
            [JOURNAL_REMOTE, "--split-mode=none", f"--output={work / 'journal' / 'one.journal'}", "-"],
            input=entry,
            check=True,
            capture_output=True,
        )
    return work


def measure(scenario: str, work: Path, env: dict[str, str], mode: str = "time") -> dict:
    out = subprocess.run(
        [PYTHON, "-c", _PROBE, scenario, str(work), mode], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def env_for(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}:{ROOT / 'src'}" + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["XDG_CACHE_HOME"] = str(cache)
    return bytecode_env(env)


def profile(scenario: str, runs: int = 5) -> dict:
    """Times: the median of `runs` runs (after one warm-up that fills the caches); memory: one run."""
    import shutil

    work = scratch_folder()
    try:
        env = env_for(work / "cache")
        measure(scenario, work, env)
        docs = [measure(scenario, work, env) for _ in range(runs)]
        memory = measure(scenario, work, env, "memory")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    modules: dict[str, list[float]] = {}
    for name in docs[0]["modules"]:
        rows = [d["modules"][name] for d in docs if name in d["modules"]]
        own = memory["modules"].get(name, [0, 0, 0, 0])
        modules[name] = [median([r[0] for r in rows]), own[1], median([r[2] for r in rows]), own[3]]
    return {
        "scenario": scenario,
        "elapsed": median([d["elapsed"] for d in docs]),
        "spent": {k: [median([d["spent"][k][0] for d in docs]), docs[0]["spent"][k][1]] for k in docs[0]["spent"]},
        "traced": memory["traced"],
        "rss_kib": median([d["rss_kib"] for d in docs]),
        "modules": modules,
        "held": memory["held"],
    }


def report(doc: dict, top: int = 25) -> str:
    modules = doc["modules"]
    own = {name: (v[0] - v[2], v[1] - v[3]) for name, v in modules.items()}
    total_time = sum(t for t, _ in own.values())
    total_mem = sum(m for _, m in own.values())
    lines = [
        f"{doc['scenario']}: {doc['elapsed'] * 1000:.0f} ms in the process after the interpreter's start "
        f"(median), of which imports {total_time * 1000:.0f} ms ({len(modules)} modules, "
        f"{total_mem / 1e6:.1f} MB allocated while importing); {doc['traced'] / 1e6:.1f} MB still allocated "
        f"at the end (tracemalloc), VmRSS {doc['rss_kib'] / 1024:.1f} MB",
        "of which, imports included: "
        + "; ".join(f"{k} {v[0] * 1000:.0f} ms ({v[1]} calls)" for k, v in doc["spent"].items()),
        "",
        f"top {top} modules by own import time (ms own / cumulative, MB own):",
    ]
    for name, (t, m) in sorted(own.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"  {t * 1000:6.1f} / {modules[name][0] * 1000:6.1f}  {m / 1e6:5.2f}  {name}")
    lines += ["", f"top {top} modules by own memory (MB own / cumulative):"]
    for name, (_, m) in sorted(own.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"  {m / 1e6:5.2f} / {modules[name][1] / 1e6:5.2f}  {name}")
    groups: dict[str, float] = {}
    for name, (t, _) in own.items():
        key = ".".join(name.split(".")[:2]) if name.startswith("crashdoc.") else name.split(".")[0]
        groups[key] = groups.get(key, 0.0) + t
    lines += ["", "own import time by package (ms):"]
    for key, t in sorted(groups.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {t * 1000:6.1f}  {key}")
    lines += ["", f"top {top} source files by memory still allocated at the end (MB):"]
    root = str(ROOT)
    for where, size in sorted(doc["held"].items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {size / 1e6:5.2f}  {where.replace(root + '/', '')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.imports", description=__doc__.split("\n")[0])
    p.add_argument("scenario", choices=("explain", "run", "diagnose"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    doc = profile(a.scenario, a.runs)
    print(json.dumps(doc, indent=1) if a.json else report(doc, a.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
