"""Sweeps: a search of a recipe's parameters for the most intelligence per dollar.

A `Sweep` is a recipe, a search space over its typed parameters (launch/space.py), an objective (sweeps/search.py:
the front of score against dollars, the most points per dollar, or the cheapest run that reaches a score), a budget
in dollars and how many trials run at once. Each `SweepTrial` is one launched job of the recipe (launch.kind.start:
through the line of jobs waiting for devices, on a node, a Ray cluster or Slurm); its dollars are its job's, the
sweep's dollars are its trials' summed, unrounded.

`advance` is the sweep's one pass, under a lock on its row, run when it is created, whenever a job ends
(trainer.signals.devices_freed) and from beat every YARDSTICK_SWEEP_PASS_S:

1. the budget: once the trials' dollars reach it, no more trials, and the running ones are stopped (Stop's three
   steps: the stop flag, SIGTERM, SIGKILL);
2. stopping by the dollar (sweeps/stopping.py): a running trial whose newest score is below most earlier trials'
   at the same dollars is stopped, the reason kept on it;
3. new trials while fewer than `parallel` are active: Optuna (sweeps/search.py) is asked for their parameters from
   every trial so far; none when `max_trials` have started, or when the next trial would pass the budget (its cost
   taken as the mean of the completed trials').

    running ──budget spent, next trial would pass it, max_trials started, or Stop──► ending ──last trial ends──► ended
       ▲                                                                                 │
       └──────────────────── an admin raises the budget (when that was why) ◄───────────┘

Every state is in the rows: a restart of the control plane loses no trial and repeats none.
"""

import logging
import math
from decimal import Decimal

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from costs.intelligence import Scores, charged_usd, jobs_money, score_cost_curve
from costs.models import AttributionState
from costs.money import exact_usd, usd_text, usd_texts
from costs.prices import PriceBook
from launch import kind as launch_kind
from launch.models import Recipe, evaluates, names_init_from
from launch.params import ParamError
from launch.space import Dimension, parse_space
from sweeps import search
from sweeps.stopping import MIN_TRIALS_DEFAULT, SHARE_DEFAULT, Point, judge
from trainer import inputs
from trainer.kinds import kind_of
from trainer.models import ENDED, ENV_MAX, NAME_MAX, TEAM_MAX, Job, Priority, Status
from yardstick.auth import has_role
from yardstick.celery import shutting_down
from yardstick.inputs import InputError
from yardstick.live import publish

log = logging.getLogger(__name__)

PARALLEL_MAX = 64
TRIALS_MAX = 1000
TRIALS_DEFAULT = 20
PARALLEL_DEFAULT = 2
FIELDS = ("name", "team", "recipe", "space", "params", "objective", "target_score", "budget_usd", "parallel",
          "max_trials", "seed", "stop_share", "stop_min_trials", "defaults_first", "env", "node", "pool", "cluster",
          "priority")


class State(models.TextChoices):
    RUNNING = "running"
    ENDING = "ending"  # no more trials; waiting for the active ones to end
    ENDED = "ended"


class Why(models.TextChoices):
    """Why a sweep stopped launching trials (what raising its budget can undo)."""

    NONE = ""
    BUDGET = "budget"
    TRIALS = "trials"
    STOPPED = "stopped"
    FAILED = "failed"


