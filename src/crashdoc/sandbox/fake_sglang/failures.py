"""The failure modes: which failure a run of the stand-in shows, chosen by its flags like the real server,
or by ``FAKE_SGLANG_*`` variables for what flags cannot express; and its timing knobs. The processes
(``launcher``, ``scheduler``) fail where SGLang fails, with its messages (``messages``). By the flags:

- ``--enable-hierarchical-cache --hicache-size N`` (N > 0) with a DeepSeek-V4 model path: every
  scheduler rank raises ``ValueError: DeepSeek V4 HiCache currently does not support --hicache-size;
  use --hicache-ratio instead.`` while building the host pool; each logs ``Scheduler hit an
  exception: Traceback ...``, SIGQUITs the launcher, which logs ``Received sigquit from a child
  process. It usually means the child failed.``, SIGKILLs its descendants and then itself
  (systemd: ``code=killed, status=9/KILL``). With ``--hicache-ratio R`` instead it starts.
- ``--enable-kv-cache-sharding`` without ``--disaggregation-mode prefill`` (or with
  ``--chunked-prefill-size`` <= 0), ``--enable-lmcache`` with ``--enable-hierarchical-cache``,
  ``--ssl-keyfile`` without ``--ssl-certfile``: the launcher's flag resolution raises ValueError
  before any child exists; a plain uncaught traceback, exit status 1.
- ``--mem-fraction-static`` >= 0.95: ``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate
  ...`` in the last TP rank while allocating the KV cache (then the SIGQUIT path above).
- An unknown flag: argparse's usage and ``sglang serve: error: ...``, exit status 2.
- Otherwise it loads, logs ``The server is fired up and ready to roll!`` and keeps printing
  ``Prefill batch, ...`` / ``Decode batch, ...`` lines from TP0.

Environment variables for what flags cannot express:

- ``FAKE_SGLANG_LOAD_SECONDS`` (default 0.5): how long "loading weights" takes (a slow start).
- ``FAKE_SGLANG_CRASH_AFTER=N``: after N seconds of healthy running every rank raises SGLang's
  ``RuntimeError: Decode out of memory. Try to lower your batch size. ...`` (a runtime crash; the
  launcher's running-phase handler logs ``SIGQUIT received. signum=None, frame=None. ...``).
- ``FAKE_SGLANG_FAILURE``: force a failure the flags do not select: ``cuda-oom``, ``runtime`` (with
  FAKE_SGLANG_CRASH_AFTER, default 3 s), ``host-oom`` (each rank really allocates host memory for its
  HiCache pool, ``FAKE_SGLANG_HOST_OOM_MB`` per rank, default 1024, so that a unit's ``MemoryMax=``
  gets it OOM-killed; the launcher then raises ``Rank N scheduler died during initialization (exit
  code: -9) ...`` and exits 1), or ``none``.
- ``FAKE_SGLANG_RAISE="ValueError: <message>"``: the launcher's flag resolution raises that (a check of
  another release, taken from its source by the test), a plain uncaught traceback, exit status 1.
- ``FAKE_SGLANG_BATCH_INTERVAL`` (default 2.0): seconds between batch lines.
- ``FAKE_SGLANG_KILL_GRACE`` (default 1 s + 0.5 s per extra rank): how long the launcher's SIGQUIT
  handler lets sibling ranks finish their own traceback before the kill (real ranks fail within
  milliseconds of each other; the fake's ranks are staggered by up to half a second per rank so that
  they report fractions of a second apart, as seen in real logs).
- ``SGLANG_LOG_MS=1``: milliseconds in timestamps, as in SGLang.
- ``FAKE_SGLANG_HANDLED=load-publisher``: TP0's load publisher cannot bind its socket and SGLang logs
  ``load-publisher disabled: failed to bind the load socket at ...`` with the ``zmq.error.ZMQError``
  traceback (scheduler_components/load_publisher.py:188, ``exc_info=True``), then starts and serves:
  a handled traceback in a healthy server.
"""

from __future__ import annotations

import os


def forced() -> str:
    """``FAKE_SGLANG_FAILURE``: a failure the flags do not select."""
    return os.environ.get("FAKE_SGLANG_FAILURE", "").strip().lower()


def env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def forced_raise() -> Exception | None:
    """``FAKE_SGLANG_RAISE="ValueError: <message>"``: the exception the launcher's flag resolution raises."""
    kind, sep, message = os.environ.get("FAKE_SGLANG_RAISE", "").partition(": ")
    if sep and kind in ("ValueError", "AssertionError", "RuntimeError"):
        return {"ValueError": ValueError, "AssertionError": AssertionError, "RuntimeError": RuntimeError}[kind](message)
    return None


def cuda_oom_selected(mem_fraction_static: float) -> bool:
    return mem_fraction_static >= 0.95 or forced() == "cuda-oom"


def host_oom_selected() -> bool:
    return forced() == "host-oom"


def host_oom_mb() -> int:
    """How much host memory each rank really allocates for its HiCache pool under ``host-oom``."""
    return int(env_float("FAKE_SGLANG_HOST_OOM_MB", 1024))


def load_publisher_fails() -> bool:
    return os.environ.get("FAKE_SGLANG_HANDLED") == "load-publisher"


def runtime_crash_after() -> float | None:
    """Seconds of healthy running before every rank runs out of memory in decode; None: it keeps serving."""
    crash_after = os.environ.get("FAKE_SGLANG_CRASH_AFTER")
    if crash_after is None and forced() == "runtime":
        crash_after = "3"
    return float(crash_after) if crash_after else None


def load_seconds() -> float:
    return max(0.0, env_float("FAKE_SGLANG_LOAD_SECONDS", 0.5))


def batch_interval() -> float:
    return max(0.2, env_float("FAKE_SGLANG_BATCH_INTERVAL", 2.0))


def kill_grace(tp_size: int) -> float:
    """How long the launcher's SIGQUIT handler lets the other ranks print their own traceback."""
    return env_float("FAKE_SGLANG_KILL_GRACE", 0.5 * (tp_size - 1) + 1.0)
