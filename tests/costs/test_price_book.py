"""The price book: which entry applies, and which entries are refused (nothing stored then)."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from costs.models import PriceEntry
from costs.prices import PriceBook, add_price
from yardstick.inputs import InputError


def book(*entries):
    PriceEntry.objects.all().delete()
    for pattern, per_hour, day in entries:
        add_price(pattern, per_hour, "0.1", "1.2", day)
    return PriceBook()


def test_the_most_specific_matching_pattern_in_force_wins(db):
    prices = book(("*", "1", date(2020, 1, 1)), ("*H100*", "2", date(2020, 1, 1)),
                  ("*H100 SXM*", "3", date(2025, 1, 1)), ("cpu", "0.05", date(2020, 1, 1)))

    assert prices.price("NVIDIA H100 SXM5 80GB", date(2025, 6, 1)).usd_per_hour == Decimal(3)
    assert prices.price("NVIDIA H100 SXM5 80GB", date(2024, 6, 1)).usd_per_hour == Decimal(2)  # before it held
    assert prices.price("nvidia h100 pcie", date(2024, 6, 1)).usd_per_hour == Decimal(2)  # case-insensitive
    assert prices.price("NVIDIA RTX 2070", date(2024, 6, 1)).usd_per_hour == Decimal(1)
    assert prices.price("cpu", date(2024, 6, 1)).usd_per_hour == Decimal("0.05")


def test_a_price_change_holds_from_its_date_and_leaves_earlier_days_alone(db):
    prices = book(("*", "1", date(2020, 1, 1)), ("*", "4", date(2025, 3, 11)))

    assert prices.price("x", date(2025, 3, 10)).usd_per_hour == Decimal(1)
    assert prices.price("x", date(2025, 3, 11)).usd_per_hour == Decimal(4)


def test_without_a_matching_entry_there_is_no_price(db):
    assert book(("*H100*", "2", date(2020, 1, 1))).price("NVIDIA A100", date(2024, 1, 1)) is None


@pytest.mark.parametrize("field,kwargs,message", [
    ("usd_per_hour", {"usd_per_hour": "-3"}, "usd_per_hour must be a number of dollars >= 0, got -3"),
    ("usd_per_kwh", {"usd_per_kwh": "cheap"}, "usd_per_kwh must be a number of dollars >= 0, got 'cheap'"),
    ("pue", {"pue": "0.9"}, "pue must be a number >= 1 (1.0 = no overhead), got 0.9"),
    ("effective_from", {"effective_from": "2025-13-01"}, "effective_from must be a date YYYY-MM-DD, got '2025-13-01'"),
    ("pattern", {"pattern": ""}, "pattern must be a model-name pattern"),
])
def test_it_refuses_bad_entries_naming_the_field_and_stores_nothing(db, field, kwargs, message):
    PriceEntry.objects.all().delete()
    args = {"pattern": "*H100*", "usd_per_hour": "2", "usd_per_kwh": "0.1", "pue": "1.2",
            "effective_from": "2025-01-01", **kwargs}

    with pytest.raises(InputError) as err:
        add_price(**args)

    assert err.value.field == field and message in err.value.message
    assert PriceEntry.objects.count() == 0


def test_it_refuses_a_second_entry_for_the_same_pattern_and_start_date(db):
    PriceEntry.objects.all().delete()
    add_price("*H100*", "2", "0.1", "1.2", "2025-01-01")

    with pytest.raises(InputError, match="already has an entry from 2025-01-01"):
        add_price("*H100*", "3", "0.1", "1.2", "2025-01-01")
    assert PriceEntry.objects.count() == 1


def test_an_entry_in_force_before_today_cannot_be_repriced(db):
    entry = add_price("*H100*", "2", "0.1", "1.2", timezone.now().date() - timedelta(days=30))
    entry.usd_per_hour = Decimal(5)

    with pytest.raises(InputError, match="add a new entry from"):
        entry.validate()
    assert PriceEntry.objects.get(pk=entry.pk).usd_per_hour == Decimal(2)


def test_a_fresh_install_ships_example_prices_labelled_as_examples(db):
    assert PriceEntry.objects.filter(pattern="*").exists()
    assert not PriceEntry.objects.filter(is_example=False).exists()
