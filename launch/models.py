"""Recipes: an admin's named, versioned launch templates of the runs Yardstick starts.

A recipe's definition is what runs on a GPU node: an argv list (never a shell line) with `{placeholders}`,
the typed parameters that fill them (launch/params.py), environment additions, a working directory, the
devices it needs, its framework and score key, the stop graces, and the arguments a Resume adds. Only
admins create and change recipes; each change is a new version, kept, so a job can say which one it ran.
Recipes travel as YAML or JSON (`export_all`, `import_all`) so a team keeps them in git.
"""

import re
from pathlib import Path

import yaml
from django.conf import settings
from django.db import models, transaction

from launch.params import RESERVED, Param, ParamError, placeholders
from trainer.models import ACTIVE, Status
from yardstick.inputs import InputError, text_problem

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Set by Yardstick for every launched run (its tracking run, token, devices, job): a recipe may not set them.
ENV_SET_BY_YARDSTICK = re.compile(r"^(MLFLOW_|YARDSTICK_|CUDA_VISIBLE_DEVICES$)")
FRAMEWORK = re.compile(r"^[a-z0-9-]{0,50}$")
DEVICE_KINDS = ("cpu", "cuda")
ARGV_MAX, PARAMS_MAX, ENV_MAX = 200, 50, 100
GRACE_MAX_S = 3600
DEFAULT_GRACE_S = (60, 30)  # the stop flag's, then SIGTERM's, before the next step
FIELDS = ("description", "argv", "params", "env", "workdir", "devices", "framework", "score_key", "stop_grace_s",
          "resume_argv", "checkpoint_pattern", "evaluates", "setup", "executor", "cluster", "shared_dir", "working_dir",
          "slurm")
# Where a recipe runs: "node" (a GPU node's launch worker, launch/executor.py) or a scheduler Yardstick submits it
# to and follows (launch/remote.py): "ray" (a registered Ray cluster's Jobs API, launch/on_ray.py), "slurm" (a
# batch job on a registered Slurm cluster, launch/on_slurm.py).
EXECUTORS = ("node", "ray", "slurm")
CLUSTER_KINDS = ("ray", "slurm")
# A Slurm recipe's batch options (its `slurm` object): each may name the recipe's parameters, checked again once
# filled (launch/on_slurm.py). A partition, account or QOS name; a time limit as sbatch takes it.
SLURM_NAME = re.compile(r"^[A-Za-z0-9_.,-]{1,100}$")
SLURM_TIME = re.compile(r"^(UNLIMITED|INFINITE|\d{1,7}(:\d{1,2}){0,2}|\d{1,4}-\d{1,2}(:\d{1,2}){0,2})$")
SLURM_GPUS_AS = ("gpus-per-node", "gres")
SLURM_NODES_MAX = 1024
SLURM_FIELDS = ("partition", "account", "qos", "nodes", "time_limit", "gpus_as")


def _text(field, value, limit, required=False):
    if value is None or value == "":
        if required:
            raise InputError(field, f"{field} is required")
        return ""
    if not isinstance(value, str):
        raise InputError(field, f"{field} must be text, got {value!r}")
    problem = text_problem(value)
    if problem or len(value) > limit:
        raise InputError(field, f"{field} must be text of at most {limit} characters, got one that "
                                f"{problem or f'has {len(value)}'}")
    return value


def _argv(field, value, allowed, required):
    if value in (None, []) and not required:
        return []
    if not isinstance(value, list) or not value or len(value) > ARGV_MAX:
        raise InputError(field, f"{field} must be a list of 1 to {ARGV_MAX} strings (the program and its "
                                f"arguments, never a shell line), got {value!r}")
    for i, item in enumerate(value):
        _item(f"{field}[{i}]", item, allowed)
    return list(value)


