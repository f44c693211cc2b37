"""Import nvidia-smi CSV logs into the telemetry store through the agent's writer."""

from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path

from django.db import connection, transaction

from collector.agent.batch import Batch
from collector.agent.smi import read_smi_log
from collector.agent.writer import Writer

BATCH_ROWS = 50_000


@dataclass
class ImportReport:
    devices: int = 0
    imported: int = 0  # new samples stored
    already_stored: int = 0  # samples a previous import stored
    skipped: dict = field(default_factory=dict)  # reason -> rows

    def lines(self, path, node):
        out = [
            f"{path}: imported {self.imported} samples for {self.devices} device(s) on node {node}",
        ]
        if self.already_stored:
            out.append(f"  {self.already_stored} samples were already stored (an earlier import); left as they were")
        total = sum(self.skipped.values())
        out.append(f"  skipped {total} rows" + (":" if total else ""))
        for reason, count in sorted(self.skipped.items(), key=lambda kv: -kv[1]):
            out.append(f"    {count} {reason}")
        return out


def import_smi(path, node, model=None, tz=timezone.utc, labels=None):
    """Read the nvidia-smi log at `path` and store it for `node`, in one transaction. Return an ImportReport."""
    with open(Path(path), newline="", encoding="utf-8", errors="replace") as f:
        log = read_smi_log(f, node=node, model=model, tz=tz)
    report = ImportReport(devices=len(log.devices))
    report.skipped = dict(log.skipped)
    for column, count in log.empty_values.items():
        report.skipped[f"values of {column} unreadable (stored empty, row kept)"] = count
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SELECT 1")  # opens the transaction the writer's savepoints nest in
        writer = Writer(connection.connection)
        for start in range(0, len(log.rows), BATCH_ROWS):
            batch = Batch(devices=log.devices, rows=log.rows[start:start + BATCH_ROWS], labels=labels or {}, interval_s=None)
            result = writer.write(batch)
            report.imported += result.inserted
            report.already_stored += result.duplicates
            if result.rejected_future:
                key = "stamped more than 5 minutes in the future"
                report.skipped[key] = report.skipped.get(key, 0) + result.rejected_future
    return report
