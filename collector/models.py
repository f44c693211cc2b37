"""Nodes, devices and their telemetry.

The tables are created by `collector.agent.schema` (raw SQL the node agent
shares), so every model here is unmanaged: Django reads and joins them, the
agent writes them with COPY. Units are in the field names.
"""

from datetime import timedelta

from django.contrib.postgres.fields import ArrayField
from django.db import connection, models
from django.utils import timezone

from collector.agent.schema import SAMPLE_FIELDS


class Node(models.Model):
    """A machine that runs an agent (or that an import named)."""

    name = models.TextField(unique=True)
    # Free-form labels from `--label key=value`; "team" is the owner charged for idle time.
    labels = models.JSONField(default=dict)
    # The agent's tick; the node is stale when its newest sample is older than STALE_INTERVALS of it.
    interval_s = models.FloatField(default=1.0)
    # The IP addresses of its machine, as its agent reports them (nvml and host sources; [] for none): a cluster's
    # scheduler may name the node by one (launch.remote.tie).
    addresses = ArrayField(models.TextField(), default=list, blank=True)
    first_seen = models.DateTimeField()
    registered_at = models.DateTimeField()

    STALE_INTERVALS = 3

    class Meta:
        managed = False
        db_table = "collector_node"
        ordering = ["name"]

    def __str__(self):
        return self.name

    OWNER_MAX = 100  # as long as a job's team (trainer.models.TEAM_MAX): the owner is a team that pays

    @property
    def owner(self):
        """The team that owns this node (label `team`), or None."""
        return self.labels.get("team") or None

    @classmethod
    def clean_owner(cls, team):
        """The owner team as stored ("" for none, stripped); ValueError with a message for people when unusable."""
        if team is None:
            return ""
        if not isinstance(team, str):
            raise ValueError(f"owner team must be text, got {team!r}")
        team = team.strip()
        if len(team) > cls.OWNER_MAX:
            raise ValueError(f"owner team must be at most {cls.OWNER_MAX} characters, got {len(team)}")
        if any(not c.isprintable() for c in team):
            raise ValueError(f"owner team must be printable text without control characters, got {team!r}")
        return team

    def set_owner(self, team):
        """Make `team` the node's owner, charged for its idle time ("" or None: no owner, "unassigned").

        The owner is the `team` label, which an agent started with `--label team=...` also sets when it
        registers, so the agent's flag and this setting name the same thing. Raises ValueError (nothing
        stored) when the team is unusable.
        """
        team = self.clean_owner(team)
        labels = {k: v for k, v in self.labels.items() if k != "team"}
        if team:
            labels["team"] = team
        self.labels = labels
        self.save(update_fields=["labels"])
        return team

    @classmethod
    def is_stale(cls, newest_sample_at, interval_s, now):
        """The one stale rule, for a node and for each of its devices: no sample at all, or the newest
        older than STALE_INTERVALS of the node's interval."""
        return newest_sample_at is None or (now - newest_sample_at).total_seconds() > cls.STALE_INTERVALS * interval_s

    def status(self, newest_sample_at, now=None):
        """Return "ok", or "stale" when the newest sample is older than 3 intervals (or missing)."""
        return "stale" if self.is_stale(newest_sample_at, self.interval_s, now or timezone.now()) else "ok"

    def to_dict(self, devices, newest_sample_at, now=None):
        """The node as the API and the pages give it, with `devices` (their dicts) and its status."""
        return {
            "name": self.name, "labels": self.labels, "owner": self.owner, "interval_s": self.interval_s,
            "status": self.status(newest_sample_at, now), "newest_sample_at": newest_sample_at, "devices": devices,
        }


