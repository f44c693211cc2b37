"""Priced usage: allocation rows summed per (device, UTC day, job-or-idle, team), with prices applied.

This is the one place money is computed; reports, intelligence per dollar and
the budget check all read it. Figures are unrounded Decimals (rounding to the
cent happens only in presentation, costs/report.py).
"""

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal

from django.db import connection

from collector import store
from costs import fold
from costs.models import ENERGY_FROM, ENERGY_SCOPES
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


_BY_MINUTE = """
SELECT a.device_id, (a.minute AT TIME ZONE 'UTC')::date AS day, a.job_id, a.team,
       array_agg(DISTINCT a.energy_from), sum(a.device_s), sum(a.energy_j), array_agg(DISTINCT a.energy_scope)
FROM costs_allocation a
WHERE {where}
GROUP BY a.device_id, day, a.job_id, a.team
"""
_BY_DAY = f"""
SELECT u.device_id, u.day, u.job_id, u.team,
       array_remove(ARRAY[{", ".join(f"CASE WHEN u.from_{v} > 0 THEN '{v}' END" for v in ENERGY_FROM)}], NULL),
       u.device_s, u.energy_j,
       array_remove(ARRAY[{", ".join(f"CASE WHEN u.scope_{v} > 0 THEN '{v}' END" for v in ENERGY_SCOPES)}], NULL)
FROM costs_usage_day u
WHERE u.minutes > 0 AND {{where}}
"""
DAY = timedelta(days=1)


def _midnight(ts):
    return datetime.combine(ts.astimezone(timezone.utc).date(), time(0), tzinfo=timezone.utc)


def read_bounds(start, end, folded=None):
    """(start, end) as the ledger reads them: a bound inside a folded day (costs/fold.py: its minutes are gone, its
    day rows kept) moved out to that day's edge, so the whole day is read. `folded`: the first day kept per minute
    (default: the mark's)."""
    folded = fold.folded_before() if folded is None else folded
    if folded is None:
        return start, end
    edge = fold.midnight(folded)
    if start is not None and start < edge and start != _midnight(start):
        start = _midnight(start)
    if end is not None and end < edge and end != _midnight(end):
        end = _midnight(end) + DAY
    return start, end


def folded_cut(start, end):
    """None, or what a report says when its period begins or ends inside a folded day: the period it was read
    for, at the day's grain ({"from", "to", "folded_before", "text"})."""
    folded = fold.folded_before()
    if folded is None:
        return None
    read = read_bounds(start, end, folded)
    if read == (start, end):
        return None
    shown = " to ".join(f"{t:%Y-%m-%d %H:%M}" if t is not None else "…" for t in read)
    return {"from": read[0], "to": read[1], "folded_before": folded,
            "text": f"read at the day's grain, {shown} UTC: allocations before {folded} are kept per day "
                    "(YARDSTICK_ALLOCATION_1M_DAYS), not per minute"}


def _summed(cur, start, end, job_ids):
    """The allocations with start <= minute < end (either bound optional) summed per (device, UTC day, job,
    team): whole days from DailyUsage, a part of a day from the minutes. A day cut by `end` is whole when no
    minute of it at or after `end` is allocated (today, up to now). A bound inside a folded day reads that whole
    day (`read_bounds`)."""
    start, end = read_bounds(start, end)
    jobs = ([], []) if job_ids is None else (["a.job_id = ANY(%s)"], [list(job_ids)])
    first_day = last_day = None  # the whole days read from DailyUsage: first_day <= day < last_day
    rows = []
    if start is not None and start != _midnight(start):
        head_end = _midnight(start) + DAY if end is None else min(end, _midnight(start) + DAY)
        cur.execute(_BY_MINUTE.format(where=" AND ".join(["a.minute >= %s", "a.minute < %s", *jobs[0]])),
                    [start, head_end, *jobs[1]])
        rows += cur.fetchall()
        first_day = head_end
    elif start is not None:
        first_day = start
    if end is not None and first_day is not None and end <= first_day:
        return rows
    if end is not None:
        last_day = _midnight(end)
        if end != last_day:
            cur.execute("SELECT EXISTS (SELECT FROM costs_allocation WHERE minute >= %s AND minute < %s)",
                        [end, last_day + DAY])
            if cur.fetchone()[0]:  # the day goes on past `end`: its part before it, from the minutes
                lo = max(last_day, first_day) if first_day is not None else last_day
                cur.execute(_BY_MINUTE.format(where=" AND ".join(["a.minute >= %s", "a.minute < %s", *jobs[0]])),
                            [lo, end, *jobs[1]])
                rows += cur.fetchall()
            else:
                last_day += DAY
    where, params = ["true"], []
    if first_day is not None:
        where.append("u.day >= %s")
        params.append(first_day.date())
    if last_day is not None:
        where.append("u.day < %s")
        params.append(last_day.date())
    if job_ids is not None:
        where.append("u.job_id = ANY(%s)")
        params.append(list(job_ids))
    cur.execute(_BY_DAY.format(where=" AND ".join(where)), params)
    rows += cur.fetchall()
    return sorted(rows, key=lambda r: (r[1], r[0], r[2] is None, r[2] or 0, r[3]))


def usage(start=None, end=None, job_ids=None, book=None):
    """Priced Usage of every allocation with start <= minute < end (either bound optional), optionally of some
    jobs: a row per (device, UTC day, job or idle, team), by day, device and job (idle last)."""
    with connection.cursor() as cur:
        rows = _summed(cur, start, end, job_ids)
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
