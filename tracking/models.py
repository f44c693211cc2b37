"""Outside training runs as MLflow sees them: experiments, runs, params, tags and metrics.

Yardstick serves the MLflow tracking REST API (tracking/api.py) so TRL, veRL,
NeMo RL and home-grown loops report here with MLFLOW_TRACKING_URI and
MLFLOW_TRACKING_TOKEN alone. Every `Run` is a `trainer.Job` (source
"external"): its status follows the run, and its metrics become the job's
`Step` rows (tracking/ingest.py), so the job pages, live charts and the cost
engine treat it like an embedded job.

The score (what IPD measures) is the logged metric named by the run tag or
the experiment tag `yardstick.score_key`, else the first present of the
frameworks' eval keys (tracking/ingest.py, DEFAULT_SCORE_KEYS).
"""

import re
import uuid

from django.conf import settings
from django.db import connection, models
from django.utils import timezone

SCORE_KEY_TAG = "yardstick.score_key"
# MLflow's own limits (mlflow/utils/validation.py), so a run that works against MLflow works here.
MAX_ENTITY_KEY_LENGTH = 250
RUN_NAME_MAX = 250  # characters of a run's name (its mlflow.runName tag), as MLflow's own store keeps it
MAX_PARAM_VAL_LENGTH = 6000
MAX_TAG_VAL_LENGTH = 8000
MAX_EXPERIMENT_NAME_LENGTH = 500


class TrackingError(Exception):
    """An MLflow API error: `error_code` as MLflow's server names it, `message` for people."""

    STATUS = {"INVALID_PARAMETER_VALUE": 400, "RESOURCE_ALREADY_EXISTS": 400, "BAD_REQUEST": 400,
              "INVALID_STATE": 400, "RESOURCE_DOES_NOT_EXIST": 404, "ENDPOINT_NOT_FOUND": 404,
              "PERMISSION_DENIED": 403, "UNAUTHENTICATED": 401, "INTERNAL_ERROR": 500}

    def __init__(self, error_code, message):
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @property
    def status(self):
        return self.STATUS.get(self.error_code, 400)

    def to_dict(self):
        return {"error_code": self.error_code, "message": self.message}


def invalid(message):
    return TrackingError("INVALID_PARAMETER_VALUE", message)


class Stage(models.TextChoices):
    ACTIVE = "active"
    DELETED = "deleted"


class RunStatus(models.TextChoices):
    RUNNING = "RUNNING"
    SCHEDULED = "SCHEDULED"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"


def new_run_id():
    return uuid.uuid4().hex


def now_ms():
    return int(timezone.now().timestamp() * 1000)


class Experiment(models.Model):
    """An MLflow experiment; its `experiment_id` is str(id). Id 0 is MLflow's "Default"."""

    DEFAULT_NAME = "Default"

    name = models.CharField(max_length=MAX_EXPERIMENT_NAME_LENGTH, unique=True)
    artifact_location = models.CharField(max_length=1000, blank=True, default="")
    lifecycle_stage = models.CharField(max_length=10, choices=Stage.choices, default=Stage.ACTIVE)
    tags = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]

    def __str__(self):
        return f"experiment {self.pk} {self.name!r}"

    @property
    def experiment_id(self):
        return str(self.pk)

    @classmethod
    def default(cls):
        """MLflow's experiment 0, which a client uses when none is set; made on first use."""
        return cls.objects.get_or_create(pk=0, defaults={"name": cls.DEFAULT_NAME,
                                                         "artifact_location": "mlflow-artifacts:/0"})[0]

    @property
    def score_key(self):
        return self.tags.get(SCORE_KEY_TAG, "")

    def set_score_key(self, key):
        """Set which logged metric is the score of this experiment's runs (empty: the frameworks'
        defaults). The page's form and `experiments/set-experiment-tag` both end here."""
        self.set_tag(SCORE_KEY_TAG, key)

    def set_tag(self, key, value):
        key = validate_key("tag", key)
        value = "" if value is None else str(value)
        if len(value) > MAX_TAG_VAL_LENGTH:
            raise invalid(f"tag '{key}' has a value of {len(value)} characters; at most {MAX_TAG_VAL_LENGTH} "
                          "are accepted")
        if key == SCORE_KEY_TAG and value:
            validate_key("score key", value)
        self.tags = {**self.tags, key: value}
        if key == SCORE_KEY_TAG and not value:
            self.tags.pop(key)
        self.updated_at = timezone.now()
        self.save(update_fields=["tags", "updated_at"])

    def to_mlflow(self):
        return {
            "experiment_id": self.experiment_id, "name": self.name, "artifact_location": self.artifact_location,
            "lifecycle_stage": self.lifecycle_stage,
            "creation_time": int(self.created_at.timestamp() * 1000),
            "last_update_time": int(self.updated_at.timestamp() * 1000),
            **({"tags": [{"key": k, "value": v} for k, v in sorted(self.tags.items())]} if self.tags else {}),
            "workspace": "default",  # MLflow 3's; Yardstick has one
        }


