"""The fold: allocations older than the horizon kept per day instead of per minute.

Attribution writes a row per (device, minute, job or idle): 1,440 a day for every device, which at 100,000 GPUs is
50 GB a day, kept for good. Past the horizon (YARDSTICK_ALLOCATION_1M_DAYS, 90 days by default) a day's minute
rows are deleted and the day is kept as its DailyUsage rows: one per (device, day, job or idle, team), holding
exactly the device-seconds, joules and rows the minutes held (numeric sums the triggers keep; costs/models.py).
Every figure is priced from those sums already (costs/ledger.py reads whole days there), so a job's cost, a team's
review, the fleet's total and the exports are the same before and after, to the micro-dollar. A day, not an hour:
reports, prices and budgets are by UTC day, and the day rows exist already, so the fold writes nothing; a period
that begins or ends inside a folded day is read at the day's grain and says so (`ledger.folded_cut`).

The order keeps the sums exact whatever runs beside it or dies midway:
1. the mark: `AttributionState.folded_before` moves to the horizon's day, under attribution's own row lock, so
   every attribution run after it charges no minute before it (a late sample there is refused, saying why) and
   none still running can write one;
2. the minutes before the mark are deleted in batches of `batch` rows, each in a transaction of its own with
   `yardstick.folding` set, which the delete trigger reads: their day keeps their sums. A batch that dies rolls
   back whole; the next fold deletes what is left. Nothing is added anywhere, so nothing can be counted twice.
"""

import logging
import time
from datetime import datetime, timedelta
from datetime import time as day_start
from datetime import timezone as dt_timezone

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from costs.models import AttributionState

log = logging.getLogger(__name__)

BATCH_ROWS = 20_000  # rows a batch deletes: tens of milliseconds, so no lock is held long
BUDGET_S = 60.0  # what one run of beat's costs-fold spends on batches at most
# Each batch's rows through the minute index, by their physical address.
_DELETE = ("DELETE FROM costs_allocation WHERE ctid = ANY(ARRAY("
           "SELECT ctid FROM costs_allocation WHERE minute < %s LIMIT %s))")


def horizon(now=None):
    """The first day kept per minute: the days before it are folded."""
    now = now or timezone.now()
    return (now - timedelta(days=settings.ALLOCATION_1M_DAYS)).date()


def folded_before():
    """The first day whose allocations are kept per minute (None: nothing was ever folded)."""
    return AttributionState.objects.filter(id=1).values_list("folded_before", flat=True).first()


def midnight(day):
    return datetime.combine(day, day_start(0), tzinfo=dt_timezone.utc)


def mark(day):
    """Move the mark to `day` (never back): from then on no attribution charges a minute before it."""
    with transaction.atomic():
        state, _ = AttributionState.objects.select_for_update().get_or_create(id=1)
        if state.folded_before is None or state.folded_before < day:
            state.folded_before = day
            state.save(update_fields=["folded_before"])
        return state.folded_before


def fold_batch(before, batch=BATCH_ROWS):
    """Delete up to `batch` allocation minutes of the days before `before` (the mark), their days keeping their
    sums, in a transaction of its own; return how many went."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL yardstick.folding = 'on'")
        cur.execute(_DELETE, [midnight(before), batch])
        gone = cur.rowcount
        # Off again at once: inside a caller's transaction SET LOCAL would outlive the batch, and a delete by
        # attribution there would keep its sums.
        cur.execute("SET LOCAL yardstick.folding = 'off'")
    return gone


def fold(now=None, batch=BATCH_ROWS, budget_s=BUDGET_S, stop=None, each=None):
    """Fold the days past the horizon, a batch at a time, for up to `budget_s` seconds or until `stop` (an Event)
    is set; return {"folded_before", "deleted", "batches", "done"} (`done`: no minute before the mark is left).
    `each(started, seconds, rows)` is called after each batch (the benchmarks time them)."""
    started = time.monotonic()
    before = mark(horizon(now))
    deleted = batches = 0
    done = False
    while not done and time.monotonic() - started < budget_s and not (stop and stop.is_set()):
        at, began = time.time(), time.perf_counter()
        gone = fold_batch(before, batch)
        if each:
            each(at, time.perf_counter() - began, gone)
        deleted += gone
        batches += 1
        done = gone < batch
    if deleted:
        log.info("folded %d allocation minutes before %s into their days (%d batches)", deleted, before, batches)
    return {"folded_before": before.isoformat(), "deleted": deleted, "batches": batches, "done": done}
