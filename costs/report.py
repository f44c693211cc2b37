"""The cost review: one table of costs by team, job, node or day, as JSON, CSV or text.

`parse_params` turns query parameters (API) or options (command) into a
`Period` and group, naming the bad parameter otherwise; `build` makes the
`Report`; `to_json`, `to_csv`, `to_text` render the same rows, so the API, the
CSV and `manage.py cost_report` agree to the cent.

Rounding: the money columns that people add up, attributed to jobs, idle and
total, are each rounded to the cent on their own by the largest-remainder
method: each row's amount becomes its value rounded down or up to the cent,
and the column adds up exactly to its unrounded total rounded half-up,
whatever the rows are. So the totals row's attributed, idle and fleet total
(the page's cards, the CSV's and text's totals) are those exact totals
rounded: the same in every grouping (team, job, node, day), never a cent off
their own unrounded figures, and every column adds up to its total. A row's
total is its own amount rounded the same way, so it, like the fleet total,
can be a cent off its attributed + idle (each rounded apart). Each row's
attributed and idle are split into device and energy cost (device: its own
amount rounded, within the cell; energy: the rest). (Rounding all four cells
of every row together, as before, let many small rows move dollars between
columns: a hundred rows of $0.007 attributed and $0.004 idle read $1.00
attributed for $0.70 charged, and the totals changed with the grouping.)

Intelligence per dollar is never computed from those cents: a job row's IPD is
its gain over its unrounded cost, which the row also carries to the
micro-dollar (`attributed_exact_usd`), so a person can recompute it by hand
from the CSV. Gains of different environments do not add up to anything, so
team, day and fleet rows carry no gain and no IPD ("by environment"); the
report's `ipd_groups` give, per (team, environment) and per environment, the
sum of the jobs' gains over the sum of their unrounded costs (idle never
counts: it is in the rows' idle column).
"""

import csv
import io
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from datetime import timezone as dt_timezone
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal, InvalidOperation

from django.utils import timezone

from costs import tokens
from costs.intelligence import Scores, ipd
from costs.ledger import energy_from_label, energy_scope_label, folded_cut, usage
from costs.money import MICRO, displays, exact_usd
from costs.prices import PriceBook
from trainer.models import Job
from yardstick.inputs import InputError, check_moment
from yardstick.text import csv_text

GROUPS = ("team", "job", "node", "day")
FORMATS = ("json", "csv")
MAX_RANGE = timedelta(days=366)
DEFAULT_RANGE = timedelta(days=7)
CENT = Decimal("0.01")
HOURS_Q = Decimal("0.0001")
KWH_Q = Decimal("0.000001")
BY_ENV = "by environment"  # the IPD state of rows whose jobs' gains are not summed (see ipd_groups)
# What the report says when any row used a shipped example price (costs.prices.EXAMPLE_NOTE is the note on each entry).
EXAMPLE_PRICES_NOTE = "some prices are examples shipped with Yardstick, not real prices (see manage.py prices list)"

# Columns of the CSV and the text table, in order.
COLUMNS = (
    "group", "key", "label", "team", "status", "device_hours", "energy_kwh", "device_cost_usd",
    "energy_cost_usd", "attributed_usd", "idle_usd", "total_usd", "attributed_exact_usd", "gain_points",
    "ipd_points_per_usd",
    "usd_per_point", "ipd_state", "energy_from", "energy_scope", "simulated", "power_estimated", "example_prices",
    "unpriced",
    # The attributed dollars by phase (costs.tokens: each job's dollars x its phase shares; no_split: jobs whose
    # runs log no phase times), exact: they add up to attributed_exact_usd to the micro-dollar.
    *(f"{p}_exact_usd" for p in ("generation", "training", "evaluation", "steps_other", "waiting", "no_split")),
)
PHASE_COLUMNS = ("generation", "training", "evaluation", "steps_other", "waiting", "no_split")


