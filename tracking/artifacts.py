"""Small artifacts runs upload through MLflow's proxied artifact API (`mlflow-artifacts:` URIs).

A run's artifact URI is `mlflow-artifacts:/<experiment id>/<run id>/artifacts`; the client turns it into
`/api/2.0/mlflow-artifacts/artifacts/<experiment id>/<run id>/artifacts/<path>` and PUTs each file
there, GETs it back, and lists a folder with `GET .../artifacts?path=<experiment id>/<run id>/artifacts/<dir>`.
Files land under `<data dir>/artifacts/<experiment id>/<run id>/<path>`, one `Artifact` row each
(the row is what pages, listings and quotas read; the file is the bytes).

Limits, so one run cannot fill the control plane's disk: a file may be at most
`settings.ARTIFACT_MAX_MB` (YARDSTICK_ARTIFACT_MAX_MB, default 5) and a run's files together
`settings.RUN_ARTIFACTS_MAX_MB` (YARDSTICK_RUN_ARTIFACTS_MAX_MB, default 50). A refusal is an MLflow
error with HTTP 413: never 429, the status MLflow itself gives RESOURCE_EXHAUSTED, because its client
retries a 429 seven times with back-off (minutes of a training loop stalled on a file that will never fit).

What an upload means for the job page: a JSON file of generations (veRL's `val_step<N>.json`, a
list of {input, output, score}; or {"rows": [...]}; or MLflow's `log_table` shape {columns, data})
becomes rollout samples of that step (`trainer.Sample`); an image (png, jpg, gif, svg) is shown as
a figure. Everything else is only stored.
"""

import json
import math
import mimetypes
import os
import re
import uuid
from pathlib import Path, PurePosixPath

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Sum

from tracking.models import Artifact, Run, TrackingError
from trainer.models import Sample
from yardstick.live import publish

MB = 1024 * 1024
CHUNK = 64 * 1024
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".svg": "image/svg+xml", ".webp": "image/webp"}
# Samples kept from one generations file: enough to read, few enough for a page.
SAMPLES_PER_FILE = 64
# Keys the frameworks use for what was asked, what the policy wrote, and how it scored (first found wins).
PROMPT_KEYS = ("input", "prompt", "question", "query", "Task", "problem")
COMPLETION_KEYS = ("output", "completion", "response", "generation", "LLM Answer", "answer", "text")
REWARD_KEYS = ("score", "reward", "rewards", "acc", "accuracy", "correct", "Correct")
STEP_IN_NAME = re.compile(r"step[_-]?(\d+)", re.IGNORECASE)
SEGMENT = re.compile(r"^[^\x00-\x1f\\]+$")


class ArtifactError(TrackingError):
    """A refusal in MLflow's shape (`error_code`, `message` naming the field, the value and what is accepted)
    with its own HTTP status where MLflow's would hurt (413 for a file or run too big, see above)."""

    def __init__(self, error_code, message, status=None):
        super().__init__(error_code, message)
        self._status = status

    @property
    def status(self):
        return self._status or super().status


def max_file_bytes():
    return settings.ARTIFACT_MAX_MB * MB


def run_quota_bytes():
    return settings.RUN_ARTIFACTS_MAX_MB * MB


def root():
    return Path(settings.DATA_DIR) / "artifacts"


def run_dir(run):
    return root() / str(run.experiment_id) / run.run_id


def clean_path(path, field="path"):
    """`path` as safe relative POSIX parts ('.' parts dropped): no absolute path, no '..', no empty part, no backslash
    or control character (so nothing can be written outside the run's folder). Raises ArtifactError."""
    parts = [p for p in (path or "").split("/")]
    while parts and parts[-1] == "":
        parts.pop()  # a trailing slash names the same folder
    bad = (path or "").startswith("/") or any(p in ("", "..") or not SEGMENT.match(p) for p in parts)
    parts = [p for p in parts if p != "."]  # "." names the folder it is in, as MLflow's server reads it
    if bad:
        raise ArtifactError("INVALID_PARAMETER_VALUE",
                            f"{field} must be a relative path without '..', empty parts, backslashes or "
                            f"control characters, got {path!r}", 400)
    return parts