def _item(field, item, allowed):
    """Check one argv item (or env value, workdir): text whose placeholders are all in `allowed`."""
    try:
        names = placeholders(item, field)
    except ParamError as err:
        raise InputError(err.field, err.message) from None
    _text(field, item, 4000, required=True)
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise InputError(field, f"{field} names {{{unknown[0]}}}, which is no parameter of this recipe "
                                f"(parameters: {', '.join(sorted(allowed)) or 'none'})")


def clean_definition(raw):
    """The recipe definition in `raw` (a dict), checked and with its defaults; InputError naming the first
    bad field and what it accepts."""
    if not isinstance(raw, dict):
        raise InputError("body", f"a recipe must be an object with {', '.join(FIELDS)}, got {raw!r}")
    unknown = sorted(set(raw) - set(FIELDS) - {"name"})
    if unknown:
        raise InputError(unknown[0], f"a recipe has no field {unknown[0]!r}; its fields are {', '.join(FIELDS)}")
    specs = raw.get("params") or []
    if not isinstance(specs, list) or len(specs) > PARAMS_MAX:
        raise InputError("params", f"params must be a list of at most {PARAMS_MAX} parameters, got {specs!r}")
    try:
        params = [Param(spec, f"params[{i}]") for i, spec in enumerate(specs)]
    except ParamError as err:
        raise InputError(err.field, err.message) from None
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise InputError("params", f"params names {twice!r} twice")
    given = set(names) | (set(RESERVED) - {"checkpoint"})  # {checkpoint}: resume arguments only
    env = raw.get("env") or {}
    if not isinstance(env, dict) or len(env) > ENV_MAX:
        raise InputError("env", f"env must be an object of at most {ENV_MAX} NAME: value pairs, got {env!r}")
    for key, value in env.items():
        if not ENV_NAME.match(key):
            raise InputError("env", f"env names must be letters, digits and _, got {key!r}")
        if ENV_SET_BY_YARDSTICK.match(key):
            raise InputError(f"env.{key}", f"env.{key} is set by Yardstick for every launched run "
                                           "(MLFLOW_*, YARDSTICK_*, CUDA_VISIBLE_DEVICES)")
        _item(f"env.{key}", value, given)
    devices = raw.get("devices") or {"kind": "cpu", "count": 1}
    if (not isinstance(devices, dict) or set(devices) - {"kind", "count"} or devices.get("kind") not in DEVICE_KINDS
            or isinstance(devices.get("count", 1), bool) or not isinstance(devices.get("count", 1), int)
            or not 1 <= devices.get("count", 1) <= 64):
        raise InputError("devices", f"devices must be {{kind: {' or '.join(DEVICE_KINDS)}, count: 1 to 64}}, "
                                    f"got {devices!r}")
    grace = raw.get("stop_grace_s") or list(DEFAULT_GRACE_S)
    if (not isinstance(grace, list) or len(grace) != 2
            or not all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g <= GRACE_MAX_S for g in grace)):
        raise InputError("stop_grace_s", f"stop_grace_s must be [seconds after the stop flag before SIGTERM, "
                                         f"seconds after SIGTERM before SIGKILL], each 0 to {GRACE_MAX_S}, "
                                         f"got {grace!r}")
    framework = raw.get("framework") or ""
    if not isinstance(framework, str) or not FRAMEWORK.match(framework):
        raise InputError("framework", f"framework must be a short lower-case name (trl, verl, nemo-rl, ...), "
                                      f"got {framework!r}")
    workdir = _text("workdir", raw.get("workdir"), 4000)
    if workdir:
        _item("workdir", workdir, given)
    pattern = _text("checkpoint_pattern", raw.get("checkpoint_pattern"), 200)
    if pattern:
        try:
            groups = re.compile(pattern).groups
        except re.error as err:
            raise InputError("checkpoint_pattern", f"checkpoint_pattern is not a regular expression ({err}), "
                                                   f"got {pattern!r}") from None
        if groups != 1:
            raise InputError("checkpoint_pattern", "checkpoint_pattern must match a checkpoint folder's whole name "
                                                   "with one group, its step: e.g. ckpt_(\\d+)")
    out = {
        "description": _text("description", raw.get("description"), 2000),
        "argv": _argv("argv", raw.get("argv"), given, required=True),
        "params": [p.to_dict() for p in params],
        "env": dict(env),
        "workdir": workdir,
        "devices": {"kind": devices["kind"], "count": devices.get("count", 1)},
        "framework": framework,
        "score_key": _text("score_key", raw.get("score_key"), 250),
        "stop_grace_s": list(grace),
        "resume_argv": _argv("resume_argv", raw.get("resume_argv"), given | {"checkpoint"}, required=False),
    }
    if pattern:  # only when given: the definitions stored before the field existed stay equal to their exports
        out["checkpoint_pattern"] = pattern
    evaluates = raw.get("evaluates", False)
    if not isinstance(evaluates, bool):
        raise InputError("evaluates", f"evaluates must be true (an evaluation recipe: it scores {{init_from}} and "
                                      f"trains nothing) or false, got {evaluates!r}")
    if evaluates and not any("init_from" in placeholders(item, "argv") for item in [*out["argv"], *out["env"].values()]):
        raise InputError("evaluates", "an evaluation recipe scores another job's checkpoint: its argv must name "
                                      "{init_from}")
    if evaluates:  # only when true, as checkpoint_pattern
        out["evaluates"] = True
    setup = raw.get("setup") or ""
    if setup:  # only when given, as checkpoint_pattern
        if not isinstance(setup, str):
            raise InputError("setup", f"setup must be the name of a recipe (a shared setup a sweep runs once before "
                                      f"its first trial), got {setup!r}")
        out["setup"] = clean_name(setup, "setup")
    out.update(_where(raw, out))
    return out


