"""Campaigns: a named lineage of runs of one policy, and what the whole loop buys.

A `Campaign` cares about some environments (`envs`) and may run itself (the
loop): when a run completes, the next starts from its final checkpoint on the
next environment of `schedule`, until someone stops it or the budget is spent.
Every run is an ordinary trainer Job (`CampaignRun` ties it to the campaign):
embedded jobs join when the loop starts them, when they continue a run of the
campaign (`init_from`, through post_save), or through the API; external runs
join with the MLflow tag `yardstick.campaign` (its id or name).

`RetentionEval` is the campaign's own measure of the policy: held-out pass@1
on every environment of the campaign, the same prompts every time, at the
start (`after_job` null: the starting policy) and at the end of each run (its
final checkpoint). trainer never imports this module: the worker that ran a job
sends `trainer.signals.run_ended`, and `on_run_ended` evaluates and advances
the loop there (see docs/architecture.md).

    loop:  off ──start──► running ──stop──► stopped ──start──► running ...
                            │ spend reaches the budget
                            └──────────► out_of_budget ──start (budget raised)──► running
"""

import logging
from decimal import Decimal

from celery import current_app
from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from costs.intelligence import charged_usd, jobs_money
from launch import kind as launch_kind
from launch.models import Launch, Recipe, continues_training, names_init_from
from tracking.store import jobs_tagged
from trainer import inputs, runner
from trainer.kinds import kind_of
from trainer.models import ENDED, ENV_MAX, NAME_MAX, TEAM_MAX, Job, Status
from yardstick.inputs import InputError
from yardstick.live import publish

log = logging.getLogger(__name__)

EVAL_SIZE_DEFAULT = 500
EVAL_SIZE_MAX = 10_000
EVAL_MAX_NEW_TOKENS_DEFAULT = 40  # TrainConfig's max_new_tokens default
# The MLflow tag an external run joins a campaign with (its value: the campaign's id or name).
CAMPAIGN_TAG = "yardstick.campaign"


# The task that evaluates a new campaign's starting policy (campaigns.tasks.evaluate_start), sent by its name.
EVALUATE_START = "campaigns.tasks.evaluate_start"

class Loop(models.TextChoices):
    OFF = "off"
    RUNNING = "running"
    STOPPED = "stopped"
    OUT_OF_BUDGET = "out_of_budget"