@dataclass(frozen=True)
class Period:
    start: datetime  # inclusive, aware UTC
    end: datetime  # exclusive


def _parse_time(param, value, end_of_day):
    text = str(value).strip()
    accepted = f"{param} must be a date YYYY-MM-DD or an ISO 8601 date-time (e.g. 2025-01-31T12:00Z), got {value!r}"
    try:
        if len(text) == 10:
            moment = datetime.combine(date.fromisoformat(text), time(0), tzinfo=dt_timezone.utc)
        else:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InputError(param, accepted) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt_timezone.utc)
    # 9999-12-31 through its end, or 0001-01-01 less the default week, overflowed (500)
    moment = check_moment(param, moment).astimezone(dt_timezone.utc)
    # A date as `to` means through the end of that day.
    return moment + timedelta(days=1) if end_of_day and len(text) == 10 else moment


def parse_params(params, now=None):
    """Return (Period, group, format) from a mapping of strings; raise InputError naming the parameter.

    from/to: dates (to = through the end of that day) or ISO date-times (to exclusive);
    default the last 7 days. group: team (default), job, node, day. format: json (default) or csv.
    """
    now = now or timezone.now()
    group = (params.get("group") or "team").strip()
    if group not in GROUPS:
        raise InputError("group", f"group must be one of {', '.join(GROUPS)}, got {group!r}")
    fmt = (params.get("format") or "json").strip()
    if fmt not in FORMATS:
        raise InputError("format", f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    end = _parse_time("to", params["to"], end_of_day=True) if params.get("to") else now
    if params.get("from"):
        start = _parse_time("from", params["from"], end_of_day=False)
    else:
        start = datetime.combine((end - DEFAULT_RANGE).date(), time(0), tzinfo=dt_timezone.utc)
    # Messages name the dates as typed: a `to` date means through its end, i.e. before the next midnight.
    typed_from = params.get("from") or start.isoformat()
    typed_to = params.get("to") or f"now ({end.isoformat(timespec='seconds')})"
    if start >= end:
        raise InputError("from", f"from must be before to, got from={typed_from} and to={typed_to}")
    if end - start > MAX_RANGE:
        raise InputError("to", f"the period may span at most {MAX_RANGE.days} days, got "
                                     f"{(end - start).days} days (from={typed_from} to={typed_to})")
    return Period(start, end), group, fmt


# -- rounding ------------------------------------------------------------------


def round_column(values, quantum=CENT):
    """Round each value to `quantum` so that they sum to their exact total rounded half-up (largest remainder)."""
    if not values:
        return []
    target = sum(values, Decimal(0)).quantize(quantum, ROUND_HALF_UP)
    floors = [v.quantize(quantum, ROUND_FLOOR) for v in values]
    steps = int((target - sum(floors, Decimal(0))) / quantum)
    order = sorted(range(len(values)), key=lambda i: (-(values[i] - floors[i]), i))
    out = list(floors)
    for i in order[:max(0, steps)]:
        out[i] += quantum
    return out


# -- the report -------------------------------------------------------------------


# A row's four money cells, unrounded in `Row.exact` and rounded to the cent in `Row.cells`: what its jobs
# were charged for device time and for energy, and what its idle devices cost the same two ways.
MONEY_CELLS = ("job_device_usd", "job_energy_usd", "idle_device_usd", "idle_energy_usd")


@dataclass
class Row:
    group: str
    key: str
    label: str
    team: str = ""
    status: str = ""
    job_id: int | None = None
    is_idle: bool = False
    # Unrounded sums: the MONEY_CELLS, device time in seconds and energy in joules.
    exact: dict = field(default_factory=lambda: dict.fromkeys(MONEY_CELLS + ("device_s", "energy_j"), Decimal(0)))
    gain_points: float | None = None
    energy_from: set = field(default_factory=set)
    energy_scope: set = field(default_factory=set)
    simulated: bool = False
    power_estimated: bool = False
    example_prices: bool = False
    unpriced: bool = False
    cells: dict = field(default_factory=dict)  # rounded (round_cells): the MONEY_CELLS to the cent, hours, kWh
    phases: dict = field(default_factory=lambda: dict.fromkeys(PHASE_COLUMNS, Decimal(0)))  # unrounded

    def add(self, u):
        """Add the Usage `u` (a job's when it has one, else idle) to the unrounded sums and the flags."""
        ex, kind = self.exact, "idle" if u.job_id is None else "job"
        ex[f"{kind}_device_usd"] += u.device_usd
        ex[f"{kind}_energy_usd"] += u.energy_usd
        ex["device_s"] += u.device_s
        ex["energy_j"] += u.energy_j
        self.energy_from |= set(u.energy_from)
        self.energy_scope |= set(u.energy_scope)
        self.simulated |= u.simulated
        self.power_estimated |= u.power_estimated
        self.example_prices |= u.example_price
        self.unpriced |= u.price_pattern is None

    def add_phases(self, usd, shares):
        """Split a job's `usd` by its phase `shares` (costs.tokens.phase_shares), or as no_split without any."""
        if shares is None:
            self.phases["no_split"] += usd
            return
        for phase, share in shares.items():
            self.phases["steps_other" if phase == "other" else phase] += usd * share

    def phase_cells(self):
        """PHASE_COLUMNS to the micro-dollar, waiting taking what is left so they add up to the attributed."""
        out = {p: v.quantize(MICRO) for p, v in self.phases.items() if p != "waiting"}
        out["waiting"] = self.jobs_exact_usd.quantize(MICRO) - sum(out.values())
        return {f"{p}_exact_usd": exact_usd(out[p]) for p in PHASE_COLUMNS}

    def add_gain(self, gain):
        if gain is not None:
            self.gain_points = (self.gain_points or 0.0) + gain

    @property
    def jobs_exact_usd(self):
        return self.exact["job_device_usd"] + self.exact["job_energy_usd"]

    @property
    def idle_exact_usd(self):
        return self.exact["idle_device_usd"] + self.exact["idle_energy_usd"]

    def values(self):
        c = self.cells
        attributed = c["job_device_usd"] + c["job_energy_usd"]
        idle = c["idle_device_usd"] + c["idle_energy_usd"]
        exact_jobs = self.jobs_exact_usd
        if self.group in ("team", "day"):
            points_per_usd, usd_per_point, state = None, None, BY_ENV
        elif self.gain_na:
            points_per_usd, usd_per_point, state = None, None, "n/a"
        else:  # a job: its gain over its unrounded cost
            points_per_usd, usd_per_point, state = ipd(self.gain_points, exact_jobs)
        return {
            "group": self.group, "key": self.key, "label": self.label, "team": self.team, "status": self.status,
            "device_hours": c["device_hours"], "energy_kwh": c["energy_kwh"],
            "device_cost_usd": c["job_device_usd"] + c["idle_device_usd"],
            "energy_cost_usd": c["job_energy_usd"] + c["idle_energy_usd"],
            "attributed_usd": attributed, "idle_usd": idle, "total_usd": c["total_usd"],
            "attributed_exact_usd": exact_usd(exact_jobs),
            "gain_points": None if self.gain_points is None else round(self.gain_points, 4),
            "ipd_points_per_usd": None if points_per_usd is None else round(float(points_per_usd), 6),
            "usd_per_point": exact_usd(usd_per_point),
            "ipd_state": state, "energy_from": energy_from_label(self.energy_from),
            "energy_scope": energy_scope_label(self.energy_scope),
            "simulated": self.simulated, "power_estimated": self.power_estimated,
            "example_prices": self.example_prices, "unpriced": self.unpriced, **self.phase_cells(),
            # What the pages show: a job's own cost and IPD as on its page (the cells above add up to the cent).
            **displays(exact_jobs if self.job_id is not None else None, points_per_usd, usd_per_point),
        }

    @property
    def gain_na(self):
        return self.is_idle or self.group == "node"


@dataclass
class Report:
    period: Period
    group: str
    rows: list
    totals: dict
    generated_at: datetime
    ipd_groups: dict = field(default_factory=lambda: {"by_team_env": [], "by_env": []})
    # None, or the period as it was read where a bound falls inside a folded day (costs.ledger.folded_cut)
    read_at: dict | None = None

    @property
    def example_prices(self):
        return self.totals["example_prices"]


def group_key(u, group, jobs):
    """(key, label) of the row a Usage `u` belongs to when grouped by `group`; `jobs` maps id to Job.
    The Costs page's chart stacks by the same rows as its table."""
    if group == "team":
        return u.team, u.team
    if group == "job":
        if u.job_id is None:
            return f"idle:{u.team}", f"idle ({u.team})"
        job = jobs.get(u.job_id)
        return str(u.job_id), job.name if job else f"deleted job {u.job_id}"
    if group == "node":
        return u.node, u.node
    return u.day.isoformat(), u.day.isoformat()


def build(period, group, book=None):
    """The cost table of `period` grouped by `group` (see the module docstring for the rounding)."""
    book = book or PriceBook()
    used = usage(period.start, period.end, book=book)
    job_ids = {u.job_id for u in used if u.job_id is not None}
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=job_ids)}
    rows = keyed_rows(used, group, jobs)
    shares = tokens.phase_shares(job_ids, book)
    for u in used:
        if u.job_id is not None:
            rows[group_key(u, group, jobs)[0]].add_phases(u.total_usd, shares.get(u.job_id))
    scores = Scores(job_ids)
    gains = {job_id: scores.gain(job_id, period.start, period.end) for job_id in sorted(job_ids)}
    if group == "job":  # gains of different environments add up to nothing: only a job's own row has one
        for job_id, gain in gains.items():
            rows[str(job_id)].add_gain(gain)
    ordered = sorted(rows.values(), key=_sort_key)
    round_cells(ordered)
    values = [r.values() for r in ordered]
    return Report(period=period, group=group, rows=values, totals=totals(ordered, values),
                  generated_at=timezone.now(), ipd_groups=ipd_groups(used, jobs, gains),
                  read_at=folded_cut(period.start, period.end))