class Sweep(models.Model):
    name = models.CharField(max_length=NAME_MAX)
    team = models.CharField(max_length=TEAM_MAX, db_index=True, help_text="who pays for it")
    recipe_name = models.CharField(max_length=100)
    recipe_version = models.PositiveIntegerField()
    space = models.JSONField(help_text="[Dimension.to_dict()]: the searched parameters")
    params = models.JSONField(default=dict, help_text="values of the parameters it does not search")
    objective = models.CharField(max_length=20, choices=[(k, k) for k in search.OBJECTIVES])
    target_score = models.FloatField(null=True, blank=True, help_text="the cheapest objective's score to reach")
    budget_usd = models.DecimalField(max_digits=16, decimal_places=6)
    parallel = models.PositiveIntegerField(default=PARALLEL_DEFAULT)
    max_trials = models.PositiveIntegerField(default=TRIALS_DEFAULT)
    seed = models.BigIntegerField(default=0)
    stop_share = models.FloatField(default=SHARE_DEFAULT, help_text="0: never stop a trial by the dollar")
    stop_min_trials = models.PositiveIntegerField(default=MIN_TRIALS_DEFAULT)
    defaults_first = models.BooleanField(default=True, help_text="trial 0 runs the recipe's defaults, to compare")
    env = models.CharField(max_length=ENV_MAX)
    node = models.CharField(max_length=255, blank=True, default="")
    pool = models.CharField(max_length=TEAM_MAX, blank=True, default="")
    cluster = models.CharField(max_length=100, blank=True, default="")
    priority = models.IntegerField(choices=Priority.choices, default=Priority.NORMAL)
    state = models.CharField(max_length=10, choices=State.choices, default=State.RUNNING)
    why = models.CharField(max_length=10, choices=Why.choices, default=Why.NONE, blank=True)
    reason = models.TextField(blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    setup_job = models.OneToOneField(Job, null=True, blank=True, on_delete=models.PROTECT, related_name="sweep_setup",
                                     help_text="the recipe's shared setup (its `setup` recipe), run once before the "
                                               "first trial: charged to the sweep, never to a trial")
    pending = models.JSONField(default=list, blank=True,
                               help_text="[{params, repeat_of, seed}]: trials asked for by hand (Re-run the top K), "
                                         "launched before the search is asked for more, as `parallel` allows")
    space_changes = models.JSONField(default=list, blank=True,
                                     help_text="[{from_trial, space, around, by, at}]: each earlier space, and from "
                                               "which trial the next one holds (Narrow around the best)")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"sweep {self.pk} {self.name}"

    # -- creating ----------------------------------------------------------------------------------------

    @classmethod
    def create(cls, *, created_by, **raw):
        """A running sweep from `raw` (FIELDS), its first trials launched; InputError naming the first bad field
        (nothing is created then)."""
        unknown = sorted(set(raw) - set(FIELDS))
        if unknown:
            raise InputError(unknown[0], f"a sweep has no field {unknown[0]!r}; its fields are {', '.join(FIELDS)}")
        clean = _clean(raw, created_by)
        with transaction.atomic():
            sweep = cls.objects.create(**clean, created_by=created_by)
        try:
            sweep.advance()
        except InputError:  # its first trial could not start (no cluster of the recipe's kind, no worker ...)
            sweep.delete()
            raise
        sweep.refresh_from_db()
        return sweep

    def again(self, by):
        """A new sweep with this one's definition and the next seed ("Run again")."""
        return Sweep.create(created_by=by, **{**self.definition(), "name": f"{self.name} (again)",
                                              "seed": self.seed + 1})

    def definition(self):
        """The fields `create` takes, as this sweep was made."""
        return {"name": self.name, "team": self.team, "recipe": self.recipe_name,
                "space": {d["name"]: _space_entry(d) for d in self.space}, "params": dict(self.params),
                "objective": self.objective, "target_score": self.target_score,
                "budget_usd": exact_usd(self.budget_usd), "parallel": self.parallel, "max_trials": self.max_trials,
                "seed": self.seed, "stop_share": self.stop_share, "stop_min_trials": self.stop_min_trials,
                "defaults_first": self.defaults_first, "env": self.env, "node": self.node, "pool": self.pool, "cluster": self.cluster,
                "priority": Priority(self.priority).label}

    # -- reading -----------------------------------------------------------------------------------------

    @property
    def dimensions(self):
        return [Dimension.from_dict(d) for d in self.space]

    def trial_rows(self):
        return list(self.trials.select_related("job", "run_again_as", "repeat_of").order_by("number"))

    def figures(self, trials=None, book=None):
        """[TrialFigures] of the sweep's trials, in number order: what the pages, the API, the CSV and each pass
        read."""
        trials = self.trial_rows() if trials is None else trials
        ids = [t.job_id for t in trials]
        if not ids:
            return []
        book = book or PriceBook()
        money = jobs_money(ids, book)
        scores = Scores(ids)
        through = AttributionState.objects.filter(pk=1).values_list("done_through", flat=True).first()
        runs_on = self.runs_on_interrupted()
        return [TrialFigures(t, money[t.job_id], scores, book, through, runs_on) for t in trials]

    def runs_on_interrupted(self):
        """Whether a trial its worker's restart or death interrupted goes on (resumed, or run again): while the sweep
        runs, or ends only because all its trials have started; not once its budget is spent or it was stopped."""
        return self.state == State.RUNNING or (self.state == State.ENDING and self.why == Why.TRIALS)

    def defaults(self):
        """The recipe's default values of the searched parameters (trial 0's, so the sweep says what its best
        bought over the run people would have started anyway); None when a default lies outside the space."""
        recipe = Recipe.objects.filter(name=self.recipe_name).first()
        if recipe is None:
            return None
        given = {p["name"]: p["default"] for p in recipe.definition["params"]}
        out = {}
        for d in self.dimensions:
            value = given.get(d.name)
            inside = value in d.choices if d.kind == "choice" else (
                isinstance(value, (int, float)) and d.low <= value <= d.high)
            if not inside:
                return None
            out[d.name] = value
        return out

    # -- the pass ----------------------------------------------------------------------------------------

    def advance(self, now=None):
        """The sweep's pass (the module's docstring): budget, stopping by the dollar, new trials; then ended when
        nothing is left to run. Return True when it changed something."""
        with transaction.atomic():
            me = Sweep.objects.select_for_update().filter(pk=self.pk).first()
            if me is None or me.state == State.ENDED:
                return False
            changed = me._pass(now or timezone.now())
        if changed:
            publish(f"sweep.{self.pk}", "sweep", {"sweep": self.pk})
        self.refresh_from_db()
        return changed

    def _pass(self, now):
        trials = self.trial_rows()
        figs = self.figures(trials)
        changed = False
        if any(f.to_resume for f in figs):
            changed = self._go_on(figs)
            figs = self.figures(self.trial_rows())
        spent = sum((f.usd for f in figs), Decimal(0)) + self.setup_usd()
        active = [f for f in figs if f.active]
        if self.state == State.RUNNING and not figs:
            waiting, setup_changed = self._setup()
            changed |= setup_changed
            if waiting:
                return changed
        if self.state == State.RUNNING and spent >= self.budget_usd:
            changed |= self._stop_launching(Why.BUDGET, f"the budget {usd_text(self.budget_usd)} is spent "
                                                        f"({usd_text(spent)} charged to its trials)")
            for f in active:
                f.trial.job.request_stop(by="the sweep", reason=f"the sweep's budget {usd_text(self.budget_usd)} is "
                                                                  "spent")
        if self.stop_share > 0:  # while ending too: its last trials spend as much as any
            changed |= self._stop_by_the_dollar(figs)
        while self.state == State.RUNNING and len(active) < self.parallel and not shutting_down():
            refusal = self._next_refusal(figs, spent)
            if refusal:
                changed |= self._stop_launching(*refusal)
                break
            launched = self._launch(figs)
            changed = True
            if launched is None:
                break
            active.append(launched)
            figs.append(launched)
        if self.state == State.RUNNING and started(figs) >= self.max_trials:
            changed |= self._stop_launching(Why.TRIALS, f"all {self.max_trials} trials started")
        if self.state != State.RUNNING and not (Job.objects.filter(pk__in=[f.trial.job_id for f in active]
                                                                    + [self.setup_job_id])
                                                .exclude(status__in=ENDED).exists()):
            Sweep.objects.filter(pk=self.pk).update(state=State.ENDED, ended_at=now)
            changed = True
        return changed

    def setup_recipe(self):
        """The name of the recipe's shared setup (its definition's `setup`), or ""."""
        recipe = Recipe.objects.filter(name=self.recipe_name).first()
        return recipe.definition.get("setup", "") if recipe else ""

    def setup_usd(self):
        """The dollars charged to the setup job (Decimal, unrounded; 0 without one)."""
        if self.setup_job_id is None:
            return Decimal(0)
        return charged_usd(jobs_money([self.setup_job_id])[self.setup_job_id])

    def _setup(self):
        """The recipe's shared setup (a base policy's build, a dataset's download): launched once, before the first
        trial, with the sweep's values that its recipe takes, so that no trial pays for it. Return (whether trials
        wait for it, whether this call changed something)."""
        name = self.setup_recipe()
        if not name:
            return False, False
        job = self.setup_job
        if job is None:
            recipe = Recipe.objects.filter(name=name).first()
            if recipe is None:
                raise InputError("recipe", f"recipe {self.recipe_name}'s setup is recipe {name!r}, which does not "
                                           "exist: an admin imports or defines it")
            takes = {p["name"] for p in recipe.definition["params"]}
            values = {k: v for k, v in {**(self.defaults() or {}), **self.params}.items() if k in takes}
            job = launch_kind.start(
                recipe=name, params=values, name=f"{self.name} · setup", team=self.team, env=self.env,
                budget_usd=self.budget_usd, node=self.node, pool=self.pool, created_by=self.created_by,
                cluster=self.cluster or None, priority=Priority(self.priority).label)
            Sweep.objects.filter(pk=self.pk).update(setup_job=job)
            self.setup_job = job
            log.info("sweep %s: its setup (recipe %s) is job %s", self.pk, name, job.pk)
            return True, True
        if job.status == Status.COMPLETED:
            return False, False
        if job.status not in ENDED:
            return True, False
        if job.interrupted and not (kind_of(job).resume_refusal(job) or job.not_resumable_reason):
            return True, job.resume(by="the sweep")
        what = job.error or job.stop_reason or job.status
        return True, self._stop_launching(Why.FAILED, f"its setup (job {job.pk}, recipe {name}) ended {job.status}: "
                                                      f"{what}")

    def _stop_by_the_dollar(self, figs):
        earlier = [(f.curve, f.usd) for f in figs if f.told_state == "ended"]
        changed = False
        for f in figs:
            if f.trial.job.status != Status.RUNNING or f.trial.stopped_reason:
                continue
            reason = judge(f.curve, earlier, self.stop_share, self.stop_min_trials, money=usd_text)
            if reason:
                SweepTrial.objects.filter(pk=f.trial.pk).update(stopped_reason=reason)
                f.trial.stopped_reason = reason
                f.trial.job.request_stop(by="the sweep", reason=reason)
                log.info("sweep %s: trial %s (job %s) %s", self.pk, f.trial.number, f.trial.job_id, reason)
                changed = True
        return changed

    def _next_refusal(self, figs, spent):
        """(why, reason) the sweep starts no more trials, or None."""
        if started(figs) >= self.max_trials:
            return Why.TRIALS, f"all {self.max_trials} trials started"
        done = [f.usd for f in figs if f.trial.job.status == Status.COMPLETED and not f.settling]
        if not done:
            return None
        estimate = sum(done, Decimal(0)) / len(done)
        committed = spent + sum((max(Decimal(0), estimate - f.usd) for f in figs if f.active), Decimal(0))
        if committed + estimate > self.budget_usd:
            # Written once, as the sweep stops launching: what was left then (its dollars still grow a minute or two).
            cost, left, budget = usd_texts(estimate, self.budget_usd - committed, self.budget_usd)
            return Why.BUDGET, (f"the next trial would pass the budget: a trial costs about {cost} (the mean of "
                                f"{len(done)} completed), and {left} of {budget} was left then, after what the "
                                "running trials would spend")
        return None

    def _launch(self, figs):
        """Start the next trial (its parameters asked of the search); None (and the sweep ending, saying why) when
        the launch is refused."""
        number = len(figs)
        if self.pending:  # asked for by hand (Re-run the top K): before the search is asked for more
            ask, rest = self.pending[0], self.pending[1:]
            Sweep.objects.filter(pk=self.pk).update(pending=rest)
            self.pending = rest
            of = SweepTrial.objects.filter(sweep=self, number=ask["repeat_of"]).first()
            return self._start_trial(figs, number, ask["params"], repeat_of=of, seed=ask["seed"],
                                     name=f"{self.name} · trial {number} (trial {ask['repeat_of']}, seed {ask['seed']})")
        told = [f.told for f in figs]
        params = self.defaults() if number == 0 and self.defaults_first else None
        if params is None:
            params = search.ask(self.dimensions, self.objective, told, self.seed, self.target_score)
        return self._start_trial(figs, number, params)

    def _start_trial(self, figs, number, params, run_again_of=None, name=None, repeat_of=None, seed=None):
        left = self.budget_usd - sum((f.usd for f in figs), Decimal(0)) - self.setup_usd()
        extra = {} if seed is None else {SEED_PARAM: seed}
        try:
            with transaction.atomic():
                job = launch_kind.start(
                    recipe=self.recipe_name, params={**self.params, **params, **extra},
                    name=name or f"{self.name} · trial {number}", team=self.team, env=self.env,
                    budget_usd=max(left, Decimal(0)), node=self.node, pool=self.pool, created_by=self.created_by,
                    cluster=self.cluster or None, priority=Priority(self.priority).label)
                trial = SweepTrial.objects.create(sweep=self, number=number, job=job, params=params,
                                                  repeat_of=repeat_of, seed=seed)
                if run_again_of is not None:
                    SweepTrial.objects.filter(pk=run_again_of.pk).update(run_again_as=trial)
        except InputError as err:
            if number == 0:
                raise  # refused as the sweep is created: Sweep.create says why and keeps nothing
            self._stop_launching(Why.FAILED, f"could not start trial {number}: {err.message}")
            return None
        log.info("sweep %s: trial %s is job %s with %s", self.pk, number, job.pk, params)
        return TrialFigures(trial, None, None, None)

    def _no_launch_worker_now(self):
        """True while nothing could run a trial of this sweep now: this process is shutting down (what it started
        would go to a worker going away), or no launch worker where its trials run has reported (a restart under
        way: the trial goes on at the pass after one has, instead of the sweep ending on the refusal)."""
        if shutting_down():
            return True
        if self.cluster:
            return False
        return not any(w.team == self.pool and (not self.node or w.host == self.node)
                       for w in launch_kind.launch_workers())

    def _go_on(self, figs):
        """Each trial its worker's restart or death interrupted goes on: resumed from its newest checkpoint, or, when
        it cannot resume (no checkpoint yet, a recipe without resume arguments), its parameters run again as a new
        trial. One that cannot be placed now (no launch worker has reported since the restart) waits for the next
        pass. Return True when one went on."""
        if not any(f.to_resume for f in figs) or self._no_launch_worker_now():  # one look, not one per trial
            return False
        changed = False
        number = len(figs)
        for f in figs:
            if not f.to_resume:
                continue
            job = f.trial.job
            why = job.interrupted_by
            if not (kind_of(job).resume_refusal(job) or job.not_resumable_reason):
                if job.resume(by="the sweep"):
                    log.info("sweep %s: trial %s (job %s) resumed after %s", self.pk, f.trial.number, job.pk, why)
                    changed = True
                continue
            again = self._start_trial(figs, number, f.trial.params, run_again_of=f.trial,
                                      name=f"{self.name} · trial {number} (trial {f.trial.number} again)")
            if again is None:
                return True  # refused: the sweep ends, saying why (_start_trial)
            log.info("sweep %s: trial %s runs trial %s's parameters again (%s could not resume after %s)", self.pk,
                     number, f.trial.number, job.pk, why)
            number += 1
            changed = True
        return changed

    def _stop_launching(self, why, reason):
        if self.state != State.RUNNING:
            return False
        Sweep.objects.filter(pk=self.pk).update(state=State.ENDING, why=why, reason=reason)
        self.state, self.why, self.reason = State.ENDING, why, reason
        log.info("sweep %s: no more trials: %s", self.pk, reason)
        return True

    # -- people's controls -------------------------------------------------------------------------------

    def stop(self, by=None):
        """Start no more trials and stop the active ones (also of a sweep already ending: its last trials). False when
        it had ended."""
        who = f" by {by}" if by else ""
        with transaction.atomic():
            me = Sweep.objects.select_for_update().get(pk=self.pk)
            if me.state == State.ENDED:
                return False
            me._stop_launching(Why.STOPPED, f"stopped{who}")
            for trial in me.trials.select_related("job").exclude(job__status__in=ENDED):
                trial.job.request_stop(by=f"the sweep's Stop{who}")
            if me.setup_job is not None and me.setup_job.status not in ENDED:
                me.setup_job.request_stop(by=f"the sweep's Stop{who}")
            publish(f"sweep.{self.pk}", "sweep", {"sweep": self.pk})
        self.advance()
        return True

    def set_budget(self, value, by):
        """Change the budget. Raising it is an admin's call (it is the team's money); anyone who may run sweeps may
        lower it. A sweep that stopped launching at its budget runs again when the new one leaves room."""
        budget = inputs.budget(value)
        if budget is None or budget <= 0:
            raise InputError("budget_usd", f"budget_usd must be a number of dollars above 0, got {value!r}")
        with transaction.atomic():
            me = Sweep.objects.select_for_update().get(pk=self.pk)
            raised = budget > me.budget_usd
            if raised and not has_role(by, "admin"):
                raise InputError("budget_usd", f"only an admin can raise a sweep's budget (it is "
                                               f"{usd_text(me.budget_usd)}); you can lower it")
            me.budget_usd = budget
            fields = ["budget_usd"]
            if me.why == Why.BUDGET and me.state != State.RUNNING and raised:
                me.state, me.why, me.reason, me.ended_at = State.RUNNING, Why.NONE, f"budget raised by {by}", None
                fields += ["state", "why", "reason", "ended_at"]
            me.save(update_fields=fields)
        self.advance()
        publish(f"sweep.{self.pk}", "sweep", {"sweep": self.pk})
        return self


    # -- more trials on the same study -------------------------------------------------------------------

    def add_trials(self, by, trials, narrow_around=None, space=None, budget=None):
        """`trials` more of the same study (its trials so far are the search's history): max_trials raised by as many,
        the sweep running again if it had ended or stopped launching. `narrow_around` (a trial's number) first narrows
        the space around that trial's values (sweeps.search.narrow), or `space` ({name: {...}}, the same parameters)
        replaces it; trials outside the new space stay on the page and leave the search. `budget`: a new budget too
        (raising it is an admin's call, as set_budget). Return what was done, in words; InputError naming the field
        (nothing changes then)."""
        count = _number("trials", trials, 1, TRIALS_MAX, True)
        if narrow_around not in (None, "") and space not in (None, "", {}):
            raise InputError("space", "give a new space or a trial to narrow around, not both")
        with transaction.atomic():
            me = Sweep.objects.select_for_update().get(pk=self.pk)
            new_space, around = None, None
            if narrow_around not in (None, ""):
                around = _number("narrow_around", narrow_around, 0, TRIALS_MAX, True)
                trial = me.trials.filter(number=around).first()
                if trial is None:
                    raise InputError("narrow_around", f"sweep {me.pk} has no trial {around}; its trials are 0 to "
                                                      f"{me.trials.count() - 1}")
                new_space = search.narrow(me.dimensions, trial.params)
                if new_space == me.dimensions:
                    raise InputError("narrow_around", "the space has no range to narrow (its parameters are choices, "
                                                      "or already as narrow as they go): give a new space instead")
            elif space not in (None, "", {}):
                new_space = me._same_parameters(space)
            me._more_room(count, by, budget)
            if new_space is not None:
                me.space_changes = [*me.space_changes, {"from_trial": me.trials.count(), "space": me.space,
                                                        "around": around, "by": _who(by),
                                                        "at": timezone.now().isoformat()}]
                me.space = [d.to_dict() for d in new_space]
            me.max_trials = min(TRIALS_MAX, me._room_base() + count)
            what = (f"{count} more trial(s) added by {_who(by)}" +
                    (f", the space narrowed around trial {around}" if around is not None else
                     ", in a new space" if new_space is not None else ""))
            me._reopen(what)
            me.save()
        self.advance()
        return what

    def repeat_top(self, by, top, seeds, budget=None):
        """Run the `top` best trials (by the sweep's objective, trials not themselves repeats) over `seeds` seeds in
        all, their own included: each gets the repeats it lacks, with the recipe's `seed` parameter the next values
        after its own, queued (`pending`) before the search asks for more. Return how many were queued."""
        top = _number("top", top, 1, 20, True)
        seeds = _number("seeds", seeds, 2, 20, True)
        with transaction.atomic():
            me = Sweep.objects.select_for_update().get(pk=self.pk)
            recipe = Recipe.objects.filter(name=me.recipe_name).first()
            spec = next((p for p in (recipe.definition["params"] if recipe else []) if p["name"] == SEED_PARAM), None)
            if spec is None or spec["kind"] != "integer":
                raise InputError("seeds", f"recipe {me.recipe_name} has no integer parameter {SEED_PARAM!r}: its runs "
                                          "cannot be told apart by seed")
            if any(d.name == SEED_PARAM for d in me.dimensions):
                raise InputError("seeds", f"this sweep searches {SEED_PARAM!r} itself")
            figs = me.figures()
            ranked = me._ranked([f for f in figs if f.trial.repeat_of_id is None])[:top]
            if not ranked:
                raise InputError("top", "no trial has ended with a result yet: re-run the best once one has")
            base = {**{p["name"]: p["default"] for p in recipe.definition["params"]}, **me.params}[SEED_PARAM]
            queued = {(a["repeat_of"], a["seed"]) for a in me.pending}
            asks = []
            for f in ranked:
                had = {f.trial.seed if f.trial.seed is not None else base}
                had |= {t.seed for t in f.trial.repeats.all()} | {s for n, s in queued if n == f.trial.number}
                seed = base
                while len(had) < seeds:
                    seed += 1
                    if seed > spec.get("maximum", 2**31 - 1):
                        break
                    if seed not in had:
                        had.add(seed)
                        asks.append({"params": f.trial.params, "repeat_of": f.trial.number, "seed": seed})
            if not asks:
                raise InputError("seeds", f"the top {len(ranked)} trial(s) already run over {seeds} seeds")
            me._more_room(len(asks), by, budget)
            me.pending = [*me.pending, *asks]
            me.max_trials = min(TRIALS_MAX, me._room_base() + len(asks))
            me._reopen(f"trials {', '.join(str(f.trial.number) for f in ranked)} re-run over {seeds} seeds by "
                       f"{_who(by)} ({len(asks)} trials)")
            me.save()
        self.advance()
        return len(asks)

    def _ranked(self, figs):
        """The trials with a result, best first by the sweep's objective: points per dollar (the front's too: the
        figure Yardstick exists for), or the cheapest that reached the target."""
        done = [f for f in figs if f.told_state == "ended" and f.score is not None and f.money.get("cost_usd")
                is not None]
        if self.objective == "cheapest":
            return sorted((f for f in done if f.score >= self.target_score), key=lambda f: f.usd)
        return sorted((f for f in done if f.ppd is not None), key=lambda f: -f.ppd)

    def _same_parameters(self, raw):
        recipe = Recipe.objects.filter(name=self.recipe_name).first()
        try:
            space = parse_space(raw, recipe.definition["params"] if recipe else [])
        except ParamError as err:
            raise InputError(err.field, err.message) from None
        names, old = sorted(d.name for d in space), sorted(d.name for d in self.dimensions)
        if names != old:
            raise InputError("space", f"a sweep's new space searches the same parameters ({', '.join(old)}), got "
                                      f"{', '.join(names)}: start a new sweep to search others")
        return space

    def _more_room(self, count, by, budget):
        """Check (and set) the budget for `count` more trials: refused when it is spent and not raised."""
        if budget not in (None, ""):
            value = inputs.budget(budget)
            if value is None or value <= 0:
                raise InputError("budget_usd", f"budget_usd must be a number of dollars above 0, got {budget!r}")
            if value > self.budget_usd and not has_role(by, "admin"):
                raise InputError("budget_usd", f"only an admin can raise a sweep's budget (it is "
                                               f"{usd_text(self.budget_usd)}); you can lower it")
            self.budget_usd = value
        spent = sum((f.usd for f in self.figures()), Decimal(0)) + self.setup_usd()
        if spent >= self.budget_usd:
            shown = usd_texts(spent, self.budget_usd)
            raise InputError("budget_usd", f"the sweep has spent {shown[0]} of its {shown[1]} budget: give a higher "
                                           f"budget with the {count} trial(s) (an admin's call)")

    def _room_base(self):
        """What more trials are added to: max_trials while the sweep still starts trials, else the trials it started
        (a sweep stopped at 2 of 5 that gets 1 more starts 1 more)."""
        started_now = started(self.figures())
        return max(self.max_trials, started_now) if self.state == State.RUNNING else started_now

    def _reopen(self, what):
        self.state, self.why, self.reason, self.ended_at = State.RUNNING, Why.NONE, what, None


SEED_PARAM = "seed"  # the recipe parameter a re-run over seeds varies


def _who(user):
    return getattr(user, "username", None) or str(user)


class SweepTrial(models.Model):
    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveIntegerField()
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="sweep_trial")
    params = models.JSONField(help_text="the searched parameters' values Optuna drew")
    stopped_reason = models.TextField(blank=True, default="", help_text="why the sweep stopped it early")
    repeat_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="repeats",
                                  help_text="the trial whose parameters this one runs again with another seed")
    seed = models.BigIntegerField(null=True, blank=True, help_text="the recipe's seed a repeat ran with")
    run_again_as = models.OneToOneField("self", null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="run_again_of",
                                        help_text="the trial that runs these parameters again: this one was "
                                                  "interrupted (Job.interrupted) and could not resume")

    class Meta:
        ordering = ["sweep", "number"]
        constraints = [models.UniqueConstraint(fields=["sweep", "number"], name="one_trial_per_number")]