class Campaign(models.Model):
    """A named lineage of runs of one policy, with an owner team, an optional budget and its environments."""

    name = models.CharField(max_length=NAME_MAX)
    team = models.CharField(max_length=TEAM_MAX, db_index=True, help_text="who pays for it")
    envs = models.JSONField(help_text="the environments it cares about (retention is evaluated on each)")
    schedule = models.JSONField(help_text="the loop's environments, in turn")
    run_config = models.JSONField(default=dict, help_text="TrainConfig fields of the loop's runs (env aside)")
    budget_usd = models.DecimalField(max_digits=16, decimal_places=6, null=True, blank=True)
    device = models.CharField(max_length=20, default="auto")
    eval_size = models.IntegerField(default=EVAL_SIZE_DEFAULT, help_text="held-out prompts per env per retention eval")
    # The starting policy: this job's checkpoint at start_step, else the base policy of schedule[0].
    start_from = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    start_step = models.IntegerField(null=True, blank=True)
    loop = models.CharField(max_length=20, choices=Loop.choices, default=Loop.OFF)
    loop_reason = models.TextField(blank=True, default="", help_text="why the loop is where it is, for people")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="campaigns")
    created_at = models.DateTimeField(default=timezone.now)
    # A loop of launched runs (launch/): its first run's recipe, the recipe of every later run (it names
    # {init_from}: the previous run's final checkpoint), their parameter values, and per environment the
    # evaluation recipe that scores a run's final checkpoint there (its retention evals). Empty: built-in runs.
    run_recipe = models.CharField(max_length=100, blank=True, default="")
    continue_recipe = models.CharField(max_length=100, blank=True, default="")
    run_params = models.JSONField(default=dict, blank=True)
    eval_recipes = models.JSONField(default=dict, blank=True, help_text="{env: evaluation recipe}")
    # Why the starting policy of a loop of launched runs has no evaluation job, for people (its evaluation recipes
    # score the folder run 1 started from once run 1 has run: launch_evals); empty while it has one or will.
    start_note = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"campaign {self.pk} {self.name!r}"

    # -- creation -------------------------------------------------------------

    @classmethod
    def create(cls, *, name, team, envs, schedule=None, run_config=None, budget_usd=None, device="auto",
               eval_size=EVAL_SIZE_DEFAULT, start_from=None, start_step=None, loop=False, created_by=None,
               run_recipe="", continue_recipe="", run_params=None, eval_recipes=None):
        """Validate, create the campaign, and (after commit) evaluate its starting policy on the jobs queue;
        with loop=True start its loop too. Raise InputError naming the first bad field; nothing is created then.
        With `run_recipe` its runs are launched (create_launched)."""
        if run_recipe or continue_recipe or run_params or eval_recipes:
            return cls.create_launched(name=name, team=team, envs=envs, schedule=schedule, budget_usd=budget_usd,
                                       run_recipe=run_recipe, continue_recipe=continue_recipe, run_params=run_params,
                                       eval_recipes=eval_recipes, loop=loop, created_by=created_by,
                                       ignored={"run_config": run_config, "start_from": start_from,
                                                "start_step": start_step})
        # here: trainer.rl loads torch, which only this path needs
        from trainer.rl.config import ConfigError, TrainConfig
        from trainer.rl.envs import ENV_NAMES

        name = inputs.text("name", name, NAME_MAX)
        team = inputs.text("team", team, TEAM_MAX)
        accepted = f"a list of environment names, each one of {', '.join(ENV_NAMES)}"
        if not isinstance(envs, list) or not envs or not all(isinstance(e, str) and e in ENV_NAMES for e in envs):
            raise InputError("envs", f"envs must be {accepted}, at least one; got {envs!r}")
        envs, schedule = _schedule(envs, schedule)
        run_config = {} if run_config is None else run_config
        if not isinstance(run_config, dict):
            raise InputError("run_config", f"run_config must be an object of TrainConfig fields, got {run_config!r}")
        if "env" in run_config:
            raise InputError("run_config.env", "run_config.env is not accepted: each run's env comes from schedule")
        try:
            TrainConfig.from_dict({**run_config, "env": schedule[0]})
        except ConfigError as err:
            raise InputError(f"run_config.{err.field}", err.message) from None
        except TypeError as err:
            raise InputError("run_config", f"run_config is not usable: {err}") from None
        budget = inputs.budget(budget_usd)
        device = inputs.device(device)
        if isinstance(eval_size, bool) or not isinstance(eval_size, int) or not 1 <= eval_size <= EVAL_SIZE_MAX:
            raise InputError("eval_size", f"eval_size must be an integer from 1 to {EVAL_SIZE_MAX}, got {eval_size!r}")
        if not isinstance(loop, bool):
            raise InputError("loop", f"loop must be true or false, got {loop!r}")
        try:
            source, step = inputs.init_from(start_from, start_step)
        except InputError as err:
            field = {"init_from": "start_from", "init_step": "start_step"}[err.field]
            raise InputError(field, err.message.replace("init_from", "start_from")
                             .replace("init_step", "start_step")) from None
        with transaction.atomic():
            campaign = cls.objects.create(
                name=name, team=team, envs=envs, schedule=schedule, run_config=run_config, budget_usd=budget,
                device=device, eval_size=eval_size, start_from=source, start_step=step, created_by=created_by)
            # By the task's name: campaigns.tasks imports this module, so this one does not import it back.
            transaction.on_commit(lambda: current_app.send_task(EVALUATE_START, args=[campaign.pk], queue="jobs"))
            if loop:
                campaign.start_loop(by=created_by)
        return campaign

    @classmethod
    def create_launched(cls, *, name, team, envs, schedule, budget_usd, run_recipe, continue_recipe, run_params,
                        eval_recipes, loop, created_by, ignored):
        """A campaign whose loop launches recipes: run 1 of `run_recipe`, each later run of `continue_recipe` from
        the previous run's final checkpoint, both with `run_params`; after each run, the evaluation recipe of each
        env (`eval_recipes`) scores its final checkpoint there. InputError names the first bad field."""
        name = inputs.text("name", name, NAME_MAX)
        team = inputs.text("team", team, TEAM_MAX)
        given = [k for k, v in ignored.items() if v not in (None, {}, "")]
        if given:
            raise InputError(given[0], f"{given[0]} is for built-in runs; a campaign of launched runs takes "
                                       "run_recipe, continue_recipe, run_params and eval_recipes")
        if (not isinstance(envs, list) or not envs
                or not all(isinstance(e, str) and e.strip() and len(e) <= ENV_MAX for e in envs)):
            raise InputError("envs", f"envs must be a list of environment names (each at most {ENV_MAX} characters), "
                                     f"at least one; got {envs!r}")
        envs, schedule = _schedule(envs, schedule)
        run_params = {} if run_params is None else run_params
        eval_recipes = {} if eval_recipes is None else eval_recipes
        _recipe("run_recipe", run_recipe, init_from=False, params=run_params)
        _recipe("continue_recipe", continue_recipe, init_from=True, params=run_params, trains=True)
        if not isinstance(eval_recipes, dict) or set(eval_recipes) - set(envs):
            raise InputError("eval_recipes", f"eval_recipes must be {{env: evaluation recipe}} for envs of the "
                                             f"campaign ({', '.join(envs)}), got {eval_recipes!r}")
        for env, recipe in eval_recipes.items():
            _recipe(f"eval_recipes.{env}", recipe, init_from=True, params={})
        budget = inputs.budget(budget_usd)
        if not isinstance(loop, bool):
            raise InputError("loop", f"loop must be true or false, got {loop!r}")
        with transaction.atomic():
            campaign = cls.objects.create(
                name=name, team=team, envs=envs, schedule=schedule, budget_usd=budget, run_recipe=run_recipe,
                continue_recipe=continue_recipe, run_params=run_params, eval_recipes=eval_recipes,
                device="launched", eval_size=0, created_by=created_by)
            if loop:
                campaign.start_loop(by=created_by)
        return campaign

    @property
    def launches(self):
        """Whether the loop's runs are launched recipes (else built-in GRPO runs)."""
        return bool(self.run_recipe)

    # -- runs -------------------------------------------------------------------

    def add_run(self, job, role="train"):
        """Put `job` in this campaign (`role` "eval": an evaluation recipe's job that scored one of its runs).
        Return the CampaignRun; InputError when it is in another campaign."""
        run, _ = CampaignRun.objects.get_or_create(job=job, defaults={"campaign": self, "role": role})
        if run.campaign_id != self.pk:
            raise InputError("job", f"job {job.pk} is already a run of campaign {run.campaign_id}")
        publish(f"campaign.{self.pk}", "runs", {"campaign": self.pk, "job": job.pk})
        return run

    @classmethod
    def join_tagged_runs(cls):
        """Put each external run tagged CAMPAIGN_TAG (a campaign's id or its name, when only one campaign
        has it) that is in no campaign yet into that campaign. Return the number of runs joined."""
        tagged = jobs_tagged(CAMPAIGN_TAG)
        taken = set(CampaignRun.objects.filter(job_id__in=list(tagged)).values_list("job_id", flat=True))
        joined = 0
        for job_id, value in tagged.items():
            if job_id in taken:
                continue
            value = value.strip()
            found = cls.objects.filter(pk=int(value)) if value.isdigit() and len(value) < 10 else \
                cls.objects.filter(name=value)
            campaign = found.first() if found.count() == 1 else None
            if campaign is not None:
                campaign.add_run(Job.objects.get(pk=job_id))
                joined += 1
        return joined

    def jobs(self):
        """The campaign's runs in the order they were started (the lineage's order); not its evaluation jobs."""
        return Job.objects.filter(campaign_run__campaign=self, campaign_run__role="train").order_by("created_at", "id")

    def eval_jobs(self):
        """{run's job id: [the evaluation jobs that scored it]}; under None, those that scored the starting policy."""
        out = {}
        for job in Job.objects.filter(campaign_run__campaign=self, campaign_run__role="eval").order_by("id"):
            out.setdefault(job.init_from_id, []).append(job)
        return out

    def latest_job(self):
        return self.jobs().last()

    def spent_usd(self, money=None):
        """Dollars charged to the campaign's runs so far, their evaluation jobs' included: the sum of their costs
        (jobs_money, unrounded)."""
        ids = list(Job.objects.filter(campaign_run__campaign=self).values_list("id", flat=True))
        money = money or jobs_money(ids)
        return sum((charged_usd(money[i]) for i in ids), Decimal(0))

    def budget_left_usd(self, money=None):
        """Budget minus spend (may be negative), or None without a budget."""
        return None if self.budget_usd is None else self.budget_usd - self.spent_usd(money)

    # -- retention ----------------------------------------------------------------

    def start_policy(self):
        """(path, label) of the starting policy: start_from's checkpoint, else the base of schedule[0]
        (built on first use, as a job would)."""
        # here: trainer.rl loads torch, which only this path needs
        from trainer.rl.pretrain import ensure_base_checkpoint

        if self.start_from_id is not None:
            return (runner.checkpoint_path(self.start_from, self.start_step),
                    f"job {self.start_from_id} at step {self.start_step}")
        env = self.schedule[0]
        return ensure_base_checkpoint(env, runner.models_dir()), f"base policy of {env}"

    def evaluate_retention(self, after=None):
        """Evaluate the policy (the starting one when `after` is None, else job `after`'s final checkpoint)
        on every env of the campaign, store one RetentionEval per env (replacing an earlier one of the same
        point), publish them; return the rows, or [] when the job kept no checkpoint."""
        import torch

        # here: trainer.rl loads torch, which only this path needs
        from trainer.rl.envs import get_env
        from trainer.rl.rollout import policy_pass_at_1

        if after is None:
            path, label = self.start_policy()
        else:
            path = runner.latest_checkpoint(after)
            if path is None:
                return []
            label = f"job {after.pk} at step {int(path.stem.removeprefix('step-'))}"
        device = runner.resolve_device(self.device)
        max_new = self.run_config.get("max_new_tokens", EVAL_MAX_NEW_TOKENS_DEFAULT)
        rows = []
        with torch.inference_mode():
            for env in self.envs:
                pass1 = policy_pass_at_1(path, get_env(env), self.eval_size, max_new_tokens=max_new, device=device)
                row, _ = RetentionEval.objects.update_or_create(
                    campaign=self, after_job=after, env=env,
                    defaults={"pass1": pass1, "eval_size": self.eval_size, "policy": label, "at": timezone.now()})
                rows.append(row)
        publish(f"campaign.{self.pk}", "retention", {"campaign": self.pk, "after_job": after and after.pk,
                                                     "evals": [r.to_dict() for r in rows]})
        return rows

    def start_unscored(self):
        """Why the campaign shows no retention eval of its starting policy, for people, said once where it applies;
        empty when it has them."""
        if self.retention_evals.filter(after_job__isnull=True).exists():
            return ""
        if not self.launches:
            policy = (f"job {self.start_from_id} at step {self.start_step}" if self.start_from_id else
                      f"the base policy of {self.schedule[0]}, built first if this data dir has none yet: a minute or "
                      "more on a CPU")
            return f"The starting policy ({policy}) is being evaluated on the jobs queue; its evals appear here when done."
        if not self.eval_recipes:
            return ("No evaluation recipe scores this campaign's policy, at the start or after a run: each run's gain "
                    "is its own score's (its recipe's score key).")
        scorers = self.eval_jobs().get(None, [])
        live = [j for j in scorers if j.status not in ENDED]
        if live:
            return "The starting policy is being scored by " + ", ".join(f"job {j.pk} on {j.env}" for j in live) + "."
        if scorers:
            return ("The starting policy is unmeasured: " + ", ".join(f"job {j.pk} on {j.env} ended {j.status}"
                                                                     for j in scorers)
                    + " without a score, so run 1 has no gain.")
        if self.start_note:
            return self.start_note
        recipes = ", ".join(sorted(set(self.eval_recipes.values())))
        return (f"The starting policy (the model run 1 starts from) is scored by {recipes} once run 1 has run, on "
                "run 1's node.")

    # -- the loop ------------------------------------------------------------------

    def start_loop(self, by=None):
        """Start (or restart) the loop and, when no run of it is active, its next run.

        Return True when the loop is now running; False when it already was or the budget is spent (see
        `loop_refusal`; the campaign is unchanged), or when its next run could not start (see `loop_reason`)."""
        with transaction.atomic():
            me = Campaign.objects.select_for_update().get(pk=self.pk)
            if me.loop_refusal():
                self.refresh_from_db()
                return False
            me._set_loop(Loop.RUNNING, f"started by {by}" if by else "started")
            me._next_run()
        self.refresh_from_db()
        return self.loop == Loop.RUNNING

    def stop_loop(self, by=None):
        """Stop the loop and its current run (a queued one is cancelled, a running one stops at its next step
        with a checkpoint). Return False when the loop was not running."""
        who = f" by {by}" if by else ""
        with transaction.atomic():
            changed = Campaign.objects.filter(pk=self.pk, loop=Loop.RUNNING).update(
                loop=Loop.STOPPED, loop_reason=f"stopped{who}")
            if changed:
                current = self.latest_job()
                if current is not None and current.status not in ENDED:
                    current.request_stop(by=f"the campaign's Stop{who}")
                self._announce()
        self.refresh_from_db()
        return bool(changed)

    def loop_refusal(self):
        """Why Start loop does nothing now, for people; empty when it would start."""
        if self.loop == Loop.RUNNING:
            latest = self.latest_job()
            if latest is None or latest.status not in ENDED:
                return f"campaign {self.pk}'s loop is already running"
            # Running, yet its latest run has ended (the worker died before it could start the next one):
            # Start goes on from there.
        if self._out_of_budget():
            return (f"campaign {self.pk} has spent {self.spent_usd()} of its {self.budget_usd} dollar budget; "
                    "raise the budget to loop on")
        return ""

    def advance(self, job):
        """The loop's step after `job` ended: start the next run when it completed and the loop runs;
        otherwise stop the loop saying why. A job that is not the campaign's latest run changes nothing."""
        with transaction.atomic():
            me = Campaign.objects.select_for_update().get(pk=self.pk)
            if me.loop != Loop.RUNNING or me.latest_job().pk != job.pk:
                return
            if job.status == Status.BUDGET_EXHAUSTED:
                me._set_loop(Loop.OUT_OF_BUDGET, f"run job {job.pk} reached the budget")
            elif job.status != Status.COMPLETED:
                me._set_loop(Loop.STOPPED, f"run job {job.pk} ended {job.status}; start the loop to go on from its "
                                           "checkpoint")
            else:
                me._next_run()
        self.refresh_from_db()

    def next_env(self):
        """The environment of the loop's next run: the schedule, in turn, by the number of runs so far."""
        return self.schedule[self.jobs().count() % len(self.schedule)]

    def _out_of_budget(self):
        left = self.budget_left_usd()
        return left is not None and left <= 0

    def _next_run(self):
        """Start the loop's next run (this campaign's row is locked), from the latest run's final checkpoint
        or the starting policy, with what is left of the budget as its own budget (so the existing budget
        stop ends it as budget_exhausted when the campaign's money is spent)."""
        latest = self.latest_job()
        if latest is not None and latest.status not in ENDED:
            return  # it is queued or running: the loop goes on when it ends
        left = self.budget_left_usd()
        if left is not None and left <= 0:
            self._set_loop(Loop.OUT_OF_BUDGET, f"spent {self.spent_usd()} of the {self.budget_usd} dollar budget")
            return
        if latest is not None:
            init, step = latest, None
        else:
            init, step = self.start_from, self.start_step
        env = self.next_env()
        n = self.jobs().count() + 1
        try:
            if self.launches:
                job = launch_kind.start(recipe=self.continue_recipe if latest else self.run_recipe,
                                        params=self.run_params, name=f"{self.name} · run {n} ({env})", team=self.team,
                                        env=env, budget_usd=left, created_by=self.created_by, init_from=init)
            else:
                job = Job.start(name=f"{self.name} · run {n} ({env})", team=self.team, env=env,
                                config={**self.run_config}, budget_usd=left, device=self.device,
                                created_by=self.created_by, init_from=init, init_step=step)
        except InputError as err:  # the previous run kept no checkpoint, a device went away ...
            self._set_loop(Loop.STOPPED, f"could not start run {n}: {err.message}")
            return
        self.add_run(job)
        self._set_loop(Loop.RUNNING, f"run {n}: job {job.pk} on {env}")

    def _set_loop(self, state, reason):
        Campaign.objects.filter(pk=self.pk).update(loop=state, loop_reason=reason)
        self.loop, self.loop_reason = state, reason
        self._announce()

    def _announce(self):
        self.refresh_from_db()
        publish(f"campaign.{self.pk}", "loop", {"campaign": self.pk, "loop": self.loop, "reason": self.loop_reason})

    # -- reading ---------------------------------------------------------------------

    @property
    def can_start_loop(self):
        return not self.loop_refusal()

    @property
    def can_stop_loop(self):
        return self.loop == Loop.RUNNING

    def to_dict(self):
        return {
            "id": self.pk, "name": self.name, "team": self.team, "envs": self.envs, "schedule": self.schedule,
            "run_recipe": self.run_recipe, "continue_recipe": self.continue_recipe, "run_params": self.run_params,
            "eval_recipes": self.eval_recipes,
            "eval_jobs": {str(k): [j.pk for j in v] for k, v in self.eval_jobs().items()},
            "run_config": self.run_config, "budget_usd": None if self.budget_usd is None else str(self.budget_usd),
            "device": self.device, "eval_size": self.eval_size, "start_from": self.start_from_id,
            "start_step": self.start_step, "loop": self.loop, "loop_reason": self.loop_reason,
            "can_start_loop": self.can_start_loop, "can_stop_loop": self.can_stop_loop,
            "created_by": self.created_by.username if self.created_by_id else None,
            "created_at": self.created_at.isoformat(),
            "runs": list(self.jobs().values_list("id", flat=True)),
        }


