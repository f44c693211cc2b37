"""The price book: validating entries, adding them, and finding the one in force for a device on a day.

Matching: fnmatch-style, case-insensitive, on the device model name (a host
CPU device matches as `cpu`). Of the patterns that match and have an entry in
force on the day, the most specific wins: the one with the most non-wildcard
characters (ties: alphabetical, so the choice is stable); of that pattern's
entries, the newest `effective_from` on or before the day. `*` is the default.

Entries in force before today are fixed: changing one would rewrite costs
already reported. To change a price, add an entry from a new date
(PriceEntry.validate holds the rules of an entry).
"""

import fnmatch
import functools
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db import connection, transaction

from costs.models import PriceEntry

HOST_KEY = "cpu"
_WILDCARDS = set("*?[]")

# Shipped so a fresh install shows figures; every one is labelled an example everywhere it shows.
EXAMPLE_NOTE = "example price shipped with Yardstick; replace it with your own (manage.py prices add)"
EXAMPLE_PRICES = [
    # pattern, USD per device-hour, USD per kWh, PUE
    ("*", "1.00", "0.12", "1.30"),
    ("cpu", "0.05", "0.12", "1.30"),
    ("*A100*", "1.80", "0.12", "1.30"),
    ("*H100*", "2.50", "0.12", "1.30"),
    ("*H200*", "3.50", "0.12", "1.30"),
    ("*B200*", "5.00", "0.12", "1.30"),
    ("*Rubin*", "8.00", "0.12", "1.30"),
]
EXAMPLE_FROM = date(2020, 1, 1)


def add_price(pattern, usd_per_hour, usd_per_kwh, pue, effective_from, is_example=False, note=""):
    """Validate and store a new price entry; return it. Raise InputError (nothing stored) on bad input."""
    entry = PriceEntry(pattern=pattern, usd_per_hour=usd_per_hour, usd_per_kwh=usd_per_kwh, pue=pue,
                       effective_from=effective_from, is_example=is_example, note=note)
    with transaction.atomic():
        entry.validate()
        entry.save()
    return entry


# -- matching ---------------------------------------------------------------------


def specificity(pattern):
    """How specific a pattern is: its number of non-wildcard characters."""
    return sum(1 for ch in pattern if ch not in _WILDCARDS)


def model_key(model, source):
    """The name a device is priced by: `cpu` for a host device, else its model name."""
    return HOST_KEY if source == "host" else (model or "")


@dataclass(frozen=True)
class Price:
    entry_id: int
    pattern: str
    usd_per_hour: Decimal
    usd_per_kwh: Decimal
    pue: Decimal
    effective_from: date
    is_example: bool


def _all_entries():
    """Every price entry, as PriceEntry.objects.all() gives them, read on a cursor: the fleet page makes a book
    at every request, and the ORM spent 1.3 ms of CPU building that query (issue 29), the read a third of it."""
    names = [f.attname for f in PriceEntry._meta.concrete_fields]
    with connection.cursor() as cur:
        cur.execute(f"SELECT {', '.join(names)} FROM {PriceEntry._meta.db_table}")
        return [PriceEntry.from_db(connection.alias, names, row) for row in cur.fetchall()]


class PriceBook:
    """All entries, loaded once; `price(key, day)` answers from memory."""

    def __init__(self, entries=None):
        entries = _all_entries() if entries is None else list(entries)
        self.by_pattern = {}
        for e in sorted(entries, key=lambda e: e.effective_from):
            self.by_pattern.setdefault(e.pattern, []).append(
                Price(e.pk, e.pattern, Decimal(e.usd_per_hour), Decimal(e.usd_per_kwh), Decimal(e.pue),
                      e.effective_from, e.is_example)
            )
        # Most specific first; alphabetical among equals.
        self.patterns = sorted(self.by_pattern, key=lambda p: (-specificity(p), p))
        self.price = functools.lru_cache(maxsize=65536)(self._price)

    def _price(self, key, day):
        """Return the Price in force for model name `key` on `day`, or None when no entry applies."""
        name = key.lower()
        for pattern in self.patterns:
            if not fnmatch.fnmatchcase(name, pattern.lower()):
                continue
            in_force = [p for p in self.by_pattern[pattern] if p.effective_from <= day]
            if in_force:
                return in_force[-1]
        return None


def cost_usd(price, device_s, energy_j):
    """(device cost, energy cost) in unrounded Decimal dollars for `device_s` seconds and `energy_j` joules."""
    if price is None:
        return Decimal(0), Decimal(0)
    device = Decimal(device_s) * price.usd_per_hour / 3600
    energy = Decimal(energy_j) * price.usd_per_kwh * price.pue / 3_600_000
    return device, energy


def burn_usd_per_h(price, power_w):
    """What a device costs per hour while it draws `power_w` (unrounded Decimal dollars): the device-hour
    price plus that power at the energy price x PUE; nothing when no price applies (`price` None). The
    fleet page's burn rate, rendered and live, is the sum of its fresh devices'."""
    if price is None:
        return Decimal(0)
    burn = price.usd_per_hour
    if power_w is not None:
        burn += Decimal(repr(power_w)) / 1000 * price.usd_per_kwh * price.pue
    return burn


def install_examples(entry_model=PriceEntry):
    """Create the example entries (labelled examples) where the book is empty; return how many."""
    if entry_model.objects.exists():
        return 0
    entry_model.objects.bulk_create([
        entry_model(pattern=p, usd_per_hour=Decimal(h), usd_per_kwh=Decimal(k), pue=Decimal(pue),
                    effective_from=EXAMPLE_FROM, is_example=True, note=EXAMPLE_NOTE)
        for p, h, k, pue in EXAMPLE_PRICES
    ])
    return len(EXAMPLE_PRICES)
