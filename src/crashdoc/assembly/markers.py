"""Lines that matter for crash-loop detection even when nothing is raised.

SGLang prints these at fixed points of its life (anchor strings from SGLang 0.5.23:
http_server.py "fired up and ready to roll", engine.py's SIGQUIT handlers, watchdog.py,
server_args.py's `server_args=ServerArgs(...)`). One literal check per line keeps this off
the profile; the precise parse happens only on a hit.
"""

from __future__ import annotations

import re
import sys

from crashdoc.assembly import memory_lines as memory
from crashdoc.assembly.logline import split_prefix
from crashdoc.events import LogLine, Marker
from crashdoc.text import LazyPattern

# (kind, literal that must appear in the line)
MARKERS: tuple[tuple[str, str], ...] = (
    ("ready", "The server is fired up and ready to roll"),
    ("sigquit", "Received sigquit from a child process"),
    ("sigquit", "It usually means one child failed"),
    ("child-crashed", "Triggering SIGQUIT for cleanup"),
    ("watchdog-timeout", "watchdog timeout (self.watchdog_timeout="),
    ("server-args", "server_args="),
    ("kv-cache", memory.KV_CACHE),
    ("loading", memory.LOAD_BEGIN),
    ("kill-tree", "kill_process_tree called"),
    ("warmup-failed", "Initialization failed. warmup error"),
    ("terminated", "terminated with"),
    # the scheduler's periodic batch lines (scheduler_components/metrics_reporter.py; `Decode batch. ` before
    # 0.5; "ready to roll" and both batch lines are in every release's wheel from 0.4.0 to 0.5.23): serving
    ("serving", "Decode batch"),
    ("serving", "Prefill batch"),
    ("serving", ' HTTP/1.1" 200'),  # uvicorn's access log: a request the HTTP server answered
    ("child-failed", "Child process unexpectedly failed"),  # engine.py's SIGCHLD handler (0.4.x)
    # utils/common.py retry(): traceback.print_exc(), then this record, then it tries again
    ("retrying", "retry() failed once"),
    # GPU memory as each rank reports it, for OOM actions computed from the run's own numbers (remedy.actions)
    ("weights-loaded", memory.LOAD_END),
    ("pool-end", memory.POOL_END),
    ("graph-begin", memory.GRAPH_BEGIN),
    ("nccl-work", "last enqueued NCCL work:"),  # PyTorch's watchdog: how far each rank got
    ("sglang-version", "sglang version: "),  # SGLang's `sglang version` (cli/main.py), run by a launch script
    ("sglang-version", "Successfully installed "),  # pip, from an ExecStartPre that installs SGLang
)
# Kinds that say the run is going down: a traceback before one of these was fatal, whatever followed it.
TEARDOWN_KINDS = frozenset({"sigquit", "child-crashed", "kill-tree", "warmup-failed", "terminated", "child-failed"})

# How SGLang words a record it logs with `exc_info=True` (or a formatted traceback) and then carries on:
# "load-publisher disabled: ...", "Polling /server_info failed; retrying.", "Warmup round failed; continuing.",
# "IPC all-to-all unavailable (...); using NCCL", "... falling back to CPU.", "Error ignored in ...".
_HANDLED_WORDING = LazyPattern(
    r"\b(?:disabled|retrying|will retry|continuing|falling back|fall(?:s|ing)? back|fallback|skipping|ignor(?:ed|ing)"
    r"|unavailable|using \S+ instead)\b|; using \w+"
    r"|Exception in ASGI application",  # uvicorn: one request failed, the server goes on
    re.IGNORECASE,
)


def handled_wording(record: str) -> bool:
    """Whether the log record a traceback was printed under says SGLang carried on."""
    _, _, body = split_prefix(record)
    return _HANDLED_WORDING.search(body[:300]) is not None


_LITERALS: tuple[str, ...] = tuple(literal for _, literal in MARKERS)
SERVING_LITERALS = frozenset(literal for kind, literal in MARKERS if kind == "serving")
_KIND = {literal: kind for kind, literal in MARKERS}


def _leftmost(text: str) -> str | None:
    """The marker literal that starts first in `text` (ties: the earlier one in MARKERS).

    The same answer as one `re` alternation of the literals, which costs 5-10x more: `re` tries
    every alternative at every position, while `in` is a fast substring search per literal
    and most lines hold none of them.
    """
    found: str | None = None
    at = -1
    for literal in _LITERALS:
        if literal in text:
            pos = text.find(literal)
            if found is None or pos < at:
                found, at = literal, pos
    return found


def find_marker(line: LogLine, literal: str | None = None) -> Marker | None:
    """The marker of `line`; `literal`: the one marker literal the line is known to hold (the engine's
    RE2 pass says so), which spares the search."""
    if literal is None:
        literal = _leftmost(line.text)
    if literal is None:
        return None
    kind = _KIND[literal]
    if kind == "terminated" and "Scheduler or DataParallelController" not in line.text:
        return None
    _, rank, body = split_prefix(line.text)  # interned: each run logs the same markers (`parse_server_args`)
    return Marker(line.unit, line.pid, kind, sys.intern(body), line.timestamp, line.invocation, rank=rank)


def launches_sglang(cmdline: str) -> bool:
    """Whether a process's command line (journald's _CMDLINE, argv joined by spaces) starts SGLang's server."""
    return "sglang.launch_server" in cmdline or "sglang serve" in cmdline or "/sglang serve" in cmdline


_LOGGED_RELEASE = LazyPattern(
    r"sglang version: ([0-9][\w.+!-]{0,40})|Successfully installed .*?\bsglang-([0-9][\w.+!]{0,40})"
)


def logged_release(text: str) -> str:
    """The SGLang release a `sglang-version` marker names ("" when the pip line installed no sglang)."""
    m = _LOGGED_RELEASE.search(text)
    return (m.group(1) or m.group(2)) if m else ""


_VALUE = r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\[[^\]]*\]|\{[^}]*\}|[^,(){}]+)"""
# \b: a name starts at a word boundary; without it findall retries \w+ inside every long word (quadratic)
_SERVER_ARG = LazyPattern(r"\b(\w+)=" + _VALUE)  # server_args=ServerArgs(name=value, ...) (before 0.5.2x)
_SERVER_ARG_DICT = LazyPattern(r"'(\w+)':\s*" + _VALUE)  # server_args={'name': value, ...} (0.5.23)


def parse_server_args(text: str) -> dict[str, str]:
    """`server_args={'model_path': 'x', 'tp_size': 8, ...}` (or the older `ServerArgs(...)` form) ->
    {"--model-path": "x", "--tp-size": "8"}.

    These are the resolved values, not the argv, but they let a diagnosis read a flag's value
    from journal files alone (no D-Bus, no unit file). Names and values are interned: every run of a unit logs the
    same ~90 of them, and a daemon keeps sixteen runs a unit (0.35 MB of copies after a 2M-entry catch-up).
    """
    start = text.find("ServerArgs(")
    if start >= 0:
        pairs = _SERVER_ARG.findall(text[start + len("ServerArgs(") :])
    else:
        start = text.find("server_args={")
        if start < 0:
            return {}
        pairs = _SERVER_ARG_DICT.findall(text[start + len("server_args={") :])
    flags: dict[str, str] = {}
    for name, raw in pairs:
        value = raw.strip()
        if value[:1] in "'\"" and value[-1:] == value[:1]:
            value = value[1:-1]
        flags[sys.intern("--" + name.replace("_", "-"))] = sys.intern(value)
    return flags
