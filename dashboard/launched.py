"""What the pages show of launched jobs and recipes: a job's launch (recipe, argv, where it ran, how it ended, what
its scheduler allocated beside what the agents measured),
the recipes a Start form offers with their typed parameters as inputs, the workers' free and held devices, and
recipe definitions as an admin edits them (YAML or JSON text).

Reads only: launching is launch.kind.start (dashboard/forms.py LaunchForm), defining is Recipe.define.
"""

import json
from datetime import datetime
from decimal import Decimal

import yaml
from django.conf import settings
from django.utils import timezone

from collector.models import Device
from costs.ledger import usage
from costs.money import exact_usd, usd_text, usd_title
from costs.prices import PriceBook, model_key
from launch.executor import signal_name
from launch.kind import LAUNCHED
from launch.models import FIELDS, Cluster, Launch, Recipe, evaluates, names_init_from
from launch.output import marker
from launch.remote import FAILED as REMOTE_FAILED
from trainer.models import ENDED, RESUMABLE, Source, Status
from trainer.workers import live_workers, with_devices
from yardstick.inputs import InputError

# What each stop step means (launch/executor.py: the flag, then SIGTERM, then SIGKILL; on a Slurm cluster the last
# is its cancel, launch/remote.py).
STOP_STEPS = {
    "flag": "the stop flag: the run ended itself at its next step",
    "SIGTERM": "SIGTERM, after the stop flag's grace",
    "SIGKILL": "SIGKILL: it ignored the stop flag and SIGTERM",
    "cancel": "the scheduler's cancel (Slurm's scancel): it ran on past the stop flag and SIGTERM",
}
FORMATS = ("yaml", "json")
# A cluster's scheduler by its kind (launch.models.CLUSTER_KINDS), as the pages name it: "on Ray cluster gpu-a".
SCHEDULERS = {"ray": "Ray", "slurm": "Slurm"}


def scheduler_name(kind):
    return SCHEDULERS.get(kind, kind)


def exit_text(code):
    """A process's exit status, for people: "0", "1", "killed by SIGKILL (signal 9)"."""
    if code is None:
        return ""
    if code < 0:
        return f"killed by {signal_name(-code)} (signal {-code})"
    return f"{code}" + (" (success)" if code == 0 else "")


def launch_of(job):
    """The job's Launch row, or None for a job of another kind."""
    if job.source != Source.LAUNCHED:
        return None
    return Launch.objects.filter(pk=job.pk).select_related("recipe", "cluster").first()


