"""What each MLflow tracking call does to Yardstick's rows: the one home of the rules the API applies.

Functions take plain values (already parsed from the request by tracking/api.py)
and return model rows; bad input raises TrackingError with MLflow's error code
and a message naming the field, the value and what is accepted, before anything
is written (a refused batch stores nothing).
"""

import posixpath
import re

from django.db import IntegrityError, transaction
from django.utils import timezone

from tracking import ingest
from tracking.kind import follow_run, open_job, revive_stale
from tracking.models import (
    MAX_ENTITY_KEY_LENGTH,
    MAX_EXPERIMENT_NAME_LENGTH,
    MAX_PARAM_VAL_LENGTH,
    MAX_TAG_VAL_LENGTH,
    RUN_NAME_MAX,
    SCORE_KEY_TAG,
    DatasetInput,
    Experiment,
    Metric,
    ModelInput,
    Param,
    Run,
    RunStatus,
    RunTag,
    Stage,
    TrackingError,
    invalid,
    now_ms,
    validate_key,
)
from tracking.protocol import exceeds_maximum_length, invalid_value, missing_value
from trainer.kinds import kind_of
from trainer.models import NAME_MAX, Job

# MLflow's log-batch limits (mlflow/utils/validation.py).
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_ENTITIES_PER_BATCH = 1000
# MLflow's other limits and rules (mlflow/utils/validation.py), so its messages can be given word for word.
DATASET_LIMITS = {"name": 500, "digest": 36, "source": 65535, "schema": 1048575, "profile": 16777215}
MAX_INPUT_TAG_KEY_LENGTH, MAX_INPUT_TAG_VALUE_LENGTH = 255, 500
RUN_ID = re.compile(r"^[a-zA-Z0-9][\w\-]{0,255}$")
MISSING_KEY_NAME = "A key name must be provided."
BAD_CHARACTERS = ("Names may only contain alphanumerics, underscores (_), dashes (-), periods (.), spaces ( ), "
                  "colon(:) and slashes (/).")
RUN_NAME_TAG = "mlflow.runName"
TEAM_TAG = "yardstick.team"
FRAMEWORK_TAG = "yardstick.framework"
STOP_TAG = "yardstick.stop_requested"
RUN_STATUS_NUMBERS = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}
# Params whose value says how many steps the run will take (the job's progress): transformers/TRL, veRL, NeMo RL.
# veRL's logger flattens its config with '/'; its trainer leaves trainer/total_training_steps None unless the
# user set it and writes the total it computed (dataloader length x epochs) into the actor's optim section.
# Within a batch a later key wins, and veRL logs trainer/ after actor_rollout_ref/: the user's value wins.
STEPS_PARAMS = ("max_steps", "actor_rollout_ref/actor/optim/total_training_steps", "trainer/total_training_steps",
                "trainer.total_training_steps", "grpo.max_num_steps")


# -- experiments ----------------------------------------------------------------------


def create_experiment(name, artifact_location="", tags=()):
    """`name` is a non-empty string (tracking/protocol.py checked it), as are the tags' keys and values."""
    if len(name) > MAX_EXPERIMENT_NAME_LENGTH:
        raise invalid(exceeds_maximum_length("name", MAX_EXPERIMENT_NAME_LENGTH))
    tags = _tags(tags)
    try:
        with transaction.atomic():
            experiment = Experiment.objects.create(name=name, artifact_location=artifact_location or "")
    except IntegrityError:
        raise TrackingError("RESOURCE_ALREADY_EXISTS", f"Experiment(name={name}) already exists.") from None
    if not artifact_location:
        experiment.artifact_location = f"mlflow-artifacts:/{experiment.pk}"
    for key, value in tags:
        experiment.set_tag(key, value)
    experiment.save()
    return experiment