def keyed_rows(used, group, jobs):
    """{key: Row}: each Usage in `used` added to the row of its `group_key`."""
    rows = {}
    for u in used:
        key, label = group_key(u, group, jobs)
        row = rows.get(key)
        if row is None:
            row = rows[key] = _new_row(u, group, key, label, jobs)
        row.add(u)
    return rows


def _new_row(u, group, key, label, jobs):
    """The row `u` opens: a job's carries its id, team and status; a team's its team; a node's its owner."""
    row = Row(group=group, key=key, label=label)
    if group == "job":
        row.is_idle = u.job_id is None
        row.team = u.team
        row.job_id = u.job_id
        row.status = "idle" if row.is_idle else (jobs[u.job_id].status if u.job_id in jobs else "")
    elif group == "team":
        row.team = u.team
    elif group == "node":
        row.team = u.node_owner or ""
    return row


def round_cells(rows):
    """Fill each row's `cells`: attributed and idle each rounded to the cent as a column of its own (largest
    remainder: each column adds up to its exact total rounded, whatever the rows are), each row's attributed and
    idle then split into device and energy (device: its own amount rounded, within what the cell holds; energy:
    the rest); hours and kWh as columns too."""
    for kind, exact in (("job", lambda r: r.jobs_exact_usd), ("idle", lambda r: r.idle_exact_usd)):
        for row, cents in zip(rows, round_column([exact(r) for r in rows])):
            device = min(max(row.exact[f"{kind}_device_usd"].quantize(CENT, ROUND_HALF_UP), Decimal(0)), cents)
            row.cells[f"{kind}_device_usd"], row.cells[f"{kind}_energy_usd"] = device, cents - device
    for row, cents in zip(rows, round_column([r.jobs_exact_usd + r.idle_exact_usd for r in rows])):
        row.cells["total_usd"] = cents
    for row, hours in zip(rows, round_column([r.exact["device_s"] / 3600 for r in rows], HOURS_Q)):
        row.cells["device_hours"] = hours
    for row, kwh in zip(rows, round_column([r.exact["energy_j"] / 3_600_000 for r in rows], KWH_Q)):
        row.cells["energy_kwh"] = kwh


