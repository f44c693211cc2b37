"""`manage.py attribute_costs [--since YYYY-MM-DD]`: run attribution and the budget check now.

--since recomputes every minute from that day on, which the periodic task does
not look back to: for old telemetry written some other way than import_smi and
import_dcgm (they attribute the window they imported themselves).
"""

from datetime import datetime, time, timezone

from django.core.management.base import BaseCommand, CommandError

from costs.attribution import attribute
from costs.budget import check_budgets


class Command(BaseCommand):
    help = "Attribute device time and energy to jobs (and idle) now; --since to backfill."

    def add_arguments(self, parser):
        parser.add_argument("--since", help="recompute from this UTC day, YYYY-MM-DD")

    def handle(self, *args, **opts):
        since = None
        if opts["since"]:
            try:
                since = datetime.combine(datetime.strptime(opts["since"], "%Y-%m-%d").date(), time(0), tzinfo=timezone.utc)
            except ValueError:
                raise CommandError(f"--since must be a date YYYY-MM-DD, got {opts['since']!r}") from None
        summary = attribute(since=since)
        stops = check_budgets()
        self.stdout.write(f"attributed {summary['from']:%Y-%m-%d %H:%M} to {summary['to']:%Y-%m-%d %H:%M} UTC: "
                          f"{summary['rows']} allocation rows ({summary['late_minutes']} late minutes); "
                          f"budget stops requested: {stops or 'none'}")
