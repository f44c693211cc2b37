"""Logged metrics → the job's Step rows, so an outside run charts, scores and costs like an embedded job.

Every logged value is kept raw in `tracking.Metric` and in `Step.metrics` under
its own key; the keys the frameworks are known to log (read from their source)
are also copied under the Yardstick key the job page charts (KNOWN_KEYS).

The score, what IPD measures, is one logged metric: the run tag
`yardstick.score_key`, else the experiment's, else the first present of
DEFAULT_SCORE_KEYS. Its values go to `Step.eval_pass1` (and `eval/pass1`) in
points 0..100:

- NeMo RL `validation/accuracy` and veRL `val-core/<source>/acc/mean@N` (which
  veRL logs to MLflow as `mean_at_N`: MLflow refuses '@') are fractions 0..1,
  taken ×100; so is any key naming an accuracy (`acc`, `accuracy` as a word);
- veRL `val-core/<source>/reward/mean@N` (its core key when the reward function
  returns no `acc`), TRL `eval_reward` (the mean of the reward functions on the
  eval set) and any other key are taken as logged: a reward of 0..1 per
  completion reads as 0..1 points, so name an accuracy metric as the score for
  a points scale.

The first score value is the baseline (Job.baseline_pass1); the cost engine
then computes IPD, cost per point, $ per 1M rollout tokens (from Step.gen_tokens:
TRL's cumulative `num_tokens` differenced; veRL's and NeMo RL's batch token
totals times the generated share of the mean lengths, see GENERATED_SHARE) and
tokens per joule exactly as for embedded jobs.
"""

import logging
import math
import re

from django.db import transaction
from django.db.models import Count, F, Q
from django.db.models.functions import Greatest
from django.utils import timezone

from tracking.models import SCORE_KEY_TAG, Metric
from trainer.models import Job, Step
from yardstick.live import publish

# Raw key → the Yardstick key the job page charts (train/*, performance/*, timing/*).
KNOWN_KEYS = {
    # TRL (GRPOTrainer through transformers' MLflowCallback)
    "reward": "train/reward_mean",
    "reward_std": "train/reward_std",
    "kl": "train/kl",
    "entropy": "train/entropy",
    "loss": "train/loss",
    "grad_norm": "train/grad_norm",
    "learning_rate": "train/lr",
    "completions/mean_length": "train/response_length_mean",
    "completions/clipped_ratio": "train/truncated_rate",
    "frac_reward_zero_std": "train/frac_reward_zero_std",
    "clip_ratio/region_mean": "train/clip_ratio",
    "step_time": "timing/step_s",
    # veRL
    "critic/score/mean": "train/reward_mean",
    "critic/score/std": "train/reward_std",
    "actor/kl_loss": "train/kl",
    "actor/entropy": "train/entropy",
    "actor/pg_loss": "train/loss",
    "actor/grad_norm": "train/grad_norm",
    "actor/lr": "train/lr",
    "actor/pg_clipfrac": "train/clip_ratio",
    "response_length/mean": "train/response_length_mean",
    "response_length/clip_ratio": "train/truncated_rate",
    "perf/mfu/actor": "performance/mfu",
    "timing_s/step": "timing/step_s",
    "timing_s/gen": "timing/generate_s",
    "timing_s/update_actor": "timing/train_s",
    "timing_s/testing": "timing/eval_s",
    "perf/total_num_tokens": "performance/train_tokens",  # the batch the actor update trains on, prompts included
    # NeMo RL
    "train/reward": "train/reward_mean",
    "train/kl_penalty": "train/kl",
    "train/approx_entropy": "train/entropy",
    "train/mean_gen_tokens_per_sample": "train/response_length_mean",
    "timing/train/total_step_time": "timing/step_s",
    "timing/train/generation": "timing/generate_s",
    "timing/train/policy_training": "timing/train_s",
    "train/total_num_tokens": "performance/train_tokens",
}
# Rollout token counters: cumulative ones are differenced per step (TRL's counts prompt tokens too, and
# logs nothing to take them out with: docs/figures.md says so).
CUMULATIVE_TOKENS = ("num_tokens",)
# (the step's batch tokens, prompt and generated alike; the mean prompt length; the mean generated length),
# all over the same sequences: the generated tokens are the batch's share of generated length. veRL's and
# NeMo RL's throughputs (perf/throughput, performance/tokens_per_sec) count prompt tokens too, and per GPU
# for veRL: the rollout throughput is the generated tokens over the generation time instead.
GENERATED_SHARE = (
    ("perf/total_num_tokens", "prompt_length/mean", "response_length/mean"),  # veRL
    ("train/total_num_tokens", "train/mean_prompt_length", "train/mean_gen_tokens_per_sample"),  # NeMo RL
)