class Run(models.Model):
    """An MLflow run; its job (`trainer.Job`, source "external") is what the pages show."""

    run_id = models.CharField(max_length=32, unique=True, default=new_run_id)
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    job = models.OneToOneField("trainer.Job", on_delete=models.CASCADE, related_name="run")
    user_id = models.CharField(max_length=255, blank=True, default="")
    run_name = models.CharField(max_length=RUN_NAME_MAX, blank=True, default="")
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.RUNNING)
    start_time = models.BigIntegerField(help_text="ms since the epoch, as the client sent it")
    end_time = models.BigIntegerField(null=True, blank=True)
    lifecycle_stage = models.CharField(max_length=10, choices=Stage.choices, default=Stage.ACTIVE)
    artifact_uri = models.CharField(max_length=1000, blank=True, default="")
    last_logged_at = models.DateTimeField(default=timezone.now, help_text="newest log of any kind (stale runs)")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="tracking_runs")

    class Meta:
        ordering = ["-start_time", "run_id"]
        indexes = [models.Index(fields=["experiment", "start_time"], name="tracking_run_exp_start")]

    def __str__(self):
        return f"run {self.run_id} {self.run_name!r} ({self.status})"


class RunKeyValue(models.Model):
    """A run's param or tag: one value per key (each subclass names its `run` link)."""

    key = models.CharField(max_length=MAX_ENTITY_KEY_LENGTH)
    value = models.TextField()

    class Meta:
        abstract = True
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="%(app_label)s_%(class)s_unique")]


class Param(RunKeyValue):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="params")


class RunTag(RunKeyValue):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tags")


class Metric(models.Model):
    """One logged value. NaN and ±inf are kept as MLflow keeps them."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metrics")
    key = models.CharField(max_length=MAX_ENTITY_KEY_LENGTH)
    value = models.FloatField()
    timestamp = models.BigIntegerField(help_text="ms since the epoch, as the client sent it")
    step = models.BigIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["run", "key", "step"], name="tracking_metric_run_key_step")]

    @classmethod
    def series(cls, run, max_points):
        """{key: ([steps], [values])} of everything `run` logged, oldest first, downsampled in SQL to at
        most `max_points` a key (every stride-th value and the newest). NaN and infinities come back as
        floats (a figure drops them)."""
        table, run_col = cls._meta.db_table, cls._meta.get_field("run").column
        with connection.cursor() as cur:
            cur.execute(
                f"""
                SELECT key, step, value FROM (
                    SELECT key, step, value, row_number() OVER (PARTITION BY key ORDER BY step, timestamp) AS rn,
                           count(*) OVER (PARTITION BY key) AS n
                    FROM {table} WHERE {run_col} = %s) m
                WHERE (rn - 1) %% greatest(1, ceil(n / %s::float8)::int) = 0 OR rn = n
                ORDER BY key, rn
                """,
                [run.pk, max_points],
            )
            out = {}
            for key, step, value in cur.fetchall():
                steps, values = out.setdefault(key, ([], []))
                steps.append(step)
                values.append(value)
        return out


def validate_key(what, key):
    """MLflow's rule for metric, param and tag names: letters, digits, _ - . space / (and :), no '..'
    path parts, not absolute, at most 250 characters. Return the key; raise INVALID_PARAMETER_VALUE."""
    if not isinstance(key, str) or not key:
        raise invalid(f"{what} name must be a non-empty string, got {key!r}")
    if len(key) > MAX_ENTITY_KEY_LENGTH:
        raise invalid(f"{what} name '{key[:40]}...' has {len(key)} characters; at most {MAX_ENTITY_KEY_LENGTH} "
                      "are accepted")
    if not re.fullmatch(r"[\w\-. /:]+", key) or key.startswith("/") or ".." in key.split("/"):
        raise invalid(f"Invalid {what} name: '{key}'. Names may only contain alphanumerics, underscores (_), "
                      "dashes (-), periods (.), spaces ( ), colons (:) and slashes (/), and may not be an "
                      "absolute path or contain '..'")
    return key


class Artifact(models.Model):
    """A file a run uploaded through MLflow's artifact API (tracking/artifacts.py keeps the bytes under
    <data dir>/artifacts/<experiment id>/<run id>/<path>); the row is what listings, quotas and pages read."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="artifacts")
    path = models.CharField(max_length=1000, help_text="relative to the run's artifact root, '/'-separated")
    size_bytes = models.BigIntegerField()
    content_type = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "path"]
        constraints = [models.UniqueConstraint(fields=["run", "path"], name="tracking_artifact_unique")]


class DatasetInput(models.Model):
    """A dataset a run used (MLflow's log-inputs), kept as the client described it; runs/get shows it back."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="dataset_inputs")
    name = models.CharField(max_length=500)
    digest = models.CharField(max_length=36)
    source_type = models.TextField()
    source = models.TextField()
    schema = models.TextField(blank=True, default="")
    profile = models.TextField(blank=True, default="")
    tags = models.JSONField(default=list, blank=True, help_text="[{key, value}], e.g. mlflow.data.context")

    class Meta:
        ordering = ["run", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "name", "digest"], name="tracking_dataset_input_unique")]

    def to_mlflow(self):
        dataset = {"name": self.name, "digest": self.digest, "source_type": self.source_type, "source": self.source,
                   **({"schema": self.schema} if self.schema else {}),
                   **({"profile": self.profile} if self.profile else {})}
        return {**({"tags": self.tags} if self.tags else {}), "dataset": dataset}


class ModelInput(models.Model):
    """A logged model a run used, by its id (MLflow 3's log-inputs `models`)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="model_inputs")
    model_id = models.CharField(max_length=255)

    class Meta:
        ordering = ["run", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "model_id"], name="tracking_model_input_unique")]