def locate(path, field="path"):
    """(run, relative artifact path) for `<experiment id>/<run id>/artifacts[/<rel>]`; ArtifactError when
    the path names no run of that experiment (RESOURCE_DOES_NOT_EXIST) or is not a run's artifact path."""
    parts = clean_path(path, field)
    if len(parts) < 3 or parts[2] != "artifacts":
        raise ArtifactError("INVALID_PARAMETER_VALUE",
                            f"{field} must look like <experiment_id>/<run_id>/artifacts/<file>, got {path!r}", 400)
    run = Run.objects.filter(run_id=parts[1], experiment_id=int(parts[0]) if parts[0].isdigit() else -1).first()
    if run is None:
        raise ArtifactError("RESOURCE_DOES_NOT_EXIST",
                            f"no run {parts[1]!r} in experiment {parts[0]!r} (from {field} {path!r})", 404)
    return run, "/".join(parts[3:])


def _too_big(rel, size_text):
    return ArtifactError(
        "INVALID_PARAMETER_VALUE",
        f"artifact {rel!r} is {size_text}; files up to {settings.ARTIFACT_MAX_MB} MB are accepted "
        f"(YARDSTICK_ARTIFACT_MAX_MB)", 413)


def _over_quota(run, rel, size, used):
    return ArtifactError(
        "RESOURCE_EXHAUSTED",
        f"artifact {rel!r} ({_mb(size)}) would bring run {run.run_id}'s artifacts to {_mb(used + size)}; "
        f"a run may keep up to {settings.RUN_ARTIFACTS_MAX_MB} MB (YARDSTICK_RUN_ARTIFACTS_MAX_MB)", 413)


def _mb(size):
    return f"{size / MB:.2f} MB"


def save(run, rel, stream, content_type="", declared_bytes=None):
    """Store what `stream` (a file-like with read(n)) holds as the run's artifact `rel`; return the Artifact.

    Refuses (ArtifactError, nothing kept) a file over the per-file cap, by its declared length before
    reading a byte when the client sent one, else while reading; and one that would take the run past
    its quota (checked with the run's row locked, so two uploads at once cannot both squeeze in).
    """
    parts = clean_path(rel)
    if not parts:
        raise ArtifactError("INVALID_PARAMETER_VALUE", "path must name a file under the run's artifacts, got ''", 400)
    rel = "/".join(parts)
    cap = max_file_bytes()
    if declared_bytes is not None and declared_bytes > cap:
        raise _too_big(rel, f"{_mb(declared_bytes)} (Content-Length {declared_bytes})")
    target = run_dir(run).joinpath(*parts)
    if target.is_dir():
        raise ArtifactError("INVALID_PARAMETER_VALUE", f"path {rel!r} is a folder of artifacts, not a file", 400)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".upload-{uuid.uuid4().hex}"
    size = 0
    try:
        with open(tmp, "wb") as out:
            while chunk := stream.read(CHUNK):
                size += len(chunk)
                if size > cap:
                    raise _too_big(rel, f"over {_mb(cap)}")
                out.write(chunk)
        with transaction.atomic():
            Run.objects.select_for_update().filter(pk=run.pk).first()
            kept = Artifact.objects.filter(run=run).exclude(path=rel)
            used = sum(kept.values_list("size_bytes", flat=True))
            if used + size > run_quota_bytes():
                raise _over_quota(run, rel, size, used)
            os.replace(tmp, target)
            artifact, _ = Artifact.objects.update_or_create(
                run=run, path=rel, defaults={"size_bytes": size, "content_type": guess_type(rel, content_type)})
            samples = ingest(run, artifact, target)
    finally:
        tmp.unlink(missing_ok=True)
    if samples:
        publish_samples(run, samples)
    return artifact


def guess_type(rel, declared=""):
    """The content type pages serve the file as: by its extension (what MLflow's client sends too), else
    the declared one, else bytes."""
    suffix = PurePosixPath(rel).suffix.lower()
    if suffix in IMAGE_TYPES:
        return IMAGE_TYPES[suffix]
    guessed, _ = mimetypes.guess_type(rel)
    return guessed or (declared.split(";")[0].strip() if declared else "") or "application/octet-stream"


def is_image(artifact):
    return artifact.content_type in IMAGE_TYPES.values()


def file_path(run, rel):
    """The stored file of the run's artifact `rel`; ArtifactError (404) when there is none."""
    parts = clean_path(rel)
    rel = "/".join(parts)
    artifact = Artifact.objects.filter(run=run, path=rel).first()
    path = run_dir(run).joinpath(*parts)
    if artifact is None or not path.is_file():
        raise ArtifactError("RESOURCE_DOES_NOT_EXIST", f"run {run.run_id} has no artifact {rel!r}", 404)
    return artifact, path


