"""`manage.py cost_report --from --to --group`: the cost table of GET /api/costs on a terminal (or as CSV/JSON)."""

import json

from django.core.management.base import BaseCommand, CommandError

from costs import report
from yardstick.inputs import InputError


class Command(BaseCommand):
    help = "Print costs by team, job, node or day for a period (the same table as /api/costs)."

    def add_arguments(self, parser):
        parser.add_argument("--from", dest="from", help="YYYY-MM-DD or ISO date-time (default: 7 days ago)")
        parser.add_argument("--to", dest="to", help="YYYY-MM-DD (through that day) or ISO date-time (default: now)")
        parser.add_argument("--group", default="team", help=f"one of {', '.join(report.GROUPS)} (default team)")
        parser.add_argument("--format", default="text", choices=("text", "csv", "json"))

    def handle(self, *args, **opts):
        params = {k: opts[k] for k in ("from", "to", "group") if opts.get(k)}
        try:
            period, group, _ = report.parse_params(params)
        except InputError as err:
            raise CommandError(f"--{err.field}: {err.message}") from None
        table = report.build(period, group)
        if opts["format"] == "csv":
            self.stdout.write(report.to_csv(table), ending="")
        elif opts["format"] == "json":
            self.stdout.write(json.dumps(report.to_json(table), indent=1))
        else:
            self.stdout.write(report.to_text(table), ending="")
