"""Import telemetry people already have: nvidia-smi CSV logs and saved dcgm-exporter scrapes.

Both go through the agent's parser for their format and the agent's writer,
in one transaction; then `into_cost_review` rolls up the imported window and
attributes it, so the cost review shows it without waiting for (or being
missed by) the periodic tasks, which only look a few minutes back.
"""

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from django.core.management.base import CommandError
from django.db import connection, transaction

from collector import signals, store
from collector.agent.batch import Batch
from collector.agent.smi import read_smi_log
from collector.agent.sources.dcgm import parse_metrics, readings_from_metrics
from collector.agent.writer import FUTURE_LIMIT, Writer

BATCH_ROWS = 50_000
# collector.store.roll_up's bounds per call: (device, hour) pairs per round, rounds.
ROLL_UP_LIMIT, ROLL_UP_ROUNDS = 2000, 50


class ScrapeError(ValueError):
    """The file holds nothing to import; the message says why and what would be read."""


class NothingImported(ValueError):
    """A non-empty file gave no sample; the message is the report saying why."""


@dataclass
class ImportReport:
    devices: int = 0
    imported: int = 0  # new samples stored
    already_stored: int = 0  # samples a previous import stored
    skipped: dict = field(default_factory=dict)  # reason -> rows
    unused_columns: list = field(default_factory=list)  # header cells naming no stored figure
    device_key: str | None = None  # the column that split the rows into devices
    first_ts: object = None  # aware datetimes of the first and last sample read
    last_ts: object = None
    notes: list = field(default_factory=list)  # further lines for the person importing

    @property
    def stored_nothing(self):
        """True when the file gave no sample at all, new or stored before."""
        return self.imported == 0 and self.already_stored == 0

    def lines(self, path, node):
        out = [
            f"{path}: imported {self.imported} samples for {self.devices} device(s) on node {node}",
        ]
        if self.devices > 1 and self.device_key:
            out.append(f"  devices told apart by the {self.device_key} column")
        if self.already_stored:
            out.append(f"  {self.already_stored} samples were already stored (an earlier import); left as they were")
        if self.unused_columns:
            out.append("  columns not imported (no stored figure for them): " + ", ".join(self.unused_columns))
        total = sum(self.skipped.values())
        out.append(f"  skipped {total} rows" + (":" if total else ""))
        for reason, count in sorted(self.skipped.items(), key=lambda kv: -kv[1]):
            out.append(f"    {count} {reason}")
        out.extend(self.notes)
        return out


def import_smi(path, node, model=None, tz=timezone.utc, labels=None, columns=None):
    """Read the nvidia-smi log at `path` and store it for `node`, in one transaction. Return an ImportReport.

    Raise SmiFormatError when the log cannot be read (see collector.agent.smi).
    """
    with open(Path(path), newline="", encoding="utf-8", errors="replace") as f:
        log = read_smi_log(f, node=node, model=model, tz=tz, columns=columns)
    report = ImportReport(devices=len(log.devices), unused_columns=log.unused_columns, device_key=log.device_key)
    report.skipped = dict(log.skipped)
    for column, count in log.empty_values.items():
        report.skipped[f"values of {column} unreadable (stored empty, row kept)"] = count
    _store(log.devices, log.rows, [], labels, report)
    return report


def import_dcgm(path, node, at, labels=None):
    """Store the dcgm-exporter scrape saved at `path` as `node`'s samples at `at` (an aware datetime).

    Every GPU of the scrape is `node`'s, whatever its Hostname label says.
    Raise ScrapeError when the file holds no dcgm-exporter GPU metric.
    """
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    readings = readings_from_metrics(parse_metrics(text), node)
    if not readings:
        raise ScrapeError(
            "no dcgm-exporter GPU metric in it: expected lines like "
            'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-...",...} 68.2 (the text of its /metrics page)'
        )
    report = ImportReport(devices=len(readings))
    others = sorted({r.device.node for r in readings} - {node})
    if others:
        report.notes.append(f"  stored as node {node} (the scrape's Hostname label says {', '.join(others)})")
    report.notes.append("  a scrape is one instant per GPU: the device time and energy the cost review charges come "
                        "from the interval since the GPU's sample before it (an earlier scrape, imported or collected)")
    devices = [replace(r.device, node=node) for r in readings]
    rows = [(d.uuid, at, *r.values) for d, r in zip(devices, readings)]
    holders = [(d.uuid, at, h) for d, r in zip(devices, readings) for h in r.holders]
    _store(devices, rows, holders, labels, report)
    return report