class Device(models.Model):
    """A GPU (or this machine's CPU, for `--source host`) on a node."""

    id = models.AutoField(primary_key=True)  # int4: it is in every sample row
    uuid = models.TextField(unique=True)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    index = models.IntegerField()
    model = models.TextField(blank=True, default="")
    source = models.TextField()  # nvml | host | dcgm | sim | smi
    # Honest labels, carried to every page and export.
    simulated = models.BooleanField(default=False)
    power_estimated = models.BooleanField(default=False)
    mem_total_mib = models.IntegerField(null=True)
    # As NVML names it ("hopper", "blackwell", "rubin", ...); "" where the source does not say.
    arch = models.TextField(blank=True, default="")
    # MIG on (True) or off (False); None where the device has no MIG or the source does not say.
    mig_mode = models.BooleanField(null=True)
    # The power scopes measured beside the GPU's own: "module", "memory", "module,memory" or "".
    power_scopes = models.TextField(blank=True, default="")
    first_seen = models.DateTimeField()
    registered_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "collector_device"
        ordering = ["node__name", "index"]

    # A fresh device at or above this utilization is busy; below it (or without a reading), idle.
    BUSY_UTIL_PCT = 10.0

    def __str__(self):
        return f"{self.node.name}/{self.index} {self.model}"

    @classmethod
    def state_of(cls, latest, interval_s, now):
        """ "stale" when the device has no sample (`latest`, a LatestSample.to_dict, is None) or its newest
        is stale by its node's interval (Node.is_stale), else "busy" at BUSY_UTIL_PCT or more, "idle"
        below. The fleet page and the live broadcaster ask this."""
        if latest is None or Node.is_stale(latest["ts"], interval_s, now):
            return "stale"
        util_pct = latest["util_pct"]
        return "busy" if util_pct is not None and util_pct >= cls.BUSY_UTIL_PCT else "idle"

    def to_dict(self):
        """The device as the API and the pages give it (without its samples)."""
        return self.dict_of(vars(self))

    @classmethod
    def dict_of(cls, fields):
        """Device.to_dict from its fields in a mapping (a row of collector.store.latest_rows), for readers that
        skip model instances: at 1,000 devices they cost the fleet page most of its time budget."""
        return {
            "uuid": fields["uuid"], "index": fields["index"], "label": cls.label_for(fields["source"], fields["index"]),
            "model": fields["model"], "source": fields["source"], "simulated": fields["simulated"],
            "power_estimated": fields["power_estimated"], "mem_total_mib": fields["mem_total_mib"],
            "arch": fields["arch"], "mig_mode": fields["mig_mode"], "power_scopes": fields["power_scopes"],
        }

    @property
    def label(self):
        """What pages call this device: "CPU" for this machine's CPU (`--source host`), else "GPU <index>"."""
        return self.label_for(self.source, self.index)

    @staticmethod
    def kind_for(source):
        """ "CPU" for the host source (this machine's CPU), else "GPU"."""
        return "CPU" if source == "host" else "GPU"

    @classmethod
    def label_for(cls, source, index):
        """Device.label from the raw fields, for readers that skip model instances (the fleet page's one query).

        A node has one host device (its CPU), so "CPU" needs no index."""
        kind = cls.kind_for(source)
        return kind if kind == "CPU" else f"{kind} {index}"


class _SampleFields(models.Model):
    util_pct = models.FloatField(null=True)
    mem_util_pct = models.FloatField(null=True)
    power_w = models.FloatField(null=True)
    # The device's cumulative energy counter as reported (it restarts at driver load).
    energy_j = models.FloatField(null=True)
    mem_used_mib = models.IntegerField(null=True)
    mem_total_mib = models.IntegerField(null=True)
    temp_c = models.FloatField(null=True)
    sm_clock_mhz = models.IntegerField(null=True)
    # Share of SMs busy (GPM / DCGM PROF_SM_ACTIVE); None where the source lacks it.
    sm_active_pct = models.FloatField(null=True)
    # What newer GPUs report (collector/agent/schema.py); None where the device or source lacks it.
    module_power_w = models.FloatField(null=True)
    memory_power_w = models.FloatField(null=True)
    module_energy_j = models.FloatField(null=True)
    tensor_active_pct = models.FloatField(null=True)
    sm_occupancy_pct = models.FloatField(null=True)
    nvlink_tx_bytes_s = models.FloatField(null=True)
    nvlink_rx_bytes_s = models.FloatField(null=True)
    clock_event_reasons = models.BigIntegerField(null=True)
    power_limit_w = models.FloatField(null=True)

    class Meta:
        abstract = True