def get_experiment(experiment_id):
    pk = _experiment_pk(experiment_id)
    if pk == 0:
        return Experiment.default()
    experiment = Experiment.objects.filter(pk=pk).first() if pk > 0 else None
    if experiment is None:
        raise TrackingError("RESOURCE_DOES_NOT_EXIST", f"No Experiment with id={pk} exists")
    return experiment


def get_experiment_by_name(name):
    if not isinstance(name, str) or not name:
        raise invalid(f"Missing value for required parameter 'experiment_name', got {name!r}")
    if name == Experiment.DEFAULT_NAME:
        Experiment.default()
    experiment = Experiment.objects.filter(name=name).first()
    if experiment is None:
        raise TrackingError("RESOURCE_DOES_NOT_EXIST", f"Could not find experiment with name '{name}'")
    return experiment


def rename_experiment(experiment_id, new_name):
    experiment = get_experiment(experiment_id)
    if experiment.lifecycle_stage != Stage.ACTIVE:
        raise TrackingError("INVALID_STATE", "Cannot rename a non-active experiment.")
    if Experiment.objects.filter(name=new_name).exclude(pk=experiment.pk).exists():
        raise TrackingError("RESOURCE_ALREADY_EXISTS", f"Experiment(name={new_name}) already exists.")
    experiment.name, experiment.updated_at = new_name, timezone.now()
    experiment.save(update_fields=["name", "updated_at"])


def set_experiment_stage(experiment_id, stage):
    experiment = get_experiment(experiment_id)
    if experiment.pk == 0 and stage == Stage.DELETED:
        raise invalid("Cannot delete the default experiment '0'. This is an internally reserved experiment.")
    experiment.lifecycle_stage, experiment.updated_at = stage, timezone.now()
    experiment.save(update_fields=["lifecycle_stage", "updated_at"])
    Run.objects.filter(experiment=experiment).update(lifecycle_stage=stage)


def set_experiment_tag(experiment_id, key, value):
    experiment = get_experiment(experiment_id)
    _active(experiment)
    experiment.set_tag(key, value)
    if key == SCORE_KEY_TAG:
        _rescore_experiment(experiment)


def delete_experiment_tag(experiment_id, key):
    experiment = get_experiment(experiment_id)
    if key not in experiment.tags:
        raise TrackingError("RESOURCE_DOES_NOT_EXIST", f"No tag with name: {key} in experiment with id {experiment_id}")
    experiment.tags = {k: v for k, v in experiment.tags.items() if k != key}
    experiment.updated_at = timezone.now()
    experiment.save(update_fields=["tags", "updated_at"])
    if key == SCORE_KEY_TAG:
        _rescore_experiment(experiment)


def _rescore_experiment(experiment):
    for run in experiment.runs.select_related("job", "experiment"):
        ingest.rescore(run)


# -- runs -------------------------------------------------------------------------------


def create_run(experiment_id, user_id="", start_time=None, tags=(), run_name="", created_by=None):
    experiment = get_experiment(experiment_id if experiment_id not in (None, "") else "0")
    _active(experiment)
    tags = dict(_tags(tags))
    run_name = run_name or tags.get(RUN_NAME_TAG) or ""
    if not isinstance(run_name, str) or len(run_name) > RUN_NAME_MAX:
        raise invalid(f"run_name must be a string of at most {RUN_NAME_MAX} characters, got {str(run_name)[:40]!r}")
    start_time = now_ms() if start_time in (None, "") else _int64("start_time", start_time)
    with transaction.atomic():
        run = Run(experiment=experiment, user_id=str(user_id or "")[:255], start_time=start_time,
                  created_by=created_by)
        run_name = run_name or f"run-{run.run_id[:8]}"
        tags[RUN_NAME_TAG] = run_name
        run.run_name = run_name
        run.artifact_uri = f"{experiment.artifact_location or f'mlflow-artifacts:/{experiment.pk}'}/{run.run_id}/artifacts"
        # Who pays: the run's yardstick.team tag, else its experiment's, else nobody yet (as idle time of a
        # node without an owner). The experiment is the run's environment: IPD sums gains per environment,
        # and points of different experiments' scores must not be added up.
        team = tags.get(TEAM_TAG) or (experiment.tags or {}).get(TEAM_TAG) or "unassigned"
        run.job = open_job(name=run_name, team=team, env=experiment.name, framework=framework_of(tags, {}),
                           created_by=created_by)
        run.save()
        RunTag.objects.bulk_create([RunTag(run=run, key=k, value=v) for k, v in tags.items()])
    return run