def totals(rows, values):
    """The totals row: sums of the rounded cells (attributed, idle and fleet each its exact total rounded to the
    cent), the exact sums to the micro-dollar, and a flag where any row has it."""
    quanta = {"device_hours": HOURS_Q, "energy_kwh": KWH_Q}
    # Sums of the rows: attributed and idle are each its own exact total rounded to the cent (round_cells), the
    # same in every grouping.
    out = {k: sum((v[k] for v in values), Decimal(0)).quantize(quanta.get(k, CENT)) for k in (
        "device_hours", "energy_kwh", "device_cost_usd", "energy_cost_usd", "attributed_usd", "idle_usd")}
    out["fleet_usd"] = sum((v["total_usd"] for v in values), Decimal(0)).quantize(CENT)  # its exact total, rounded
    attributed_exact = sum((r.jobs_exact_usd for r in rows), Decimal(0))
    idle_exact = sum((r.idle_exact_usd for r in rows), Decimal(0))
    out.update({
        "attributed_exact_usd": exact_usd(attributed_exact),
        **{c: exact_usd(sum((Decimal(v[c]) for v in values), Decimal(0)))
           for c in (f"{p}_exact_usd" for p in PHASE_COLUMNS)},
        "idle_exact_usd": exact_usd(idle_exact),
        "fleet_exact_usd": exact_usd(attributed_exact + idle_exact),
        "gain_points": None, "ipd_points_per_usd": None, "usd_per_point": None, "ipd_state": BY_ENV,
        "energy_from": energy_from_label(set().union(*(r.energy_from for r in rows)) if rows else set()),
        "energy_scope": energy_scope_label(set().union(*(r.energy_scope for r in rows)) if rows else set()),
        **{flag: any(v[flag] for v in values) for flag in ("simulated", "power_estimated", "example_prices",
                                                           "unpriced")},
    })
    return out