class CampaignRun(models.Model):
    """One job of a campaign (a job is in at most one): a run of its lineage, or an evaluation recipe's job that
    scored one (its init_from) on an environment."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="runs")
    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="campaign_run")
    role = models.CharField(max_length=10, default="train", help_text="train: a run; eval: an evaluation job")
    added_at = models.DateTimeField(default=timezone.now)


class RetentionEval(models.Model):
    """Held-out pass@1 of the campaign's policy on one env: at the start (after_job null) or after a run."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="retention_evals")
    after_job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    env = models.CharField(max_length=50)
    pass1 = models.FloatField(help_text="points 0..100")
    eval_size = models.IntegerField()
    policy = models.CharField(max_length=200, help_text='what was evaluated: "base policy of arithmetic", ...')
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["campaign", "after_job", "env"], name="campaigns_retention_unique"),
            models.UniqueConstraint(fields=["campaign", "env"], condition=models.Q(after_job__isnull=True),
                                    name="campaigns_retention_start_unique"),
        ]

    def to_dict(self):
        return {"after_job": self.after_job_id, "env": self.env, "pass1": self.pass1, "eval_size": self.eval_size,
                "policy": self.policy, "at": self.at.isoformat()}


# -- what the trainer tells us ------------------------------------------------------


def campaign_of(job):
    """The campaign `job` is a run of, or None."""
    return Campaign.objects.filter(runs__job=job).first()