def _where(raw, clean):
    """The fields of a recipe that runs on a cluster (executor, cluster, shared_dir, working_dir), checked; {} for
    a node recipe, so the definitions stored before clusters existed stay equal to their exports."""
    executor = raw.get("executor") or "node"
    if executor not in EXECUTORS:
        raise InputError("executor", f"executor must be one of {', '.join(EXECUTORS)} (node: a GPU node's launch "
                                     f"worker; ray: a registered Ray cluster; slurm: a batch job on a registered "
                                     f"Slurm cluster), got {executor!r}")
    if executor == "node":
        extra = sorted(k for k in ("cluster", "shared_dir", "working_dir", "slurm") if raw.get(k))
        if extra:
            raise InputError(extra[0], f"{extra[0]} is for a recipe that runs on a cluster (executor: ray or slurm); "
                                       "this one runs on a node's launch worker")
        return {}
    if raw.get("slurm") and executor != "slurm":
        raise InputError("slurm", f"slurm holds a Slurm batch job's options; this recipe runs on {executor}")
    cluster = raw.get("cluster") or ""
    if cluster:
        clean_name(cluster, "cluster")
    shared = _text("shared_dir", raw.get("shared_dir"), 1000)
    if shared and not shared.startswith("/"):
        raise InputError("shared_dir", f"shared_dir must be an absolute path on storage every node of the cluster "
                                       f"mounts (its jobs' output directories go there), got {shared!r}")
    if executor == "slurm" and not shared:
        raise InputError("shared_dir", "a Slurm batch job writes its output file into the job's output directory, "
                                       "where Yardstick reads it while it runs: set shared_dir to storage the "
                                       "cluster's nodes and Yardstick's follower share (e.g. /mnt/shared/yardstick)")
    if executor == "slurm" and re.search(r"[\s%'\"\\$`]", shared):
        raise InputError("shared_dir", f"a Slurm recipe's shared_dir goes into #SBATCH lines: no spaces, quotes, "
                                       f"'%', '$', '`' or backslashes, got {shared!r}")
    items = [*clean["argv"], *clean["resume_argv"], *clean["env"].values(), clean["workdir"]]
    uses_dir = any("job_dir" in placeholders(item, "argv") for item in items)
    if any("models" in placeholders(item, "argv") for item in items):
        raise InputError("argv", "{models} is a node's own folder (<data dir>/models on its launch worker); a recipe "
                                 "on a cluster names its model by a path on storage the cluster's nodes share")
    if uses_dir and not shared:
        raise InputError("shared_dir", "this recipe names {job_dir}, which on a cluster must be on storage its "
                                       "nodes share: set shared_dir (e.g. /mnt/shared/yardstick)")
    if clean["resume_argv"] and not shared:
        raise InputError("shared_dir", "a Resume on a cluster finds its checkpoints in the job's output directory, "
                                       "on storage its nodes share: set shared_dir")
    working_dir = _text("working_dir", raw.get("working_dir"), 1000)
    if working_dir and executor != "ray":
        raise InputError("working_dir", "working_dir is what Ray ships to its nodes first; a Slurm job runs where "
                                        "its nodes' storage has the code (set workdir)")
    out = {"executor": executor, "cluster": cluster, "shared_dir": shared}
    if working_dir:
        out["working_dir"] = working_dir
    if executor == "slurm":
        out["slurm"] = _slurm(raw.get("slurm"), {p["name"] for p in clean["params"]} | (set(RESERVED) - {"checkpoint"}))
    return out


