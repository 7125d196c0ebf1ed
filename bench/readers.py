"""The baseline ways of reading a journal, each run alone in a fresh process.

`python -m bench.readers CASE FILE...` prints {"entries": N, "seconds": S, "cpu": C} (the read
itself: open, walk, close; not the interpreter's start-up; C: this process's CPU seconds).

- floor:   systemd-python `_next()` + `_get()` of MESSAGE, _PID, _SYSTEMD_UNIT (bytes): the raw floor
- default: `for entry in Reader(files=...)` with systemd-python's default converters
- json:    `journalctl --file ... -o json` piped into Python, `json.loads` per line
"""

from __future__ import annotations

import json
import subprocess
import sys
import time


def floor(files: list[str]) -> int:
    from systemd import journal

    r = journal.Reader(files=files)
    nxt, get = r._next, r._get
    n = 0
    while nxt():
        n += 1
        try:
            get("MESSAGE")
            get("_PID")
            get("_SYSTEMD_UNIT")
        except KeyError:
            pass
    r.close()
    return n


def default(files: list[str]) -> int:
    from systemd import journal

    r = journal.Reader(files=files)
    n = 0
    for _entry in r:
        n += 1
    r.close()
    return n


def json_pipe(files: list[str]) -> int:
    argv = ["journalctl", "--no-pager", "-o", "json"]
    for f in files:
        argv += ["--file", f]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, bufsize=1 << 20)
    assert proc.stdout is not None
    n = 0
    loads = json.loads
    for line in proc.stdout:
        loads(line)
        n += 1
    if proc.wait() != 0:
        raise RuntimeError("journalctl failed")
    return n


CASES = {"floor": floor, "default": default, "json": json_pipe}


def main(argv: list[str]) -> int:
    case, files = argv[0], argv[1:]
    started, cpu = time.perf_counter(), time.process_time()
    n = CASES[case](files)
    print(json.dumps({"entries": n, "seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