def ipd_groups(used, jobs, gains):
    """IPD per (team, environment) and per environment: the sum of the jobs' gains over the sum of their
    unrounded costs, each as {team, env, jobs, gain_points, cost_usd, ipd_points_per_usd, usd_per_point,
    ipd_state} with costs.money's display strings. A job with no eval yet adds its cost, not a gain."""
    cost = defaultdict(Decimal)
    for u in used:
        if u.job_id in jobs:
            cost[u.job_id] += u.total_usd
    groups = {}
    for job_id in sorted(cost):
        job, gain = jobs[job_id], gains.get(job_id)
        for key in ((job.team, job.env), (None, job.env)):
            g = groups.setdefault(key, {"jobs": 0, "gain": None, "cost": Decimal(0)})
            g["jobs"] += 1
            g["cost"] += cost[job_id]
            if gain is not None:
                g["gain"] = (g["gain"] or 0.0) + gain
    out = {"by_team_env": [], "by_env": []}
    for (team, env), g in sorted(groups.items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or "", kv[0][1])):
        points_per_usd, usd_per_point, state = ipd(g["gain"], g["cost"])
        out["by_env" if team is None else "by_team_env"].append({
            **({} if team is None else {"team": team}), "env": env, "jobs": g["jobs"],
            "gain_points": None if g["gain"] is None else round(g["gain"], 4), "cost_usd": exact_usd(g["cost"]),
            "ipd_points_per_usd": None if points_per_usd is None else round(float(points_per_usd), 6),
            "usd_per_point": exact_usd(usd_per_point), "ipd_state": state,
            **displays(g["cost"], points_per_usd, usd_per_point),
        })
    return out


