"""The cost engine's tables: the price book, per-minute allocations, and the attribution watermark.

Why per-(device, minute, holder) rows rather than per-(job, day) aggregates:
a re-run of attribution replaces exactly the minutes it recomputes (delete +
insert, idempotent), late telemetry for one minute touches only that minute,
and every dollar in a report can be explained line by line down to the
telemetry rollup it came from. Money is *not* stored: rows hold device-seconds
and joules, and prices are applied when a report is built, from the entry in
force on each minute's UTC day. So a price added today changes only today
onward, and a report never depends on when attribution happened to run.
Prices are per day (an entry holds "from YYYY-MM-DD"), so reports aggregate
rows per (device, day, holder) in SQL before pricing: the row count of a
report grows with devices x days, not with minutes.
"""

from datetime import date, datetime
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from yardstick.inputs import InputError


class PriceEntry(models.Model):
    """What one device-hour and one kWh cost for devices whose model matches `pattern`, from a date on.

    Which entry applies to a device on a day: among patterns matching the
    device's model (host CPUs match as `cpu`) that have an entry in force that
    day, the most specific (most non-wildcard characters) wins; of its entries,
    the newest `effective_from` on or before the day (costs.prices.PriceBook). Its
    rules are `validate` (the admin, the command and `clean` all use it).
    """

    pattern = models.CharField(
        max_length=200, help_text="fnmatch pattern on the device model (case-insensitive): *H100*, cpu, * (default)"
    )
    usd_per_hour = models.DecimalField(max_digits=14, decimal_places=6, help_text="USD per device-hour, >= 0")
    usd_per_kwh = models.DecimalField(max_digits=14, decimal_places=6, help_text="USD per kWh drawn, >= 0")
    pue = models.DecimalField(max_digits=6, decimal_places=3, default=1, help_text="power usage effectiveness, >= 1")
    effective_from = models.DateField(help_text="UTC day from which this entry holds")
    is_example = models.BooleanField(
        default=False, help_text="an example price shipped with Yardstick, not a real contract price"
    )
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["pattern", "effective_from"]
        verbose_name_plural = "price entries"
        constraints = [
            models.UniqueConstraint(fields=["pattern", "effective_from"], name="costs_price_pattern_from_unique"),
            models.CheckConstraint(condition=models.Q(usd_per_hour__gte=0), name="costs_price_per_hour_nonneg"),
            models.CheckConstraint(condition=models.Q(usd_per_kwh__gte=0), name="costs_price_per_kwh_nonneg"),
            models.CheckConstraint(condition=models.Q(pue__gte=1), name="costs_price_pue_ge_1"),
        ]

    def __str__(self):
        label = " (example)" if self.is_example else ""
        return (f"{self.pattern} from {self.effective_from}: ${self.usd_per_hour}/h, "
                f"${self.usd_per_kwh}/kWh x PUE {self.pue}{label}")

    def clean(self):
        try:
            self.validate()
        except InputError as err:
            raise ValidationError({err.field: err.message}) from None

    def validate(self):
        """Normalise and check this entry (saved or not) in place; raise InputError on the first bad field."""
        pattern = (self.pattern or "").strip() if isinstance(self.pattern, str) else self.pattern
        if not isinstance(pattern, str) or not pattern or len(pattern) > 200:
            raise InputError("pattern", f"pattern must be a model-name pattern like *H100*, cpu or * "
                                        f"(1 to 200 characters), got {self.pattern!r}")
        self.pattern = pattern
        self.usd_per_hour = parse_money("usd_per_hour", self.usd_per_hour, accepted="a number of dollars >= 0")
        self.usd_per_kwh = parse_money("usd_per_kwh", self.usd_per_kwh, accepted="a number of dollars >= 0")
        self.pue = parse_money("pue", self.pue, minimum=Decimal(1), accepted="a number >= 1 (1.0 = no overhead)")
        if self.pue != self.pue.quantize(Decimal("0.001")):
            raise InputError("pue", f"pue must have at most 3 decimal places, got {self.pue}")
        self.effective_from = parse_day("effective_from", self.effective_from)

        clash = PriceEntry.objects.filter(pattern=self.pattern, effective_from=self.effective_from)
        if self.pk:
            clash = clash.exclude(pk=self.pk)
        other = clash.first()
        if other is not None:
            raise InputError("effective_from", f"pattern {self.pattern!r} already has an entry from "
                                               f"{self.effective_from} (${other.usd_per_hour}/h); "
                                               "choose another date (entries of one pattern need distinct start dates)")

        if self.pk:
            stored = PriceEntry.objects.filter(pk=self.pk).first()
            today = timezone.now().date()
            if stored is not None and stored.effective_from < today:
                fixed = ("pattern", "usd_per_hour", "usd_per_kwh", "pue", "effective_from")
                changed = [f for f in fixed if getattr(stored, f) != getattr(self, f)]
                if changed:
                    raise InputError(changed[0], f"{changed[0]} of an entry in force since {stored.effective_from} "
                                                 "cannot change (past costs would change with it); "
                                                 f"add a new entry from {today} or later instead")
        return self


