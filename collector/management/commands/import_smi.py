"""`manage.py import_smi FILE --node NAME`: an nvidia-smi CSV log in, rolled up and attributed for the cost review."""

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.management.base import BaseCommand, CommandError

from collector.agent.cli import parse_label
from collector.agent.smi import SmiFormatError, parse_columns
from collector.importer import command_lines, import_smi


class Command(BaseCommand):
    help = ("Import a log written by `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` "
            "(optionally -l/-lms), then roll up and attribute it for the cost review.")

    def add_arguments(self, parser):
        parser.add_argument("file", help="the CSV log")
        parser.add_argument("--node", required=True, help="name of the node the log came from")
        parser.add_argument("--model", default=None, help="device model when the log has no name column")
        parser.add_argument(
            "--tz", default="UTC",
            help="time zone of the log's timestamps (nvidia-smi prints local time); default UTC; "
                 "an offset in the timestamps themselves wins",
        )
        parser.add_argument(
            "--columns", default=None, metavar='"timestamp,name,..."',
            help="the columns of a log written with --format=csv,noheader: the list given to --query-gpu",
        )
        parser.add_argument("--label", action="append", default=[], type=parse_label, metavar="KEY=VALUE")

    def handle(self, *args, **opts):
        try:
            tz = ZoneInfo(opts["tz"])
        except (ZoneInfoNotFoundError, ValueError):
            raise CommandError(f"--tz must be an IANA time zone like UTC or Europe/Paris, got {opts['tz']!r}") from None
        columns = None
        if opts["columns"] is not None:
            columns = parse_columns(opts["columns"])
            if not columns:
                raise CommandError('--columns must list the log\'s columns, like "timestamp,name,utilization.gpu"')
        lines = command_lines(lambda: import_smi(opts["file"], opts["node"], model=opts["model"], tz=tz,
                                                 labels=dict(opts["label"]), columns=columns),
                              opts["file"], opts["node"], SmiFormatError)
        self.stdout.write("\n".join(lines))