def _slurm(raw, allowed):
    """A Slurm recipe's batch options, checked: {partition, account, qos, nodes, time_limit, gpus_as}."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise InputError("slurm", f"slurm must be an object with {', '.join(SLURM_FIELDS)}, got {raw!r}")
    unknown = sorted(set(raw) - set(SLURM_FIELDS))
    if unknown:
        raise InputError(f"slurm.{unknown[0]}", f"slurm has no field {unknown[0]!r}; its fields are "
                                                f"{', '.join(SLURM_FIELDS)}")
    out = {}
    for key in ("partition", "account", "qos", "time_limit"):
        value = raw.get(key)
        if value in (None, ""):
            continue
        field = f"slurm.{key}"
        _item(field, value, allowed)
        if not placeholders(value, field):
            slurm_option_problem(key, value)
        out[key] = value
    nodes = raw.get("nodes", 1)
    if isinstance(nodes, str) and "{" in nodes:
        _item("slurm.nodes", nodes, allowed)
    else:
        slurm_option_problem("nodes", nodes)
    out["nodes"] = nodes
    gpus_as = raw.get("gpus_as") or SLURM_GPUS_AS[0]
    if gpus_as not in SLURM_GPUS_AS:
        raise InputError("slurm.gpus_as", f"slurm.gpus_as must be {' or '.join(SLURM_GPUS_AS)} (how the batch job "
                                          f"asks for the recipe's GPUs on each node), got {gpus_as!r}")
    out["gpus_as"] = gpus_as
    return out


def slurm_option_problem(key, value):
    """Raise InputError when `value` (filled) is no Slurm batch option `key` accepts; the field is slurm.<key>."""
    field = f"slurm.{key}"
    if key == "nodes":
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= SLURM_NODES_MAX:
            raise InputError(field, f"{field} must be a whole number of nodes from 1 to {SLURM_NODES_MAX}, got "
                                    f"{value!r}")
        return value
    if key == "time_limit":
        if not isinstance(value, str) or not SLURM_TIME.match(value):
            raise InputError(field, f"{field} must be a time limit as sbatch takes it (minutes, MM:SS, HH:MM:SS, "
                                    f"D-HH, D-HH:MM:SS or UNLIMITED), got {value!r}")
        return value
    if not isinstance(value, str) or not SLURM_NAME.match(value):
        raise InputError(field, f"{field} must be a Slurm {key} name (letters, digits, '.', '_', '-'; several "
                                f"separated by ','), got {value!r}")
    return value


def names_init_from(definition):
    """Whether a (clean) recipe definition starts from another job's checkpoint: its argv or env names {init_from}
    (a Continue's recipe, a campaign's next run, an evaluation recipe)."""
    items = [*definition["argv"], *definition["env"].values()]
    return any("init_from" in placeholders(item, "argv") for item in items)


def evaluates(definition):
    """Whether a (clean) recipe definition is an evaluation recipe: it scores {init_from} and trains nothing (a
    campaign's scorer, never a run's continuation)."""
    return bool(definition.get("evaluates"))


def continues_training(definition):
    """Whether a (clean) recipe definition trains on from another job's checkpoint: it names {init_from} and is no
    evaluation recipe (a Continue's training, a campaign's next run)."""
    return names_init_from(definition) and not evaluates(definition)


def clean_name(name, field="name"):
    if not isinstance(name, str) or not NAME.match(name):
        raise InputError(field, f"{field} must be 1 to 100 lower-case letters, digits, '.', '_' or '-' (starting "
                                f"with a letter or digit), got {name!r}")
    return name


class Recipe(models.Model):
    """A named launch template; `definition` is its current version's (RecipeVersion keeps them all)."""

    name = models.CharField(max_length=100, unique=True)
    version = models.PositiveIntegerField(default=1)
    definition = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"recipe {self.name} v{self.version}"

    @classmethod
    def define(cls, name, raw, user=None):
        """Create the recipe `name` from `raw`, or give it a new version when `raw` differs from its current
        one; return (recipe, "created" | "updated" | "unchanged"). InputError names the bad field; nothing
        is stored then."""
        name = clean_name(name)
        definition = clean_definition(raw)
        with transaction.atomic():
            recipe = cls.objects.select_for_update().filter(name=name).first()
            if recipe is None:
                recipe = cls.objects.create(name=name, definition=definition)
                outcome = "created"
            elif recipe.definition == definition:
                return recipe, "unchanged"
            else:
                recipe.version += 1
                recipe.definition = definition
                recipe.save(update_fields=["version", "definition", "updated_at"])
                outcome = "updated"
            RecipeVersion.objects.create(recipe=recipe, version=recipe.version, definition=definition, created_by=user)
        return recipe, outcome

    def params(self):
        return [Param(spec) for spec in self.definition["params"]]

    def to_dict(self, versions=False):
        out = {"name": self.name, "version": self.version, **self.definition,
               "updated_at": self.updated_at.isoformat() if self.updated_at else None}
        if versions:
            out["versions"] = [v.to_dict() for v in self.versions.order_by("-version")]
        return out

    def export(self):
        """The recipe as it travels (export_all): its name and definition, no version or times."""
        return {"name": self.name, **self.definition}


