"""The Start form: environment presets, and every bad field named with what would be accepted.

The trainer owns validation (`Job.start`, which the API calls too), so the
form never re-implements a rule: it turns the posted strings into the values
the API would receive and hands them to `Job.start`. `Job.start` stops at the
first bad field; to name *each* bad field, the form asks again with that field
set back to a value known to be good, checking only (nothing is created),
until the trainer accepts the rest (see `_all_errors`).

With a recipe picked instead of the built-in trainer, `LaunchForm` hands the
recipe's typed parameters and the launch's fields to `launch.kind.start`.
"""

from launch.kind import start as launch_start
from launch.models import Recipe
from launch.params import ParamError
from trainer.models import Job
from yardstick.inputs import InputError

# Preset name → (label, env, config). The config fields shown on the form are FORM_CONFIG.
PRESETS = {
    "arithmetic-standard": ("Arithmetic, standard (200 steps)", "arithmetic",
                            {"steps": 200, "prompts_per_step": 32, "group_size": 8, "lr": 2e-4, "kl_coef": 0.02,
                             "eval_every": 25, "eval_size": 500}),
    "arithmetic-quick": ("Arithmetic, quick look (40 steps)", "arithmetic",
                         {"steps": 40, "prompts_per_step": 16, "group_size": 8, "lr": 2e-4, "kl_coef": 0.02,
                          "eval_every": 10, "eval_size": 200}),
    "toolcalc-standard": ("Tool calculator, standard (300 steps)", "toolcalc",
                          {"steps": 300, "prompts_per_step": 32, "group_size": 8, "lr": 2e-4, "kl_coef": 0.02,
                           "eval_every": 25, "eval_size": 500, "max_new_tokens": 48}),
    "smoke": ("Smoke test (tiny, seconds a step)", "arithmetic",
              {"steps": 20, "prompts_per_step": 4, "group_size": 2, "max_new_tokens": 12, "minibatch_size": 8,
               "warmup_steps": 0, "eval_every": 2, "eval_size": 8, "checkpoint_every": 2, "keep_checkpoints": 2,
               "samples_per_step": 2, "torch_threads": 1}),
}
DEFAULT_PRESET = "arithmetic-quick"

# Config fields the form shows: name, input type, the label a person reads (the page shows the
# name beside it, as the API and the config spell it); the preset supplies the rest.
FORM_CONFIG = [
    ("steps", "int", "Training steps (GRPO updates)"),
    ("prompts_per_step", "int", "Prompts per step"),
    ("group_size", "int", "Completions per prompt"),
    ("lr", "float", "Learning rate"),
    ("kl_coef", "float", "KL penalty coefficient"),
    ("eval_every", "int", "Evaluate every N steps"),
]
# The stop-loss's fields (trainer/stoploss.py), posted as "stop_loss.<key>" by the Start form and the job page.
STOP_LOSS_FIELDS = [
    ("usd", "Last $", "dollars of spend the rule looks back over"),
    ("points", "Bought at least (points)", "score points those dollars must buy"),
    ("reward_drop", "Reward drop", "reward mean this far below its best…"),
    ("kl_max", "KL above", "…or KL above this…"),
    ("entropy_min", "Entropy below", "…or entropy below this…"),
    ("steps", "For steps", "…for this many steps (default 5)"),
]
TOP_FIELDS = ("name", "team", "env", "budget_usd", "device", "devices", "node", "pool")
# Values the trainer certainly accepts, used only to probe the other fields (never saved).
_GOOD = {"name": "probe", "team": "probe", "env": "arithmetic", "budget_usd": None, "device": "auto", "devices": 1,
         "node": "", "pool": "", "priority": "normal"}


def stop_loss_input(data):
    """The stop-loss object the API would receive from posted "stop_loss.<key>" fields (None when all are empty);
    the trainer validates it (trainer.stoploss.parse)."""
    given = {key: data.get(f"stop_loss.{key}", "").strip() for key, _, _ in STOP_LOSS_FIELDS}
    given = {k: v for k, v in given.items() if v}
    return given or None


def _number(raw, kind):
    """int/float from the form's text; the text itself when it is not one, so the trainer names it."""
    text = raw.strip()
    if text == "":
        return None
    try:
        return int(text) if kind == "int" else float(text)
    except ValueError:
        return text


