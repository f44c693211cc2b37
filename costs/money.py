"""How money and intelligence per dollar are written for people: the one home of the display rules.

Every ratio is computed from unrounded amounts (costs.intelligence,
costs.report); these functions only write a figure down, so the same figure
reads the same on every page, in the live updates (costs.live sends these
strings) and in the template filters (dashboard/templatetags).

- Dollars (`usd_text`): $0.00 for nothing; from a cent up, to the cent with
  thousands separators ($1,234.57); below a cent, two significant digits
  ($0.0039), because a small CPU job's whole cost is a fraction of a cent and
  "$0.00" would say it cost nothing. `usd_title` gives the exact figure, to
  the micro-dollar, for a hover wherever the display rounds.
- Exports (`exact_usd`): the unrounded amount to the micro-dollar, as a
  plain decimal string, so a person can recompute any ratio by hand.
- Points per dollar (`ipd_text`): from 100 up, whole points with thousands
  separators (4,308); below, three significant figures (16.8, 1.68, 0.0123).

Cent rounding stays where totals must add up to the cent (costs/report.py).
"""

from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
MICRO = Decimal("0.000001")
NONE_TEXT = "—"
IPD_UNIT = "pts/$"
# Shown wherever "IPD" first appears on a page (dashboard's `ipd_abbr` and `ipd_definition` tags).
IPD_DEFINITION = ("intelligence per dollar: eval points gained over the job's baseline, divided by the dollars "
                  "the job cost")
IPD_GROUPS_DEFINITION = ("For a team or an environment: the sum of its jobs' gains over the sum of their costs. "
                         "Idle time is charged to node owners and shown apart, never in IPD.")


def _decimal(value):
    return value if isinstance(value, Decimal) else Decimal(str(value))


def exact_usd(value):
    """The unrounded amount to the micro-dollar, with at least cents: "1.50", "0.003912"; None stays None."""
    if value is None or value == "":
        return None
    amount = _decimal(value).quantize(MICRO, ROUND_HALF_UP)
    text = format(amount, "f").rstrip("0")
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


def _significant(amount, digits):
    """`amount` rounded half-up to `digits` significant digits (amount != 0)."""
    return amount.quantize(Decimal(1).scaleb(amount.adjusted() - digits + 1), ROUND_HALF_UP)


def usd_text(value):
    """Dollars as people read them: "$0.00", "$1,234.57", "$0.0039", "—" for None."""
    if value is None or value == "":
        return NONE_TEXT
    exact = _decimal(value)
    sign = "-" if exact < 0 else ""
    amount = abs(exact).quantize(MICRO, ROUND_HALF_UP)  # never more precise than the exports
    if amount == 0:
        return "$0.00" if exact == 0 else f"{sign}< $0.000001"
    if amount < CENT:
        small = _significant(amount, 2)
        if small < CENT:
            return f"{sign}${format(small.normalize(), 'f')}"
    return f"{sign}${amount.quantize(CENT, ROUND_HALF_UP):,}"


def usd_texts(*values):
    """Dollars shown side by side ("Spent · Budget · left"), each as usd_text writes it but all to one precision: the
    one the finest of them needs (cents when each is a cent or more), so "$0.0169 · $0.0200 · $0.0031" and never
    "$0.02 · $0.02 · $0.0031"."""
    places = 2
    for value in values:
        if value is None or value == "":
            continue
        amount = abs(_decimal(value)).quantize(MICRO, ROUND_HALF_UP)
        if 0 < amount < CENT:
            places = max(places, -_significant(amount, 2).normalize().as_tuple().exponent)
    out = []
    for value in values:
        if value is None or value == "" or places == 2:
            out.append(usd_text(value))
            continue
        exact = _decimal(value)
        amount = abs(exact).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP)
        out.append(f"{'-' if exact < 0 and amount else ''}${amount:,}")
    return out


def usd_title(value):
    """The exact figure for a hover where usd_text rounds ("exact: $0.003912"); "" where it shows it all."""
    exact = exact_usd(value)
    if exact is None:
        return ""
    shown = usd_text(value)
    if "<" not in shown and Decimal(shown.replace("$", "").replace(",", "")) == Decimal(exact):
        return ""
    sign = "-" if exact.startswith("-") else ""
    return f"exact: {sign}${Decimal(exact.lstrip('-')):,}"


def ipd_text(value):
    """Points per dollar as people read them: "4,308", "16.8", "0.0123", "—" for None."""
    if value is None or value == "":
        return NONE_TEXT
    number = _decimal(value)
    if abs(number) >= 100:
        return f"{number.quantize(Decimal(1), ROUND_HALF_UP):,}"
    if number == 0:
        return "0"
    rounded = _significant(number, 3)
    if abs(rounded) >= 100:  # 99.96 rounds up to 100: whole points, like every figure from 100 up
        return f"{rounded.quantize(Decimal(1), ROUND_HALF_UP):,}"
    return format(rounded, "f")


def ipd_title(value):
    """The unrounded points per dollar for a hover where ipd_text rounds; "" otherwise."""
    if value is None or value == "":
        return ""
    number = _decimal(value)
    if Decimal(ipd_text(number).replace(",", "")) == number:
        return ""
    return f"exact: {round(float(number), 6):,} {IPD_UNIT}"  # as the API gives it


def displays(cost_usd=None, points_per_usd=None, usd_per_point=None):
    """The display strings the pages and live updates show beside the raw figures (keys *_display, *_title)."""
    return {
        "cost_display": usd_text(cost_usd), "cost_title": usd_title(cost_usd),
        "ipd_display": ipd_text(points_per_usd), "ipd_title": ipd_title(points_per_usd),
        "usd_per_point_display": usd_text(usd_per_point), "usd_per_point_title": usd_title(usd_per_point),
    }


# The keys `displays` adds (the live "costs" event sends them as computed).
DISPLAY_KEYS = tuple(displays())
