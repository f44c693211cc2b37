"""Where the output of `up`'s parts goes: all of it into one rotated file per part, and to the
terminal only what a person watching it needs.

Every line a part writes goes to `<data dir>/log/<part>.log`. The terminal gets a log record
when its level is at least YARDSTICK_LOG_LEVEL (default WARNING), and Yardstick's own INFO
records too (a job starting or ending, a worker's devices: events, not chatter); a traceback
or a warning printed outside logging always. Everything else stays in the file: Celery's
per-task "received"/"succeeded" and beat's "Sending due task" lines (INFO of a library), the
banners Celery prints, Daphne's access log, Redis. `up --verbose` shows every line.

This module imports nothing from Django: the LOGGING config names its filter, the runner
builds the rest.
"""

import logging
import logging.handlers
import re

LOG_MAX_BYTES = 10 * 2**20  # a part's file is rotated past this size ...
LOG_BACKUPS = 5  # ... keeping this many older ones (<part>.log.1 is the newest)

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_LEVEL = "(" + "|".join(LEVELS) + ")"
# A record as the LOGGING config's "plain" formatter writes it: "WARNING celery.app.trace: ...".
PLAIN_RECORD = re.compile(_LEVEL + r" ([\w.]+): ")
# A record as the collector agent's own handler writes it (collector/agent/cli.py), always from
# the collector.agent logger: "2026-12-01 21:55:47,058 WARNING ...".
AGENT_RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} " + _LEVEL + " ")
# What `warnings` prints to stderr before logging captures warnings: "path.py:893: SecurityWarning: ...".
RAW_WARNING = re.compile(r"\S+:\d+: \w*Warning: ")
TRACEBACK = "Traceback (most recent call last):"


class PartLog:
    """One part's log file, timestamping each line and rotated at `max_bytes`, keeping `backups`.

    Safe to write from several threads (a part's stdout and stderr readers); the only writer of its
    file, so rotating never pulls a file from under another process.
    """

    def __init__(self, path, max_bytes=LOG_MAX_BYTES, backups=LOG_BACKUPS):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self._handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))

    def write(self, line):
        # No args: the line is taken as it is, "%" and all.
        self._handler.handle(logging.LogRecord(self.path.stem, logging.INFO, "", 0, line, None, None))

    def close(self):
        self._handler.close()


def show_everything(line):
    return True


def show_nothing(line):
    return False


class RecordsForPeople:
    """Decide, line by line, which lines of one output stream of a part reach the terminal.

    `level`: a level name; records from it up are shown. `own_packages`: the top-level packages
    whose loggers are Yardstick's, shown from INFO. A line that is no record's first (a traceback,
    a multi-line message) goes where the record it continues went; one before any record (a
    banner) stays in the file.
    """

    def __init__(self, level, own_packages):
        self.level = logging.getLevelName(level)
        self.own = tuple(own_packages)
        self.showing = False  # the verdict of the record the next lines continue

    def __call__(self, line):
        plain = PLAIN_RECORD.match(line)
        agent = None if plain else AGENT_RECORD.match(line)
        if plain or agent:
            level = logging.getLevelName((plain or agent).group(1))
            logger = plain.group(2) if plain else "collector.agent"
            self.showing = level >= self.level or (level >= logging.INFO and self._is_own(logger))
        elif line.startswith(TRACEBACK) or RAW_WARNING.match(line):
            self.showing = True
        return self.showing

    def _is_own(self, logger):
        return logger.split(".", 1)[0] in self.own


class HealthAnswersAreInfo(logging.Filter):
    """A 503 from /healthz is its answer (some part is down, which `up` and monitors report), not a
    server error: Django's ERROR record for it becomes INFO, kept in the web log, off the terminal."""

    def filter(self, record):
        match = getattr(getattr(record, "request", None), "resolver_match", None)
        if match is not None and match.url_name == "healthz" and record.levelno > logging.INFO:
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True
