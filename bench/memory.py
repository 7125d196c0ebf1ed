"""crashdoc's memory: after following the whole generated journal, and during a flood.

- Baseline: VmHWM of a bare Python that imports crashdoc (the daemon's modules).
- Follow: `crashdoc run --directory <journal folder>` with a saved cursor at the journal's head, so
  the daemon follows all of it as it would after a restart; VmRSS/VmHWM once it has caught up.
- Flood: on a private systemd, a unit writes 10k lines/s for 60 s (bench/flood.py: long lines up
  to 48K, 400-frame tracebacks, a ~1000-frame RecursionError) while the two crash-looping units of
  the latency bench keep crashing. VmRSS is sampled every 0.5 s, `crashdoc_journal_lag_seconds`
  polled from /metrics; after the flood, how long until the lag is back under 1 s.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

from bench.common import PYTHON, ROOT, Results, bare_python_rss_kib, log, proc_status
from bench.journal_gen import JournalSet

LIMIT_MB = 45  # VmRSS once caught up (issue 26)
PEAK_LIMIT_MB = 50  # VmHWM while catching up, and during the flood (issue 26)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metrics(base: str) -> dict[str, float]:
    try:
        with urllib.request.urlopen(base + "/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def warm_state_cache(cache: Path) -> None:
    """What a daemon that ran before finds in `<state>/cache`: the compiled library's matching part and the C
    reader (a first start validates the YAML library, which leaves the heap of a validation behind, and builds
    the reader)."""
    from bench.common import library_folders
    from crashdoc.matching.cache import CompiledCache
    from crashdoc.matching.library import load_library
    from crashdoc.sources import fastread

    folders, _ = library_folders()
    load_library(folders, compiled=CompiledCache(cache), matching_only=True)  # what the daemon keeps
    fastread.built_library(cache)


def follow(js: JournalSet, workdir: Path, timeout: float = 600.0) -> dict[str, float]:
    """Run the daemon over the generated journal folder from its head; memory while it catches up (sampled
    every 0.1 s) and once it has (its "caught up with the journal" line, then a second of idling)."""

    from bench.catchup import daemon_config, head_cursor, start_daemon, stop_daemon

    state = workdir / "follow-state"
    warm_state_cache(state / "cache")
    d = start_daemon(js, state, daemon_config(workdir), head_cursor(js))
    proc, said, caught_up = d.proc, d.said, d.caught_up
    base = f"http://127.0.0.1:{d.port}"
    entries = int(js.meta["entries"])
    started = time.monotonic()
    peak = peak_anon = peak_file = 0
    try:
        while not caught_up.is_set():
            if proc.poll() is not None:
                raise RuntimeError(f"crashdoc run exited: {''.join(said)[-2000:]}")
            if time.monotonic() - started > timeout:
                raise RuntimeError("crashdoc did not catch up with the journal in time")
            now = proc_status(proc.pid)
            peak = max(peak, now.get("VmRSS", 0))
            peak_anon = max(peak_anon, now.get("RssAnon", 0))
            peak_file = max(peak_file, now.get("RssFile", 0) + now.get("RssShmem", 0))
            time.sleep(0.1)
        seconds = time.monotonic() - started
        time.sleep(1.0)
        status = proc_status(proc.pid)
        m = _metrics(base)
        return {
            "seconds": seconds,
            "rss_kib": status.get("VmRSS", 0),
            "hwm_kib": status.get("VmHWM", 0),
            "anon_kib": status.get("RssAnon", 0),
            "file_kib": status.get("RssFile", 0) + status.get("RssShmem", 0),
            "peak_sampled_kib": peak,
            "peak_anon_kib": peak_anon,
            "peak_file_kib": peak_file,
            "entries": entries,
            "units_looping": sum(v for k, v in m.items() if k.startswith("crashdoc_unit_crashloop{")),
            "crashes": sum(v for k, v in m.items() if k.startswith("crashdoc_crashes_total{")),
        }
    finally:
        stop_daemon(proc)


def flood(rate: float = 10_000, seconds: float = 60.0) -> dict[str, object]:
    from bench.latency import DECODE, PREFILL, _e2e, crash_units
    from crashdoc.sandbox.demo import package_root
    from crashdoc.sandbox.systemd import PrivateSystemd, make_workdir

    units = crash_units(restart_sec=1.0)
    flood_unit = "sglang-flood.service"
    units[flood_unit] = (
        "[Unit]\nDescription=a unit flooding the journal\nDefaultDependencies=no\n\n"
        "[Service]\nType=simple\nEnvironment=PYTHONUNBUFFERED=1\n"
        f"Environment=PYTHONPATH={ROOT}:{package_root()}\n"
        "LogRateLimitIntervalSec=0\n"
        f"ExecStart={PYTHON} -m bench.flood --rate {rate:.0f} --seconds {seconds:.0f}\n"
    )
    sandbox = PrivateSystemd(units, make_workdir(), start_units=[], keep_workdir=False)
    sandbox.start()
    cd = None
    try:
        # journald's own rate limit (10000 lines per 30 s, scaled by free space) would drop most of the
        # flood: the unit's LogRateLimitIntervalSec=0 needs cgroup xattrs the sandbox may not have
        sandbox.run(
            [
                "sh",
                "-c",
                "mkdir -p /run/systemd/journald.conf.d && printf '[Journal]\\nRateLimitInterval"
                "Sec=0\\nRateLimitBurst=0\\n' > /run/systemd/journald.conf.d/bench.conf && "
                "systemctl restart systemd-journald",
            ],
            check=True,
            timeout=60,
        )
        config = (
            "units:\n"
            f'  - {{name: "{PREFILL}", role: prefill}}\n'
            f'  - {{name: "{DECODE}", role: decode}}\n'
            f'  - {{name: "{flood_unit}", role: decode}}\n'
        )
        cd = _e2e().start_crashdoc(sandbox, config=config)
        pid = cd.pid
        assert pid is not None
        sandbox.systemctl("start", PREFILL, DECODE, check=True)
        time.sleep(3)
        before = proc_status(pid)
        sandbox.systemctl("start", flood_unit, check=True)
        started = time.monotonic()
        samples: list[tuple[float, int, float, int]] = []
        recovered_at = None
        while True:
            t = time.monotonic() - started
            m = _metrics(cd.base)
            now = proc_status(pid)
            rss = now.get("VmRSS", 0)
            lag = m.get("crashdoc_journal_lag_seconds", float("nan"))
            samples.append((t, rss, lag, now.get("RssAnon", 0)))
            if t > seconds and lag < 1.0 and recovered_at is None:
                recovered_at = t
            if recovered_at is not None or t > seconds + 120:
                break
            time.sleep(0.5)
        status = proc_status(pid)
        m = _metrics(cd.base)
        looping = {u: m.get(f'crashdoc_unit_crashloop{{unit="{u}"}}', 0.0) for u in (PREFILL, DECODE)}
        written = sandbox.run(
            ["sh", "-c", f"journalctl -u {flood_unit} -o cat --no-pager | wc -l"], timeout=120
        ).stdout.strip()
        report = sandbox.journalctl("-u", flood_unit, "-o", "cat", "-g", "^flood: ", timeout=120).stdout.strip()
        suppressed = sandbox.journalctl("-o", "cat", "-g", "Suppressed", timeout=60).stdout.strip()
        return {
            "rss_before_kib": before.get("VmRSS", 0),
            "rss_max_kib": max(s[1] for s in samples),
            "hwm_kib": status.get("VmHWM", 0),
            "rss_end_kib": status.get("VmRSS", 0),
            "anon_max_kib": max(s[3] for s in samples),
            "file_end_kib": status.get("RssFile", 0) + status.get("RssShmem", 0),
            "lag_max": max((s[2] for s in samples if s[2] == s[2]), default=float("nan")),
            "recovered_after_flood": None if recovered_at is None else recovered_at - seconds,
            "flood_entries": int(written or 0),
            "writer": report.splitlines()[-1] if report else "",
            "suppressed": suppressed.splitlines()[-3:],
            "entries_read": m.get("crashdoc_journal_entries_read_total", m.get("crashdoc_journal_entries_read", 0)),
            "looping": looping,
            "samples": samples,
        }
    finally:
        if cd is not None:
            cd.stop()
        sandbox.stop()


def run(js: JournalSet | None, results: Results, flood_seconds: float = 60.0, rate: float = 10_000) -> None:
    from crashdoc.sandbox.systemd import make_workdir, unavailable_reason

    base = bare_python_rss_kib()
    results.add("memory", "baseline: bare Python importing crashdoc", f"{base / 1024:.1f} MB (VmHWM)")
    results.raw["memory_baseline_kib"] = base
    if js is not None:
        workdir = make_workdir()
        try:
            log(f"memory: crashdoc run following {js.meta['entries']:,} entries ...")
            f = follow(js, workdir)
        finally:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
        results.raw["memory_follow"] = f
        mb = f["hwm_kib"] / 1024
        rss = f["rss_kib"] / 1024
        results.add(
            "memory",
            f"after following {f['entries']:,} entries (crashdoc run)",
            f"{rss:.1f} MB RSS (VmHWM {mb:.1f} MB)",
            f"{rss / (base / 1024):.2f} x baseline",
            f"VmRSS <= {LIMIT_MB} MB",
            rss <= LIMIT_MB,
            note=f"of which {f['anon_kib'] / 1024:.1f} MB anonymous (heap), {f['file_kib'] / 1024:.1f} MB "
            f"file pages (shared libraries + journal); peak during catch-up: heap "
            f"{f['peak_anon_kib'] / 1024:.1f} MB, file {f['peak_file_kib'] / 1024:.1f} MB; "
            f"caught up in {f['seconds']:.1f} s ({f['entries'] / f['seconds']:,.0f}"
            f" entries/s); {f['crashes']:.0f} crashes counted",
        )
        results.add(
            "memory",
            f"peak while catching up on {f['entries']:,} entries (VmHWM)",
            f"{mb:.1f} MB",
            f"{mb / (base / 1024):.2f} x baseline",
            f"<= {PEAK_LIMIT_MB} MB",
            mb <= PEAK_LIMIT_MB,
        )
    reason = unavailable_reason()
    if reason is not None:
        results.add("memory", "flood", "skipped", note=f"cannot boot a private systemd: {reason}")
        return
    log(f"memory: {rate:.0f} lines/s for {flood_seconds:.0f} s into the journal while two units crash-loop ...")
    fl = flood(rate, flood_seconds)
    results.raw["memory_flood"] = {k: v for k, v in fl.items() if k != "samples"}
    results.raw["memory_flood_samples"] = fl["samples"]
    mb = fl["hwm_kib"] / 1024  # type: ignore[operator]
    rec = fl["recovered_after_flood"]
    results.add(
        "memory",
        f"flood {rate / 1000:.0f}k lines/s x {flood_seconds:.0f} s, others crash-looping",
        f"{fl['rss_max_kib'] / 1024:.1f} MB max RSS, {mb:.1f} MB HWM",  # type: ignore[operator]
        f"{mb / (base / 1024):.2f} x baseline",
        f"<= {PEAK_LIMIT_MB} MB",
        mb <= PEAK_LIMIT_MB,
        note=f"max {fl['anon_max_kib'] / 1024:.1f} MB anonymous (heap), {fl['file_end_kib'] / 1024:.1f} MB "
        f"file pages (shared libraries + journal) at the end; {fl['flood_entries']:,} flood entries "
        "in the journal "
        f"({fl['writer'] or 'writer report missing'}); "
        f"loops still diagnosed: {sum(1 for v in fl['looping'].values() if v == 1.0)}/2",
    )  # type: ignore
    results.add(
        "memory",
        "journal lag during the flood",
        f"max {fl['lag_max']:.1f} s",
        target="recovers",
        ok=rec is not None,
        note="back under 1 s " + (f"{rec:.1f} s after the flood ended" if rec is not None else "never (120 s)"),
    )