def attach_run(job, experiment, score_key="", created_by=None):
    """The MLflow run of a job Yardstick starts itself (a launched one), RUNNING from now in the experiment named
    `experiment` (made when missing; a deleted one refuses), named and tagged as the job. Its command reports into
    it (MLFLOW_RUN_ID): transformers' callback, veRL and NeMo RL attach to a run so named instead of making one.
    The job's status is its process's, never the run's (tracking.kind.follow_run leaves it alone)."""
    found = Experiment.objects.filter(name=experiment).first()
    if found is None:
        try:
            found = create_experiment(experiment)
        except TrackingError:  # made meanwhile by another launch
            found = Experiment.objects.get(name=experiment)
    _active(found)
    tags = {RUN_NAME_TAG: job.name, TEAM_TAG: job.team, "yardstick.job_id": str(job.pk)}
    if score_key:
        tags[SCORE_KEY_TAG] = score_key
    run = Run(experiment=found, job=job, start_time=now_ms(), run_name=job.name, created_by=created_by,
              user_id=created_by.username if created_by else "")
    run.artifact_uri = f"{found.artifact_location or f'mlflow-artifacts:/{found.pk}'}/{run.run_id}/artifacts"
    run.save()
    RunTag.objects.bulk_create([RunTag(run=run, key=k, value=v) for k, v in tags.items()])
    return run


def get_run(run_id):
    if not isinstance(run_id, str) or not run_id:
        raise invalid(missing_value("run_id"))
    run = Run.objects.select_related("experiment", "job").filter(run_id=run_id).first()
    if run is None:
        raise TrackingError("RESOURCE_DOES_NOT_EXIST", f"Run with id={run_id} not found")
    return run


def update_run(run_id, status=None, end_time=None, run_name=None):
    run = get_run(run_id)
    _writable(run)
    fields = []
    if status not in (None, ""):
        status = run_status(status)
        run.status = status
        fields.append("status")
    if end_time not in (None, ""):
        run.end_time = _int64("end_time", end_time)
        fields.append("end_time")
    if run_name and (not isinstance(run_name, str) or len(run_name) > RUN_NAME_MAX):
        raise invalid(f"run_name must be a string of at most {RUN_NAME_MAX} characters, got {str(run_name)[:40]!r}")
    with transaction.atomic():
        run.last_logged_at = timezone.now()
        run.save(update_fields=[*fields, "last_logged_at"])
        if run_name:
            _rename(run, run_name)
        if "status" in fields:
            follow_run(run.job, status)
    return run


def _rename(run, run_name):
    """The run is now called `run_name` (its client renamed it: update_run, or the mlflow.runName tag), and so is
    its job when the job's kind takes its name from its run (an outside run nobody else named); a job a person or
    Yardstick named keeps its name (transformers names a launched job's run after its output directory)."""
    Run.objects.filter(pk=run.pk).update(run_name=run_name)
    run.run_name = run_name
    RunTag.objects.update_or_create(run=run, key=RUN_NAME_TAG, defaults={"value": run_name})
    if kind_of(run.job).named_by_run:
        Job.objects.filter(pk=run.job_id).update(name=run_name[:NAME_MAX])


def set_run_stage(run_id, stage):
    run = get_run(run_id)
    run.lifecycle_stage = stage
    run.save(update_fields=["lifecycle_stage"])


