"""`manage.py prices list|add`: read and extend the price book from a terminal."""

from django.core.management.base import BaseCommand, CommandError

from costs.models import PriceEntry
from costs.prices import EXAMPLE_NOTE, add_price
from yardstick.inputs import InputError


class Command(BaseCommand):
    help = "List the price book, or add an entry (prices per device model pattern, from a date)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="print every entry")
        add = sub.add_parser("add", help="add an entry")
        add.add_argument("--pattern", required=True, help="device model pattern: *H100*, cpu, or * (default)")
        add.add_argument("--per-hour", required=True, dest="usd_per_hour", help="USD per device-hour, >= 0")
        add.add_argument("--per-kwh", required=True, dest="usd_per_kwh", help="USD per kWh, >= 0")
        add.add_argument("--pue", default="1", help="power usage effectiveness, >= 1 (default 1)")
        add.add_argument("--from", required=True, dest="effective_from", help="UTC day it holds from, YYYY-MM-DD")
        add.add_argument("--note", default="")

    def handle(self, *args, **opts):
        if opts["action"] == "add":
            try:
                entry = add_price(opts["pattern"], opts["usd_per_hour"], opts["usd_per_kwh"], opts["pue"],
                                  opts["effective_from"], note=opts["note"])
            except InputError as err:
                flag = {"usd_per_hour": "--per-hour", "usd_per_kwh": "--per-kwh", "effective_from": "--from"}
                raise CommandError(f"{flag.get(err.field, '--' + err.field)}: {err.message}; nothing stored") from None
            self.stdout.write(f"added {entry}")
            return
        entries = list(PriceEntry.objects.order_by("pattern", "effective_from"))
        header = ("pattern", "from", "usd_per_hour", "usd_per_kwh", "pue", "example")
        rows = [header] + [(e.pattern, str(e.effective_from), str(e.usd_per_hour), str(e.usd_per_kwh), str(e.pue),
                            "EXAMPLE" if e.is_example else "") for e in entries]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for r in rows:
            self.stdout.write("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
        if any(e.is_example for e in entries):
            self.stdout.write(f"NOTE: entries marked EXAMPLE are {EXAMPLE_NOTE}")