def _store(devices, rows, holders, labels, report):
    """Write the rows (and holders) in one transaction, adding the counts to `report`."""
    limit = datetime.now(timezone.utc) + FUTURE_LIMIT  # the writer refuses rows stamped later
    stamps = [r[1] for r in rows if r[1] <= limit]
    if stamps:
        report.first_ts, report.last_ts = min(stamps), max(stamps)
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SELECT 1")  # opens the transaction the writer's savepoints nest in
        writer = Writer(connection.connection)
        for start in range(0, len(rows), BATCH_ROWS):
            batch = Batch(devices=devices, rows=rows[start:start + BATCH_ROWS],
                          holders=holders if start == 0 else [], labels=labels or {}, interval_s=None)
            result = writer.write(batch)
            report.imported += result.inserted
            report.already_stored += result.duplicates
            if result.rejected_future:
                key = "stamped more than 5 minutes in the future"
                report.skipped[key] = report.skipped.get(key, 0) + result.rejected_future


def into_cost_review(report, now=None):
    """Roll up the window `report` imported and tell the apps above (collector.signals.imported), so the
    cost review shows it now: the periodic tasks look back minutes, not to last year's log. Return the
    summary a receiver gave (costs: {"from", "to", "rows"} it attributed), or None when nothing new was
    imported or nobody summed it up.
    """
    if not report.imported or report.first_ts is None:
        return None
    # roll_up does a bounded amount per call; one that did all it may do leaves more behind
    while store.roll_up(limit=ROLL_UP_LIMIT, max_rounds=ROLL_UP_ROUNDS) >= ROLL_UP_LIMIT * ROLL_UP_ROUNDS:
        pass
    lo = report.first_ts.astimezone(timezone.utc).replace(second=0, microsecond=0)
    hi = report.last_ts.astimezone(timezone.utc).replace(second=0, microsecond=0) + timedelta(minutes=1)
    answers = signals.imported.send(sender=into_cost_review, lo=lo, hi=hi, now=now)
    return next((summary for _receiver, summary in answers if summary is not None), None)


def conclude(report, path, node):
    """Bring what `report` imported into the cost review; return the lines for the person importing.

    Raise NothingImported, with the report's lines, when the file gave no sample
    at all (a script around the import must notice).
    """
    lines = report.lines(path, node)
    if report.stored_nothing:
        raise NothingImported("nothing imported; see why below\n" + "\n".join(lines))
    return lines + [review_line(into_cost_review(report))]


def command_lines(do_import, path, node, format_error):
    """For import_smi and import_dcgm: run `do_import()`, conclude its report, return the lines to print.

    Every way it can fail becomes a CommandError (exit 1) that says what to do: a missing file, a file
    its parser refuses (`format_error`), a file that gave no sample."""
    try:
        return conclude(do_import(), path, node)
    except (FileNotFoundError, IsADirectoryError):
        raise CommandError(f"no such file: {path}") from None
    except format_error as exc:
        raise CommandError(f"{path}: {exc}") from None
    except NothingImported as exc:
        raise CommandError(str(exc)) from None


def review_line(window):
    """The line a person reads after `into_cost_review`: what the cost review now holds."""
    if window is None:
        return "  nothing new to bring into the cost review"
    line = (f"  rolled up and attributed {window['from']:%Y-%m-%d %H:%M} to {window['to']:%Y-%m-%d %H:%M} UTC "
            f"({window['rows']} allocation rows): the cost review (/costs, /api/costs, cost_report) shows it now")
    return line + (f"; {window['refused']}" if window.get("refused") else "")