def on_job_created(sender, instance, created, **kwargs):
    """post_save of a Job: a job that continues a run of a campaign is a run of that campaign too."""
    if not created or instance.init_from_id is None:
        return
    campaign = Campaign.objects.filter(runs__job_id=instance.init_from_id).first()
    # A loop of launched runs adds its own runs and evaluation jobs (add_run), each in its role.
    if campaign is not None and not campaign.launches:
        CampaignRun.objects.get_or_create(job=instance, defaults={"campaign": campaign})


def on_run_ended(sender, job, **kwargs):
    """trainer.signals.run_ended, in the worker that ran `job`: evaluate retention at the run's end, then
    take the loop's next step. A launched run is scored by the campaign's evaluation recipes (launched too);
    the end of one of those records its score."""
    campaign = campaign_of(job)
    if campaign is None:
        return
    if campaign.launches:
        role = CampaignRun.objects.filter(job=job).values_list("role", flat=True).first()
        if role == "eval":
            record_eval(campaign, job)
        else:
            launch_evals(campaign, job)
            campaign.advance(job)
        return
    if not kind_of(job).holds_policy:  # no checkpoint of Yardstick's to evaluate
        return
    try:
        campaign.evaluate_retention(after=job)
    except Exception:  # the loop goes on; the page shows the run without its retention evals
        log.exception("campaign %s: retention evals after job %s failed", campaign.pk, job.pk)
    campaign.advance(job)