def listing(run, rel=""):
    """What MLflow's list call answers: the files and folders directly under `rel` as
    [{"path": name, "is_dir": bool, "file_size": int (files only)}]; empty when `rel` is a file or
    holds nothing (MLflow's own server answers so, and its client relies on it to tell files from folders)."""
    parts = clean_path(rel)
    prefix = "/".join(parts)
    entries = {}
    for path, size in Artifact.objects.filter(run=run).values_list("path", "size_bytes"):
        if prefix and not path.startswith(prefix + "/"):
            continue
        rest = path[len(prefix) + 1:] if prefix else path
        name, sep, _ = rest.partition("/")
        entries[name] = {"path": name, "is_dir": True} if sep else {"path": name, "is_dir": False, "file_size": size}
    return [entries[k] for k in sorted(entries)]


def used_bytes(run):
    return Artifact.objects.filter(run=run).aggregate(total=Sum("size_bytes"))["total"] or 0


# -- what an artifact means for the job page ------------------------------------------------------------


def ingest(run, artifact, path):
    """Rollout samples from a generations file (JSON or JSON lines); [] for anything else or a file that
    does not parse as one (it stays an artifact: a run's upload is never refused for its content)."""
    suffix = PurePosixPath(artifact.path).suffix.lower()
    if suffix not in (".json", ".jsonl") or artifact.size_bytes == 0:
        return []
    try:
        text = path.read_text(encoding="utf-8")
        rows = [json.loads(line) for line in text.splitlines() if line.strip()] if suffix == ".jsonl" \
            else generation_rows(json.loads(text))
    except (UnicodeDecodeError, ValueError):
        return []
    return keep_samples(run, artifact.path, rows)


def generation_rows(data):
    """The list of row objects in a generations file: a list of objects; {"rows": [...]} (veRL with a
    table name); MLflow's log_table {"columns": [...], "data": [[...]]}; else []."""
    if isinstance(data, dict):
        if isinstance(data.get("rows"), list):
            data = data["rows"]
        elif isinstance(data.get("columns"), list) and isinstance(data.get("data"), list):
            cols = data["columns"]
            data = [dict(zip(cols, r)) for r in data["data"] if isinstance(r, list)]
        else:
            return []
    return data if isinstance(data, list) else []


def _first(row, keys):
    for k in keys:
        if k in row and row[k] is not None:
            return row[k]
    return None


def _reward(value):
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, list) and value:
        value = value[0]
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def keep_samples(run, rel, rows):
    """Sample rows of the run's job from generation rows that have a prompt and a completion. Their step:
    the row's "step", else the number after "step" in the file's name, else the job's last step.
    The trainer's advantage and tool calls are not reported by these frameworks: NaN and 0."""
    job = run.job
    named = STEP_IN_NAME.search(PurePosixPath(rel).name)
    default_step = int(named.group(1)) if named else job.steps_done
    out, next_index = [], {}
    for row in rows:
        if not isinstance(row, dict):
            continue
        prompt, completion = _first(row, PROMPT_KEYS), _first(row, COMPLETION_KEYS)
        if prompt is None or completion is None:
            continue
        step = row.get("step")
        step = int(step) if isinstance(step, (int, float)) and not isinstance(step, bool) and math.isfinite(step) \
            else default_step
        if step not in next_index:
            top = Sample.objects.filter(job=job, step=step).aggregate(top=Max("index"))["top"]
            next_index[step] = 0 if top is None else top + 1
        reward = _reward(_first(row, REWARD_KEYS))
        out.append(Sample(job=job, step=step, index=next_index[step], prompt=_text(prompt), completion=_text(completion),
                          reward=math.nan if reward is None else reward, advantage=math.nan))
        next_index[step] += 1
        if len(out) >= SAMPLES_PER_FILE:
            break
    return Sample.objects.bulk_create(out)


def _text(value):
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def publish_samples(run, samples):
    """Tell the job page the newest generations (the "rollouts" event: the table follows the newest step)."""
    newest = max(s.step for s in samples)
    publish(f"job.{run.job_id}", "rollouts",
             {"step": newest, "samples": [_sample_dict(s) for s in samples if s.step == newest]})


def _sample_dict(sample):
    d = sample.to_dict()
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}
