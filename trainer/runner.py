"""Run one job: the domain function behind the Celery task and `manage.py train`.

`run(job_id)` claims a queued job, opens a stint on this node's device, builds
the trainer (fresh, from the job's newest checkpoint, or, for a job that
continues another (`init_from`), from that job's checkpoint; the first job on an
environment with this data dir pretrains its base policy first, which takes a
minute or more), and then loops in labelled phases until the configured steps
are done or someone asks it to stop:

    check flags → train step → evaluate (every eval_every) → checkpoint
    (every checkpoint_every) → record the step, samples and heartbeat → publish

Stop and budget requests are read from the database between steps, so a stop
takes effect within one step and is always followed by a checkpoint (during a
base-policy build, within PHASE_EVERY_S, with no checkpoint to write). What the
worker is doing is the job's `phase`, shown on the pages and published on
topic "jobs" (kind "phase"). Every way
out ends the stint; an exception ends the job as failed with its text. A
worker killed outright can do neither: `fail_crashed_jobs` finds its job by
its stale heartbeat (see trainer/tasks.py).

A job with `devices` N > 1 trains as N processes under torch.distributed
(trainer/rl/distributed.py): this process is rank 0 and does all the database
work; ranks 1..N-1 are subprocesses it starts (a Celery pool process is
daemonic: multiprocessing may not start children there), each with a stint of
its own, on cuda:0..N-1 or N times this node's cpu. They stop at the same step
as rank 0, which writes the checkpoint; a rank that dies fails the job naming it.
"""

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from trainer.inputs import DEVICE_ACCEPTED, DEVICE_RE
from trainer.models import ACTIVE, ENDED, Job, Sample, Status, Step, Stint
from trainer.signals import run_ended
from trainer.workers import DeviceUnavailable, Heartbeat
from yardstick.live import publish

log = logging.getLogger(__name__)

CHECKPOINT_GLOB = "step-*.pt"
# How the phase of a base-policy build begins (the job page tells it by this).
BUILD_PHASE = "building the base policy"
# At most this often a base-policy build writes its progress and reads the stop flags.
PHASE_EVERY_S = 2.0


class LostJob(Exception):
    """Another party ended the job while this worker held it (the crash detector, usually)."""


class _StopRequested(Exception):
    """A stop arrived while the base policy was being built; carries the Outcome."""

    def __init__(self, outcome):
        super().__init__(outcome.reason)
        self.outcome = outcome


# -- where things live ----------------------------------------------------------


def models_dir():
    """Base checkpoints, one per environment (built on first use)."""
    return Path(settings.DATA_DIR) / "models"


def heartbeat_limit_s():
    """A heartbeat older than this means the worker is gone."""
    return float(settings.YARDSTICK_JOB_HEARTBEAT_LIMIT_S)


def ddp_timeout_s():
    """The process group's timeout for a job on several devices."""
    return float(settings.YARDSTICK_DDP_TIMEOUT_S)


def checkpoint_path(job, step):
    return job.checkpoint_dir / f"step-{step:06d}.pt"


def checkpoints(job):
    """The job's checkpoint files, oldest first."""
    return sorted(job.checkpoint_dir.glob(CHECKPOINT_GLOB))


def latest_checkpoint(job):
    """Return the newest checkpoint of `job`, or None when it has none."""
    found = checkpoints(job)
    return found[-1] if found else None


# -- devices ---------------------------------------------------------------------


def resolve_device(requested):
    """Return the torch device string for a job's `device` ("auto" → cuda when present, else cpu).

    Raise DeviceUnavailable naming what this node has when the request cannot be met.
    """
    import torch

    if not isinstance(requested, str) or not DEVICE_RE.match(requested):
        raise ValueError(f"device must be {DEVICE_ACCEPTED}, got {requested!r}")
    if requested == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return "cpu"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(requested.partition(":")[2] or 0)
    if index >= count:
        raise DeviceUnavailable(
            f"device {requested} was requested but {settings.YARDSTICK_NODE} has {count} CUDA device(s); "
            "use auto, cpu" + (f" or cuda:0..cuda:{count - 1}" if count else "")
        )
    return f"cuda:{index}"