def _check_run_id(run_id):
    """Refuse a run id no run can have, in MLflow's words, before a write looks it up (a missing one is get_run's)."""
    if isinstance(run_id, str) and run_id and not RUN_ID.match(run_id):
        raise invalid(invalid_value("run_id", run_id))


def log_batch(run_id, metrics=(), params=(), tags=(), single=False):
    """Validate the whole batch, then store it in one transaction and feed the job's steps. `single`: one
    log-metric, log-parameter or set-tag call, whose errors name the field alone ('key', not 'params[0].key')."""
    metrics, params, tags = list(metrics or []), list(params or []), list(tags or [])
    _check_run_id(run_id)
    rows = [_metric("" if single else f"metrics[{i}]", m) for i, m in enumerate(metrics)]
    params = [_param("" if single else f"params[{i}]", p) for i, p in enumerate(params)]
    tags = [_tag("" if single else f"tags[{i}]", t) for i, t in enumerate(tags)]
    for kind, limit, count in (("metrics", MAX_METRICS_PER_BATCH, len(metrics)),
                               ("params", MAX_PARAMS_TAGS_PER_BATCH, len(params)),
                               ("tags", MAX_PARAMS_TAGS_PER_BATCH, len(tags)),
                               ("metrics, params, and tags", MAX_ENTITIES_PER_BATCH,
                                len(metrics) + len(params) + len(tags))):
        if count > limit:
            raise invalid(f"A batch logging request can contain at most {limit} {kind}. Got {count} {kind}. "
                          f"Please split up {kind} across multiple requests and try again.")
    keys = [k for k, _ in params]
    dupes = [k for i, k in enumerate(keys) if k in keys[:i]]
    if dupes:
        raise invalid(f"Duplicate parameter keys have been submitted: {dupes}. Please ensure the request "
                      "contains only one param value per param key.")
    named = dict(tags).get(RUN_NAME_TAG)
    if named and len(named) > RUN_NAME_MAX:  # the run's name, as create_run and update_run take it
        raise invalid(f"{RUN_NAME_TAG} must be a run name of at most {RUN_NAME_MAX} characters, got {named[:40]!r}")
    run = get_run(run_id)
    _writable(run)
    _check_params_unchanged(run, params, single)
    with transaction.atomic():
        Param.objects.bulk_create([Param(run=run, key=k, value=v) for k, v in params], ignore_conflicts=True)
        for key, value in tags:
            RunTag.objects.update_or_create(run=run, key=key, defaults={"value": value})
        Metric.objects.bulk_create([Metric(run=run, key=k, value=v, timestamp=t, step=s) for k, v, t, s in rows])
        run.last_logged_at = timezone.now()
        run.save(update_fields=["last_logged_at"])
        job = run.job
        if job.status == "failed" and job.error.startswith("stale:"):
            revive_stale(job)
        _describe_job(run, dict(params), dict(tags))
        if dict(tags).get(RUN_NAME_TAG):
            _rename(run, dict(tags)[RUN_NAME_TAG])
        if rows:
            ingest.ingest(run, rows)
        else:
            Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now())
        if any(k == SCORE_KEY_TAG for k, _ in tags):
            ingest.rescore(run)


def log_inputs(run_id, datasets=(), models=()):
    """Keep the datasets (and logged models) a run used; a dataset logged again (same name and digest)
    keeps its first entry, as in MLflow."""
    _check_run_id(run_id)
    inputs = [_dataset_input(d) for d in datasets or []]
    run = get_run(run_id)
    _writable(run)
    with transaction.atomic():
        for dataset, tags in inputs:
            DatasetInput.objects.get_or_create(run=run, name=dataset["name"], digest=dataset["digest"],
                                               defaults={**dataset, "tags": tags})
        for model in models or []:
            if model.get("model_id"):
                ModelInput.objects.get_or_create(run=run, model_id=model["model_id"])


