"""`manage.py train`: run one job in the foreground, through the same runner as a Celery worker.

It creates the Job row (so the run shows on the dashboard like any other),
then runs it in this process: a progress bar on a terminal, and with --json
the final metrics as one JSON object on stdout. The first Ctrl-C asks the job
to stop at the next step boundary (with a checkpoint; `resume` continues it);
a second one aborts.
"""

import json
import signal
import sys
import time

from django.core.management.base import BaseCommand, CommandError

from trainer import runner
from trainer.models import Job, Status, Step
from yardstick.inputs import InputError

# Fields of Job.start and the flags that set them, for error messages.
FLAGS = {"env": "--env", "name": "--name", "team": "--team", "device": "--device", "devices": "--devices",
         "budget_usd": "--budget-usd", "config": "--config", "config.steps": "--steps", "config.seed": "--seed"}


class Command(BaseCommand):
    help = "Run a GRPO post-training job in the foreground and print its metrics."

    def add_arguments(self, parser):
        parser.add_argument("--env", default="arithmetic", help="environment (default: arithmetic)")
        parser.add_argument("--steps", type=int, help="GRPO updates to run (default: the config's)")
        parser.add_argument("--seed", type=int, help="seed (default: the config's)")
        parser.add_argument("--name", help="job name (default: '<env> seed <seed>')")
        parser.add_argument("--team", default="cli", help="team charged for it (default: cli)")
        parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
        parser.add_argument("--devices", type=int, default=1,
                            help="train on this many devices of that kind, one process each (default 1): "
                                 "cuda:0..N-1, or N CPU cores")
        parser.add_argument("--budget-usd", dest="budget_usd", help="stop at this spend (dollars)")
        parser.add_argument(
            "--config", action="append", default=[], metavar="JSON|KEY=VALUE",
            help="TrainConfig overrides: a JSON object, or key=value (repeatable), e.g. --config lr=1e-3",
        )
        parser.add_argument("--json", action="store_true", help="print the final metrics as one JSON object")

    def handle(self, *args, **opts):
        config = self.parse_config(opts["config"])
        if opts["steps"] is not None:
            config["steps"] = opts["steps"]
        if opts["seed"] is not None:
            config["seed"] = opts["seed"]
        if "env" in config and config["env"] != opts["env"]:
            raise CommandError(f"--config env={config['env']!r} differs from --env {opts['env']!r}; give it once")
        config.pop("env", None)
        name = opts["name"] or f"{opts['env']} seed {config.get('seed', 0)}"
        try:
            job = Job.start(name=name, team=opts["team"], env=opts["env"], config=config,
                            budget_usd=opts["budget_usd"], device=opts["device"], devices=opts["devices"],
                            enqueue=False, runs_here=True)
        except InputError as err:
            flag = FLAGS.get(err.field) or f"--config {err.field.removeprefix('config.')}"
            raise CommandError(f"{flag}: {err.message}") from None

        started = time.perf_counter()
        job = self.run_with_progress(job)
        wall_s = time.perf_counter() - started

        last = Step.objects.filter(job=job).order_by("-step").first()
        result = {
            "job_id": job.pk, "name": job.name, "env": job.env, "status": job.status,
            "steps_done": job.steps_done, "steps": job.steps_total,
            "baseline_pass1": job.baseline_pass1, "final_pass1": job.latest_pass1, "wall_s": round(wall_s, 3),
            **(last.metrics if last else {}),
        }
        if opts["json"]:
            self.stdout.write(json.dumps(result))
        else:
            self.stdout.write(
                f"job {job.pk} {job.status} after {job.steps_done}/{job.steps_total} steps in {wall_s:.0f} s; "
                f"eval pass@1 {_pts(job.baseline_pass1)} → {_pts(job.latest_pass1)}"
            )
        if job.status == Status.FAILED:
            raise CommandError(f"job {job.pk} failed: {job.error}")

    def parse_config(self, items):
        """Merge --config values (JSON objects or key=value pairs) into one dict."""
        config = {}
        for item in items:
            text = item.strip()
            if text.startswith("{"):
                try:
                    value = json.loads(text)
                except ValueError as err:
                    raise CommandError(
                        f"--config: {text!r} is not valid JSON ({err}); give a JSON object or key=value") from None
                if not isinstance(value, dict):
                    raise CommandError(f"--config: {text!r} must be a JSON object or key=value")
                config.update(value)
                continue
            key, sep, raw = text.partition("=")
            if not sep or not key.strip():
                raise CommandError(f"--config: {text!r} must be key=value (e.g. lr=1e-3) or a JSON object")
            try:
                value = json.loads(raw)  # numbers, true/false, null, quoted strings
            except ValueError:
                value = raw  # a bare word such as lr_schedule=cosine
            config[key.strip()] = value
        return config

    def run_with_progress(self, job):
        from tqdm import tqdm

        ctrl_c = {"presses": 0, "stop_sent": False}

        def on_sigint(signum, frame):
            ctrl_c["presses"] += 1
            if ctrl_c["presses"] > 1:
                raise KeyboardInterrupt
            sys.stderr.write("\nstopping at the next step boundary (Ctrl-C again to abort)\n")

        # disable=None: a bar on a terminal, nothing when stderr is a file or a pipe.
        bar = tqdm(total=job.steps_total, unit="step", file=sys.stderr, disable=None, dynamic_ncols=True)
        shown = {}  # the newest pass@1 stays on the bar between evaluations

        def progress(job, step, metrics):
            # The signal handler only sets a flag; the database is touched here, between steps.
            if ctrl_c["presses"] and not ctrl_c["stop_sent"]:
                job.request_stop(by="Ctrl-C")
                ctrl_c["stop_sent"] = True
            if "eval/pass1" in metrics:
                shown["pass1"] = metrics["eval/pass1"]
            shown["reward"] = metrics.get("train/reward_mean")
            shown["tok/s"] = metrics.get("performance/gen_tokens_per_s")
            bar.set_postfix({k: f"{v:.3g}" for k, v in shown.items() if v is not None}, refresh=False)
            if step > bar.n:
                bar.update(step - bar.n)  # redraws, postfix included
            else:
                bar.refresh()

        previous = signal.signal(signal.SIGINT, on_sigint) if _main_thread() else None
        try:
            return runner.run(job.pk, progress=progress)
        finally:
            bar.close()
            if previous is not None:
                signal.signal(signal.SIGINT, previous)


def _pts(value):
    return "n/a" if value is None else f"{value:.1f}"


def _main_thread():
    import threading

    return threading.current_thread() is threading.main_thread()
