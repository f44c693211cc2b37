"""A local-disk spool of batches the database could not take yet.

Batches are appended, one JSON line each prefixed by its CRC-32, to segment
files `NNNNNNNNNNNN.spool` in the spool directory, and replayed oldest first.
Each run of the agent starts a new segment, so a line torn by SIGKILL stays at
the end of an old segment, where replay detects and skips it.

The agent's sampling thread appends while its delivery thread replays: every
method holds the spool's lock, except while `replay` waits on the database.

The spool has a size cap: when the segments on disk exceed it, the oldest
segment is deleted with a warning that says how many samples from which
time span were dropped.

A running agent claims its spool directory (`claim`, an exclusive lock on
`agent.lock` there, which the kernel drops when the process ends): two agents
on one directory would replay, and delete, each other's segments, so a second
one is refused at start.
"""

import fcntl
import json
import logging
import os
import threading
import time
import zlib
from pathlib import Path

from .batch import Batch

log = logging.getLogger("collector.agent")

# Replay merges consecutive spooled batches into one write of at most this many rows.
REPLAY_ROWS = 50_000
# The file a running agent locks in its spool directory; it holds the agent's pid.
LOCK_NAME = "agent.lock"


class Unwritable(Exception):
    """Raised by replay's `write` for a batch that fails for a reason of its own (a value no column takes): writing
    it again would fail again. Replay then writes the records it merged one at a time and drops only those."""


class SpoolInUse(Exception):
    """Another running agent holds the spool directory."""