def run_inputs(run):
    """MLflow's RunInputs of `run`: {"dataset_inputs": [...], "model_inputs": [...]}, empty lists left out."""
    datasets = [d.to_mlflow() for d in run.dataset_inputs.all()]
    models = [{"model_id": m.model_id} for m in run.model_inputs.all()]
    return {**({"dataset_inputs": datasets} if datasets else {}), **({"model_inputs": models} if models else {})}


def delete_tag(run_id, key):
    run = get_run(run_id)
    _writable(run)
    deleted, _ = RunTag.objects.filter(run=run, key=key).delete()
    if not deleted:
        raise TrackingError("RESOURCE_DOES_NOT_EXIST", f"No tag with name: {key} in run with id {run_id}")
    if key == SCORE_KEY_TAG:
        ingest.rescore(run)


def jobs_tagged(key):
    """{job id: tag value} of the runs that carry the tag `key` (campaigns joins runs tagged yardstick.campaign)."""
    return dict(RunTag.objects.filter(key=key).values_list("run__job_id", "value"))


def metric_history(run_id, key):
    run = get_run(run_id)
    if not isinstance(key, str) or not key:
        raise invalid(missing_value("metric_key"))
    return Metric.objects.filter(run=run, key=key).order_by("timestamp", "step", "value", "id")  # MLflow's order


def latest_metrics(runs):
    """{run pk: [Metric]} the newest value of each key (highest step, then newest timestamp), as MLflow's run data."""
    rows = (Metric.objects.filter(run__in=runs).order_by("run_id", "key", "-step", "-timestamp", "-id")
            .distinct("run_id", "key"))
    out = {}
    for row in rows:
        out.setdefault(row.run_id, []).append(row)
    return out


def framework_of(tags, params):
    """Which framework trained a run, from what it logged: "trl", "verl", "nemo-rl", "transformers", or ""."""
    if tags.get(FRAMEWORK_TAG):
        return tags[FRAMEWORK_TAG][:50]
    keys = set(params)
    # veRL's own logger flattens its config with '/' (actor_rollout_ref/rollout/n); '.' is how people write it.
    if any(k.startswith(("actor_rollout_ref/", "actor_rollout_ref.", "algorithm/adv_estimator",
                         "algorithm.adv_estimator")) for k in keys):
        return "verl"
    if any(k.startswith(("grpo.", "loss_fn.")) for k in keys):
        return "nemo-rl"
    if "num_generations" in keys or "max_completion_length" in keys:
        return "trl"
    if "per_device_train_batch_size" in keys:
        return "transformers"
    return ""


