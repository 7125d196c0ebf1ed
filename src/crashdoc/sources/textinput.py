"""A pasted log's input (`explain`, `diagnose --file`), read in bounded pieces: memory independent of its size.

An input that fits in `HEAD_BYTES` (every paste a person makes) is read whole and parsed by
`textlog.parse_text`, exactly as before. A larger one (a log file of a long run) is read block by block: the
shape of its lines (`journalctl -o short*`, plain, the router's format) is decided from its first block, which
unit a `journalctl -u` paste is about from the PID 1 records in that block, and each further block is undone
of quotes and outer columns (`textlog.normalize`) with the last `CONTEXT_LINES` lines of the block before it
in front, so that a traceback cut by a block's end reads as one. What only a whole paste can say is not looked
for past the head: a paste that is one exception line is short. A large input with kernel GPU lines is read
whole: joining them to the crash needs every line.

Standard input larger than the head is spooled to an unnamed temporary file, so that it can be read twice
(once for what the input holds, once to parse it), as a file is.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from crashdoc.events import LifecycleRecord, LogLine
from crashdoc.sources.routerlog import is_router_log, parse_router_line
from crashdoc.sources.textlog import (
    MAX_LINE_CHARS,
    PASTED_UNIT,
    Groups,
    ParsedText,
    ShortLines,
    detect_format,
    is_fence,
    normalize,
    not_text,
    only_notes,
    parse_text,
)
from crashdoc.text import clean

HEAD_BYTES = 1 << 20  # an input up to this size is read whole, as it always was
BLOCK_BYTES = 1 << 20  # what a larger one is read in
CONTEXT_LINES = 256  # lines of the block before put in front of the next one's shape undoing
_GPU_WORDS = (b"NVRM", b"SXid")  # as hardware_paste.read_paste looks for them
_LINE_ENDS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines cuts


@dataclass(slots=True)
class StreamedText:
    """A large input's events, read lazily; `notes` and `format` are complete once `events` has been read."""

    events: Iterator[LogLine | LifecycleRecord]
    format: str = "plain"
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class TextInput:
    """One input: its whole text when it is small, else an open file read in blocks (`parse`)."""

    name: str
    text: str | None = None
    handle: BinaryIO | None = None
    block_bytes: int = BLOCK_BYTES

    def whole(self) -> str:
        """The whole text (small inputs; large ones with kernel GPU lines, which the GPU join needs whole)."""
        if self.text is None:
            assert self.handle is not None
            self.handle.seek(0)
            self.text = self.handle.read().decode("utf-8", "replace")
            self.close()
        return self.text

    def streamed(self) -> bool:
        """True when the input is read in blocks: it is larger than the head and holds no kernel GPU line."""
        if self.handle is None:
            return False
        tail = b""
        for chunk in self._chunks():
            window = tail + chunk  # a word cut by a chunk's end
            if any(word in window for word in _GPU_WORDS):
                return False
            tail = chunk[-8:]
        return True

    def only_notes(self) -> bool:
        """`textlog.only_notes` of the input: stops at its first log line."""
        if self.text is not None:
            return only_notes(self.text)
        return all(only_notes("\n".join(block)) for block in self.blocks())

    def blocks(self) -> Iterator[list[str]]:
        """The input's lines (as `str.splitlines` gives them), a block at a time."""
        if self.text is not None:
            yield self.text.splitlines()
            return
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        carry = ""
        for chunk in self._chunks():
            text = carry + decoder.decode(chunk)
            lines = text.splitlines()
            carry = ""
            if text[-1:] == "\r":  # "\r\n" is one line end: its "\n" may start the next chunk
                carry = lines.pop() + "\r"
            elif text and text[-1] not in _LINE_ENDS:  # the last line goes on in the next chunk
                carry = lines.pop()
            if lines:
                yield lines
        rest = carry + decoder.decode(b"", final=True)
        if rest:
            yield rest.splitlines()

    def parse(self) -> ParsedText | StreamedText:
        """The input's events: a list for a small one (`parse_text`), read lazily block by block otherwise."""
        if self.text is not None:
            return parse_text(self.text)
        return parse_blocks(self.blocks())

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def _chunks(self) -> Iterator[bytes]:
        assert self.handle is not None
        self.handle.seek(0)
        while chunk := self.handle.read(self.block_bytes):
            yield chunk