def _schedule(envs, schedule):
    """(envs without repeats, the loop's schedule: the envs in turn unless given); InputError for a schedule that
    names another env."""
    envs = list(dict.fromkeys(envs))
    schedule = envs if schedule in (None, []) else schedule
    if not isinstance(schedule, list) or not all(isinstance(e, str) and e in envs for e in schedule):
        raise InputError("schedule", f"schedule must be a list of the campaign's envs ({', '.join(envs)}), "
                                     f"in the order the loop takes them; got {schedule!r}")
    return envs, schedule


# -- launched runs -------------------------------------------------------------------


def continuations(run_recipe, run_params=None):
    """The recipes a launched campaign's next runs may take after `run_recipe` with `run_params` ({name: value}):
    they train on from {init_from}, ask for the kind of device it does, and have every parameter the values name.
    `<run_recipe>-continue` first (the examples' naming), then by name. All that train on, for no `run_recipe`."""
    first = Recipe.objects.filter(name=run_recipe).first() if run_recipe else None
    names = set(run_params or {})
    out = []
    for recipe in Recipe.objects.order_by("name"):
        definition = recipe.definition
        if not continues_training(definition):
            continue
        if first is not None and (definition["devices"]["kind"] != first.definition["devices"]["kind"]
                                  or names - {p["name"] for p in definition["params"]}):
            continue
        out.append(recipe)
    return sorted(out, key=lambda r: r.name != f"{run_recipe}-continue")