class TrialFigures:
    """A trial's figures: its dollars (`usd`, unrounded Decimal; the job's cost), newest score, gain over its first,
    points per dollar, its score-against-dollars curve, and how the search is told of it (`told`).

    `settling`: it ended after the minutes attribution has charged (`through`, AttributionState.done_through; None
    where attribution has not run, as in a fresh install or a test that attributes its own minutes): its dollars
    still grow for a minute or two. Until they are final it is told to the search as running, and neither the
    front, the best trials nor the next trial's cost count it."""

    def __init__(self, trial, money, scores, book, through=None, runs_on=False):
        self.trial = trial
        job = trial.job
        self.money = money or {}
        self.usd = charged_usd(money) if money else Decimal(0)
        self.score = scores.latest(job.pk) if scores else None
        self.gain = self.money.get("gain_points")
        self.ppd = self.money.get("points_per_usd")
        self.curve = ([Point(Decimal(repr(p["cost_usd"])), p["pass1"]) for p in score_cost_curve(job, book, scores)]
                      if scores and job.status != Status.QUEUED else [])
        # Ended by its worker's restart or death, not by its run: never a result. It goes on (`to_resume`: the
        # sweep's pass resumes it, or runs its parameters again as a new trial, `run_again_as`) and until then
        # holds its place among the active trials; told to the search as running, then (run again) as failed.
        self.interrupted = job.interrupted
        self.run_again = trial.run_again_as_id is not None
        self.to_resume = self.interrupted and not self.run_again and runs_on
        self.active = job.status not in ENDED or self.to_resume
        self.settling = (not self.active and through is not None and job.finished_at is not None
                         and job.finished_at >= through)
        # Said while it stops and once it has; a trial that completed before the stop reached it was not stopped.
        self.stopped_by_sweep = trial.stopped_reason if job.status != Status.COMPLETED else ""
        # A failed or interrupted trial is no result however its dollars settle; an ended one waits for them.
        self.told_state = ("running" if self.active else
                           "failed" if job.status == Status.FAILED or self.interrupted else
                           "running" if self.settling else "ended")
        self.told = search.Told(trial.number, trial.params, self.told_state, score=self.score, gain=self.gain,
                                usd=float(self.usd) if money and money.get("cost_usd") is not None else None)