class RecipeVersion(models.Model):
    recipe = models.ForeignKey(Recipe, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    definition = models.JSONField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["recipe", "version"], name="launch_recipe_version_unique")]

    def to_dict(self):
        return {"version": self.version, "created_at": self.created_at.isoformat(),
                "created_by": self.created_by.username if self.created_by else None}


def export_all():
    """Every recipe as it travels: {"recipes": [{name, ...definition}]}, by name."""
    return {"recipes": [r.export() for r in Recipe.objects.all()]}


def import_all(document, user=None):
    """Define every recipe of `document` ({"recipes": [...]}, as export_all gives it) in one transaction: all or
    none. Return {"created": [names], "updated": [...], "unchanged": [...]}; InputError names the recipe and
    field of the first bad one ("recipes[2].argv")."""
    recipes = document.get("recipes") if isinstance(document, dict) else None
    if not isinstance(recipes, list):
        raise InputError("recipes", "the document must be {recipes: [{name, argv, params, ...}, ...]}")
    outcome = {"created": [], "updated": [], "unchanged": []}
    names = [r.get("name") if isinstance(r, dict) else None for r in recipes]
    with transaction.atomic():
        for i, raw in enumerate(recipes):
            if names[i] is not None and names.count(names[i]) > 1:
                raise InputError(f"recipes[{i}].name", f"recipes[{i}].name {names[i]!r} is in the document twice")
            try:
                recipe, what = Recipe.define(raw.get("name") if isinstance(raw, dict) else None, raw, user)
            except InputError as err:
                raise InputError(f"recipes[{i}].{err.field}", f"recipes[{i}]: {err.message}") from None
            outcome[what].append(recipe.name)
    return outcome