def _recipe(field, name, init_from, params, trains=False):
    """Check that recipe `name` exists, takes `params`, and names {init_from} as its place in the loop needs (with
    `trains`: one that trains on, no evaluation recipe)."""
    if not isinstance(name, str) or not name:
        raise InputError(field, f"{field} is required: the name of a recipe")
    recipe = Recipe.objects.filter(name=name).first()
    if recipe is None:
        raise InputError(field, f"{field}: there is no recipe {name!r}")
    if names_init_from(recipe.definition) != init_from:
        raise InputError(field, f"{field}: recipe {name!r} {'names no' if init_from else 'names'} {{init_from}}; "
                                + ("it must start from the run it continues or scores" if init_from
                                   else "the first run starts from the recipe's own model"))
    if trains and not continues_training(recipe.definition):
        raise InputError(field, f"{field}: recipe {name!r} is an evaluation recipe (it scores {{init_from}} and trains "
                                "nothing); the next run needs one that trains on from it")
    launch_kind.parameter_values(recipe.definition, params)


def launch_evals(campaign, job):
    """Launch the campaign's evaluation recipes on `job`'s final checkpoint, one job per env (after run 1, on the
    starting policy too: launch_start_evals); a run that kept no checkpoint, or an env whose evaluation cannot start,
    is logged and skipped (its retention stays unmeasured)."""
    if job.status not in ENDED:
        return []
    started = launch_start_evals(campaign, job)
    if not job.kept_checkpoint_steps():
        return started
    for env, recipe in campaign.eval_recipes.items():
        try:
            evaluation = launch_kind.start(recipe=recipe, name=f"{campaign.name} · eval of job {job.pk} on {env}",
                                           team=campaign.team, env=env, created_by=campaign.created_by,
                                           init_from=job.pk)
        except InputError as err:
            log.warning("campaign %s: evaluation of job %s on %s not started: %s", campaign.pk, job.pk, env,
                        err.message)
            continue
        campaign.add_run(evaluation, role="eval")
        started.append(evaluation)
    return started