VERL_ACC = re.compile(r"^val-core/.+/acc/mean(@|_at_)\d+$")
# veRL's core validation key when the reward function returns a bare score (its gsm8k and MATH ones): no acc.
VERL_REWARD = re.compile(r"^val-core/.+/reward/mean(@|_at_)\d+$")
ACCURACY_WORD = re.compile(r"(^|[/_.\-])acc(uracy)?($|[/_.\-@])")
DEFAULT_SCORE_KEYS = ("validation/accuracy", "val-core/<source>/acc/mean@N", "val-core/<source>/reward/mean@N",
                      "eval_reward")
STEP_MAX = 2**31 - 1  # Step.step is an int; a run logging epoch times as steps keeps its raw metrics only

log = logging.getLogger(__name__)


def chartable(step):
    """Whether a logged step can be one of the job's Step rows (MLflow's steps are 64-bit; Step.step is not)."""
    return 0 <= step <= STEP_MAX


def unchartable(run):
    """[(key, points)] of what `run` logged at steps that cannot be job steps (see `chartable`), by key."""
    outside = Metric.objects.filter(run=run).filter(Q(step__lt=0) | Q(step__gt=STEP_MAX))
    return list(outside.values("key").annotate(points=Count("id")).order_by("key").values_list("key", "points"))


def score_key(run, logged_keys=()):
    """The key whose values are this run's score, or "" when none is set or logged yet."""
    own = run.tags.filter(key=SCORE_KEY_TAG).values_list("value", flat=True).first()
    if own:
        return own
    if run.experiment.score_key:
        return run.experiment.score_key
    keys = set(logged_keys) | set(Metric.objects.filter(run=run).values_list("key", flat=True).distinct())
    if "validation/accuracy" in keys:
        return "validation/accuracy"
    verl = sorted(k for k in keys if VERL_ACC.match(k)) or sorted(k for k in keys if VERL_REWARD.match(k))
    if verl:
        return verl[0]
    return "eval_reward" if "eval_reward" in keys else ""


def points(key, value):
    """A score value in points: accuracy keys are fractions (×100), others as logged (module docstring)."""
    if value is None or not math.isfinite(value):
        return None
    return value * 100.0 if (VERL_ACC.match(key) or ACCURACY_WORD.search(key)) else value


def ingest(run, metrics):
    """Merge freshly logged metrics [(key, value, timestamp_ms, step)] into the job's steps, update the
    job's running figures and publish each changed step (after commit)."""
    if not metrics:
        return
    job = run.job
    score = score_key(run, [m[0] for m in metrics])
    by_step = {}
    unchartable = set()
    for key, value, _ts, step in metrics:
        if chartable(step):
            by_step.setdefault(step, {})[key] = value
        else:
            unchartable.add(key)
    if unchartable:
        # Kept in tracking.Metric (get-history and runs/get return them, as MLflow's server does); the job's
        # Step rows, what its page charts, take steps 0..2^31-1 only.
        log.info("run %s logged %s at a step outside 0..%d: kept in its metric history, not charted",
                 run.run_id, ", ".join(sorted(unchartable)), STEP_MAX)
    if not by_step:
        Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now())
        return
    rows = []
    for step in sorted(by_step):
        raw = by_step[step]
        mapped = {k: _json_number(v) for k, v in raw.items()}
        for key, value in raw.items():
            if key in KNOWN_KEYS and math.isfinite(value):
                mapped[KNOWN_KEYS[key]] = value
        gen_tokens = _step_tokens(run, step, raw)
        if gen_tokens is not None:
            mapped["performance/gen_tokens"] = gen_tokens
        pass1 = points(score, raw[score]) if score in raw else None
        if pass1 is not None:
            mapped["eval/pass1"] = pass1
        rows.append(_merge_step(job, step, mapped))
    if any(key in CUMULATIVE_TOKENS for key, *_ in metrics):
        _redifference_later_steps(run, job, set(by_step))
    _update_job(job, rows)
    for step, merged in rows:
        publish(f"job.{job.pk}", "step", {"job": job.pk, "step": step, "steps": job.steps_total,
                                          "metrics": merged, "samples": []})
    last_step, last = rows[-1]
    publish("jobs", "progress", {"id": job.pk, "step": last_step, "steps": job.steps_total,
                                 "reward_mean": last.get("train/reward_mean")})