class StartForm:
    """Parse posted data into Job.start's arguments; `errors` maps field → message."""

    def __init__(self, data=None):
        self.data = data or {}
        self.errors = {}
        preset = self.data.get("preset") or DEFAULT_PRESET
        self.preset = preset if preset in PRESETS else None
        if self.preset is None:
            self.errors["preset"] = f"preset must be one of {', '.join(PRESETS)}, got {preset!r}"

    def initial(self):
        """Field values to show: what was posted, else the default preset's."""
        _, env, config = PRESETS[self.preset or DEFAULT_PRESET]
        values = {"preset": self.preset or DEFAULT_PRESET, "env": env, "device": "auto", "devices": "1", "node": "",
                  "pool": "", "name": "", "team": "", "budget_usd": ""}
        values.update({k: config.get(k, "") for k, _, _ in FORM_CONFIG})
        values.update({k: v for k, v in self.data.items() if k != "csrfmiddlewaretoken"})
        return values

    def arguments(self):
        """Job.start's keyword arguments from the posted data (the preset's config under the form's fields)."""
        _, preset_env, preset_config = PRESETS[self.preset]
        config = dict(preset_config)
        for key, kind, _ in FORM_CONFIG:
            if key in self.data:
                value = _number(self.data[key], kind)
                if value is None:
                    config.pop(key, None)  # left empty: the trainer's default
                else:
                    config[key] = value
        return {
            "name": self.data.get("name", ""), "team": self.data.get("team", ""),
            "env": self.data.get("env") or preset_env, "config": config,
            "budget_usd": self.data.get("budget_usd", "").strip() or None,
            "device": (self.data.get("device") or "auto").strip(),
            "devices": _number(self.data.get("devices", ""), "int") or 1,
            "node": self.data.get("node", "").strip(), "pool": self.data.get("pool", "").strip(),
            "stop_loss": stop_loss_input(self.data), "priority": self.data.get("priority", "").strip(),
        }

    def save(self, user):
        """Start the job and return it, or return None with `errors` naming every bad field."""
        if self.errors:
            return None
        args = self.arguments()
        try:
            return Job.start(**args, created_by=user)
        except InputError as first:
            self.errors = _all_errors(args, first)
            return None


def _all_errors(args, first):
    """{field: message} for every bad field, starting from the trainer's first complaint."""
    errors = {first.field: first.message}
    probe = {**args, "config": dict(args["config"])}
    for _ in range(len(TOP_FIELDS) + len(probe["config"]) + 2):
        field = list(errors)[-1]
        if field in _GOOD:
            probe[field] = _GOOD[field]
        elif field.split(".")[0] == "stop_loss":
            probe["stop_loss"] = None  # the stop-loss is checked whole: one complaint about it is enough
        elif field.startswith("config.") and field[7:] in probe["config"]:
            del probe["config"][field[7:]]  # the trainer's default for that field
        else:
            break  # nothing to put back (config as a whole): stop at what we know
        try:
            # Checked only: a probe that passes creates nothing (not even a job id used up) and enqueues nothing.
            Job.start(**probe, check_only=True)
            break
        except InputError as err:
            if err.field in errors:
                break
            errors[err.field] = err.message
    return errors


class LaunchForm:
    """The Start form with a recipe picked: its typed parameters (posted as "params.<name>") and the launch's
    name, team, environment, budget, node, pool, stop-loss and (a recipe that runs on one) cluster, handed to
    launch.kind.start, which owns every rule. Each parameter is checked first (launch.params.Param.value, no side
    effect) so every bad one is named at once; then start's first refusal (a field such as devices, node, env or
    cluster) is named."""

    def __init__(self, data, recipe_name):
        self.data = data
        self.recipe_name = recipe_name
        self.errors = {}

    def _list(self, key):
        data = self.data
        return data.getlist(key) if hasattr(data, "getlist") else ([data[key]] if key in data else [])

    def params_given(self, recipe):
        """{name: raw value} from the posted fields: a boolean's checkbox (absent: false), a number left empty
        takes its default, text as typed (empty is a value)."""
        given = {}
        for spec in recipe.definition["params"]:
            key, kind = f"params.{spec['name']}", spec["kind"]
            if kind == "boolean":
                given[spec["name"]] = "true" if "true" in self._list(key) else "false"
            elif key in self.data:
                raw = self.data.get(key, "")
                if kind in ("integer", "float"):
                    raw = raw.strip()
                    if raw == "":
                        continue
                given[spec["name"]] = raw
        return given

    def save(self, user):
        """Launch the recipe and return the job, or return None with `errors` naming the bad fields."""
        recipe = Recipe.objects.filter(name=self.recipe_name).first()
        if recipe is None:
            self.errors["recipe"] = f"there is no recipe {self.recipe_name!r} (an admin may have renamed it)"
            return None
        given = self.params_given(recipe)
        for param in recipe.params():
            try:
                param.value(given.get(param.name, param.default), field=f"params.{param.name}")
            except ParamError as err:
                self.errors[err.field] = err.message
        if self.errors:
            return None
        data = self.data
        try:
            return launch_start(
                recipe=recipe.name, params=given, name=data.get("name", "").strip(), team=data.get("team", ""),
                env=data.get("env", "").strip(), budget_usd=data.get("budget_usd", "").strip() or None,
                node=data.get("node", "").strip(), pool=data.get("pool", "").strip(), created_by=user,
                init_from=data.get("init_from", "").strip() or None, init_step=data.get("init_step", "").strip() or None,
                stop_loss=stop_loss_input(data), cluster=data.get("cluster", "").strip() or None,
                priority=data.get("priority", "").strip())
        except InputError as err:
            self.errors[err.field] = err.message
            return None