def start_model(first, following, argv):
    """The folder run 1 started from: the item of its `argv` (as it ran, recipe definition `first`) at the place
    where the next runs' recipe (definition `following`) puts {init_from}, found by the same flag before it
    (`--model_name_or_path {init_from}`) or the same text around it (`model.path={init_from}`); None when the two
    recipes do not line up so."""
    items = first["argv"]
    if len(argv) < len(items):
        return None
    for i, item in enumerate(following["argv"]):
        before, found, after = item.partition("{init_from}")
        if not found:
            continue
        if before or after:
            at = [j for j, x in enumerate(items) if "{" in x and x.startswith(before) and x.endswith(after)]
            value = argv[at[0]] if len(at) == 1 else ""
            if value.startswith(before) and value.endswith(after) and len(value) > len(before) + len(after):
                return value[len(before):len(value) - len(after)]
        elif i > 0:
            at = [j + 1 for j, x in enumerate(items[:-1]) if x == following["argv"][i - 1]]
            if len(at) == 1:
                return argv[at[0]]
    return None


def launch_start_evals(campaign, first):
    """After run 1 (`first`) has run: launch the campaign's evaluation recipes on the folder it started from
    (start_model), on its node, one job per env, whose scores are the start's retention evals (and whose dollars
    are run 1's). Once: nothing when `first` is not run 1 or the start has evaluation jobs already; a start that
    cannot be scored says why in `start_note`."""
    if not campaign.eval_recipes or campaign.eval_jobs().get(None) or campaign.jobs().first() != first:
        return []
    launch = Launch.objects.filter(job=first).first()
    if launch is None or not launch.argv:  # added by hand, or it never started: nothing says what it started from
        return []
    following = Recipe.objects.filter(name=campaign.continue_recipe).first()
    path = start_model(launch.definition, following.definition, launch.argv) if following else None
    if not path:
        note = (f"The starting policy is unmeasured, so run 1 has no gain: recipe {launch.recipe_name} does not say "
                f"which folder run 1 started from (no argv item at the place {campaign.continue_recipe} puts "
                "{init_from}, after the same flag or with the same text around it).")
        Campaign.objects.filter(pk=campaign.pk).update(start_note=note)
        return []
    started, refused = [], []
    node = launch.node if launch.executor == launch_kind.NODE.name else ""
    for env, recipe in campaign.eval_recipes.items():
        try:
            evaluation = launch_kind.start(recipe=recipe, name=f"{campaign.name} · eval of the start on {env}",
                                           team=campaign.team, env=env, created_by=campaign.created_by,
                                           init_path=path, node=node)
        except InputError as err:
            log.warning("campaign %s: evaluation of the start on %s not started: %s", campaign.pk, env, err.message)
            refused.append(f"on {env}: {err.message}")
            continue
        campaign.add_run(evaluation, role="eval")
        started.append(evaluation)
    if refused:
        Campaign.objects.filter(pk=campaign.pk).update(
            start_note=f"The starting policy ({path}) could not be scored " + "; ".join(refused) + ".")
    return started


def record_eval(campaign, evaluation):
    """The retention eval an evaluation job measured: its score (the recipe's score key) on its env, for the run
    whose checkpoint it scored, or for the start (a job that scored the folder run 1 started from). A job that
    ended without a score records nothing."""
    run = evaluation.init_from
    if evaluation.status != Status.COMPLETED or evaluation.latest_pass1 is None:
        log.warning("campaign %s: evaluation job %s ended %s without a score", campaign.pk, evaluation.pk,
                    evaluation.status)
        return None
    launch = evaluation.launch
    scored = (f"job {run.pk} at step {evaluation.init_step}" if run is not None
              else f"the starting model {launch.values.get('init_from', '')}")
    row, _ = RetentionEval.objects.update_or_create(
        campaign=campaign, after_job=run, env=evaluation.env,
        defaults={"pass1": evaluation.latest_pass1, "eval_size": 0, "at": timezone.now(),
                  "policy": f"{scored}, scored by job {evaluation.pk} ({launch.recipe_name})"[:200]})
    publish(f"campaign.{campaign.pk}", "retention", {"campaign": campaign.pk, "after_job": run and run.pk,
                                                     "evals": [row.to_dict()]})
    return row