def _space_entry(d):
    if "choices" in d:
        return {"choices": d["choices"]}
    return {"low": d["low"], "high": d["high"], "log": d["log"]}


def _number(field, value, low, high, integer=False, default=None):
    if value is None or value == "":
        if default is None:
            raise InputError(field, f"{field} is required: {'an integer' if integer else 'a number'} from {low} to "
                                    f"{high}")
        return default
    if isinstance(value, str):
        try:
            value = float(value) if not integer else int(value.strip())
        except ValueError:
            pass
    ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
          and low <= value <= high and (not integer or float(value).is_integer()))
    if not ok:
        raise InputError(field, f"{field} must be {'an integer' if integer else 'a number'} from {low} to {high}, "
                                f"got {value!r}")
    return int(value) if integer else float(value)


def _flag(field, value):
    if value in (True, "true", "on", "1"):
        return True
    if value in (False, "false", "off", "0"):
        return False
    raise InputError(field, f"{field} must be true or false, got {value!r}")


def _clean(raw, user):
    """The model's fields from `raw`, every one checked; InputError naming the first bad one."""
    name = inputs.text("name", raw.get("name"), NAME_MAX)
    team = inputs.text("team", raw.get("team"), TEAM_MAX)
    recipe_name = raw.get("recipe")
    if not isinstance(recipe_name, str) or not recipe_name:
        raise InputError("recipe", "recipe is required: the name of one of the admins' recipes, whose parameters the "
                                   "sweep searches")
    recipe = Recipe.objects.filter(name=recipe_name).first()
    if recipe is None:
        names = ", ".join(Recipe.objects.values_list("name", flat=True)) or "none yet (an admin defines them)"
        raise InputError("recipe", f"there is no recipe {recipe_name!r}; recipes: {names}")
    definition = recipe.definition
    if evaluates(definition) or names_init_from(definition):
        raise InputError("recipe", f"recipe {recipe_name} starts from another job's checkpoint ({{init_from}}); a "
                                   "sweep's trials each train from the recipe's own start: choose a recipe without it")
    try:
        space = parse_space(raw.get("space"), definition["params"])
    except ParamError as err:
        raise InputError(err.field, err.message) from None
    params = raw.get("params") or {}
    if not isinstance(params, dict):
        raise InputError("params", f"params must be an object of the values of parameters the sweep does not search, "
                                   f"got {params!r}")
    searched = sorted(set(params) & {d.name for d in space})
    if searched:
        raise InputError(f"params.{searched[0]}", f"params.{searched[0]} is searched (space.{searched[0]}): leave "
                                                  "it out of params")
    launch_kind.parameter_values(definition, params)  # each value its parameter's (InputError: params.<name>)
    objective = raw.get("objective") or "front"
    if objective not in search.OBJECTIVES:
        accepted = "; ".join(f"{k}: {v}" for k, v in search.OBJECTIVES.items())
        raise InputError("objective", f"objective must be one of {accepted}; got {objective!r}")
    target = raw.get("target_score")
    if objective == "cheapest":
        target = _number("target_score", target, -1e9, 1e9)
    elif target not in (None, ""):
        raise InputError("target_score", f"target_score is the cheapest objective's score to reach; this sweep's "
                                         f"objective is {objective}")
    else:
        target = None
    budget = inputs.budget(raw.get("budget_usd"))
    if budget is None or budget <= 0:
        raise InputError("budget_usd", "budget_usd is required: the dollars the sweep may spend on its trials, above 0")
    env = inputs.text("env", raw.get("env") or recipe_name, ENV_MAX)
    launch_kind.check_experiment(env)
    cluster = raw.get("cluster") or ""
    if not isinstance(cluster, str):
        raise InputError("cluster", f"cluster must be the name of a registered cluster, got {cluster!r}")
    parallel = _number("parallel", raw.get("parallel"), 1, PARALLEL_MAX, True, PARALLEL_DEFAULT)
    max_trials = _number("max_trials", raw.get("max_trials"), 1, TRIALS_MAX, True, TRIALS_DEFAULT)
    if max_trials < parallel:
        raise InputError("max_trials", f"max_trials ({max_trials}) is below parallel ({parallel}), the trials run at "
                                       f"once: give at least {parallel} trials, or fewer at once")
    return {
        "name": name, "team": team, "recipe_name": recipe.name, "recipe_version": recipe.version,
        "space": [d.to_dict() for d in space], "params": params, "objective": objective, "target_score": target,
        "budget_usd": budget,
        "parallel": parallel, "max_trials": max_trials,
        "seed": _number("seed", raw.get("seed"), 0, 2**31 - 1, True, 0),
        "stop_share": _number("stop_share", raw.get("stop_share"), 0, 0.99, default=SHARE_DEFAULT),
        "stop_min_trials": _number("stop_min_trials", raw.get("stop_min_trials"), 1, 100, True, MIN_TRIALS_DEFAULT),
        "defaults_first": _flag("defaults_first", raw.get("defaults_first", True)),
        "env": env, "node": inputs.name_field("node", raw.get("node"), 255),
        "pool": inputs.name_field("pool", raw.get("pool"), TEAM_MAX), "cluster": cluster,
        "priority": inputs.priority(raw.get("priority"), user),
    }


def started(figs):
    """Trials started, as max_trials counts them: one interrupted and run again as another counts once."""
    return sum(1 for f in figs if not f.run_again)


def advance_all(now=None):
    """One pass of every sweep not yet ended; return how many changed."""
    changed = 0
    for sweep in Sweep.objects.exclude(state=State.ENDED):
        try:
            changed += sweep.advance(now)
        except Exception:  # noqa: BLE001 - one sweep's trouble must not stop the others' passes
            log.exception("sweep %s: pass failed", sweep.pk)
    return changed


def on_job_ended(sender=None, job=None, **kwargs):
    """trainer.signals.devices_freed's receiver: a pass of the sweep whose trial `job` was (its devices are free,
    and its figures final)."""
    try:
        trial = SweepTrial.objects.filter(job_id=getattr(job, "pk", None)).select_related("sweep").first()
        sweep = trial.sweep if trial is not None else Sweep.objects.filter(setup_job_id=getattr(job, "pk", None)).first()
        if sweep is not None and sweep.state != State.ENDED:
            sweep.advance()
    except Exception:  # noqa: BLE001 - the process that ended the job must not fail for a sweep: beat passes again
        log.exception("sweep pass after job %s ended failed", getattr(job, "pk", None))
