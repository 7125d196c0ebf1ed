"""A unit that floods the journal: `python -m bench.flood --rate 10000 --seconds 60` (stdout, one line each).

Mostly SGLang decode-batch lines from TP0, plus the shapes that stress a journal follower:
long lines (up to journald's LineMax of 48K), huge tracebacks (a scheduler exception 400 frames
deep) and a real RecursionError of about 1000 frames (mutual recursion, so Python does not fold
the frames into "[Previous line repeated ...]"). Prints what it wrote to stderr at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback


def _ping(n: int) -> int:
    return _pong(n + 1)


def _pong(n: int) -> int:
    return _ping(n + 1)


def recursion_traceback() -> str:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        _ping(0)
    except RecursionError:
        return traceback.format_exc()
    finally:
        sys.setrecursionlimit(old)
    return ""


def deep_traceback(depth: int) -> str:
    lines = ["Traceback (most recent call last):"]
    for i in range(depth):
        lines.append(
            f'  File "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/layers/deep_{i % 50}.py", '
            f"line {100 + i}, in forward_{i}"
        )
        lines.append(f"    return self.layer_{i + 1}(hidden_states, positions, forward_batch)")
    lines.append(
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=float, default=10_000)
    p.add_argument("--seconds", type=float, default=60)
    a = p.parse_args(argv)
    out = os.fdopen(1, "wb", buffering=0)
    rng = random.Random(1)
    recursion = recursion_traceback()
    deep = deep_traceback(400)
    written = long_lines = tracebacks = 0
    started = time.monotonic()
    tick = 0.01
    per_tick = a.rate * tick
    due = 0.0
    next_tb = 5.0
    next_rec = 20.0
    while True:
        now = time.monotonic() - started
        if now >= a.seconds:
            break
        due += per_tick
        chunk: list[str] = []
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        while due >= 1:
            due -= 1
            if written % 1000 == 999:
                size = rng.randint(4_000, 48 * 1024 - 200)
                chunk.append(f"[{stamp} TP0] Prefill batch, prompt dump: " + "x" * size)
                long_lines += 1
            else:
                chunk.append(
                    f"[{stamp} TP0] Decode batch, #running-req: {rng.randint(8, 64)}, #token: "
                    f"{rng.randint(1000, 90000)}, token usage: {rng.random():.2f}, cuda graph: True, "
                    f"gen throughput (token/s): {rng.uniform(900, 2400):.2f}, #queue-req: 0"
                )
            written += 1
        if now >= next_tb:
            tb = deep.split("\n")
            chunk.append(f"[{stamp} TP1] Scheduler hit an exception: {tb[0]}")
            chunk.extend(tb[1:])
            chunk.append("")
            written += len(tb) + 1
            tracebacks += 1
            next_tb += 5.0
        if now >= next_rec:
            tb = recursion.rstrip("\n").split("\n")
            chunk.append(f"[{stamp} TP2] Scheduler hit an exception: {tb[0]}")
            chunk.extend(tb[1:])
            chunk.append("")
            written += len(tb) + 1
            tracebacks += 1
            next_rec += 20.0
        if chunk:
            out.write(("\n".join(chunk) + "\n").encode())
        sleep = tick - ((time.monotonic() - started) - now)
        if sleep > 0:
            time.sleep(sleep)
    elapsed = time.monotonic() - started
    print(
        f"flood: {written} lines in {elapsed:.1f} s ({written / elapsed:.0f}/s), {long_lines} long lines, "
        f"{tracebacks} tracebacks, recursion traceback {recursion.count(chr(10))} lines",
        file=sys.stderr,
    )
    # stay alive (idle) so the unit does not restart and flood again
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
