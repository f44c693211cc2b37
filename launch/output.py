"""A launched run's output as a person reads it: whole lines, progress bars at their last state, no raw ANSI,
and a cap that drops the oldest lines with a marker saying how many.

The worker that runs a recipe's command feeds its stdout and stderr, as the bytes arrive, to one
`LineSplitter` each, and keeps the lines in an `OutputLog` (capped: 10 MiB unless told otherwise).
Imports nothing from Django: it runs on the node, beside the process it reads.
"""

import re
from collections import deque

DEFAULT_CAP_BYTES = 10 * 2**20
# A line longer than this (a program that never writes a newline) is cut into pieces of this size.
MAX_LINE_BYTES = 64 * 2**10
# CSI (colours, cursor moves: ESC [ ... final byte), OSC (titles, links: ESC ] ... BEL or ESC \) and the
# two-byte escapes: what a terminal interprets and a page would show as noise.
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Other control characters but tab (backspace, bell, ...), once escapes are gone.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean_line(raw):
    """`raw` (one line, without its newline) as a person reads it: a carriage-return progress bar at its last
    state (what follows the last \\r that has text after it), ANSI escapes and other control characters
    removed, tabs kept."""
    frames = [f for f in raw.split("\r") if f != ""]
    last = frames[-1] if frames else ""
    return CONTROL.sub("", ANSI.sub("", last))


class LineSplitter:
    """Turn an output stream's bytes, fed as they arrive, into clean lines (clean_line); a line split across
    chunks, or a UTF-8 character split across them, comes out whole."""

    def __init__(self):
        self._pending = b""

    def feed(self, chunk):
        """The complete lines that `chunk` ends (none when it ends no line)."""
        data = self._pending + chunk
        *lines, self._pending = data.split(b"\n")
        while len(self._pending) > MAX_LINE_BYTES and b"\r" not in self._pending[-MAX_LINE_BYTES:]:
            lines.append(self._pending[:MAX_LINE_BYTES])
            self._pending = self._pending[MAX_LINE_BYTES:]
        if len(self._pending) > MAX_LINE_BYTES:  # a progress bar redrawn for ever: only its last frames matter
            self._pending = self._pending[-MAX_LINE_BYTES:]
        return [clean_line(line.decode("utf-8", errors="replace")) for line in lines]

    def pending(self):
        """The line being written now, cleaned (a progress bar's current state), or "" when there is none."""
        return clean_line(self._pending.decode("utf-8", errors="ignore"))

    def close(self):
        """The last line when the stream ended without a newline, as a list (empty when it ended on one)."""
        rest, self._pending = self._pending, b""
        return [clean_line(rest.decode("utf-8", errors="replace"))] if rest else []


def line_bytes(text):
    """What a kept line counts against the cap: its UTF-8 bytes and a newline."""
    return len(text.encode("utf-8")) + 1


def marker(dropped, cap_bytes):
    """The line that stands for `dropped` oldest lines, or None when none was dropped."""
    if not dropped:
        return None
    return (f"… {dropped:,} earlier line{'s' if dropped != 1 else ''} dropped: the log keeps the newest "
            f"{cap_bytes / 2**20:g} MiB")


class OutputLog:
    """A job's output lines, newest kept: past `cap_bytes` (UTF-8, a newline each) the oldest are dropped and
    counted, and `lines()` starts with a marker saying how many."""

    def __init__(self, cap_bytes=DEFAULT_CAP_BYTES):
        if cap_bytes < 1:
            raise ValueError(f"cap_bytes must be >= 1, got {cap_bytes}")
        self.cap_bytes = cap_bytes
        self._lines = deque()  # (stream, text, bytes)
        self.bytes = 0
        self.dropped = 0

    def add(self, stream, text):
        """Keep `text` (a clean line) of `stream` ("stdout" or "stderr"), dropping the oldest past the cap."""
        size = line_bytes(text)
        self._lines.append((stream, text, size))
        self.bytes += size
        while self.bytes > self.cap_bytes and len(self._lines) > 1:
            _stream, _text, old = self._lines.popleft()
            self.bytes -= old
            self.dropped += 1

    def marker(self):
        """The line that stands for the dropped ones, or None when none was dropped."""
        return marker(self.dropped, self.cap_bytes)

    def lines(self):
        """[(stream, text)] oldest first, after a ("yardstick", marker) when lines were dropped."""
        kept = [(stream, text) for stream, text, _size in self._lines]
        said = self.marker()
        return [("yardstick", said), *kept] if said else kept

    def tail(self, stream, n):
        """The last `n` lines of `stream`: what a failed job's error quotes of its stderr."""
        return [text for s, text, _size in self._lines if s == stream][-n:]


def failure(how, tail, own_exit=True):
    """(first line, error) of a failed run, the same on every executor: `how` it ended ("exited with status 1"), and
    when the run exited by itself (`own_exit`: not a signal, not its scheduler's limit) its last line after a colon;
    the error quotes `tail` (its last lines: a node's stderr, a scheduler's merged log) below the first line."""
    first = f"{how}: {tail[-1].strip()}" if own_exit and tail else how
    quoted = "\n".join(tail)
    return first, f"{first}\n{quoted}".strip() if quoted else first
