"""How money and IPD are written for people (costs.money): one rule for every page, live update and export."""

from decimal import Decimal

from costs.money import exact_usd, ipd_text, ipd_title, usd_text, usd_title


def test_it_writes_a_cent_and_more_to_the_cent_with_thousands_separators():
    assert usd_text(Decimal("1234.567891")) == "$1,234.57"
    assert usd_text("1.5") == "$1.50"
    assert usd_text(Decimal("0.01")) == "$0.01"
    assert usd_text(0) == "$0.00" and usd_text(None) == "—"


def test_it_writes_less_than_a_cent_with_two_significant_digits_not_as_nothing():
    assert usd_text(Decimal("0.0039123")) == "$0.0039"
    assert usd_text(Decimal("0.0051")) == "$0.0051", "not $0.01"
    assert usd_text(Decimal("0.0004")) == "$0.0004"
    assert usd_text(Decimal("0.00996")) == "$0.01", "two digits that round up to a cent are a cent"
    assert usd_text(Decimal("0.0000004")) == "< $0.000001"


def test_the_exact_figure_goes_on_hover_only_where_the_display_rounds():
    assert usd_title(Decimal("0.0039123")) == "exact: $0.003912"
    assert usd_title(Decimal("1234.567891")) == "exact: $1,234.567891"
    assert usd_title(Decimal("1.50")) == "" and usd_title(None) == ""
    assert ipd_title(4307.69) == "exact: 4,307.69 pts/$" and ipd_title(2.5) == ""


def test_exports_keep_the_amount_to_the_micro_dollar_with_at_least_cents():
    assert exact_usd(Decimal("0.0039123")) == "0.003912"
    assert exact_usd(Decimal("3.581")) == "3.581"
    assert exact_usd(Decimal("1.5")) == "1.50" and exact_usd(0) == "0.00"
    assert exact_usd(None) is None


def test_points_per_dollar_have_three_significant_figures_and_no_decimals_from_100_up():
    assert ipd_text(4307.69) == "4,308"
    assert ipd_text(2050.0) == "2,050"
    assert ipd_text(99.96) == "100"
    assert ipd_text(16.76) == "16.8" and ipd_text(1.676) == "1.68" and ipd_text(0.012345) == "0.0123"
    assert ipd_text(-3.214) == "-3.21" and ipd_text(0) == "0" and ipd_text(None) == "—"