def _sort_key(row):
    if row.group == "job":
        return (row.is_idle, -(row.job_id or 0) if not row.is_idle else 0, row.key)
    return (row.key,)


# -- rendering ---------------------------------------------------------------------


def _plain(value):
    if isinstance(value, Decimal):
        return str(value)
    return value


def to_json(report):
    return {
        "from": report.period.start.isoformat(),
        "to": report.period.end.isoformat(),
        "group": report.group,
        "rows": [{k: _plain(v) for k, v in row.items()} for row in report.rows],
        "totals": {k: _plain(v) for k, v in report.totals.items()},
        "ipd_groups": report.ipd_groups,
        "note": EXAMPLE_PRICES_NOTE if report.example_prices else "",
        "rounding": "each money cell is rounded to the cent so that attributed + idle = fleet exactly",
        "read_at": None if report.read_at is None else {
            "from": report.read_at["from"].isoformat(), "to": report.read_at["to"].isoformat(),
            "grain": "day", "text": report.read_at["text"]},
    }


def _cell(value, text=str):
    """One cell as a string; `text` treats what people typed (names, teams), never numbers, so a negative
    gain stays the number -6.0."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return text(value)
    return str(value)


def csv_rows(report, text=str):
    """Header, one row per group, a totals row: lists of strings (the CSV and the text table share them)."""
    out = [list(COLUMNS)]
    for row in report.rows:
        out.append([_cell(row[c], text) for c in COLUMNS])
    t = report.totals
    totals = {**t, "group": report.group, "key": "TOTAL", "label": "fleet", "team": "", "status": "",
              "total_usd": t["fleet_usd"]}
    out.append([_cell(totals.get(c), text) for c in COLUMNS])
    return out


def to_csv(report):
    """The CSV a spreadsheet opens: text cells are guarded against formula injection (the text table is not)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerows(csv_rows(report, text=csv_text))
    return buf.getvalue()


TEXT_COLUMNS = ("key", "label", "team", "device_hours", "energy_kwh", "device_cost_usd", "energy_cost_usd",
                "attributed_usd", "idle_usd", "total_usd", "gain_points", "ipd_points_per_usd", "ipd_state", "flags")


def to_text(report):
    """A fixed-width table for a terminal, with the same figures as the CSV."""
    table = csv_rows(report)
    header = table[0]
    idx = {c: i for i, c in enumerate(header)}
    lines = []
    body = [TEXT_COLUMNS]
    for cells in table[1:]:
        flags = [name for name in ("simulated", "power_estimated", "example_prices", "unpriced")
                 if cells[idx[name]] == "true"]
        body.append(tuple(cells[idx[c]] if c != "flags" else ",".join(flags) for c in TEXT_COLUMNS))
    widths = [max(len(r[i]) for r in body) for i in range(len(TEXT_COLUMNS))]
    lines.append(f"Costs by {report.group}, {report.period.start.isoformat()} to {report.period.end.isoformat()}")
    for n, r in enumerate(body):
        if n == len(body) - 1:
            lines.append("  ".join("-" * w for w in widths))
        lines.append("  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(r, widths)).rstrip())
    t = report.totals
    lines.append(f"attributed ${t['attributed_usd']}, idle ${t['idle_usd']}, fleet ${t['fleet_usd']} (each its exact "
                 "total rounded to the cent)")
    if report.example_prices:
        lines.append(f"NOTE: {EXAMPLE_PRICES_NOTE}")
    if report.read_at:
        lines.append(f"NOTE: {report.read_at['text']}")
    return "\n".join(lines) + "\n"


def _numeric(text):
    try:
        Decimal(text)
        return True
    except (InvalidOperation, TypeError, ValueError):
        return False