def parse_money(field, value, minimum=Decimal(0), accepted=None):
    """Return `value` as a finite Decimal >= minimum (6 decimal places at most), or raise InputError."""
    accepted = accepted or f"a number >= {minimum}"
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise InputError(field, f"{field} must be {accepted}, got {value!r}") from None
    if isinstance(value, bool) or not amount.is_finite() or amount < minimum:
        raise InputError(field, f"{field} must be {accepted}, got {value}")
    if amount > Decimal("99999999"):
        raise InputError(field, f"{field} must be {accepted} and below 100000000, got {value}")
    if amount != amount.quantize(Decimal("0.000001")):
        raise InputError(field, f"{field} must have at most 6 decimal places, got {value}")
    return amount


def parse_day(field, value):
    """Return a date from a date or 'YYYY-MM-DD', or raise InputError."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value).strip())
    except ValueError:
        raise InputError(field, f"{field} must be a date YYYY-MM-DD, got {value!r}") from None


class Allocation(models.Model):
    """Device time and energy of one device in one minute, charged to one job or to idle (job null).

    For each rollup minute the rows of that (device, minute) sum exactly to the
    rollup's covered_s and energy_j (numeric arithmetic; idle takes the
    remainder). `team` is who pays: the job's team, or for idle the node's
    owner label at attribution time ("unassigned" without one). The rollup's
    own figures are copied (`rollup_*`) so a later change to the rollup (late
    samples) is seen and the minute recomputed.
    """

    # No index of their own on device and job: the unique constraint's (device, minute, job) and the index
    # (job, minute) begin with them. Every attribution run deletes and writes a row per device-minute (100,000
    # a minute at 100,000 GPUs): each index more is paid there.
    device = models.ForeignKey(
        "collector.Device", on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    minute = models.DateTimeField()  # start of the rollup bucket, UTC
    # Null: idle. No database constraint: a deleted job must not take its device time with it.
    job = models.ForeignKey(
        "trainer.Job", null=True, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    team = models.CharField(max_length=100)
    held_s = models.FloatField(help_text="seconds of this minute the job held the device (idle: held by no job)")
    device_s = models.DecimalField(max_digits=30, decimal_places=15)
    energy_j = models.DecimalField(max_digits=30, decimal_places=15)
    energy_from = models.CharField(max_length=10)  # counter | power | mixed | none, from the rollup
    # Whose energy: device | module | mixed | none | in_module, from the rollup (collector/agent/schema.py).
    energy_scope = models.CharField(max_length=10, default="device")
    rollup_samples = models.IntegerField()
    rollup_covered_s = models.FloatField()
    rollup_energy_j = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["device", "minute", "job"], nulls_distinct=False, name="costs_allocation_unique"
            ),
        ]
        indexes = [
            models.Index(fields=["minute"], name="costs_allocation_minute"),
            models.Index(fields=["job", "minute"], name="costs_allocation_job"),
        ]

    def __str__(self):
        return f"device {self.device_id} {self.minute:%Y-%m-%d %H:%M} → {self.job_id or 'idle'}"


ENERGY_FROM = ("counter", "power", "mixed", "none")
ENERGY_SCOPES = ("device", "module", "mixed", "none", "in_module")


class DailyUsage(models.Model):
    """The allocation rows of one (device, UTC day, job or idle, team) summed: what reports, budgets and the
    live figures price (costs.ledger.usage), so they read a row per device and day instead of one per minute.

    Kept by triggers on costs_allocation (DAILY_SQL, migration 0004): every statement that inserts, deletes
    or updates allocations adds or takes away its rows' sums here, in its own transaction, exactly (numeric
    arithmetic); a TRUNCATE empties it. The fold's deletes (costs/fold.py) are the one exception: past the
    horizon a day is kept here alone, with the sums its minutes had. `minutes` counts the rows summed (0: none
    left), the `from_*` and `scope_*` how many had each energy_from and energy_scope.
    """

    # As Allocation's: no index of their own (the unique constraint and (job, day) begin with them). Each
    # attribution run updates a row per device (twice where it replaces minutes): the table is kept half full
    # (fillfactor 50, migration 0006) so most updates stay on their page and touch no index (HOT).
    device = models.ForeignKey(
        "collector.Device", on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    day = models.DateField()
    job = models.ForeignKey(
        "trainer.Job", null=True, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    team = models.CharField(max_length=100)
    minutes = models.IntegerField()
    device_s = models.DecimalField(max_digits=30, decimal_places=15)
    energy_j = models.DecimalField(max_digits=30, decimal_places=15)
    from_counter = models.IntegerField()
    from_power = models.IntegerField()
    from_mixed = models.IntegerField()
    from_none = models.IntegerField()
    scope_device = models.IntegerField()
    scope_module = models.IntegerField()
    scope_mixed = models.IntegerField()
    scope_none = models.IntegerField()
    scope_in_module = models.IntegerField()

    class Meta:
        db_table = "costs_usage_day"
        constraints = [
            models.UniqueConstraint(
                fields=["device", "day", "job", "team"], nulls_distinct=False, name="costs_usage_day_unique"
            ),
        ]
        indexes = [
            models.Index(fields=["day"], name="costs_usage_day_day"),
            models.Index(fields=["job", "day"], name="costs_usage_day_job"),
        ]


_DAY_COLUMNS = ("device_id, day, job_id, team, minutes, device_s, energy_j, "
                + ", ".join(f"from_{v}" for v in ENERGY_FROM) + ", "
                + ", ".join(f"scope_{v}" for v in ENERGY_SCOPES))


def _summed(rows, sign):
    """SELECT of `rows` (a transition table of allocations) summed per DailyUsage key, times `sign`."""
    counts = ([f"{sign}count(*) FILTER (WHERE energy_from = '{v}')" for v in ENERGY_FROM]
              + [f"{sign}count(*) FILTER (WHERE energy_scope = '{v}')" for v in ENERGY_SCOPES])
    return (f"SELECT device_id, (minute AT TIME ZONE 'UTC')::date, job_id, team, {sign}count(*), "
            f"{sign}sum(device_s), {sign}sum(energy_j), {', '.join(counts)} FROM {rows} "
            "GROUP BY 1, 2, 3, 4")


_ADD = ", ".join(f"{c} = u.{c} + excluded.{c}" for c in _DAY_COLUMNS.split(", ")[4:])


def day_trigger(name, rows, sign, unless=""):
    return f"""
CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {unless}
    INSERT INTO costs_usage_day AS u ({_DAY_COLUMNS}) {_summed(rows, sign)}
    ON CONFLICT (device_id, day, job_id, team) DO UPDATE SET {_ADD};
    RETURN NULL;
END $$;"""


# Deleting allocations takes their sums away, except where the fold deletes them (costs/fold.py sets
# yardstick.folding in its transaction): their day keeps them, which is what folding them means.
TAKE_SQL = day_trigger("costs_usage_day_take", "gone", "-",
                        "IF current_setting('yardstick.folding', true) = 'on' THEN RETURN NULL; END IF;")
# The triggers that keep DailyUsage, and the backfill of what was allocated before them.
DAILY_SQL = f"""
{day_trigger("costs_usage_day_add", "added", "")}
{TAKE_SQL}
CREATE OR REPLACE FUNCTION costs_usage_day_empty() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE costs_usage_day;
    RETURN NULL;
END $$;
CREATE TRIGGER costs_allocation_day_insert AFTER INSERT ON costs_allocation
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION costs_usage_day_add();
CREATE TRIGGER costs_allocation_day_delete AFTER DELETE ON costs_allocation
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION costs_usage_day_take();
CREATE TRIGGER costs_allocation_day_update_old AFTER UPDATE ON costs_allocation
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION costs_usage_day_take();
CREATE TRIGGER costs_allocation_day_update_new AFTER UPDATE ON costs_allocation
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION costs_usage_day_add();
CREATE TRIGGER costs_allocation_day_truncate AFTER TRUNCATE ON costs_allocation
    FOR EACH STATEMENT EXECUTE FUNCTION costs_usage_day_empty();
INSERT INTO costs_usage_day ({_DAY_COLUMNS}) {_summed("costs_allocation", "")};
"""
DAILY_DROP_SQL = """
DROP TRIGGER IF EXISTS costs_allocation_day_insert ON costs_allocation;
DROP TRIGGER IF EXISTS costs_allocation_day_delete ON costs_allocation;
DROP TRIGGER IF EXISTS costs_allocation_day_update_old ON costs_allocation;
DROP TRIGGER IF EXISTS costs_allocation_day_update_new ON costs_allocation;
DROP TRIGGER IF EXISTS costs_allocation_day_truncate ON costs_allocation;
DROP FUNCTION IF EXISTS costs_usage_day_add(), costs_usage_day_take(), costs_usage_day_empty();
"""


class AttributionState(models.Model):
    """One row: how far attribution has run, and which stints were still open then.

    A stint open at the last run was charged up to that run's end; when it
    closes (finished, or its crash found later with ended_at set back to the
    last heartbeat) the next run recomputes from its ended_at. The stints and
    the snapshot are read at the start of a run, before the minutes.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    done_through = models.DateTimeField(null=True, help_text="minutes before this are attributed")
    open_stints = models.JSONField(default=list)
    last_stint_id = models.BigIntegerField(default=0)
    ran_at = models.DateTimeField(null=True)
    # The pg_snapshot the last run took before it read (collector.store.rollup_snapshot): the next reads only
    # the rollups written since. None before the first run that took one.
    rollups_seen = models.TextField(null=True)
    # The stints that started or ended in the LOOKBACK before the last run's end, as that run saw them: the next
    # recomputes only those of the LOOKBACK it has not seen (a row committed after a run that read newer ones).
    recent_stints = models.JSONField(default=list)
    # Allocations of the days before this are folded (costs/fold.py): their minute rows deleted, their sums kept in
    # DailyUsage. Attribution charges no minute before it (a late sample there is refused, saying why).
    folded_before = models.DateField(null=True)
