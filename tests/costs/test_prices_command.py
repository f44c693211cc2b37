"""`manage.py prices list|add`."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from costs.models import PriceEntry


def run(*args):
    out = StringIO()
    call_command("prices", *args, stdout=out)
    return out.getvalue()


def test_list_marks_the_shipped_prices_as_examples(db):
    out = run("list")

    assert "*H100*" in out and "EXAMPLE" in out
    assert "NOTE: entries marked EXAMPLE are example price" in out


def test_add_stores_an_entry_that_is_not_an_example(db):
    out = run("add", "--pattern", "*H100*", "--per-hour", "2.75", "--per-kwh", "0.09", "--pue", "1.25",
              "--from", "2026-01-01")

    entry = PriceEntry.objects.get(pattern="*H100*", effective_from="2026-01-01")
    assert (str(entry.usd_per_hour), str(entry.usd_per_kwh), str(entry.pue)) == ("2.750000", "0.090000", "1.250")
    assert not entry.is_example and out.startswith("added *H100* from 2026-01-01")


@pytest.mark.parametrize("flag,value,message", [
    ("--per-hour", "-1", "--per-hour: usd_per_hour must be a number of dollars >= 0, got -1; nothing stored"),
    ("--pue", "0.8", "--pue: pue must be a number >= 1 (1.0 = no overhead), got 0.8; nothing stored"),
    ("--from", "31/01/2026", "--from: effective_from must be a date YYYY-MM-DD, got '31/01/2026'; nothing stored"),
])
def test_add_refuses_bad_values_with_the_flag_and_what_is_accepted(db, flag, value, message):
    args = {"--pattern": "*H100*", "--per-hour": "2", "--per-kwh": "0.1", "--pue": "1.2", "--from": "2026-01-01"}
    args[flag] = value
    before = PriceEntry.objects.count()

    with pytest.raises(CommandError) as err:
        run("add", *[x for kv in args.items() for x in kv])

    assert str(err.value) == message
    assert PriceEntry.objects.count() == before


def test_add_refuses_an_overlapping_start_date(db):
    with pytest.raises(CommandError, match="--from: pattern '\\*H100\\*' already has an entry from 2020-01-01"):
        run("add", "--pattern", "*H100*", "--per-hour", "9", "--per-kwh", "0.1", "--from", "2020-01-01")
