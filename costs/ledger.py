"""Priced usage: allocation rows summed per (device, UTC day, job-or-idle, team), with prices applied.

This is the one place money is computed; reports, intelligence per dollar and
the budget check all read it. Figures are unrounded Decimals (rounding to the
cent happens only in presentation, costs/report.py).
"""

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db import connection

from collector import store
from costs.prices import PriceBook, cost_usd, model_key


@dataclass
class Usage:
    device_id: int
    day: date
    job_id: int | None  # None: idle
    team: str
    node: str
    node_owner: str | None
    model: str
    simulated: bool
    power_estimated: bool
    energy_from: frozenset  # {"counter", "power", "mixed", "none"}
    energy_scope: frozenset  # {"device", "module", "mixed", "none", "in_module"} (collector/agent/schema.py)
    device_s: Decimal
    energy_j: Decimal
    device_usd: Decimal
    energy_usd: Decimal
    price_pattern: str | None  # None: no entry applies (charged nothing, flagged unpriced)
    example_price: bool

    @property
    def total_usd(self):
        return self.device_usd + self.energy_usd


def usage(start=None, end=None, job_ids=None, book=None):
    """Priced Usage of every allocation with start <= minute < end (either bound optional), optionally of some jobs."""
    where, params = ["true"], []
    if start is not None:
        where.append("a.minute >= %s")
        params.append(start)
    if end is not None:
        where.append("a.minute < %s")
        params.append(end)
    if job_ids is not None:
        where.append("a.job_id = ANY(%s)")
        params.append(list(job_ids))
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT a.device_id, (a.minute AT TIME ZONE 'UTC')::date AS day, a.job_id, a.team,
                   array_agg(DISTINCT a.energy_from), sum(a.device_s), sum(a.energy_j),
                   array_agg(DISTINCT a.energy_scope)
            FROM costs_allocation a
            WHERE {' AND '.join(where)}
            GROUP BY a.device_id, day, a.job_id, a.team
            ORDER BY day, a.device_id, a.job_id NULLS LAST
            """,
            params,
        )
        rows = cur.fetchall()
    book = book or PriceBook()
    devices = store.device_facts({r[0] for r in rows})  # the collector's: node, its owner, model, flags
    out = []
    for device_id, day, job_id, team, froms, dev_s, joules, scopes in rows:
        if device_id not in devices:
            continue  # no such device any more: nothing to price it by (as the join it replaces)
        d = devices[device_id]
        node, owner, model, source = d["node"], d["owner"], d["model"], d["source"]
        simulated, estimated = d["simulated"], d["power_estimated"]
        price = book.price(model_key(model, source), day)
        device_usd, energy_usd = cost_usd(price, dev_s, joules)
        out.append(Usage(
            device_id=device_id, day=day, job_id=job_id, team=team, node=node, node_owner=owner, model=model,
            simulated=simulated, power_estimated=estimated, energy_from=frozenset(froms),
            energy_scope=frozenset(scopes),
            device_s=dev_s, energy_j=joules, device_usd=device_usd, energy_usd=energy_usd,
            price_pattern=price.pattern if price else None, example_price=bool(price and price.is_example),
        ))
    return out


def job_costs(job_ids, book=None):
    """{job id: unrounded total USD so far} for `job_ids` (jobs without allocations are absent)."""
    totals = {}
    for u in usage(job_ids=job_ids, book=book):
        totals[u.job_id] = totals.get(u.job_id, Decimal(0)) + u.total_usd
    return totals


def energy_from_label(froms):
    """One word for a set of energy sources: counter, power, mixed or none."""
    real = set(froms) - {"none"}
    if not real:
        return "none"
    if len(real) == 1:
        return next(iter(real))
    return "mixed"


def energy_scope_label(scopes):
    """One word for whose energy a figure charges: device, module, mixed or none; a host CPU counted in a
    module's reading (in_module) beside module figures is still module."""
    real = set(scopes) - {"none"}
    if real - {"in_module"} == {"module"} or real == {"in_module"}:
        return "module"
    if len(real) == 1:
        return next(iter(real))
    return "mixed" if real else "none"
