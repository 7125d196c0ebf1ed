"""A stand-in for ``python -m sglang.launch_server`` (SGLang 0.5.23) with its process shape and messages.

Why: crashdoc has to be proven against what SGLang really does under systemd (a launcher, one spawned
scheduler process per TP rank, a detokenizer, whole tracebacks in one log record, a SIGQUIT to the
launcher and a self-SIGKILL), and GPUs are not available in tests. Every message below is copied from
SGLang 0.5.23's source; the failing frames are real Python frames raised in the right process.
Standard library only, unbuffered output.

Run it as ``python -m crashdoc.sandbox.fake_sglang --model-path M --tp-size 2 ...``; what happens follows from
the flags, like the real server, and from ``FAKE_SGLANG_*`` variables for what flags cannot express (both
listed in ``failures``). Its parts: the launcher process (``launcher``), a scheduler rank and the detokenizer
(``scheduler``), SGLang's process plumbing (``process_control``), its flags and their resolution
(``server_args``), its texts and exception types (``messages``), and the failure modes (``failures``).
"""

from __future__ import annotations

from crashdoc.sandbox.fake_sglang.launcher import main

__all__ = ["main"]