# The example recipes shipped with Yardstick (docs/launching.md, "The example recipes"): what a first start imports
# in one click, trl-grpo-cpu among them.
EXAMPLES = Path(__file__).resolve().parent / "examples" / "recipes.yaml"
FIRST_RUN = "trl-grpo-cpu"  # the example a laptop runs as it is, on its CPU: the first run the pages point to


def import_examples(user=None):
    """Define the example recipes (EXAMPLES) as import_all does: created, or a new version where one differs."""
    return import_all(yaml.safe_load(EXAMPLES.read_text()), user)


CLUSTER_FIELDS = ("name", "kind", "address", "headers", "python", "description")
HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,100}$")
HEADERS_MAX = 20


class Cluster(models.Model):
    """A scheduler Yardstick submits recipes to and follows (launch/remote.py): a Ray cluster, by the address of its
    dashboard (the Jobs API, e.g. http://ray-head:8265) and the headers an authenticating proxy in front of it wants
    (their values are secrets: stored, sent, never shown); a Slurm cluster, by the slurm.conf its commands read on
    the machine Yardstick's follower runs on (a login node: sbatch, squeue, scontrol, scancel).

    `answered_at` / `unreachable_since` / `error` are the follower's: when it last answered, since when it has not,
    and what the last failed call said."""

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, default="ray")
    address = models.CharField(max_length=1000)
    headers = models.JSONField(default=dict, blank=True)
    python = models.CharField(max_length=1000, blank=True, default="python",
                              help_text="what {python} is in its recipes: the interpreter on the cluster's nodes")
    description = models.CharField(max_length=2000, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    unreachable_since = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"{self.kind} cluster {self.name}"

    @classmethod
    def register(cls, raw, user=None):
        """Create the cluster `raw` names ({name, address, kind?, headers?, python?, description?}) or change it; return
        (cluster, "created" | "updated"). InputError names the bad field; nothing is stored then."""
        if not isinstance(raw, dict):
            raise InputError("body", "a cluster must be an object {name, address, kind, headers, description}")
        unknown = sorted(set(raw) - set(CLUSTER_FIELDS))
        if unknown:
            raise InputError(unknown[0], f"a cluster has no field {unknown[0]!r}; its fields are "
                                         f"{', '.join(CLUSTER_FIELDS)}")
        name = clean_name(raw.get("name"))
        kind = raw.get("kind") or "ray"
        if kind not in CLUSTER_KINDS:
            raise InputError("kind", f"kind must be one of {', '.join(CLUSTER_KINDS)}, got {kind!r}")
        address = clean_slurm_conf(raw.get("address")) if kind == "slurm" else clean_address(raw.get("address"))
        headers = raw.get("headers") or {}
        if headers and kind == "slurm":
            raise InputError("headers", "headers are for a Ray dashboard behind a proxy; a Slurm cluster's commands "
                                        "authenticate as the user Yardstick's follower runs as")
        if not isinstance(headers, dict) or len(headers) > HEADERS_MAX:
            raise InputError("headers", f"headers must be an object of at most {HEADERS_MAX} Name: value pairs (what "
                                        "a proxy in front of the dashboard wants), got a "
                                        f"{type(headers).__name__}")
        for key, value in headers.items():
            if not HEADER_NAME.match(key):
                raise InputError("headers", f"header names are letters, digits and '-', got {key!r}")
            if not isinstance(value, str) or text_problem(value) or len(value) > 4000 or "\n" in value:
                raise InputError(f"headers.{key}", f"headers.{key} must be one line of text of at most 4000 "
                                                   "characters")
        description = _text("description", raw.get("description"), 2000)
        python = _text("python", raw.get("python"), 1000) or "python"
        with transaction.atomic():
            row = cls.objects.select_for_update().filter(name=name).first()
            outcome = "updated" if row else "created"
            row = row or cls(name=name, created_by=user)
            row.kind, row.address, row.headers, row.description = kind, address, dict(headers), description
            row.python = python
            row.save()
        return row, outcome

    def live_jobs(self):
        """Ids of the queued and running jobs launched on this cluster (its follower needs its address)."""
        return list(self.launches.filter(job__status__in=(Status.QUEUED, *ACTIVE)).values_list("job_id", flat=True))

    def forget(self):
        """Delete the cluster unless a job launched on it is live; return those jobs' ids (nothing is deleted
        then). The ended jobs keep their history and lose the link to it."""
        with transaction.atomic():
            live = self.live_jobs()
            if not live:
                Launch.objects.filter(cluster=self).update(cluster=None)
                self.delete()
        return live

    def to_dict(self):
        return {"name": self.name, "kind": self.kind, "address": self.address, "header_names": sorted(self.headers),
                "python": self.python, "description": self.description,
                "answered_at": self.answered_at.isoformat() if self.answered_at else None,
                "unreachable_since": self.unreachable_since.isoformat() if self.unreachable_since else None,
                "error": self.error}


def clean_slurm_conf(value):
    """A Slurm cluster's address: the absolute path of the slurm.conf its commands read (SLURM_CONF)."""
    text = _text("address", value, 1000, required=True).strip()
    if not text.startswith("/") or "\n" in text:
        raise InputError("address", "a Slurm cluster's address is the absolute path of the slurm.conf its commands "
                                    f"read on this machine (e.g. /etc/slurm/slurm.conf), got {value!r}")
    return text


def clean_address(value):
    """A cluster dashboard's address: http(s)://host[:port][/path], no credentials in it (headers carry those)."""
    from urllib.parse import urlsplit

    text = _text("address", value, 1000, required=True).strip()
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises on a port that is no number
    except ValueError as err:
        raise InputError("address", f"address is not a URL ({err}), got {value!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError("address", f"address must be the dashboard's http(s)://host:port (Ray's is port 8265), got "
                                    f"{value!r}")
    if parts.username or parts.password:
        raise InputError("address", "address must not hold a user or password: give them as headers (e.g. "
                                    "Authorization), which are never shown")
    return text.rstrip("/")