class Spool:
    def __init__(self, directory, max_bytes=512 * 2**20, segment_bytes=None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or max(64 * 1024, max_bytes // 8)
        self._current = None  # (path, file) of the segment being appended to
        self._read_path = None  # segment being replayed
        self._read_offset = 0
        self._lock = threading.RLock()
        self._claim = None  # the open lock file while this process holds the directory

    def claim(self):
        """Hold the spool directory for this process until `close`; raise SpoolInUse, naming the
        holder's pid, when another agent holds it."""
        f = open(self.dir / LOCK_NAME, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            raise SpoolInUse(
                f"spool directory {self.dir} is in use by another agent (pid {holder}): "
                "give each agent on a machine its own --spool-dir"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._claim = f

    # -- writing -------------------------------------------------------------

    def append(self, batch):
        """Append `batch`; drop the oldest segments if the spool is over its cap."""
        data = json.dumps(batch.to_json(), separators=(",", ":")).encode()
        line = b"%08x %s\n" % (zlib.crc32(data), data)
        with self._lock:
            path, f = self._segment_for(len(line))
            f.write(line)
            # Flushed to the kernel at once: a SIGKILL then loses nothing written.
            f.flush()
            self._enforce_cap()

    def _segment_for(self, size):
        if self._current is not None:
            path, f = self._current
            if f.tell() + size <= self.segment_bytes or f.tell() == 0:
                return self._current
            f.close()
        segments = self.segments()
        seq = int(segments[-1].stem) + 1 if segments else 1
        path = self.dir / f"{seq:012d}.spool"
        self._current = (path, open(path, "ab"))
        return self._current

    def _enforce_cap(self):
        segments = self.segments()
        total = sum(p.stat().st_size for p in segments)
        while total > self.max_bytes and len(segments) > 1:
            oldest = segments.pop(0)
            size = oldest.stat().st_size
            samples, first, last = _summarize(oldest)
            oldest.unlink()
            total -= size
            if self._read_path == oldest:
                self._read_path, self._read_offset = None, 0
            log.warning(
                "spool %s is over its cap of %.1f MiB: dropped its oldest %d samples (%s to %s); "
                "the database has been unreachable too long to keep them",
                self.dir,
                self.max_bytes / 2**20,
                samples,
                first,
                last,
            )

    # -- reading -------------------------------------------------------------

    def segments(self):
        return sorted(p for p in self.dir.glob("*.spool") if p.stem.isdigit())

    def is_empty(self):
        with self._lock:
            for path in self.segments():
                if path.stat().st_size > (self._read_offset if path == self._read_path else 0):
                    return False
            return True

    def replay(self, write, budget_s=None):
        """Pass spooled batches, oldest first, to `write(batch)`; return samples replayed.

        A segment is deleted once every batch in it was written. `write`
        raising stops the replay; the batch that failed stays spooled. Stops
        after `budget_s` seconds so sampling is not starved.
        """
        deadline = None if budget_s is None else time.monotonic() + budget_s
        replayed = 0
        while deadline is None or time.monotonic() < deadline:
            with self._lock:
                segments = self.segments()
                if not segments:
                    break
                path = segments[0]
                if path != self._read_path:
                    self._read_path, self._read_offset = path, 0
                merged, end = self._read_some(path, self._read_offset)
            if merged is not None:
                try:
                    write(merged)  # without the lock: appends go on while the database is slow
                    replayed += len(merged.rows)
                except Unwritable:  # one record at a time, so one bad record does not block those behind it
                    replayed += self._replay_one_by_one(path, write)
            with self._lock:
                if path != self._read_path:
                    continue  # the size cap dropped this segment meanwhile
                self._read_offset = end
                if end >= path.stat().st_size:
                    if self._current is not None and self._current[0] == path:
                        self._current[1].close()
                        self._current = None
                    path.unlink()
                    self._read_path, self._read_offset = None, 0
        return replayed

    def _replay_one_by_one(self, path, write):
        """Write the records of `path` from the read offset up to where the merged read ended, one at a time,
        dropping each that is Unwritable (logged); return samples written."""
        written, offset = 0, self._read_offset
        with self._lock:
            _, end = self._read_some(path, offset)
        while offset < end:
            with self._lock:
                batch, offset = self._read_some(path, offset, rows=1)
            if batch is None:
                continue
            try:
                write(batch)
                written += len(batch.rows)
            except Unwritable as exc:
                log.error("spool %s: dropped a batch of %d samples that cannot be written: %s", path.name,
                          len(batch.rows), exc)
        return written

    def _read_some(self, path, offset, rows=REPLAY_ROWS):
        """Read batches from `offset`, merged up to `rows` rows; return (batch or None, end offset)."""
        merged = None
        with open(path, "rb") as f:
            f.seek(offset)
            while True:
                start = f.tell()
                line = f.readline()
                if not line:
                    return merged, start
                if not line.endswith(b"\n"):
                    if self._current is not None and self._current[0] == path:
                        return merged, start  # still being written
                    log.warning("spool %s: skipped a record torn by a crash", path.name)
                    return merged, f.tell()
                batch = _decode(line, path)
                if batch is None:
                    continue
                if merged is None:
                    merged = batch
                elif (batch.labels, batch.interval_s) != (merged.labels, merged.interval_s) or (
                    len(merged.rows) + len(batch.rows) > rows
                ):
                    return merged, start
                else:
                    known = set(merged.devices)
                    merged.devices.extend(d for d in batch.devices if d not in known)
                    merged.rows.extend(batch.rows)
                    merged.holders.extend(batch.holders)
                    merged.events.extend(batch.events)

    def close(self):
        with self._lock:
            if self._current is not None:
                self._current[1].close()
                self._current = None
            if self._claim is not None:
                self._claim.close()  # closing the file releases its lock
                self._claim = None


def _decode(line, path):
    crc, _, data = line.rstrip(b"\n").partition(b" ")
    try:
        if int(crc, 16) != zlib.crc32(data):
            raise ValueError("checksum mismatch")
        return Batch.from_json(json.loads(data))
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("spool %s: skipped an unreadable record (%s)", path.name, exc)
        return None


def _summarize(path):
    samples, first, last = 0, None, None
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                continue
            batch = _decode(line, path)
            if batch is None or not batch.rows:
                continue
            samples += len(batch.rows)
            lo = min(r[1] for r in batch.rows)
            hi = max(r[1] for r in batch.rows)
            first = lo if first is None else min(first, lo)
            last = hi if last is None else max(last, hi)
    return samples, first, last