def resolve_devices(requested, count):
    """Return the torch device of each of a job's `count` ranks: [resolve_device(requested)] for one;
    for more, cuda:0..count-1 (auto with CUDA, or cuda) or count times cpu (one process per core).

    Raise DeviceUnavailable naming what this node has when it has fewer than `count`.
    """
    if count == 1:
        return [resolve_device(requested)]
    import torch

    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError(f"devices {count} needs device auto, cpu or cuda (one process per device), got {requested!r}")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "cpu" or (requested == "auto" and not gpus):
        cores = len(os.sched_getaffinity(0))
        if count > cores:
            raise DeviceUnavailable(
                f"{count} × cpu was requested but {settings.YARDSTICK_NODE} lets this worker use {cores} CPU core(s), "
                f"one per process; use devices 1..{cores}")
        return ["cpu"] * count
    if count > gpus:
        raise DeviceUnavailable(
            f"{count} × cuda was requested but {settings.YARDSTICK_NODE} has {gpus} CUDA device(s); use "
            + (f"devices 1..{gpus} or " if gpus else "") + "device cpu")
    return [f"cuda:{rank}" for rank in range(count)]


def device_identity(device):
    """Return (id, name) of a torch device: ("cpu", "cpu") or ("GPU-<uuid>", "NVIDIA H200").

    The id is the UUID NVML reports, which is what the collector records for
    the same GPU, so the cost engine can join a stint to its telemetry.
    """
    if device == "cpu":
        return "cpu", "cpu"
    import torch

    index = torch.device(device).index or 0
    props = torch.cuda.get_device_properties(index)
    uuid = _nvml_uuid(props) or (f"GPU-{props.uuid}" if getattr(props, "uuid", None) else f"cuda:{index}")
    return uuid, props.name


def _nvml_uuid(props):
    """The NVML UUID of the GPU torch describes in `props`, or None without pynvml or a driver.

    Matched by PCI address, not by index: CUDA_VISIBLE_DEVICES and CUDA's
    fastest-first order make torch's index differ from NVML's.
    """
    try:
        import pynvml
    except ImportError:
        return None
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver answers
        return None
    try:
        address = f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(address)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        return uuid.decode() if isinstance(uuid, bytes) else uuid
    except Exception as err:  # noqa: BLE001 - any NVML failure: torch's UUID is used instead
        log.info("NVML has no device at the PCI address torch reports (%s); using torch's UUID", err)
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting NVML down is best effort
            pass


def torch_threads(config):
    """Threads for this job's process: the config's, the setting's, or the cores this process may use.

    Never more than those cores: the start checked the config against the machine that took the request,
    and a worker with fewer cores would only slow down (a huge count crashed the pool process)."""
    cores = len(os.sched_getaffinity(0))
    asked = config.torch_threads or settings.YARDSTICK_JOB_TORCH_THREADS
    return min(asked, cores) if asked else cores


# -- the heartbeat ---------------------------------------------------------------


# -- the run -----------------------------------------------------------------------


@dataclass
class Outcome:
    status: str
    reason: str


