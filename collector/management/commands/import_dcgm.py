"""`manage.py import_dcgm FILE --node NAME --at TIME`: a saved dcgm-exporter scrape in, as one sample per GPU."""

from datetime import datetime, timezone

from django.core.management.base import BaseCommand, CommandError

from collector.agent.cli import parse_label
from collector.importer import ScrapeError, command_lines, import_dcgm


def parse_at(text):
    """An aware datetime from ISO 8601 text; without an offset it is UTC. Raise ValueError naming the format."""
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--at must be an ISO 8601 time like 2025-06-01T14:30:00Z or "
                         f"2025-06-01 16:30:00+02:00, got {text!r}") from None
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


class Command(BaseCommand):
    help = ("Import a saved scrape of dcgm-exporter's /metrics page (the text people paste into tickets) "
            "as one sample per GPU at --at, through the same parser the dcgm source uses.")

    def add_arguments(self, parser):
        parser.add_argument("file", help="the saved /metrics text")
        parser.add_argument("--node", required=True, help="name of the node the scrape came from")
        parser.add_argument("--at", required=True, metavar="TIME",
                            help="when it was scraped, ISO 8601 (2025-06-01T14:30:00Z); UTC when no offset")
        parser.add_argument("--label", action="append", default=[], type=parse_label, metavar="KEY=VALUE")

    def handle(self, *args, **opts):
        try:
            at = parse_at(opts["at"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        lines = command_lines(lambda: import_dcgm(opts["file"], opts["node"], at, labels=dict(opts["label"])),
                              opts["file"], opts["node"], ScrapeError)
        self.stdout.write("\n".join(lines))