class Sample(_SampleFields):
    """A raw sample; table partitioned by UTC day."""

    pk = models.CompositePrimaryKey("device", "ts")
    device = models.ForeignKey(Device, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    ts = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "telemetry_sample"


class LatestSample(_SampleFields):
    """The newest sample of each device, updated with every batch."""

    device = models.OneToOneField(Device, on_delete=models.CASCADE, primary_key=True, related_name="latest")
    ts = models.DateTimeField()

    FIELDS = ("ts",) + SAMPLE_FIELDS

    class Meta:
        managed = False
        db_table = "telemetry_latest"

    def to_dict(self):
        return {f: getattr(self, f) for f in self.FIELDS}


class _Rollup(models.Model):
    ENERGY_FROM = [
        ("counter", "energy counter deltas"),
        ("power", "power integrated over time"),
        ("mixed", "both (a counter reset or gap)"),
        ("none", "no energy figure"),
    ]

    pk = models.CompositePrimaryKey("device", "bucket")
    device = models.ForeignKey(Device, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    bucket = models.DateTimeField()  # start of the bucket, UTC
    samples = models.IntegerField()
    # Device-seconds observed: each sample covers the time since the device's previous
    # sample (gaps over schema.MAX_GAP_S count nothing), credited to the sample's bucket.
    covered_s = models.FloatField()
    util_mean_pct = models.FloatField(null=True)
    util_max_pct = models.FloatField(null=True)
    sm_active_mean_pct = models.FloatField(null=True)
    mem_used_max_mib = models.IntegerField(null=True)
    power_mean_w = models.FloatField(null=True)
    power_max_w = models.FloatField(null=True)
    temp_max_c = models.FloatField(null=True)
    energy_j = models.FloatField()
    energy_from = models.TextField(choices=ENERGY_FROM)
    tensor_active_mean_pct = models.FloatField(null=True)
    sm_occupancy_mean_pct = models.FloatField(null=True)
    module_power_mean_w = models.FloatField(null=True)
    memory_power_mean_w = models.FloatField(null=True)
    nvlink_tx_mean_bytes_s = models.FloatField(null=True)
    nvlink_rx_mean_bytes_s = models.FloatField(null=True)
    # Samples whose clocks power, heat, sync boost or a hardware slowdown held down (schema.THROTTLE_MASK), of
    # the samples that reported clock event reasons at all.
    throttled_samples = models.IntegerField(default=0)
    reasons_samples = models.IntegerField(default=0)
    # Whose energy energy_j is: device | module | mixed | none | in_module (schema._ROLLUP_EXTENDED_COLUMNS).
    energy_scope = models.TextField(default="device")
    # Of those, the samples held down by each group of schema.REASONS; and the lowest power limit enforced.
    power_cap_samples = models.IntegerField(default=0)
    thermal_samples = models.IntegerField(default=0)
    sync_boost_samples = models.IntegerField(default=0)
    hw_slowdown_samples = models.IntegerField(default=0)
    power_limit_min_w = models.FloatField(null=True)

    class Meta:
        abstract = True


class Rollup1m(_Rollup):
    class Meta:
        managed = False
        db_table = "telemetry_rollup_1m"


class Rollup1h(_Rollup):
    class Meta:
        managed = False
        db_table = "telemetry_rollup_1h"


class DeviceEvent(models.Model):
    """What a device reported about its health (collector/agent/sources/nvml.py): an XID error, uncorrected ECC
    errors, a row remapping pending or failed. A critical one makes the device unhealthy for UNHEALTHY_FOR."""

    UNHEALTHY_FOR = timedelta(hours=24)

    pk = models.CompositePrimaryKey("device", "ts", "kind", "code")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="events")
    ts = models.DateTimeField()
    kind = models.TextField()  # xid | ecc_uncorrected | row_remap_pending | row_remap_failure | rows_remapped
    code = models.BigIntegerField(default=0)  # the XID, or the count the event reports
    detail = models.TextField(blank=True, default="")
    critical = models.BooleanField(default=False)

    class Meta:
        managed = False
        db_table = "telemetry_device_event"
        ordering = ["-ts"]

    @classmethod
    def unhealthy(cls, device_ids=None, now=None):
        """{device id: its newest critical event} of those devices (None: every device) that had one within
        UNHEALTHY_FOR, in one query that returns a row per such device. The fleet's readers ask for every
        device: at 1,000 devices a list of their ids costs ten times the query itself."""
        since = (now or timezone.now()) - cls.UNHEALTHY_FOR
        # On a cursor: every fleet read asks (the page, /api/fleet, the broadcaster), and the ORM spent 1.3 ms
        # of CPU building this query before running it (issue 29), the whole read on a cursor a fifth of that.
        names = [f.attname for f in cls._meta.concrete_fields]
        sql = (f"SELECT DISTINCT ON (device_id) {', '.join(names)} FROM {cls._meta.db_table} "
               f"WHERE critical AND ts >= %s{'' if device_ids is None else ' AND device_id = ANY(%s)'} "
               "ORDER BY device_id, ts DESC")
        with connection.cursor() as cur:
            cur.execute(sql, [since] if device_ids is None else [since, list(device_ids)])
            rows = cur.fetchall()
        return {e.device_id: e for e in (cls.from_db(connection.alias, names, row) for row in rows)}


class DeviceHolder(models.Model):
    """A process (`pid:1234`) or pod (`pod:namespace/name`) seen holding a device.

    For a process, where it comes from (collector/agent/lineage.py): its
    ancestor PIDs, parent first, and the launcher job ids in its environment;
    tracking/matching.py matches training runs to devices through them.
    """

    pk = models.CompositePrimaryKey("device", "holder")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="holders")
    holder = models.TextField()
    pid = models.IntegerField(null=True)
    used_mem_mib = models.IntegerField(null=True)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    ancestor_pids = ArrayField(models.IntegerField(), default=list)
    launcher_ids = models.JSONField(default=dict)  # e.g. {"SLURM_JOB_ID": "4242"}

    class Meta:
        managed = False
        db_table = "telemetry_device_holder"