def run(job_id, progress=None):
    """Run job `job_id` from queued to an ended state; return the Job (None when there is none).

    A job that is not queued (cancelled, or claimed by another worker) is left
    alone. `progress(job, step, metrics)` is called after every recorded step
    (step 0 is the baseline evaluation).
    """
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        log.warning("job %s does not exist; nothing to run", job_id)
        return None
    if not job.claim():
        log.info("job %s is %s, not queued; another worker has it or it was cancelled", job_id, job.status)
        return job

    stints = []  # rank 0's, then (on several devices) the other ranks'
    beat = None
    try:
        # The GPUs the line gave it (trainer/queue.py; NVML's indices, CUDA's on a node whose GPUs are alike), else
        # what its device names here.
        devices = [f"cuda:{i}" for i in job.gpus] if job.gpus else resolve_devices(job.device, job.devices)
        stints.append(_open_stint(job, devices[0], os.getpid()))
        job.announce_stints()  # "Where it ran" shows this stint from now (the claim's status event had none)
        # INFO of Yardstick's own: `up`'s terminal shows it (yardstick/logs.py), as it does the end below.
        log.info("job %s (%s) started on %s, device %s", job.pk, job.name, settings.YARDSTICK_NODE,
                 ", ".join(str(d) for d in devices))
        limit = heartbeat_limit_s()
        beat = Heartbeat(job, interval_s=max(0.5, min(30.0, limit / 4))).start()
        outcome = _train(job, devices, stints, progress)
    except LostJob as err:
        log.warning("job %s: %s; this worker lets it go", job_id, err)
        _end_stints(stints, "lost", _steps_done(job))
    except BaseException as err:  # KeyboardInterrupt in `manage.py train` too: the job must not stay running
        log.exception("job %s failed", job_id)
        with transaction.atomic():
            _end_stints(stints, Status.FAILED, _steps_done(job))
            # A missing device is missing again on a resume: say so, and offer no Resume.
            job.finish(Status.FAILED, error=_error_text(err), not_resumable_reason=(
                _missing_devices(job) if isinstance(err, DeviceUnavailable) else ""))
        if not isinstance(err, Exception):
            raise
    else:
        with transaction.atomic():
            _end_stints(stints, outcome.status, _steps_done(job))
            if not job.finish(outcome.status, outcome.reason):
                log.warning("job %s was ended by another party before it could end as %s", job_id, outcome.status)
    finally:
        if beat is not None:
            beat.stop()
    job.refresh_from_db()
    if job.status in ENDED:
        log.info("job %s (%s) ended %s after %s steps", job.pk, job.name, job.status, job.steps_done)
        tell_run_ended(job)
    return job


def _open_stint(job, device, pid):
    """A stint of `job` on this node's `device` for process `pid` (rank 0: this one), starting now.

    The ranks of a job on N CPUs all name this node's "cpu", which the cost engine reads as the
    node's one host device: it charges a job the union of its stints on a device, so the host is
    charged once for the job while any rank runs, not N times (the host's price and power cover
    all its cores). On GPUs each rank's stint names its own GPU, and each GPU is charged.
    """
    uuid, name = device_identity(device)
    return Stint.objects.create(job=job, node=settings.YARDSTICK_NODE, device=uuid, device_name=name, pid=pid,
                                first_step=job.steps_done)


def _end_stints(stints, reason, steps_done):
    for stint in stints:
        stint.end(reason, steps_done)


def _missing_devices(job):
    """Why a job whose devices this worker lacks is not offered a resume."""
    if job.devices > 1:
        return (f"{job.devices} × {job.device} is more than the worker that ran it has; start a new job with "
                "devices the workers have")
    return (f"its device {job.device} is not on the worker that ran it; start a new job with a device "
            "the workers have (auto runs anywhere)")


def tell_run_ended(job):
    """Send trainer.signals.run_ended (from whichever worker ran the job); a receiver's error is logged, the job's
    end stands."""
    for receiver, result in run_ended.send_robust(sender=Job, job=job):
        if isinstance(result, Exception):
            log.error("job %s: %s failed after the run ended: %r", job.pk, getattr(receiver, "__qualname__", receiver),
                      result, exc_info=result)