def rescore(run):
    """Recompute the run's score on every step from its raw metrics (its score key changed)."""
    key = score_key(run)
    job = run.job
    with transaction.atomic():
        Step.rescore(job.pk, lambda metrics: points(key, metrics[key])
                     if isinstance(metrics.get(key), (int, float)) else None)
        scored = Step.objects.filter(job=job, eval_pass1__isnull=False).order_by("step")
        first, last = scored.first(), scored.last()
        Job.objects.filter(pk=job.pk).update(baseline_pass1=first.eval_pass1 if first else None,
                                             latest_pass1=last.eval_pass1 if last else None)


def _step_tokens(run, step, raw):
    """Rollout tokens generated in `step`, from the counters logged at it, or None."""
    for total_key, prompt_key, generated_key in GENERATED_SHARE:
        parts = [raw.get(total_key), raw.get(prompt_key), raw.get(generated_key)]
        if all(v is not None and math.isfinite(v) and v >= 0 for v in parts) and parts[1] + parts[2] > 0:
            total, prompt, generated = parts
            return round(total * generated / (prompt + generated))
    for key in CUMULATIVE_TOKENS:
        if key in raw and math.isfinite(raw[key]):
            before = (Metric.objects.filter(run=run, key=key, step__lt=step).order_by("-step", "-timestamp")
                      .values_list("value", flat=True).first())
            return max(0, int(raw[key] - (before if before is not None and math.isfinite(before) else 0)))
    return None


def _redifference_later_steps(run, job, steps):
    """A cumulative counter that arrived after a later step's (the client's async batches can overtake
    each other) changes that later step's difference: recompute the step after each one logged now."""
    for key in CUMULATIVE_TOKENS:
        for step in steps:
            later = (Metric.objects.filter(run=run, key=key, step__gt=step).order_by("step", "-timestamp")
                     .values_list("step", flat=True).first())
            if later is None or later in steps or not chartable(later):
                continue
            value = (Metric.objects.filter(run=run, key=key, step=later).order_by("-timestamp")
                     .values_list("value", flat=True).first())
            tokens = _step_tokens(run, later, {key: value})
            if tokens is not None:
                _merge_step(job, later, {"performance/gen_tokens": tokens})


def _merge_step(job, step, mapped):
    """(step, the step's metrics once `mapped` is merged in, with its rollout throughput: its generated tokens
    over its generation time, once the step has both; NeMo RL logs its timings in a batch of their own,
    after the tokens)."""
    merged = Step.merge(job.pk, step, mapped)
    tokens, seconds = merged.get("performance/gen_tokens"), merged.get("timing/generate_s")
    if not (isinstance(tokens, (int, float)) and isinstance(seconds, (int, float)) and math.isfinite(seconds)
            and seconds > 0):
        return step, merged
    rate = tokens / seconds
    if merged.get("performance/gen_tokens_per_s") != rate:
        merged = Step.merge(job.pk, step, {"performance/gen_tokens_per_s": rate})
    return step, merged


def _update_job(job, rows):
    last_step, last = rows[-1]
    fields = {"steps_done": Greatest(F("steps_done"), last_step), "heartbeat_at": timezone.now()}
    if "train/reward_mean" in last:
        fields["latest_reward_mean"] = last["train/reward_mean"]
    scored = [m["eval/pass1"] for _s, m in rows if "eval/pass1" in m]
    if scored:
        fields["latest_pass1"] = scored[-1]
        Job.objects.filter(pk=job.pk, baseline_pass1__isnull=True).update(baseline_pass1=scored[0])
    Job.objects.filter(pk=job.pk).update(**fields)
    job.refresh_from_db()


def _json_number(value):
    """JSON has no NaN or infinity: keep them as MLflow's JSON spells them."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