class Launch(models.Model):
    """What a launched job (trainer.Job, source "launched") runs: the recipe version, the parameter values, and
    the exact argv and environment names of its newest start; where it runs and how its process ended.

    The web never reads a node's files: the launch worker writes here what the pages show (the checkpoints it
    found in the job's output directory, the stop step that ended the process, the exit status).
    """

    job = models.OneToOneField("trainer.Job", on_delete=models.CASCADE, primary_key=True, related_name="launch")
    recipe = models.ForeignKey(Recipe, null=True, on_delete=models.SET_NULL, related_name="launches")
    recipe_name = models.CharField(max_length=100)
    recipe_version = models.PositiveIntegerField()
    definition = models.JSONField(help_text="the recipe version's definition, as it ran")
    values = models.JSONField(default=dict, help_text="the parameter values, checked")
    argv = models.JSONField(default=list, help_text="the exact argv of the newest start")
    env_names = models.JSONField(default=list, help_text="names of the variables set for it (never their values)")
    # On the worker that runs it (chosen at placement, written again when the worker starts it).
    worker = models.CharField(max_length=255, blank=True, default="")
    node = models.CharField(max_length=255, blank=True, default="")
    gpus = models.JSONField(default=list, help_text="NVML indices of the GPUs given to it while it runs")
    cores = models.PositiveIntegerField(default=0, help_text="CPU cores given to a cpu recipe while it runs")
    job_dir = models.CharField(max_length=1000, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True, help_text="the process group leader while it runs")
    # How the newest start ended: the stop step ("flag", "SIGTERM", "SIGKILL") and the exit status.
    stop_step = models.CharField(max_length=10, blank=True, default="")
    exit_code = models.IntegerField(null=True, blank=True, help_text="negative: killed by that signal")
    checkpoints = models.JSONField(default=list, help_text="checkpoint names found in job_dir, oldest first")
    token = models.ForeignKey("yardstick.ApiToken", null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+", help_text="the run-scoped tracking token, revoked when the job ends")
    output_bytes = models.BigIntegerField(default=0, help_text="bytes of the output lines kept")
    output_dropped = models.BigIntegerField(default=0, help_text="oldest output lines dropped past the cap")
    output_seq = models.BigIntegerField(default=0, help_text="number of the newest output line")
    # A launch on a cluster (launch/remote.py): the scheduler's id of its newest start, what the scheduler last
    # said of it, how much of its log is kept, and its stop steps' times (the follower keeps nothing in memory).
    executor = models.CharField(max_length=20, default="node")
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="launches")
    remote_id = models.CharField(max_length=200, blank=True, default="")
    remote_status = models.CharField(max_length=40, blank=True, default="")
    remote_message = models.TextField(blank=True, default="")
    starts = models.PositiveIntegerField(default=0, help_text="submissions so far (each Resume is one more)")
    log_offset = models.BigIntegerField(default=0, help_text="characters of the scheduler's log already kept")
    stop_flag_at = models.DateTimeField(null=True, blank=True)
    unreachable_since = models.DateTimeField(null=True, blank=True)
    allocation = models.JSONField(null=True, blank=True, help_text="what the scheduler gave its newest start, where "
                                  "it says (Slurm: nodes, GPUs, CPUs, start, end)")

    def __str__(self):
        return f"launch of job {self.job_id}: {self.recipe_name} v{self.recipe_version}"

    @property
    def stop_grace_s(self):
        return self.definition.get("stop_grace_s") or list(DEFAULT_GRACE_S)

    def to_dict(self):
        return {"recipe": self.recipe_name, "recipe_version": self.recipe_version, "values": self.values,
                "argv": self.argv, "env_names": self.env_names, "worker": self.worker, "node": self.node,
                "gpus": self.gpus, "cores": self.cores, "job_dir": self.job_dir, "pid": self.pid,
                "stop_step": self.stop_step, "exit_code": self.exit_code, "checkpoints": self.checkpoints,
                "executor": self.executor, "cluster": self.cluster.name if self.cluster_id else None,
                "remote_id": self.remote_id, "remote_status": self.remote_status,
                "remote_message": self.remote_message,
                "unreachable_since": self.unreachable_since.isoformat() if self.unreachable_since else None,
                "allocation": self.allocation,
                "output": {"bytes": self.output_bytes, "dropped": self.output_dropped, "lines": self.output_seq}}


class OutputLine(models.Model):
    """One line a launched job's process wrote (stdout or stderr), clean (launch/output.py), numbered per job."""

    job = models.ForeignKey("trainer.Job", on_delete=models.CASCADE, related_name="output_lines")
    seq = models.BigIntegerField()
    stream = models.CharField(max_length=10)  # stdout, stderr, or yardstick (what the worker says)
    text = models.TextField()
    at = models.DateTimeField()

    class Meta:
        ordering = ["job", "seq"]
        constraints = [models.UniqueConstraint(fields=["job", "seq"], name="launch_output_line_unique")]

    def to_list(self):
        return [self.seq, self.stream, self.text]