def _train(job, devices, stints, progress):
    """Build the trainer (on several devices: start the other ranks too) and run the loop.
    Return the Outcome; raise LostJob when someone else ended the job."""
    import torch

    # here: trainer.rl loads torch, which only this path needs
    from trainer.rl import TrainConfig, Trainer

    config = TrainConfig.from_dict(job.config)
    threads = torch_threads(config)
    torch.set_num_threads(threads)

    # -- where it starts: the newest checkpoint, another job's policy, or the base policy --
    resume_from = latest_checkpoint(job)
    built = None
    if resume_from is not None:
        origin = {"checkpoint": str(resume_from), "base_dir": str(models_dir())}
        phase = f"loading the checkpoint {resume_from.name}"
    elif job.init_step is not None:
        if job.init_from_id is None:  # SET_NULL: never train from the base policy in its place
            raise LookupError("the job it continues was deleted, and its checkpoint with it; start a new job")
        # Continue: another job's policy, at the checkpoint chosen when this job was started.
        source = checkpoint_path(job.init_from, job.init_step)
        if not source.exists():
            raise FileNotFoundError(f"job {job.init_from_id} no longer keeps its checkpoint at step {job.init_step} "
                                    f"({source.name}); start a new job from one it keeps")
        origin = {"policy": str(source), "config": config.to_dict()}
        phase = f"loading job {job.init_from_id}'s policy (checkpoint at step {job.init_step})"
    else:
        try:
            built = _build_base(job, config, devices[0])
        except _StopRequested as stop:
            return stop.outcome
        origin = {"config": config.to_dict(), "base_dir": str(models_dir())}
        phase = "loading the base policy"

    # -- build: here, and on several devices in every rank -----------------------------
    if len(devices) == 1:
        _set_phase(job, phase)
        trainer = Trainer.from_origin(origin, devices[0])
        return _steps(job, trainer, config, resume_from, built, stints, progress)
    # here: trainer.rl loads torch, which only this path needs
    from trainer.rl.distributed import Leader

    if devices[0] == "cpu":
        threads = max(1, threads // len(devices))  # the ranks share this node's cores
    _set_phase(job, f"{phase} on {len(devices)} devices")
    with Leader(devices, origin, threads=threads, timeout_s=ddp_timeout_s()) as leader:
        stints.extend(_open_stint(job, device, pid) for device, pid in zip(devices[1:], leader.pids))
        job.announce_stints()
        leader.join(Trainer.from_origin(origin, devices[0], leader.ranks))
        torch.set_num_threads(threads)
        return _steps(job, leader, config, resume_from, built, stints, progress)


def _steps(job, trainer, config, resume_from, built, stints, progress):
    """The loop, from the baseline (a fresh start) or the checkpoint's step. Return the Outcome."""
    if resume_from is not None:
        log.info("job %s resumes from %s (step %s)", job.pk, resume_from.name, trainer.step)
    # Rows past the checkpoint belong to steps that will run again (after a crash);
    # a fresh start (no checkpoint) runs the baseline again too.
    keep_through = trainer.step if resume_from is not None else -1
    with transaction.atomic():
        Step.objects.filter(job=job, step__gt=keep_through).delete()
        Sample.objects.filter(job=job, step__gt=keep_through).delete()
        _update_active(job, steps_done=trainer.step)
        Stint.objects.filter(pk__in=[stint.pk for stint in stints]).update(first_step=trainer.step)
        # Pages drop the re-run steps' old points (publish waits for this commit).
        publish(f"job.{job.pk}", "rewind", {"job": job.pk, "through": keep_through})

    if resume_from is None:
        # -- baseline: pass@1 before the first update ----------------------------------
        _set_phase(job, "baseline evaluation (pass@1 before any update)")
        metrics = _clean(trainer.evaluate())
        if built is not None:
            # The build ran on this job's stint, so it is in this job's cost; the page says how much of it.
            metrics["base/build_started_at"], metrics["base/build_s"] = built
        _record(job, 0, metrics, [], config)
        publish(f"job.{job.pk}", "step", {"job": job.pk, "step": 0, "steps": config.steps, "metrics": metrics,
                                          "samples": []})
        publish("jobs", "progress", {"id": job.pk, "step": 0, "steps": config.steps, "reward_mean": None})
        if progress:
            progress(job, 0, metrics)

    _set_phase(job, "training")
    while trainer.step < config.steps:
        # -- flags: read between steps, so a stop lands within one step --------------
        flags = _flags(job)
        if flags["budget_stop_requested"]:
            _checkpoint_if_new(job, trainer, config)
            reason = flags["stop_reason"] or "budget reached"
            return Outcome(Status.BUDGET_EXHAUSTED, f"{reason}; checkpoint at step {trainer.step}")
        if flags["stop_requested"] or flags["status"] == Status.STOPPING:
            _checkpoint_if_new(job, trainer, config)
            said = f"{flags['stop_reason']}; " if flags["stop_reason"] else ""  # the stop-loss says why
            return Outcome(Status.STOPPED, f"{said}stopped at step {trainer.step}")

        # -- rollout → reward → advantages → update -----------------------------------
        started = time.perf_counter()
        result = trainer.train_step()
        step = result.step
        metrics = dict(result.metrics)

        # -- evaluate ------------------------------------------------------------------
        metrics["timing/eval_s"] = 0.0
        if step % config.eval_every == 0 or step == config.steps:
            metrics.update(trainer.evaluate())

        # -- record ----------------------------------------------------------------------
        # The row is written before the checkpoint: a worker killed in between leaves a
        # row past the newest checkpoint, which a resume deletes and runs again. The
        # other order would leave a checkpoint whose step has no row, for ever.
        metrics["timing/checkpoint_s"] = 0.0
        metrics["timing/step_s"] = time.perf_counter() - started
        metrics = _clean(metrics)
        kept = _record(job, step, metrics, result.samples, config)

        # -- checkpoint ------------------------------------------------------------------
        if step % config.checkpoint_every == 0 or step == config.steps:
            metrics["timing/checkpoint_s"] = _checkpoint(job, trainer, config)
            metrics["timing/step_s"] = time.perf_counter() - started
            Step.merge(job.pk, step, {key: metrics[key] for key in ("timing/checkpoint_s", "timing/step_s")})

        # -- publish -----------------------------------------------------------------------
        publish(f"job.{job.pk}", "step", {"job": job.pk, "step": step, "steps": config.steps, "metrics": metrics,
                                          "samples": kept})
        publish("jobs", "progress", {"id": job.pk, "step": step, "steps": config.steps,
                                     "reward_mean": metrics.get("train/reward_mean")})
        if progress:
            progress(job, step, metrics)
    return Outcome(Status.COMPLETED, f"all {config.steps} steps done")


def _build_base(job, config, device):
    """Pretrain the environment's base policy when this data dir has none yet, its progress as
    the job's phase. Return (unix time it began, seconds it took), or None when there was nothing
    to build. Raise _StopRequested when a stop or budget stop arrives meanwhile."""
    # here: trainer.rl loads torch, which only this path needs
    from trainer.rl.envs import get_env
    from trainer.rl.pretrain import base_checkpoint_path, ensure_base_checkpoint

    if base_checkpoint_path(config.env, models_dir()).exists():
        return None
    began, started = time.time(), time.perf_counter()
    target = get_env(config.env).warm_start_target
    what = f"{BUILD_PHASE} for {config.env} (first job on it here; until pass@1 reaches {target:.0f}%)"
    _set_phase(job, what)
    shown = {"at": time.monotonic(), "pass1": None}

    def progress(step, max_steps, info):
        if "pass1" in info:
            shown["pass1"] = info["pass1"]
        if time.monotonic() - shown["at"] < PHASE_EVERY_S:
            return
        shown["at"] = time.monotonic()
        flags = _flags(job)
        if flags["budget_stop_requested"]:
            reason = flags["stop_reason"] or "budget reached"
            raise _StopRequested(Outcome(Status.BUDGET_EXHAUSTED, f"{reason}; stopped while building the base policy"))
        if flags["stop_requested"] or flags["status"] == Status.STOPPING:
            raise _StopRequested(Outcome(Status.STOPPED, "stopped while building the base policy (no checkpoint yet)"))
        probe = "" if shown["pass1"] is None else f", pass@1 {shown['pass1']:.0f}%"
        _set_phase(job, f"{what}: step {step} of at most {max_steps}{probe}")

    log.info("job %s: no base policy for %s yet; building it", job.pk, config.env)
    ensure_base_checkpoint(config.env, models_dir(), device, progress=progress)
    return began, time.perf_counter() - started


def _set_phase(job, text):
    """Say what the worker is doing now (the job's phase) and publish it."""
    _update_active(job, phase=text[:200])
    publish("jobs", "phase", {"id": job.pk, "phase": text[:200]})


def _record(job, step, metrics, samples, config):
    """Save one step's row, its samples and the job's running figures; return the kept samples (as
    Sample.to_dict gives them, for the step's live event)."""
    pass1 = metrics.get("eval/pass1")
    reward = metrics.get("train/reward_mean")
    with transaction.atomic():
        Step.merge(job.pk, step, metrics)
        kept = Sample.objects.bulk_create([
            Sample(job=job, step=step, index=i, prompt=s["prompt"], completion=s["completion"],
                   reward=float(s["reward"]), advantage=float(s["advantage"]), tool_calls=int(s.get("tool_calls", 0)))
            for i, s in enumerate(samples[: config.samples_per_step])
        ])
        fields = {"steps_done": step}
        if reward is not None:
            fields["latest_reward_mean"] = reward
        if pass1 is not None:
            fields["latest_pass1"] = pass1
            if step == 0:
                fields["baseline_pass1"] = pass1
        _update_active(job, **fields)
    return [s.to_dict() for s in kept]


def _checkpoint(job, trainer, config):
    """Write a checkpoint for the trainer's step, keep the newest K; return the seconds it took."""
    started = time.perf_counter()
    path = checkpoint_path(job, trainer.step)
    # The core writes beside the path and renames, so a worker killed mid-write
    # leaves no half checkpoint for a resume to trip on (and the glob skips the temp file).
    trainer.save_checkpoint(path)
    for old in checkpoints(job)[: -config.keep_checkpoints]:
        old.unlink(missing_ok=True)
    _update_active(job, checkpoint_step=trainer.step)
    return time.perf_counter() - started


def _checkpoint_if_new(job, trainer, config):
    if not checkpoint_path(job, trainer.step).exists():
        _checkpoint(job, trainer, config)


def request_stop_of_local_jobs(reason):
    """Request a stop of every running job whose open stint is a process of this one's tree
    on this node. Return the ids of the jobs asked."""
    me = psutil.Process()
    pids = [me.pid] + [p.pid for p in me.children(recursive=True)]
    jobs = Job.objects.filter(status=Status.RUNNING, stints__ended_at__isnull=True,
                              stints__node=settings.YARDSTICK_NODE, stints__pid__in=pids).distinct()
    asked = [job.pk for job in jobs if job.request_stop(by=reason)]
    # Interrupted, not stopped for a reason of its own: a sweep resumes it (Job.interrupted).
    Job.objects.filter(pk__in=asked, status=Status.STOPPING).update(interrupted_by=reason)
    return asked


def _flags(job):
    row = Job.objects.filter(pk=job.pk).values("status", "stop_requested", "budget_stop_requested",
                                                 "stop_reason").first()
    if row is None or row["status"] not in ACTIVE:
        raise LostJob(f"the job is now {row['status'] if row else 'deleted'}")
    return row


def _update_active(job, **fields):
    """Update the job while it is still this worker's (running or stopping); raise LostJob if not."""
    if not Job.objects.filter(pk=job.pk, status__in=ACTIVE).update(heartbeat_at=timezone.now(), **fields):
        raise LostJob("the job is no longer running")


def _steps_done(job):
    return Job.objects.filter(pk=job.pk).values_list("steps_done", flat=True).first()


def _error_text(err):
    text = f"{type(err).__name__}: {err}".strip()
    return text if len(text) <= 4000 else text[:4000] + "…"


def _clean(metrics):
    """Plain floats for JSON; NaN and infinities (which PostgreSQL's jsonb refuses) become null."""
    out = {}
    for key, value in metrics.items():
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = value
    return out