def launch_view(job):
    """What the job page shows of a launched job's launch, or None for another kind of job."""
    launch = launch_of(job)
    if launch is None:
        return None
    order = [p["name"] for p in launch.definition.get("params", [])]
    values = sorted(launch.values.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    cap = settings.LAUNCH_OUTPUT_MAX_MB
    ended = job.status in ENDED
    return {
        "launch": launch, "values": values, "ended": ended, "devices_text": devices_text(launch.definition["devices"]),
        "current_version": launch.recipe.version if launch.recipe else None,
        "stop_step_text": STOP_STEPS.get(launch.stop_step, ""),
        "exit_text": exit_text(launch.exit_code),
        "kept": max(0, launch.output_seq - launch.output_dropped),
        "marker": marker(launch.output_dropped, cap * 2**20), "cap_mb": cap,
        # On a cluster: its scheduler placed it and says how it goes (launch/remote.py follows it).
        "remote": launch.executor != "node", "scheduler": scheduler_name(launch.executor),
        # what the scheduler said is an error: a failed end (its own word may be TIMEOUT, OUT_OF_MEMORY, ...)
        "remote_failed": launch.remote_status == REMOTE_FAILED or (job.status == Status.FAILED and launch.remote_message),
        "allocation": allocation_view(job, launch),
    }


def allocation_view(job, launch, now=None):
    """What a scheduler allocated the job's newest start (Launch.allocation: Slurm's nodes, GPUs, start and end)
    beside what the agents measured of it there, or None where the scheduler said nothing (docs/figures.md,
    "Allocated idle"):

    - allocated GPU-seconds: its GPUs × the seconds from its start to its end (to now while it runs);
    - measured GPU-seconds: the device-seconds charged to the job on the allocation's nodes (GPUs, since the start);
    - allocated idle: the allocated GPU-seconds the agents did not measure it using, at the device-hour price of
      the GPUs it did use there (else of those the nodes have): an estimate, device time only (their energy is
      the nodes' idle draw)."""
    a = launch.allocation
    if not a:
        return None
    now = now or timezone.now()
    start = datetime.fromisoformat(a["start"])
    end = datetime.fromisoformat(a["end"]) if a.get("end") else now
    seconds = Decimal(max(0, int((end - start).total_seconds())))
    # Its nodes as the agents name them (tied by the follower: launch.remote.measured_where), and as the scheduler does.
    hosts = set(a.get("hosts") or [a["nodes"]]) | {n for n in a.get("yardstick_nodes") or () if n}
    rows = [u for u in usage(start=start.replace(second=0, microsecond=0), job_ids=[job.pk]) if u.model != "cpu"]
    there = [u for u in rows if u.node in hosts]
    measured = sum((u.device_s for u in there), Decimal(0))
    elsewhere = sum((u.device_s for u in rows if u.node not in hosts), Decimal(0))
    allocated = Decimal(a["gpus"]) * seconds
    idle = max(Decimal(0), allocated - measured)
    rate, priced_by = _gpu_second_price(there, hosts)
    return {
        **a, "start_at": start, "end_at": end if a.get("end") else None, "seconds": seconds, "allocated_gpu_s": allocated, "measured_gpu_s": measured,
        "elsewhere_gpu_s": elsewhere, "idle_gpu_s": idle,
        "idle_pct": f"{idle * 100 / allocated:.0f}" if allocated else None,
        "idle_usd": exact_usd(idle * rate) if rate is not None else None, "priced_by": priced_by,
        "idle_usd_text": usd_text(idle * rate) if rate is not None else "",
        "idle_usd_title": usd_title(idle * rate) if rate is not None else "",
        "running": a.get("end") is None,
    }


def _gpu_second_price(there, hosts):
    """(Decimal dollars per GPU-second, by what) for the allocation's GPUs: what the job's own GPUs there cost per
    second, else the device-hour price of a GPU its nodes have; (None, "") when nothing prices them."""
    seconds = sum((u.device_s for u in there), Decimal(0))
    if seconds:
        return sum((u.device_usd for u in there), Decimal(0)) / seconds, "the GPUs it used there"
    book, today = PriceBook(), timezone.now().date()
    for model, source in Device.objects.filter(node__name__in=hosts).exclude(source="host").values_list(
            "model", "source").distinct():
        price = book.price(model_key(model, source), today)
        if price is not None:
            return price.usd_per_hour / 3600, f"the {model} price"
    return None, ""


def restart_refusal(job):
    """Why a launched job that has ended cannot resume, so that Restart (a new job from the beginning) is what it
    offers; "" for a job Restart is not for (another kind, not ended, or one that can resume)."""
    if job.source != Source.LAUNCHED or job.status not in RESUMABLE:
        return ""
    return LAUNCHED.resume_refusal(job)


# -- the Start form's recipes -------------------------------------------------------------------------


def devices_text(devices):
    kind, count = devices["kind"], devices["count"]
    return f"{count} × {'GPU' if kind == 'cuda' else 'CPU core'}{'s' if count > 1 else ''}"


def bounds_text(spec):
    low, high = spec.get("minimum"), spec.get("maximum")
    if low is not None and high is not None:
        return f"from {low} to {high}"
    if low is not None:
        return f"at least {low}"
    return f"at most {high}" if high is not None else ""


def accepts_text(spec):
    """(what a parameter accepts, in words, and the pattern or root it names, shown as code)."""
    kind = spec["kind"]
    if kind in ("integer", "float"):
        bounds = bounds_text(spec)
        return (f"{kind} {bounds}" if bounds else kind), ""
    if kind == "choice":
        return f"one of {', '.join(spec['choices'])}", ""
    if kind == "string":
        return ("text matching", spec["pattern"]) if spec.get("pattern", ".*") != ".*" else ("text", "")
    if kind == "path":
        return "a path under", spec["root"]
    return "on or off", ""


def _shown(value):
    """A parameter's value as its input shows it: true/false for a boolean, the text otherwise."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def recipe_choices(selected="", posted=None, errors=None):
    """The recipes the Start form offers, each with its parameters as inputs: the posted values for the recipe
    `selected` (what was submitted), the defaults for the others; `errors` ({field: message}) beside them."""
    posted, errors = posted or {}, errors or {}
    clusters = clusters_by_kind()
    out = []
    for recipe in Recipe.objects.all():
        definition = recipe.definition
        mine = recipe.name == selected
        params = []
        for spec in definition["params"]:
            key = f"params.{spec['name']}"
            if mine and spec["kind"] == "boolean":
                value = "true" if "true" in _getlist(posted, key) else "false"
            elif mine and key in posted:
                value = posted[key]
            else:
                value = _shown(spec["default"])
            accepts, code = accepts_text(spec)
            params.append({**spec, "key": key, "id": f"f-{recipe.name}-{spec['name']}", "value": value,
                           "default_text": _shown(spec["default"]), "accepts": accepts, "accepts_code": code,
                           "error": errors.get(key, "") if mine else ""})
        uses_init_from = names_init_from(definition)
        out.append({"name": recipe.name, "version": recipe.version, "description": definition.get("description", ""),
                    "framework": definition.get("framework", ""), "devices": devices_text(definition["devices"]),
                    "params": params, "uses_init_from": uses_init_from, "value": f"recipe:{recipe.name}",
                    "init_from": posted.get("init_from", "") if mine else "",
                    "init_error": (errors.get("init_from") or errors.get("init_step", "")) if mine else "",
                    "selected": mine, **_where_choice(definition, clusters, mine, posted, errors)})
    return out


def clusters_by_kind():
    """{kind: [names of the registered clusters of that kind]}, by name."""
    out = {}
    for kind, name in Cluster.objects.order_by("name").values_list("kind", "name"):
        out.setdefault(kind, []).append(name)
    return out


def runs_on(definition, clusters=None):
    """Where a recipe (definition) runs, as its page says it: on a node's launch worker ({"remote": False}), or on a
    cluster: its scheduler, the cluster it names ("" for the only one of its kind, or the launch's choice), whether
    that one is registered, the shared and working directories. `clusters`: clusters_by_kind(), read once."""
    executor = definition.get("executor", "node")
    if executor == "node":
        return {"remote": False}
    name = definition.get("cluster", "")
    clusters = clusters_by_kind() if clusters is None else clusters
    return {"remote": True, "scheduler": scheduler_name(executor), "cluster": name,
            "registered": name in clusters.get(executor, []), "clusters": clusters.get(executor, []),
            "shared_dir": definition.get("shared_dir", ""), "working_dir": definition.get("working_dir", "")}


def _where_choice(definition, clusters, mine, posted, errors):
    """runs_on for a recipe's Start form fields; for one that runs on a cluster, also the cluster chosen (posted, else
    the recipe's: launch.kind.start's `cluster`) and the refusal of it."""
    where = runs_on(definition, clusters)
    if not where["remote"]:
        return where
    chosen = posted.get("cluster", "") if mine and "cluster" in posted else where["cluster"]
    return {**where, "recipe_cluster": where["cluster"], "cluster": chosen,
            "cluster_error": errors.get("cluster", "") if mine else ""}


def again_fields(job):
    """The Start form's fields as launched `job` was started, for its "Run again...": its recipe, the values it ran
    with (those its recipe still takes), name, team, environment, budget, node, pool, stop-loss, cluster and the job it
    continued; every one editable before the new start."""
    launch = job.launch
    fields = {"what": f"recipe:{launch.recipe_name}", "name": job.name, "team": job.team, "env": job.env,
              "budget_usd": "" if job.budget_usd is None else f"{job.budget_usd.normalize():f}",
              "node": job.node, "pool": job.pool,
              "cluster": launch.cluster.name if launch.cluster_id else "",
              "init_from": _shown(job.init_from_id), "init_step": _shown(job.init_step)}
    takes = {spec["name"] for spec in launch.definition["params"]}  # not what Yardstick put beside them (init_from)
    fields.update({f"params.{name}": _shown(value) for name, value in launch.values.items() if name in takes})
    fields.update({f"stop_loss.{key}": _shown(int(value) if isinstance(value, float) and value.is_integer() else value)
                   for key, value in (job.stop_loss or {}).items() if key != "from_step"})
    return fields


def continue_fields(job, recipe):
    """The Start form's fields for a Continue of launched `job` with `recipe` (one that names {init_from}): the
    recipe picked, `job` in "Continue from job", its team and environment, and its values for the parameters the
    two recipes share (a continuation recipe takes its training one's)."""
    launch = job.launch
    takes = {spec["name"] for spec in recipe.definition["params"]}
    fields = {"what": f"recipe:{recipe.name}", "team": job.team, "env": job.env, "init_from": str(job.pk),
              "pool": job.pool}
    fields.update({f"params.{name}": _shown(value) for name, value in launch.values.items() if name in takes})
    return fields


def init_from_recipes():
    """The recipes that name {init_from} (a Continue can start them), by name, each with `evaluates` set."""
    recipes = [r for r in Recipe.objects.order_by("name") if names_init_from(r.definition)]
    for r in recipes:
        r.evaluates = evaluates(r.definition)
    return recipes


def continuations(job, recipes=None):
    """The recipes a Continue of `job` can start (init_from_recipes(), or `recipes` read once for a whole page), its
    own recipe first, then the others that train on, then the evaluation recipes (the page says they score it); []
    when the job cannot be continued (Job.can_continue: ended, with a checkpoint)."""
    if job.source != Source.LAUNCHED or job.status not in ENDED or not job.can_continue:
        return []
    own = job.launch.recipe_name
    return sorted(init_from_recipes() if recipes is None else recipes, key=lambda r: (r.name != own, r.evaluates))


def _getlist(data, key):
    if hasattr(data, "getlist"):
        return data.getlist(key)
    value = data.get(key)
    return [] if value is None else value if isinstance(value, list) else [value]


def worker_rows(workers=None):
    """The live jobs and launch workers with what each has, what is free now and which job holds which GPU."""
    rows = []
    for worker in workers if workers is not None else live_workers():
        devices = with_devices(worker)
        held = sorted((int(i), j) for i, j in devices["held"]["gpus"].items())
        models = {}
        for gpu in worker.gpus:
            models.setdefault(gpu.get("name") or "CUDA GPU", []).append(gpu)
        groups = [{"name": name, "count": len(gpus), "indices": [g.get("index") for g in gpus],
                   "uuids": " ".join(str(g.get("uuid", "")) for g in gpus)} for name, gpus in models.items()]
        rows.append({"worker": worker, "launch": worker.name.startswith("launch@"), "gpu_groups": groups,
                     "free_gpus": devices["free"]["gpus"],
                     "free_cores": devices["free"]["cores"], "held_gpus": held,
                     "held_cores": sorted((int(j), n) for j, n in devices["held"]["cores"].items())})
    return rows


# -- recipes as text --------------------------------------------------------------------------------


PARAM_KEYS = ("name", "kind", "default", "minimum", "maximum", "choices", "pattern", "root", "help")


def _ordered(definition):
    """The definition's fields in the order a person reads them (launch.models.FIELDS; a parameter's name and kind
    first): the database keeps a JSON object's keys in an order of its own."""
    out = {k: definition[k] for k in FIELDS if k in definition}
    out.update({k: v for k, v in definition.items() if k not in out})
    out["params"] = [{**{k: p[k] for k in PARAM_KEYS if k in p}, **{k: v for k, v in p.items() if k not in PARAM_KEYS}}
                     for p in out.get("params", [])]
    if isinstance(out.get("devices"), dict):
        out["devices"] = {k: out["devices"][k] for k in ("kind", "count") if k in out["devices"]}
    return out


def definition_text(name, definition, fmt="yaml"):
    """A recipe as an admin edits it: its name and definition, as YAML or JSON text."""
    document = {"name": name, **_ordered(definition)}
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120)


def parse_definition(text, fmt):
    """The recipe document in `text` (YAML or JSON) as a dict; InputError("definition", why) when it is not one."""
    if fmt not in FORMATS:
        raise InputError("format", f"format must be yaml or json, got {fmt!r}")
    if not text.strip():
        raise InputError("definition", "the definition is empty: give the recipe's name, argv, params, ...")
    if fmt == "json":
        try:
            document = json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError("definition", f"the definition is not JSON: {err.msg} at line {err.lineno}, "
                                           f"column {err.colno}") from None
    else:
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as err:
            where = getattr(err, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise InputError("definition", f"the definition is not YAML: {problem}{at}") from None
        # Through JSON, so what YAML alone can say (dates, sets) is refused as text would be.
        document = json.loads(json.dumps(document, default=lambda v: f"<{type(v).__name__} {v!r}>"))
    if not isinstance(document, dict):
        raise InputError("definition", f"the definition must be a mapping of the recipe's fields (name, argv, "
                                       f"params, ...), got {type(document).__name__}")
    return document
