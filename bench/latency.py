"""Detection latency on a private systemd: a crash's last log line -> crashdoc shows its diagnosis.

Two crash-looping units run fake SGLang (`crashdoc.sandbox.fake_sglang`) with its real messages:

- sglang-prefill.service: DeepSeek-V4 with `--hicache-size` (every TP rank raises SGLang's
  ValueError inside a scheduler process, the launcher logs the SIGQUIT line and SIGKILLs its tree);
- sglang-decode.service: `--enable-lmcache` with `--enable-hierarchical-cache` (the launcher's flag
  resolution raises before any child exists: a plain traceback, exit status 1).

Each crash is a new run (systemd INVOCATION_ID), so each is a fresh diagnosis event: crash k of a
unit counts as shown once `/metrics` has `crashdoc_crashes_total` summed over the unit's signatures
>= k *and* `/diagnoses` has a diagnosis of that unit naming that run's invocation (the loop's
diagnosis moves to the newest crash of its root cause; before the loop, the crash's own one).
Both are polled from the host every `interval` (the sandbox shares the network namespace).

The reference time is the journal's `__REALTIME_TIMESTAMP` of the run's last line (its newest
stdout entry), read back with journalctl afterwards; PID 1's "Main process exited" record splits
the latency into the process's dying (last line -> exit) and crashdoc's part (exit -> shown).

`load` N (`python -m bench --only latency --latency-load 20`): N CPU-heavy child processes spin beside the
daemon for the whole measurement, the stand-in for the fix checks (SGLang's argument checks of candidate
fixes, run outside the daemon's process): the detection latency must not move while they run (issue 26:
p50 <= 300 ms, p99 <= 600 ms). `python -m bench.accepted_latency` measures beside the real ones: twenty fix
searches the daemon runs with SGLang 0.5.23's own checks (`beside`, `beside_units`).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import PYTHON, ROOT, Results, log, percentile

PREFILL = "sglang-prefill.service"
DECODE = "sglang-decode.service"
EXITED = "98e322203f7a4ed290d09fe03c09fe15"


def crash_units(restart_sec: float = 0.3) -> dict[str, str]:
    from crashdoc.sandbox.demo import sglang_unit

    fake = [
        PYTHON,
        "-m",
        "crashdoc.sandbox.fake_sglang",
        "--model-path",
        "deepseek-ai/DeepSeek-V4-Flash",
        "--trust-remote-code",
        "--tp-size",
        "1",
    ]
    env = {"FAKE_SGLANG_LOAD_SECONDS": "0", "FAKE_SGLANG_KILL_GRACE": "0"}
    prefill = [
        *fake,
        "--port",
        "30000",
        "--disaggregation-mode",
        "prefill",
        "--enable-hierarchical-cache",
        "--hicache-size",
        "150",
    ]
    decode = [
        *fake,
        "--port",
        "30001",
        "--disaggregation-mode",
        "decode",
        "--enable-hierarchical-cache",
        "--enable-lmcache",
    ]
    return {
        PREFILL: sglang_unit(
            "SGLang prefill (DSV4, --hicache-size)", " ".join(prefill), env=env, restart_sec=restart_sec
        ),
        DECODE: sglang_unit("SGLang decode (LMCache + HiCache)", " ".join(decode), env=env, restart_sec=restart_sec),
    }


@dataclass
class Observer:
    """Polls /metrics and /diagnoses; remembers when each crash count and each invocation first appeared."""

    base: str
    interval: float = 0.02
    counts: dict[str, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    invocations: dict[tuple[str, str], float] = field(default_factory=dict)
    polls: int = 0
    errors: int = 0
    lag: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.base + path, timeout=2) as r:
            return r.read()

    def _run(self) -> None:
        last: dict[str, int] = {}
        while not self._stop.is_set():
            began = time.time()
            try:
                metrics = self._get("/metrics").decode()
                at = time.time()
                totals: dict[str, int] = defaultdict(int)
                for line in metrics.splitlines():
                    if line.startswith("crashdoc_crashes_total{"):
                        labels, _, value = line.rpartition(" ")
                        unit = labels.split('unit="', 1)[1].split('"', 1)[0]
                        totals[unit] += int(float(value))
                    elif line.startswith("crashdoc_journal_lag_seconds "):
                        self.lag.append(float(line.split()[1]))
                for unit, total in totals.items():
                    if total != last.get(unit):
                        last[unit] = total
                        self.counts[unit].append((total, at))
                diagnoses = json.loads(self._get("/diagnoses"))["diagnoses"]
                at = time.time()
                for d in diagnoses:
                    key = (d["unit"], d.get("invocation") or "")
                    self.invocations.setdefault(key, at)
                self.polls += 1
            except (OSError, ValueError):
                self.errors += 1
            self._stop.wait(max(0.0, self.interval - (time.time() - began)))

    def count_seen(self, unit: str, k: int) -> float | None:
        for total, at in self.counts.get(unit, []):
            if total >= k:
                return at
        return None


def crash_truth(sandbox, unit: str) -> list[dict[str, float | str]]:
    """Each ended run of `unit`: invocation, last line's and exit record's journal times."""
    out = sandbox.journalctl(
        "-o",
        "json",
        "-u",
        unit,
        "--output-fields=MESSAGE_ID,INVOCATION_ID,_SYSTEMD_INVOCATION_ID,_PID,__REALTIME_TIMESTAMP",
        timeout=60,
    ).stdout
    last_line: dict[str, float] = {}
    exits: list[tuple[str, float]] = []
    for raw in out.splitlines():
        e = json.loads(raw)
        ts = int(e["__REALTIME_TIMESTAMP"]) / 1e6
        if e.get("_PID") == "1":
            if e.get("MESSAGE_ID") == EXITED and e.get("INVOCATION_ID"):
                exits.append((e["INVOCATION_ID"], ts))
        elif e.get("_SYSTEMD_INVOCATION_ID"):
            inv = e["_SYSTEMD_INVOCATION_ID"]
            last_line[inv] = max(ts, last_line.get(inv, 0.0))
    return [
        {"unit": unit, "invocation": inv, "exit": at, "last_line": last_line[inv]}
        for inv, at in exits
        if inv in last_line
    ]


# a CPU-heavy child: spins until its parent (the bench) is gone or it is stopped
_BUSY = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    sum(i * i for i in range(20000))\n"


def busy_children(n: int) -> list[subprocess.Popen[bytes]]:
    """`n` CPU-heavy processes beside the daemon (stop them with `stop_children`)."""
    return [subprocess.Popen([PYTHON, "-c", _BUSY], stdin=subprocess.DEVNULL) for _ in range(n)]


def stop_children(children: list[subprocess.Popen[bytes]]) -> None:
    """Stop the children `busy_children` started, each by its own handle."""
    for child in children:
        child.kill()
    for child in children:
        child.wait(10)


def measure(
    crashes: int = 50,
    dbus: bool = True,
    interval: float = 0.02,
    timeout: float = 300.0,
    restart_sec: float = 0.3,
    units: tuple[str, ...] = (PREFILL, DECODE),
    beside: Callable[[Any, Any], Callable[[], dict]] | None = None,
    beside_units: Callable[[Path], dict[str, str]] | None = None,
    load: int = 0,
) -> dict:
    """`load`: CPU-heavy children beside the daemon; `beside_units(workdir)`: more units in the sandbox (watched
    as role any); `beside(sandbox, crashdoc)`: run once crashdoc is up, before the measured units start (work to
    measure beside, e.g. `bench.accepted_latency`'s real fix searches); what it returns is called at the end and
    its result kept as `res["beside"]`."""
    from crashdoc.sandbox.systemd import PrivateSystemd, make_workdir

    start_crashdoc = _e2e().start_crashdoc

    workdir = make_workdir()
    more = beside_units(workdir) if beside_units is not None else {}
    sandbox = PrivateSystemd({**crash_units(restart_sec), **more}, workdir, start_units=[], keep_workdir=False)
    sandbox.start()
    cd = None
    obs = None
    children: list[subprocess.Popen[bytes]] = []
    try:
        config = (
            "units:\n"
            f'  - {{name: "{PREFILL}", role: prefill}}\n'
            f'  - {{name: "{DECODE}", role: decode}}\n'
            + "".join(f'  - {{name: "{name}", role: any}}\n' for name in more)
            + f"dbus: {'true' if dbus else 'false'}\n"
        )
        cd = start_crashdoc(sandbox, config=config)
        after = beside(sandbox, cd) if beside is not None else None
        obs = Observer(cd.base, interval)
        obs.start()
        children = busy_children(load)
        sandbox.systemctl("start", *units, check=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = sum(total for unit in units for total, _ in obs.counts.get(unit, [])[-1:])
            if seen >= crashes + 2:
                break
            time.sleep(0.5)
        sandbox.systemctl("stop", *units)
        time.sleep(1.5)
        obs.stop()
        truth = [t for unit in units for t in crash_truth(sandbox, unit)]
        samples = []
        for unit in units:
            runs = sorted((t for t in truth if t["unit"] == unit), key=lambda t: t["exit"])
            for k, run in enumerate(runs, start=1):
                count_at = obs.count_seen(unit, k)
                diag_at = obs.invocations.get((unit, str(run["invocation"])))
                if count_at is None or diag_at is None:
                    continue
                shown = max(count_at, diag_at)
                samples.append(
                    {
                        "unit": unit,
                        "k": k,
                        "latency": shown - float(run["last_line"]),
                        "dying": float(run["exit"]) - float(run["last_line"]),
                        "crashdoc": shown - float(run["exit"]),
                        "metric": count_at - float(run["last_line"]),
                        "diagnoses": diag_at - float(run["last_line"]),
                    }
                )
        samples.sort(key=lambda s: s["latency"])
        histogram = _histogram(cd)
        return {
            "beside": after() if after is not None else {},
            "crashes_ended": len(truth),
            "samples": samples,
            "polls": obs.polls,
            "poll_errors": obs.errors,
            "interval": interval,
            "dbus": dbus,
            "max_lag": max(obs.lag, default=0.0),
            "histogram": histogram,
            "load": load,
        }
    finally:
        stop_children(children)
        if obs is not None:
            obs.stop()
        if cd is not None:
            cd.stop()
        sandbox.stop()


def _e2e():
    """tests/support/e2e.py: how the end-to-end tests start crashdoc inside a sandbox (one way, shared)."""
    import importlib
    import sys

    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    return importlib.import_module("support.e2e")


def _histogram(cd) -> dict[str, float]:
    try:
        with urllib.request.urlopen(cd.base + "/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("crashdoc_time_to_diagnosis_seconds_") and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def summarize(res: dict, crashes: int) -> dict[str, float]:
    samples = res["samples"]
    # the first `crashes` crashes in time order per run, not the fastest ones
    ordered = sorted(samples, key=lambda s: (s["k"], s["unit"]))[:crashes]
    lat = [s["latency"] for s in ordered]
    return {
        "n": len(lat),
        "p50": percentile(lat, 50),
        "p99": percentile(lat, 99),
        "max": max(lat, default=float("nan")),
        "dying_p50": percentile([s["dying"] for s in ordered], 50),
        "crashdoc_p50": percentile([s["crashdoc"] for s in ordered], 50),
        "crashdoc_p99": percentile([s["crashdoc"] for s in ordered], 99),
        "metric_p50": percentile([s["metric"] for s in ordered], 50),
        "diagnoses_p50": percentile([s["diagnoses"] for s in ordered], 50),
    }


def run(results: Results, crashes: int = 50, journal_only: bool = True, load: int = 0) -> None:
    from crashdoc.sandbox.systemd import unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        results.add("latency", "detection latency", "skipped", note=f"cannot boot a private systemd: {reason}")
        return
    # (D-Bus, crashes, RestartSec): the main case, then what the journal alone gives, then crashes
    # 5 s apart, so that crashdoc is idle (no short timer) when each one comes
    # (D-Bus, crashes, RestartSec, CPU-heavy children): the main case; with `load`, the same while the
    # children spin; then what the journal alone gives, then crashes 5 s apart, so that crashdoc is idle
    # (no short timer) when each one comes
    variants = [(True, crashes, 0.3, 0)]
    if load:
        variants.append((True, crashes, 0.3, load))
    if journal_only:
        variants += [(False, max(10, crashes // 2), 0.3, 0), (True, 10, 5.0, 0), (False, 10, 5.0, 0)]
    for dbus, n, restart_sec, children in variants:
        log(f"latency: {n} crashes, D-Bus {'on' if dbus else 'off'}, RestartSec={restart_sec}, {children} busy ...")
        res = measure(
            n,
            dbus=dbus,
            restart_sec=restart_sec,
            units=(PREFILL, DECODE) if restart_sec < 1 else (DECODE,),
            load=children,
        )
        s = summarize(res, n)
        results.raw[f"latency_dbus_{dbus}_restart_{restart_sec}_load_{children}"] = {"summary": s, **res}
        name = "crash -> /metrics + /diagnoses" + ("" if dbus else " (dbus: false, journal only)")
        if restart_sec > 1:
            name += f", isolated crashes of one unit (RestartSec={restart_sec:g})"
        if children:
            name += f", while {children} CPU-heavy children run (the fix checks' stand-in)"
        main_case = dbus and restart_sec < 1 and not children
        loaded = bool(children)  # issue 26: p50 <= 300 ms, p99 <= 600 ms while the fix checks run
        ok_p50 = s["p50"] <= (0.3 if loaded else 0.25)
        ok_p99 = s["p99"] <= (0.6 if loaded else 1.0)
        results.add(
            "latency",
            f"{name}, p50",
            f"{s['p50'] * 1000:.0f} ms",
            target="<= 250 ms" if main_case else "<= 300 ms" if loaded else "",
            ok=ok_p50 if main_case or loaded else None,
            note=f"{s['n']} crashes; process dying (last line -> exit) p50 {s['dying_p50'] * 1000:.0f} ms, "
            f"crashdoc (exit -> shown) p50 {s['crashdoc_p50'] * 1000:.0f} ms",
        )
        results.add(
            "latency",
            f"{name}, p99",
            f"{s['p99'] * 1000:.0f} ms",
            target="<= 1 s" if main_case else "<= 600 ms" if loaded else "",
            ok=ok_p99 if main_case or loaded else None,
            note=f"max {s['max'] * 1000:.0f} ms; crashdoc part p99 {s['crashdoc_p99'] * 1000:.0f} ms; "
            f"polled every {res['interval'] * 1000:.0f} ms",
        )