def run_status(value):
    """An MLflow RunStatus, given by name or by its proto number."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = RUN_STATUS_NUMBERS.get(value, value)
    if value not in RunStatus.values:
        raise invalid(f"status must be one of {', '.join(RunStatus.values)}, got {value!r}")
    return value


# -- helpers ---------------------------------------------------------------------------


def _describe_job(run, params, tags):
    """What newly logged params and tags say about the job: its framework and how many steps it will take."""
    job = run.job
    fields = {}
    # "transformers" is what a TRL, veRL or NeMo run's generic params say before its own arrive (a client
    # logs params in batches, in no set order): a later batch may still name the framework on top.
    if job.framework in ("", "transformers") or FRAMEWORK_TAG in tags:
        found = framework_of({**dict(run.tags.values_list("key", "value")), **tags},
                             {**dict.fromkeys(run.params.values_list("key", flat=True)), **params})
        if found and found != job.framework:
            fields["framework"] = found
    for key in STEPS_PARAMS:
        if key in params and re.fullmatch(r"\s*\d+\s*", params[key]) and int(params[key]) > 0:
            fields["config"] = {**(job.config or {}), "steps": int(params[key])}
    if TEAM_TAG in tags and tags[TEAM_TAG]:
        fields["team"] = tags[TEAM_TAG][:100]
    if fields:
        Job.objects.filter(pk=job.pk).update(**fields)
        job.refresh_from_db()


def _experiment_pk(value):
    """An experiment id as MLflow reads one: an integer, given as a string (negative ones name no experiment)."""
    text = str(value).strip() if value is not None else ""
    if not re.fullmatch(r"[-+]?\d{1,18}", text):
        raise invalid(f"Invalid experiment ID '{value}'. Experiment ID must be a valid integer.")
    return int(text)


def _active(experiment):
    if experiment.lifecycle_stage != Stage.ACTIVE:
        raise invalid(f"The experiment {experiment.pk} must be in the 'active' state. "
                      f"Current state is {experiment.lifecycle_stage}.")


def _writable(run):
    if run.lifecycle_stage != Stage.ACTIVE:
        raise invalid(f"The run {run.run_id} must be in the 'active' state. Current state is {run.lifecycle_stage}.")


def _int64(field, value):
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not re.fullmatch(r"-?\d{1,19}", str(value).strip()):
        raise invalid(f"{field} must be an integer (ms since the epoch, or a step), got {value!r}")
    number = int(str(value).strip())
    if not -2**63 <= number < 2**63:
        raise invalid(f"{field} must fit in 64 bits, got {value!r}")
    return number


def _float(field, value):
    """MLflow's JSON spells NaN and infinities as strings; a number or one of those is accepted."""
    if isinstance(value, bool):
        raise invalid(f"{field} must be a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip() in ("NaN", "Infinity", "-Infinity", "inf", "-inf", "nan"):
        return float(value.strip().replace("Infinity", "inf"))
    try:
        number = float(value) if isinstance(value, str) else None
    except ValueError:
        number = None
    if number is None:
        raise invalid(f"{field} must be a number (or 'NaN', 'Infinity', '-Infinity'), got {value!r}")
    return number


def _entry(path, entry):
    if not isinstance(entry, dict):
        raise invalid(invalid_value(path or "entry", entry, "an object with key and value is expected"))
    return entry


def _join(path, name):
    return f"{path}.{name}" if path else name


def _metric(path, entry):
    """(key, value, timestamp, step) of one metric, checked as MLflow's _validate_metric does."""
    entry = _entry(path, entry)
    key = _entity_key("metric", _join(path, "name"), entry.get("key"))
    if entry.get("value") in (None, ""):
        raise invalid(missing_value(_join(path, "value")))
    value = _float(_join(path, "value"), entry["value"])
    if entry.get("timestamp") in (None, ""):
        raise invalid(missing_value(_join(path, "timestamp")))
    timestamp = _int64(_join(path, "timestamp"), entry["timestamp"])
    if timestamp < 0:
        raise invalid(invalid_value(_join(path, "timestamp"), timestamp,
                                    f"metric '{key}' (value={value}). Timestamp must be a nonnegative long "
                                    "(64-bit integer) "))
    step = _int64(_join(path, "step"), entry.get("step") if entry.get("step") not in (None, "") else 0)
    if len(key) > MAX_ENTITY_KEY_LENGTH:
        raise invalid(exceeds_maximum_length("Metric name", MAX_ENTITY_KEY_LENGTH))
    return key, value, timestamp, step


def _param(path, entry):
    """(key, value) of one param. A value over MLflow's limit is refused: MLflow's server cuts it short
    (MLFLOW_TRUNCATE_LONG_VALUES), which would keep a value the run never logged."""
    entry = _entry(path, entry)
    key = _entity_key("param", _join(path, "key"), entry.get("key"))
    value = "" if entry.get("value") is None else str(entry["value"])
    if len(key) > MAX_ENTITY_KEY_LENGTH:
        raise invalid(exceeds_maximum_length("Param key", MAX_ENTITY_KEY_LENGTH))
    if len(value) > MAX_PARAM_VAL_LENGTH:
        raise invalid(exceeds_maximum_length("Param value", MAX_PARAM_VAL_LENGTH))
    return key, value


def _tag(path, entry):
    """(key, value) of one run or experiment tag; a value over MLflow's limit is refused (see _param)."""
    entry = _entry(path, entry)
    key = _entity_key("tag", _join(path, "key"), entry.get("key"))
    value = "" if entry.get("value") is None else str(entry["value"])
    if len(key) > MAX_ENTITY_KEY_LENGTH:
        raise invalid(exceeds_maximum_length(_join(path, "key"), MAX_ENTITY_KEY_LENGTH))
    if len(value) > MAX_TAG_VAL_LENGTH:
        raise invalid(exceeds_maximum_length(_join(path, "value"), MAX_TAG_VAL_LENGTH))
    if key == SCORE_KEY_TAG and value:
        validate_key("score key", value)
    return key, value


def _tags(tags):
    return [_tag("", t) for t in tags or []]


def _entity_key(what, path, key):
    """A metric, param or tag name checked as MLflow checks one (mlflow.utils.validation); return it."""
    if key is None:
        if what == "tag":
            raise invalid(missing_value(path))
        raise invalid(invalid_value(path, "" if what == "param" else None,
                                    ("Metric name cannot be None. " if what == "metric" else "") + MISSING_KEY_NAME))
    if not isinstance(key, str):
        raise invalid(invalid_value(path, key, "a string is expected"))
    if not re.fullmatch(r"[/\w.\- :]*", key):
        raise invalid(invalid_value(path, key, BAD_CHARACTERS))
    normal = posixpath.normpath(key)
    if normal != key or normal == "." or normal.startswith("..") or normal.startswith("/"):
        raise invalid(invalid_value(path, key, "Names may be treated as files in certain cases, and must not "
                                               f"resolve to other names when treated as such. This name would "
                                               f"resolve to {normal!r}"))
    return key


def _check_params_unchanged(run, params, single):
    existing = dict(Param.objects.filter(run=run, key__in=[k for k, _ in params]).values_list("key", "value"))
    changed = [{"key": k, "old_value": existing[k], "new_value": v} for k, v in params
               if k in existing and existing[k] != v]
    if not changed:
        return
    if single:
        c = changed[0]
        raise invalid(f"Changing param values is not allowed. Param with key='{c['key']}' was already logged with "
                      f"value='{c['old_value']}' for run ID='{run.run_id}'. Attempted logging new value "
                      f"'{c['new_value']}'.")
    raise invalid(f"Changing param values is not allowed. Params were already logged='{changed}' for run "
                  f"ID='{run.run_id}'.")


def _dataset_input(entry):
    """(dataset fields, tags) of one dataset input, checked as MLflow's _validate_dataset does."""
    # A field the request left out is "" (protobuf's default), as MLflow's server reads it.
    dataset = {f: v for f, v in (entry.get("dataset") or {}).items() if v is not None}
    for field, limit in DATASET_LIMITS.items():
        if dataset.get(field) is not None and len(dataset[field]) > limit:
            raise invalid(exceeds_maximum_length(field, limit))
    tags = []
    for tag in entry.get("tags") or []:
        tag = {"key": tag.get("key") or "", "value": tag.get("value") or ""}
        if len(tag["key"]) > MAX_INPUT_TAG_KEY_LENGTH:
            raise invalid(exceeds_maximum_length("key", MAX_INPUT_TAG_KEY_LENGTH))
        if len(tag["value"]) > MAX_INPUT_TAG_VALUE_LENGTH:
            raise invalid(exceeds_maximum_length("value", MAX_INPUT_TAG_VALUE_LENGTH))
        tags.append({"key": tag["key"], "value": tag["value"]})
    fields = {f: dataset.get(f) or "" for f in ("name", "digest", "source_type", "source", "schema", "profile")}
    return fields, tags
