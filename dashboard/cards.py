"""Cards that apps above the dashboard add to its cost review, without the dashboard importing them.

An app registers from its ready(): `add_cost_review_card(template, build)`; the cost review page calls
`build(period)` (a costs.report period: .start, .end) and includes `template` with the dict it returns as `card`,
or leaves the card out when it returns None. Sweeps add theirs (a sweep's spend, with its trials underneath).
"""

_COST_REVIEW = []


def add_cost_review_card(template, build):
    if all(t != template for t, _ in _COST_REVIEW):
        _COST_REVIEW.append((template, build))


def cost_review_cards(period):
    cards = []
    for template, build in _COST_REVIEW:
        card = build(period)
        if card is not None:
            cards.append({**card, "template": template})
    return cards
