from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.management.base import BaseCommand, CommandError

from collector.agent.cli import _label
from collector.agent.smi import SmiFormatError
from collector.importer import import_smi


class Command(BaseCommand):
    help = "Import a log written by `nvidia-smi --query-gpu=... --format=csv` (optionally -l/-lms)."

    def add_arguments(self, parser):
        parser.add_argument("file", help="the CSV log")
        parser.add_argument("--node", required=True, help="name of the node the log came from")
        parser.add_argument("--model", default=None, help="device model when the log has no name column")
        parser.add_argument(
            "--tz", default="UTC", help="time zone of the log's timestamps (nvidia-smi prints local time); default UTC"
        )
        parser.add_argument("--label", action="append", default=[], type=_label, metavar="KEY=VALUE")

    def handle(self, *args, **opts):
        try:
            tz = ZoneInfo(opts["tz"])
        except (ZoneInfoNotFoundError, ValueError):
            raise CommandError(f"--tz must be an IANA time zone like UTC or Europe/Paris, got {opts['tz']!r}")
        try:
            report = import_smi(opts["file"], opts["node"], model=opts["model"], tz=tz, labels=dict(opts["label"]))
        except FileNotFoundError:
            raise CommandError(f"no such file: {opts['file']}")
        except SmiFormatError as exc:
            raise CommandError(f"{opts['file']}: {exc}")
        for line in report.lines(opts["file"], opts["node"]):
            self.stdout.write(line)
