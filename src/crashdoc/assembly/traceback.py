"""Putting Python tracebacks back together from journal lines.

journald stores one entry per line, and the ranks of one unit interleave, so each process
(`_PID`) gets its own small state machine. A traceback starts at `Traceback (most recent
call last):` (bare, or wrapped by SGLang as `Scheduler hit an exception: Traceback ...`) or,
in a log that was cut, at a `  File "..."` line. Frames follow, then `Type: message`,
message continuation lines, and possibly a chained exception. It ends at the next
prefixed SGLang line, a new header, a blank line after a wrapped record (SGLang's records
end with a newline), or when the caller flushes it (the process died or went quiet).

A native crash dumped by faulthandler (`Fatal Python error: Segmentation fault`, then one
`Thread 0x... (most recent call first):` block per thread with `  File "x", line N in f`
frames) becomes a traceback too: type `Fatal Python error`, the signal as its message and the
frames of the *current* thread, innermost last. The other threads were idle (waiting on a
lock, a queue, tqdm's monitor): they are counted, never taken for the cause.

Everything is bounded: frames, message lines and text per traceback, and the number of
processes with a traceback in progress.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crashdoc.assembly.logline import has_prefix, split_prefix
from crashdoc.events import LogLine
from crashdoc.text import LazyPattern, clean

if TYPE_CHECKING:
    from crashdoc.failure_records import ExceptionInfo, Frame, Traceback

TRACEBACK_HEAD = "Traceback (most recent call last):"
CHAIN_MARKERS = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
_HEADER_STARTS = ("Exception in thread", "Process Process-", "Process SpawnProcess-", "Fatal Python error")
_FRAME = LazyPattern(r'\s*File "(?P<file>[^"]*)", line (?P<line>\d+)(?:,? in (?P<func>.*))?$')
FATAL_TYPE = "Fatal Python error"  # faulthandler's dump of a native crash (SIGSEGV, SIGABRT, SIGBUS, ...)
_FATAL = LazyPattern(r"Fatal Python error: (?P<what>.+)$")
_THREAD = LazyPattern(r"(?P<current>Current thread|Thread) 0x[0-9a-fA-F]+\b.*\(most recent call first\):$")
_LEVELS = ("ERROR:", "WARNING:", "INFO:")  # uvicorn's own records ("ERROR:    Exception in ASGI application")
_FATAL_SKIP = ("Python runtime state:", "  <no Python frame>", "Stack (most recent call first):", "  ...")
_EXC_LINE = LazyPattern(r"(?P<type>[A-Za-z_][\w.]*)(?::(?: ?(?P<msg>.*))?)?$")
_WRAPPER = LazyPattern(r"(?P<who>[\w.]+) hit an exception: ?$")
_REPEATED = LazyPattern(r"\s*\[Previous line repeated \d+ more times?\]")
# The first line of another logger's record: c10/glog (`[W1002 09:05:41.123 ProcessGroupNCCL.cpp:1479]`,
# `E1118 07:47:06.214117  2349 rdma_context.cpp:63]`) or a Python warning (`/x/y.py:224: UserWarning: ...`)
_RECORD_START = LazyPattern(
    r"\[?[EWIF]\d{4} \d\d:\d\d:\d\d\.\d+ +(?:\d+ )?[\w./-]+:\d+\]|/\S+\.py:\d+: [A-Z]\w*Warning: "
)

_EMPTY: tuple[Traceback, ...] = ()


@dataclass(slots=True)
class Limits:
    """Bounds on what one traceback may hold, so that a flood or a deep recursion stays small."""

    max_frames: int = 120  # keep the first 20 and the last 100 of a deep recursion
    max_message_lines: int = 80
    max_text_chars: int = 16 * 1024  # also bounds a message's characters (after its first line)
    max_chain: int = 16  # chained exceptions: keep the first causes and the last ones
    max_pending: int = 4096  # processes with a traceback in progress


# a working record, one object per traceback being read: compared by identity (no generated __eq__ to build at import)
@dataclass(slots=True, eq=False)
class _Pending:
    """A traceback being assembled for one process: what has been read of it so far."""

    unit: str
    pid: int
    invocation: str
    timestamp: float
    wrapper: str
    rank: str
    header: str
    chain: list[ExceptionInfo] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    frames_dropped: int = 0
    exc_type: str = ""
    exc_line: str = ""
    message: list[str] = field(default_factory=list)
    phase: str = "frames"  # frames | message | end (a blank line after a wrapped record) | gap
    blank_lines: int = 0
    text: list[str] = field(default_factory=list)
    text_chars: int = 0
    truncated: bool = False
    last_seen: float = 0.0
    seq: int = 0
    logged_with: str = ""
    fatal: str = ""  # faulthandler's "Fatal Python error: ..." line: a native crash dump is being read
    threads: int = 0  # thread stacks in that dump
    in_current: bool = True  # the frames being read belong to the thread that crashed


class TracebackAssembler:
    """Feeds lines in, gets complete tracebacks out; one state machine per (unit, pid)."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._pending: OrderedDict[tuple[str, int], _Pending] = OrderedDict()
        self._previous: dict[tuple[str, int], str] = {}  # last plain line per process: a header candidate
        self.consumed = False  # whether the last line fed became part of a traceback
        self._seq = 0

    def feed(self, line: LogLine, seq: int = 0) -> tuple[Traceback, ...] | list[Traceback]:
        """One line in, the tracebacks it completed out; `seq` numbers the line (a traceback keeps the
        number of the line it began on, so that the engine can tell what the process logged after it)."""
        self._seq = seq
        key = (line.unit, line.pid)
        state = self._pending.get(key)
        text = line.text
        if state is None:  # the hot path: a line of a process with no traceback in progress (one call a line)
            if "Fatal Python error: " in text:
                self.consumed = True
                return self._start_fatal(key, line, clean(text))
            if "Traceback (most recent" not in text and not text.startswith('  File "'):
                self.consumed = False
                if text and not text[0].isspace():
                    previous = self._previous
                    previous[key] = text[:300]
                    if len(previous) > self.limits.max_pending:
                        previous.pop(next(iter(previous)))
                return _EMPTY
            self.consumed = True
            return self._start(key, line, clean(text))
        self.consumed = True
        return self._continue(state, key, line, clean(text))

    def flush(self, unit: str | None = None, pid: int | None = None) -> list[Traceback]:
        """Finish tracebacks whose process died or whose unit stopped."""
        done: list[Traceback] = []
        for key in [k for k in self._pending if (unit is None or k[0] == unit) and (pid is None or k[1] == pid)]:
            tb = self._finish(self._pending.pop(key))
            if tb is not None:
                done.append(tb)
        if unit is not None:
            for key in [k for k in self._previous if k[0] == unit]:
                del self._previous[key]
        return done

    def flush_idle(self, now: float, quiet_seconds: float) -> list[Traceback]:
        """Finish tracebacks that saw no line for `quiet_seconds` (the process printed its last words)."""
        done: list[Traceback] = []
        for key in [k for k, s in self._pending.items() if s.phase != "frames" and now - s.last_seen >= quiet_seconds]:
            tb = self._finish(self._pending.pop(key))
            if tb is not None:
                done.append(tb)
        return done

    @property
    def pending(self) -> int:
        return len(self._pending)

    def export(self) -> tuple[list[tuple[tuple[str, int], _Pending]], list[tuple[tuple[str, int], str]]]:
        """The state in progress, as plain data (for a snapshot)."""
        return list(self._pending.items()), list(self._previous.items())

    def import_(self, state: tuple[list[tuple[tuple[str, int], _Pending]], list[tuple[tuple[str, int], str]]]) -> None:
        pending, previous = state
        self._pending = OrderedDict(pending)
        self._previous = dict(previous)

    # --- state machine -------------------------------------------------------------------

    def _start(self, key: tuple[str, int], line: LogLine, text: str) -> list[Traceback]:
        _, rank, body = split_prefix(text)
        wrapper = ""
        header = ""
        logged_with = ""
        at = body.find(TRACEBACK_HEAD)
        if at > 0:
            header = body[:at].rstrip()
            m = _WRAPPER.search(header[-200:])  # the tail only: searching a 16K header is quadratic
            if m is not None:
                wrapper = m.group("who")
        elif at < 0:  # a log cut mid-traceback: begins with a frame line
            header = ""
        else:
            header = self._previous.get(key, "")
            if header and not has_prefix(text) and (has_prefix(header) or header.startswith(_LEVELS)):
                logged_with = header  # logger.x("...", exc_info=True): the record's first line, then the traceback
            if not header.startswith(_HEADER_STARTS):
                header = ""
        state = _Pending(
            unit=line.unit,
            pid=line.pid,
            invocation=line.invocation,
            timestamp=line.timestamp,
            wrapper=wrapper,
            rank=rank,
            header=header,
            last_seen=line.timestamp,
            seq=self._seq,
            logged_with=logged_with,
        )
        if at < 0:
            state.truncated = True
            self._frame_or_code(state, body)
        self._append_text(state, text)
        self._pending[key] = state
        if len(self._pending) > self.limits.max_pending:
            _, oldest = self._pending.popitem(last=False)
            finished = self._finish(oldest)
            return [finished] if finished is not None else []
        return []

    def _start_fatal(self, key: tuple[str, int], line: LogLine, text: str) -> list[Traceback]:
        _, rank, body = split_prefix(text)
        m = _FATAL.search(body)
        if m is None:
            self.consumed = False
            return []
        state = _Pending(
            unit=line.unit,
            pid=line.pid,
            invocation=line.invocation,
            timestamp=line.timestamp,
            wrapper="",
            rank=rank,
            header=body[m.start() :].strip(),
            last_seen=line.timestamp,
            fatal=m.group("what").strip(),
            seq=self._seq,
            phase="fatal",
            in_current=False,
        )
        self._append_text(state, text)
        self._pending[key] = state
        return []

    def _continue_fatal(self, state: _Pending, key: tuple[str, int], line: LogLine, text: str) -> list[Traceback]:
        """One line of a faulthandler dump: thread headers, frames, the extension module list."""
        _, _, body = split_prefix(text)
        m = _THREAD.match(body)
        if m is not None:
            state.threads += 1
            state.in_current = m.group("current") == "Current thread"
            self._append_text(state, text)
            return []
        if body.startswith("  File "):
            frame = _FRAME.match(body)
            if frame is not None:
                if (state.in_current or state.threads == 0) and len(state.frames) < self.limits.max_frames:
                    from crashdoc.failure_records import Frame  # with the first traceback (as below)

                    # faulthandler prints the innermost frame first; Python's tracebacks print it last
                    found = Frame(frame.group("file"), int(frame.group("line")), frame.group("func") or "")
                    state.frames.insert(0, found)
                self._append_text(state, text)
                return []
        if not body.strip() or body.startswith(_FATAL_SKIP):
            return []
        if body.startswith(TRACEBACK_HEAD):  # a fatal error at start-up that Python explains with a traceback
            del self._pending[key]
            self._previous[key] = state.header
            return self._start(key, line, text)
        if body.startswith("Extension modules:"):
            self._append_text(state, text)
            done = self._finish(self._pending.pop(key))
            return [done] if done is not None else []
        done = self._finish(self._pending.pop(key))
        restarted = self.feed(LogLine(line.unit, line.pid, text, line.timestamp, line.invocation), self._seq)
        return [done, *restarted] if done is not None else list(restarted)

    def _continue(self, state: _Pending, key: tuple[str, int], line: LogLine, text: str) -> list[Traceback]:
        state.last_seen = line.timestamp or state.last_seen
        if state.phase == "fatal":
            return self._continue_fatal(state, key, line, text)
        prefixed, _, body = split_prefix(text)
        if body.startswith("Fatal Python error: "):  # the process went down natively while printing
            done = self._finish(self._pending.pop(key))
            self._start_fatal(key, line, text)
            return [done] if done is not None else []
        if prefixed:
            # the process logged a new record: whatever we had is complete
            done = self._finish(self._pending.pop(key))
            restarted = self.feed(LogLine(line.unit, line.pid, text, line.timestamp, line.invocation), self._seq)
            return [done, *restarted] if done is not None else list(restarted)
        if body.startswith(TRACEBACK_HEAD):
            if state.phase == "gap" or (state.phase == "frames" and not state.frames):
                state.phase = "frames"
                self._append_text(state, text)
                return []
            done = self._finish(self._pending.pop(key))
            restarted = self._start(key, line, text)
            return [done, *restarted] if done is not None else restarted
        if state.phase == "frames":
            if body.strip() == "" and not state.frames:
                return []
            if not self._frame_or_code(state, body):
                self._exception_line(state, body)
            self._append_text(state, text)
            return []
        if state.phase == "message":
            if _RECORD_START.match(body):
                # another logger's record (torch's `[rank0]:[W1002 09:05:41.1 ProcessGroupNCCL.cpp:1479] ...`, glog's
                # `E1118 07:47:06.2 2349 file.cpp:63]`, a Python warning) ends the message like SGLang's prefix does
                done = self._finish(self._pending.pop(key))
                restarted = self.feed(LogLine(line.unit, line.pid, text, line.timestamp, line.invocation), self._seq)
                return [done, *restarted] if done is not None else list(restarted)
            if body in CHAIN_MARKERS:
                self._close_exception(state)
                state.phase = "gap"
                self._append_text(state, text)
                return []
            if body.startswith(_HEADER_STARTS):
                done = self._finish(self._pending.pop(key))
                self._previous[key] = body
                self.consumed = False
                return [done] if done is not None else []
            if state.wrapper and body.strip() == "":
                # SGLang's record ends with a newline; a chained exception or more message may still follow
                state.phase = "end"
                state.blank_lines += 1
                return []
            if (
                len(state.message) < self.limits.max_message_lines
                and sum(map(len, state.message)) + len(body) <= self.limits.max_text_chars
            ):
                state.message.append(body)
                self._append_text(state, text)
            else:
                state.truncated = True
            return []
        if state.phase == "end":
            if body.strip() == "":
                state.blank_lines += 1
                return []
            if body in CHAIN_MARKERS:
                self._close_exception(state)
                state.phase = "gap"
                self._append_text(state, text)
                return []
            # the message had a blank line in it: carry on with it
            state.message.extend([""] * min(state.blank_lines, self.limits.max_message_lines))
            state.blank_lines = 0
            state.phase = "message"
            return self._continue(state, key, line, text)
        # gap between chained exceptions: blank lines, then the next Traceback
        if body.strip() == "":
            return []
        done = self._finish(self._pending.pop(key))
        self.consumed = False
        return [done] if done is not None else []

    def _frame_or_code(self, state: _Pending, body: str) -> bool:
        """Consume a frame or source line; False when the line is the exception line."""
        from crashdoc.failure_records import Frame  # a log without a traceback never builds the records' classes

        if body.startswith("  File ") or body.startswith('File "'):
            m = _FRAME.match(body)
            if m is not None:
                frame = Frame(m.group("file"), int(m.group("line")), (m.group("func") or "").strip())
                self._add_frame(state, frame)
                return True
        if body.startswith((" ", "\t")) or body.strip() == "" or _REPEATED.match(body):
            if state.frames and body.startswith("    ") and not state.frames[-1].code:
                code = body.strip()
                if code and not set(code) <= {"^", "~", " "}:
                    last = state.frames[-1]
                    state.frames[-1] = Frame(last.file, last.line, last.function, code[:200])
            return True
        return False

    def _add_frame(self, state: _Pending, frame: Frame) -> None:
        frames = state.frames
        frames.append(frame)
        if len(frames) > self.limits.max_frames:
            del frames[20]  # keep the entry point and the innermost frames
            state.frames_dropped += 1

    def _exception_line(self, state: _Pending, body: str) -> None:
        m = _EXC_LINE.match(body)
        if m is not None and (m.group("msg") is not None or _looks_like_type(m.group("type"))):
            state.exc_type = m.group("type")
            first = m.group("msg") or ""
        else:
            state.exc_type = ""
            first = body
        state.exc_line = body
        state.message = [first]
        state.phase = "message"

    def _close_exception(self, state: _Pending) -> None:
        if state.phase not in ("message", "end"):
            return
        from crashdoc.failure_records import ExceptionInfo

        lines = state.message
        while len(lines) > 1 and not lines[-1].strip():
            lines.pop()
        if len(lines) > 1 and not lines[0].strip():
            # `raise RuntimeError("""\n    An attempt ...""")`: the message starts on the next line
            while len(lines) > 1 and not lines[0].strip():
                lines.pop(0)
            lines[0] = lines[0].strip()
            state.exc_line = f"{state.exc_type}: {lines[0]}" if state.exc_type else lines[0]
        elif not "".join(lines).strip() and state.exc_type.endswith("AssertionError") and state.frames:
            # a bare `assert self.total_num_heads % tp_size == 0` prints "AssertionError" alone: the condition that
            # failed, from the frame's source line, is what it says (the printed line stays as it was)
            code = state.frames[-1].code
            if code.startswith("assert ") and len(code) > len("assert ("):
                lines = [code]
        state.chain.append(
            ExceptionInfo(
                type=state.exc_type,
                message="\n".join(lines),
                frames=tuple(state.frames),
                line=state.exc_line,
            )
        )
        if len(state.chain) > self.limits.max_chain:
            del state.chain[self.limits.max_chain // 2]  # the original cause and the newest stay
            state.truncated = True
        state.frames = []
        state.message = []
        state.exc_type = ""
        state.exc_line = ""

    def _append_text(self, state: _Pending, text: str) -> None:
        if state.text_chars + len(text) > self.limits.max_text_chars:
            state.truncated = True
            return
        state.text.append(text)
        state.text_chars += len(text) + 1

    def _finish(self, state: _Pending) -> Traceback | None:
        from crashdoc.failure_records import ExceptionInfo, Traceback

        if state.phase == "fatal":
            others = max(0, state.threads - 1) if state.threads else 0
            state.chain.append(
                ExceptionInfo(
                    type=FATAL_TYPE,
                    message=state.fatal + (f"\n({others} other thread stack(s) in the dump)" if others else ""),
                    frames=tuple(state.frames),
                    line=state.header,
                )
            )
            state.frames = []
            state.phase = "done"
        self._close_exception(state)
        if not state.chain:
            return None
        return Traceback(
            unit=state.unit,
            pid=state.pid,
            chain=tuple(state.chain),
            timestamp=state.timestamp,
            invocation=state.invocation,
            wrapper=state.wrapper,
            rank=state.rank,
            header=state.header,
            text="\n".join(state.text),
            truncated=state.truncated or state.frames_dropped > 0,
            seq=state.seq,
            logged_with=state.logged_with,
        )


def _looks_like_type(name: str) -> bool:
    short = name.rsplit(".", 1)[-1]
    return short.endswith(("Error", "Exception", "Exit", "Interrupt", "Warning", "Iteration", "Failure")) or (
        "." in name and short[:1].isupper()
    )