class ScrapeTarget(models.Model):
    """A metrics page the agent of `node` reads every few seconds (collector/agent/serving.py): a serving
    deployment's (serving.models.Deployment keeps it in step), and how its newest reads went."""

    name = models.CharField(max_length=100, unique=True, help_text="the deployment's name")
    node = models.CharField(max_length=255, db_index=True, help_text="the node whose agent reads it")
    engine = models.CharField(max_length=20, help_text="a key of collector.agent.engines.ENGINES, or auto")
    metrics_url = models.CharField(max_length=1000)
    model = models.CharField(max_length=500, blank=True, default="", help_text="'': every model the page counts")
    checked_at = models.DateTimeField(null=True, blank=True, help_text="the newest read, whether it worked or not")
    read_at = models.DateTimeField(null=True, blank=True, help_text="the newest read that worked")
    engine_read = models.CharField(max_length=20, blank=True, default="", help_text="the engine the page was read as")
    unreadable_since = models.DateTimeField(null=True, blank=True,
                                            help_text="the first failed read after the last that worked")
    unreadable = models.CharField(max_length=2000, blank=True, default="", help_text="why the newest read failed")
    pid = models.IntegerField(null=True, blank=True, help_text="the process serving the page at the newest read, "
                                                             "where its node's agent sees it")

    def __str__(self):
        return f"scrape target {self.name} on {self.node}"

    @classmethod
    def put(cls, name, node, engine, metrics_url, model):
        """Create or change the target `name`; a changed page, node or engine keeps what was read of the old."""
        target, _ = cls.objects.update_or_create(name=name, defaults={
            "node": node, "engine": engine, "metrics_url": metrics_url, "model": model})
        return target


class ServedCount(models.Model):
    """What one model's counters on a target's page gained between two reads (the later one's `ts`), and its gauges
    then; written by the node's agent (collector/agent/writer.py), once per read whatever the replays. None: the
    engine does not expose it."""

    target = models.ForeignKey(ScrapeTarget, on_delete=models.CASCADE, related_name="counts")
    ts = models.DateTimeField()
    model = models.CharField(max_length=500, blank=True, default="", help_text="'' for an engine that names none")
    prompt_tokens = models.FloatField(null=True)
    generation_tokens = models.FloatField(null=True)
    requests = models.FloatField(null=True)
    cached_prompt_tokens = models.FloatField(null=True)
    prefill_seconds = models.FloatField(null=True)
    decode_seconds = models.FloatField(null=True)
    ttft_sum = models.FloatField(null=True)
    ttft_count = models.FloatField(null=True)
    itl_sum = models.FloatField(null=True)
    itl_count = models.FloatField(null=True)
    running = models.FloatField(null=True)
    waiting = models.FloatField(null=True)
    kv_cache_usage = models.FloatField(null=True)
    restarted = models.BooleanField(default=False, help_text="the engine restarted since the read before")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["target", "model", "ts"], name="served_count_once")]
        indexes = [models.Index(fields=["target", "ts"])]

    SUMMED = ("prompt_tokens", "generation_tokens", "requests", "cached_prompt_tokens")

    @staticmethod
    def empty():
        return {f: None for f in ServedCount.SUMMED} | {"restarts": 0, "first": None, "last": None}

    @classmethod
    def totals(cls, target_ids=None, since=None):
        """{target id: {prompt_tokens, generation_tokens, requests, cached_prompt_tokens (sums; None where the
        engine exposes none), restarts, first, last (ISO times of the first and last reads counted)}}."""
        rows = cls.objects.all()
        if target_ids is not None:
            rows = rows.filter(target_id__in=target_ids)
        if since is not None:
            rows = rows.filter(ts__gt=since)
        sums = {f: models.Sum(f) for f in cls.SUMMED}
        restarts = models.Count("pk", filter=models.Q(restarted=True))
        out = {}
        for r in rows.values("target").annotate(**sums, restarts=restarts, first=models.Min("ts"), last=models.Max("ts")):
            out[r["target"]] = {f: r[f] for f in cls.SUMMED} | {
                "restarts": r["restarts"], "first": r["first"].isoformat(), "last": r["last"].isoformat()}
        return out


class TargetHold(models.Model):
    """A GPU that a target's engine (the process serving its page, or one it started) held at one read of the page
    (collector/agent/serving.py): what its dollars will be charged from."""

    target = models.ForeignKey(ScrapeTarget, on_delete=models.CASCADE, related_name="holds")
    ts = models.DateTimeField()
    device = models.CharField(max_length=255, help_text="its UUID (collector.models.Device.uuid), as a stint names one")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["target", "device", "ts"], name="target_hold_once")]
