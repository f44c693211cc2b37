"""Constants and helpers shared by the job tests."""

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A GRPO step of 4 prompts x 2 completions, evaluated on 8 held-out prompts: well under a second.
TINY = {
    "prompts_per_step": 4,
    "group_size": 2,
    "max_new_tokens": 12,
    "minibatch_size": 8,
    "warmup_steps": 0,
    "eval_every": 2,
    "eval_size": 8,
    "checkpoint_every": 2,
    "keep_checkpoints": 2,
    "samples_per_step": 2,
    "torch_threads": 1,
}

# Every key the issue asks of a step row (eval/pass1 only where evaluated).
STEP_KEYS = [
    "train/reward_mean", "train/reward_std", "train/reward_min", "train/reward_max", "train/frac_reward_zero_std",
    "train/loss", "train/kl", "train/entropy", "train/clip_ratio", "train/grad_norm", "train/lr",
    "train/response_length_mean", "train/truncated_rate", "train/tool_calls_mean",
    "performance/gen_tokens", "performance/gen_tokens_per_s", "performance/train_tokens_per_s",
    "performance/train_tokens", "performance/tokens_total",
    "timing/generate_s", "timing/score_s", "timing/train_s", "timing/eval_s", "timing/checkpoint_s", "timing/step_s",
]



def purge_jobs_queue():
    """Drop run_job messages left in the real broker by earlier tests or sessions."""
    from yardstick.celery import app

    with app.connection_for_write() as conn:
        try:
            conn.default_channel.queue_purge("jobs")
        except Exception:  # noqa: BLE001 - the queue does not exist yet
            pass


def manage_cmd(*args):
    return [sys.executable, str(ROOT / "manage.py"), *args]


def run_subprocess(argv, env, timeout=120):
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@contextmanager
def worker_process(env, log_path, name, *options):
    """A real `celery worker` on the "jobs" queue in a process group of its own, its output in `log_path`;
    killed on the way out when the test left it running. The queue is emptied first: a run_job message an
    earlier test left there would be the worker's first task (and a warm shutdown waits for it to end)."""
    purge_jobs_queue()
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "yardstick", "worker", "-Q", "jobs", "-n", name, *options,
         "--without-heartbeat", "--without-mingle", "--without-gossip", "--loglevel", "INFO"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def run_collecting(job, progress=None):
    """runner.run(job) in a thread; return (the Job, events on job.<id> and jobs, in order)."""
    from tests import live_events
    from trainer import runner

    return live_events.run_collecting(lambda: runner.run(job.pk, progress=progress), [f"job.{job.pk}", "jobs"])
