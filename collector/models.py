"""Nodes, devices and their telemetry.

The tables are created by `collector.agent.schema` (raw SQL the node agent
shares), so every model here is unmanaged: Django reads and joins them, the
agent writes them with COPY. Units are in the field names.
"""

from datetime import timedelta

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone


class Node(models.Model):
    """A machine that runs an agent (or that an import named)."""

    name = models.TextField(unique=True)
    # Free-form labels from `--label key=value`; "team" is the owner charged for idle time.
    labels = models.JSONField(default=dict)
    # The agent's tick; the node is stale when its newest sample is older than STALE_INTERVALS of it.
    interval_s = models.FloatField(default=1.0)
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

    def status(self, newest_sample_at, now=None):
        """Return "ok", or "stale" when the newest sample is older than 3 intervals (or missing)."""
        now = now or timezone.now()
        if newest_sample_at is None:
            return "stale"
        limit = timedelta(seconds=self.STALE_INTERVALS * self.interval_s)
        return "ok" if now - newest_sample_at <= limit else "stale"


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
    first_seen = models.DateTimeField()
    registered_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "collector_device"
        ordering = ["node__name", "index"]

    def __str__(self):
        return f"{self.node.name}/{self.index} {self.model}"

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

    class Meta:
        managed = False
        db_table = "telemetry_latest"


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