def open_input(path: str, stdin: BinaryIO | None = None, head_bytes: int = HEAD_BYTES) -> tuple[TextInput, str]:
    """(input, problem) for `path`, `-` meaning `stdin`; `problem` is `textlog.not_text`'s word on the input
    ("" when it is a text log). A missing or unreadable file raises OSError."""
    if path == "-":
        assert stdin is not None
        head = stdin.read(head_bytes + 1)
        handle: BinaryIO | None = None
        if len(head) > head_bytes:
            import shutil  # only standard input is spooled: a file or a paste never pays their imports
            import tempfile

            handle = tempfile.TemporaryFile()  # noqa: SIM115 (closed by TextInput)
            handle.write(head)
            shutil.copyfileobj(stdin, handle, BLOCK_BYTES)
    else:
        handle = open(path, "rb")  # noqa: SIM115 (closed by TextInput)
        head = handle.read(head_bytes + 1)
    problem = not_text(head, path) or ""  # it reads the first 64 KB and the magic numbers: the head holds them
    if problem or len(head) <= head_bytes:
        if handle is not None:
            handle.close()
        return TextInput(path, "" if problem else head.decode("utf-8", "replace")), problem
    return TextInput(path, handle=handle), ""


def parse_blocks(blocks: Iterable[list[str]]) -> StreamedText:
    """A large paste's events, parsed lazily block by block (see the module's docstring)."""
    parsed = StreamedText(iter(()))
    parsed.events = _events(iter(blocks), parsed, parsed.notes)
    return parsed


def _events(blocks: Iterator[list[str]], parsed: StreamedText, notes: list[str]) -> Iterator[LogLine | LifecycleRecord]:
    groups = Groups()
    context: list[str] = []
    short: ShortLines | None = None
    fmt = ""
    for block in blocks:
        raw = [clean(line[:MAX_LINE_CHARS]) for line in block]
        lines, pids, said = normalize(context + raw, groups)
        # what the context became (a docker JSON record may hold several lines): those lines were given already
        given = len(normalize(context, Groups())[0]) if context else 0
        lines, pids = lines[given:], pids[given:]
        notes.extend(note for note in said if note not in notes)
        context = _fenceless(raw)[-CONTEXT_LINES:]
        if not fmt:  # the head decides
            fmt = detect_format(lines)
            if fmt == "plain" and is_router_log(lines):
                fmt = "router"
                notes.append("parsing the SGLang router's log format")
            elif fmt != "plain":
                short = ShortLines(fmt)
                head = list(short.read(lines))
                if len(short.units) == 1:  # `journalctl -u one.service`: every line belongs to it
                    short.unit = next(iter(short.units))
                    for event in head:
                        if isinstance(event, LogLine):
                            event.unit = short.unit
                parsed.format = fmt
                yield from head
                continue
            parsed.format = fmt
        if short is not None:
            yield from short.read(lines)
        elif fmt == "router":
            for line, pid in zip(lines, pids, strict=True):
                record = parse_router_line(line)
                yield (
                    LogLine(PASTED_UNIT, pid, line)
                    if record is None
                    else LogLine(PASTED_UNIT, pid, record.text, record.timestamp)
                )
        else:
            for line, pid in zip(lines, pids, strict=True):
                yield LogLine(PASTED_UNIT, pid, line)


def _fenceless(raw: list[str]) -> list[str]:
    """The lines `normalize` keeps one for one (it drops code fences first): the context must be counted in them."""
    return [line for line in raw if not is_fence(line)]
