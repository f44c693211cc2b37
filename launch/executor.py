"""Run a launched job on this node: the launch worker's side (launch.tasks.run_launch calls `run`).

The worker claims the queued job and starts its recipe's argv, rendered with the job's parameter values and
Yardstick's own placeholders, as a process group of its own (a new session) with:

- CUDA_VISIBLE_DEVICES: the GPUs the placement gave the job (NVML indices, with CUDA_DEVICE_ORDER=PCI_BUS_ID so
  CUDA counts them as NVML does), empty for a cpu recipe;
- MLFLOW_TRACKING_URI (settings.YARDSTICK_URL), MLFLOW_TRACKING_TOKEN (a token that writes the job's run and
  nothing else, issued now and revoked when the process ends), MLFLOW_RUN_ID and MLFLOW_EXPERIMENT_NAME of the
  job's run, YARDSTICK_JOB_ID, YARDSTICK_NODE; the recipe's own variables; none of the worker's own settings
  (its database and broker addresses are not the run's to use).

Beside it a guard (launch/guard.py) kills the group if this worker dies. While the command runs, this thread
reads its stdout and stderr as they arrive (whole, clean lines: launch/output.py), keeps them on the job
(OutputLine, the newest settings.LAUNCH_OUTPUT_MAX_MB) and publishes them on the job's topic; it beats, looks
for checkpoints in the job's output directory, and reads the stop flags. A stop goes in three steps: the flag
(the run's StopCallback / should_stop() end it at its next step, with a checkpoint), SIGTERM to the group after
the recipe's first grace, SIGKILL after the second. The exit status ends the job: 0 completed; non-zero failed
with the last lines of stderr; killed by a signal, named; stopped (or budget exhausted) saying which step ended
it. A Resume starts the recipe again with its resume arguments and {checkpoint}, the newest checkpoint.
"""

import logging
import os
import secrets
import selectors
import shlex
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from launch.guard import MARK, RELEASE, kill_all
from launch.kind import checkpoint_names, init_from_path
from launch.models import Launch, OutputLine
from launch.output import LineSplitter, failure, line_bytes, marker
from launch.params import render
from trainer.models import ACTIVE, Job, Status, Stint, Worker
from trainer.runner import heartbeat_limit_s, tell_run_ended
from trainer.workers import Heartbeat
from yardstick.live import publish
from yardstick.models import ApiToken

log = logging.getLogger(__name__)

FLUSH_EVERY_S = 0.25  # output reaches the page at most this late
FLAGS_EVERY_S = 0.5  # a stop is seen at most this late
SCAN_EVERY_S = 5.0  # checkpoints are looked for this often (and at the end)
DRAIN_S = 2.0  # after the command exits, how long its pipes may stay open (a child still writing)
STDERR_QUOTED = 10  # the lines of stderr a failed job's error quotes
# The worker's own settings: never passed to a launched command (it gets a token for its run instead).
PRIVATE_ENV = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "EMAIL_HOST_PASSWORD")
PRIVATE_PREFIXES = ("YARDSTICK_", "MLFLOW_", "DJANGO_", "CELERY_", "CUDA_VISIBLE_DEVICES")


class LaunchError(Exception):
    """The command could not be started (no program, no checkpoint to resume from); says why, for people."""


def control_plane_url():
    """Where a launched run reports (its MLFLOW_TRACKING_URI): settings.YARDSTICK_URL, which `up` gives every part it
    starts. LaunchError when it is unset: a guessed address would hand the run's token to whatever answers there."""
    if not settings.YARDSTICK_URL:
        raise LaunchError("YARDSTICK_URL is not set, so the run would not know where to report: set it to the control "
                          "plane's address as the nodes reach it (`manage.py up` sets it for every part it starts)")
    return settings.YARDSTICK_URL


def output_cap_bytes():
    return settings.LAUNCH_OUTPUT_MAX_MB * 2**20


def job_dir(job):
    return Path(settings.DATA_DIR) / "launched" / f"job-{job.pk}"


def models_dir():
    """{models}: this node's folder of local models, which a recipe may fill on first use (trl-grpo-cpu)."""
    return Path(settings.DATA_DIR) / "models"


def found_checkpoints(folder, definition):
    """[(step, name)] of the checkpoint folders (or files) in `folder`, oldest first."""
    try:
        names = [p.name for p in Path(folder).iterdir()]
    except OSError:
        return []
    return checkpoint_names(names, definition)


def child_env(job, launch, run, token, gpus, values):
    """The launched command's environment: the worker's, less its private settings, plus the run's variables and
    the recipe's (rendered)."""
    env = {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV and not k.startswith(PRIVATE_PREFIXES)}
    env.update({
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpus),
        **run_variables(job, launch, run, token, values),
        "YARDSTICK_NODE": settings.YARDSTICK_NODE,
    })
    return env


def run_variables(job, launch, run, token, values):
    """What every start of a launched job is given, wherever it runs: its MLflow run and token, its job id, how
    often to ask for a stop, and the recipe's own variables (rendered)."""
    env = {
        "PYTHONUNBUFFERED": "1",  # lines reach the page as they are printed, not when a buffer fills
        "MLFLOW_TRACKING_URI": control_plane_url(),
        "MLFLOW_TRACKING_TOKEN": token,
        "MLFLOW_RUN_ID": run.run_id,
        "MLFLOW_EXPERIMENT_NAME": run.experiment.name,
        "YARDSTICK_JOB_ID": str(job.pk),
        # The run asks whether to stop well within the first grace (the client's default is every 10 s).
        "YARDSTICK_STOP_CHECK_S": f"{max(1.0, min(10.0, launch.stop_grace_s[0] / 3)):g}",
    }
    env.update(dict(zip(launch.definition["env"], render(list(launch.definition["env"].values()), values))))
    return env


def command(job, launch, folder, python):
    """(argv, placeholder values) of this start of `job`, its output directory `folder` and {python} `python`: the
    recipe's argv, and on a Resume its resume arguments from the newest checkpoint there. LaunchError when a Resume
    finds none or no token can be issued."""
    definition = launch.definition
    run = job.run
    values = {**launch.values, "job_dir": str(folder), "experiment": run.experiment.name, "python": python,
              "yardstick": str(settings.BASE_DIR), "models": str(models_dir())}
    if job.init_from_id:
        values["init_from"] = init_from_path(job)
    argv = render(definition["argv"], values)
    if launch.checkpoints and definition.get("resume_argv"):  # a Resume: from the newest checkpoint
        found = found_checkpoints(folder, definition)
        if not found:
            raise LaunchError(f"job {job.pk} was resumed but its output directory {folder} holds no checkpoint "
                              "now; Restart starts it again from the beginning")
        argv += render(definition["resume_argv"], {**values, "checkpoint": str(Path(folder) / found[-1][1])})
    if not job.created_by_id:
        raise LaunchError(f"job {job.pk} has no user who launched it, so no token can be issued for its run")
    return argv, values


def issue_token(job):
    """(secret, ApiToken row) of a new token that writes `job`'s run and nothing else; LaunchError, and no token, when
    the run would not know where to report (control_plane_url)."""
    control_plane_url()
    return ApiToken.issue(job.created_by, name=f"launched job {job.pk}", run_id=job.run.run_id)


def prepare(job, launch):
    """(argv, env, cwd, token row) of this start of `job`; LaunchError when it cannot start."""
    definition = launch.definition
    folder = job_dir(job)
    folder.mkdir(parents=True, exist_ok=True)
    argv, values = command(job, launch, folder, sys.executable)
    token, row = issue_token(job)
    env = child_env(job, launch, job.run, token, launch.gpus, values)
    env[MARK] = secrets.token_hex(16)  # every process of this start carries it: the guard finds them by it
    cwd = render([definition["workdir"]], values)[0] if definition.get("workdir") else str(folder)
    return argv, env, cwd, row


def run(job_id, worker=None):
    """Run launched job `job_id` on this node to its end; return the Job. `worker`: this launch worker's name; a job
    placed on another since this message was sent (put back in the line and placed again) is not this one's."""
    job = Job.objects.filter(pk=job_id).select_related("created_by").first()
    if job is None:
        log.warning("launched job %s does not exist; nothing to run", job_id)
        return None
    if not job.claim(where=Q(launch__worker=worker) if worker else None):
        log.info("launched job %s is %s, not queued on %s; another worker has it or it was cancelled", job_id,
                 job.status, worker or "this worker")
        return job
    launch = job.launch
    token = None
    try:
        argv, env, cwd, token = prepare(job, launch)
        # The worker and the devices are the placement's (launch.kind.Launched.dispatch wrote them).
        Launch.objects.filter(pk=job.pk).update(argv=argv, env_names=sorted(env_names(env, launch)), token=token,
                                                node=settings.YARDSTICK_NODE,
                                                job_dir=str(job_dir(job)), stop_step="", exit_code=None)
        Supervisor(job, argv, env, cwd).run()
    except LaunchError as err:
        job.finish(Status.FAILED, error=str(err))
    except Exception as err:  # noqa: BLE001 - whatever it was, the job must not stay running
        log.exception("launched job %s failed", job_id)
        job.finish(Status.FAILED, error=f"{type(err).__name__}: {err}"[:4000])
    finally:
        if token is not None:
            ApiToken.objects.filter(pk=token.pk).update(revoked=True)
        job.refresh_from_db()
        if job.status not in ACTIVE:
            tell_run_ended(job)
        connection.close()  # this thread's own connection
    return job


def env_names(env, launch):
    """The names of the variables Yardstick and the recipe set for the command (what the job records)."""
    ours = {"PYTHONUNBUFFERED", "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "YARDSTICK_STOP_CHECK_S", MARK}
    return [k for k in env if k in ours or k.startswith(("MLFLOW_", "YARDSTICK_")) or k in launch.definition["env"]]


class Supervisor:
    """One start of a launched command, from Popen to its exit: output, beats, checkpoints, stop steps."""

    def __init__(self, job, argv, env, cwd):
        self.job, self.argv, self.env, self.cwd = job, argv, env, cwd
        self.mark = env[MARK]
        self.launch = Launch.objects.get(pk=job.pk)
        self.out = OutputWriter(job.pk, self.launch.output_seq)
        self.stderr_tail = deque(maxlen=STDERR_QUOTED)
        self.splitters = {"stdout": LineSplitter(), "stderr": LineSplitter()}
        self.stop_at = None  # monotonic time the stop flag was seen
        self.step = ""  # the stop step reached: "", flag, SIGTERM, SIGKILL
        self.lost = ""

    # -- the run ----------------------------------------------------------------------------

    def run(self):
        try:
            proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as err:
            raise LaunchError(f"could not start {self.argv[0]!r}: {err.strerror or err} (cwd {self.cwd})") from None
        self.proc = proc
        # In a session of its own too: a signal to the worker's process group (its supervisor's hard stop) must
        # not take the guard with it.
        guard = subprocess.Popen([sys.executable, "-m", "launch.guard", str(proc.pid), str(self.job.pk), self.mark],
                                 cwd=settings.BASE_DIR, stdin=subprocess.PIPE, start_new_session=True)
        stints = self._open_stints(proc.pid)
        Launch.objects.filter(pk=self.job.pk).update(pid=proc.pid)
        # Quoted as a shell would: a value with spaces or quotes reads as the one argument it is.
        self.say(f"started on {settings.YARDSTICK_NODE} (pid {proc.pid}): {shlex.join(self.argv)}")
        limit = heartbeat_limit_s()
        beat = Heartbeat(self.job, interval_s=max(0.5, min(30.0, limit / 4))).start()
        try:
            code = self._supervise(proc)
        finally:
            beat.stop()
            try:
                guard.stdin.write(RELEASE)
                guard.stdin.close()
            except OSError:
                pass
            guard.wait(timeout=10)
        self._scan_checkpoints()
        self.flush()
        self._end(code, stints)

    def _open_stints(self, pid):
        """A stint on each GPU the job was given (by UUID, as the agents record it), or this node's cpu."""
        row = Worker.objects.filter(name=self.job.placed_on).first()
        gpus = {g["index"]: g for g in (row.gpus if row else [])}
        stints = []
        for index in self.launch.gpus or [None]:
            gpu = gpus.get(index)
            device, name = (gpu["uuid"], gpu.get("name", "")) if gpu else ("cpu", "cpu")
            stints.append(Stint.objects.create(job=self.job, node=settings.YARDSTICK_NODE, device=device,
                                               device_name=name, pid=pid, first_step=self.job.steps_done))
        self.job.announce_stints()
        return stints

    def _supervise(self, proc):
        selector = selectors.DefaultSelector()
        for stream, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            os.set_blocking(pipe.fileno(), False)
            selector.register(pipe, selectors.EVENT_READ, stream)
        flushed = flagged = scanned = time.monotonic()
        exited_at = None
        while selector.get_map():
            for key, _events in selector.select(timeout=FLUSH_EVERY_S):
                self._read(selector, key)
            now = time.monotonic()
            try:
                if now - flushed >= FLUSH_EVERY_S:
                    self.flush()
                    flushed = now
                if proc.poll() is None and now - flagged >= FLAGS_EVERY_S:
                    self._check_flags(proc)
                    flagged = now
            except DatabaseError as err:  # a database blip: the lines wait in memory, the run goes on
                log.warning("launched job %s: the database did not answer (%s); trying again", self.job.pk, err)
                connection.close()  # the next query opens a fresh one
            if proc.poll() is not None:
                if exited_at is None:
                    exited_at = now
                elif now - exited_at > DRAIN_S:
                    break  # the command exited; a child of it still holds the pipes: it is killed below
            if now - scanned >= SCAN_EVERY_S:
                self._scan_checkpoints()
                scanned = now
        for key in list(selector.get_map().values()):
            selector.unregister(key.fileobj)
        code = proc.wait()
        kill_all(self.mark, proc.pid)  # nothing of the run outlives it (a child left behind holds its GPU)
        for stream, splitter in self.splitters.items():
            for text in splitter.close():
                self.add(stream, text)
        proc.stdout.close()
        proc.stderr.close()
        return code

    def _read(self, selector, key):
        stream = key.data
        try:
            chunk = os.read(key.fileobj.fileno(), 65536)
        except BlockingIOError:
            return
        if not chunk:
            selector.unregister(key.fileobj)
            for text in self.splitters[stream].close():
                self.add(stream, text)
            return
        for text in self.splitters[stream].feed(chunk):
            self.add(stream, text)

    # -- stop -------------------------------------------------------------------------------

    def _check_flags(self, proc):
        # One connection for the whole run (this thread's): a stop check twice a second and a flush four times
        # must not open a new one each (CONN_MAX_AGE is 0), which cost PostgreSQL more than the lines did.
        row = Job.objects.filter(pk=self.job.pk).values("status", "budget_stop_requested").first()
        if row is None or row["status"] not in ACTIVE:
            self.lost = f"the job is now {row['status'] if row else 'deleted'}"
            self.say(f"{self.lost}: its processes are killed")
            kill_all(self.mark, proc.pid)
            return
        wanted = row["status"] == Status.STOPPING or row["budget_stop_requested"]
        if not wanted:
            return
        now = time.monotonic()
        first, second = self.launch.stop_grace_s
        if self.stop_at is None:
            self.stop_at = now
            self._step("flag", f"stop requested: the run's stop flag is set; SIGTERM in {first} s if it runs on")
        if self.step == "flag" and now - self.stop_at >= first:
            self._step("SIGTERM", f"the run ran on {first} s after its stop flag: SIGTERM to its process group; "
                                  f"SIGKILL in {second} s")
            kill_all(self.mark, proc.pid, signal.SIGTERM)
        if self.step == "SIGTERM" and now - self.stop_at >= first + second:
            self._step("SIGKILL", f"the run ran on {second} s after SIGTERM: SIGKILL")
            kill_all(self.mark, proc.pid, signal.SIGKILL)

    def _step(self, step, text):
        self.step = step
        Launch.objects.filter(pk=self.job.pk).update(stop_step=step)
        self.say(text)

    # -- output -----------------------------------------------------------------------------

    def add(self, stream, text):
        self.out.add(stream, text)
        if stream == "stderr" and text.strip():
            self.stderr_tail.append(text)

    def say(self, text):
        """A line of Yardstick's own in the job's output (the stop steps, the start and the end), written now with
        the lines being written (a progress bar stays on the page)."""
        self.out.add("yardstick", text)
        self.flush()

    def flush(self):
        self.out.flush({s: sp.pending() for s, sp in self.splitters.items() if sp.pending()})

    def _scan_checkpoints(self):
        found = [name for _step, name in found_checkpoints(job_dir(self.job), self.launch.definition)]
        if found != self.launch.checkpoints:
            self.launch.checkpoints = found
            steps = checkpoint_names(found, self.launch.definition)
            Launch.objects.filter(pk=self.job.pk).update(checkpoints=found)
            if steps:
                Job.objects.filter(pk=self.job.pk).update(checkpoint_step=steps[-1][0])

    # -- the end ----------------------------------------------------------------------------

    def _end(self, code, stints):
        Launch.objects.filter(pk=self.job.pk).update(exit_code=code, pid=None)
        job = Job.objects.get(pk=self.job.pk)
        to, reason, error = self._outcome(code, job)
        self.say(f"ended {to}: {reason}" if to != Status.FAILED else f"ended failed: {error.splitlines()[0]}")
        with transaction.atomic():
            # Its token dies with its process, before the job says it ended.
            ApiToken.objects.filter(pk=Launch.objects.get(pk=job.pk).token_id).update(revoked=True)
            for stint in stints:
                stint.end(to, job.steps_done)
            if not self.lost and not job.finish(to, reason, error=error):
                log.warning("launched job %s was ended by another party before it could end %s", job.pk, to)

    def _outcome(self, code, job):
        """(status, reason, error) of the job from the command's exit status and the stop step that ended it."""
        killed_by = signal_name(-code) if code < 0 else ""
        if self.stop_at is not None:
            to = Status.BUDGET_EXHAUSTED if job.budget_stop_requested else Status.STOPPED
            who = f"{job.stop_reason}; " if job.stop_reason else ""
            how = {"flag": f"the run ended itself at its stop flag ({exit_text(code)})",
                   "SIGTERM": f"SIGTERM ended it, {self.launch.stop_grace_s[0]} s after its stop flag "
                              f"({exit_text(code)})",
                   "SIGKILL": f"SIGKILL ended it: it ignored its stop flag and SIGTERM "
                              f"({sum(self.launch.stop_grace_s)} s)"}[self.step]
            return to, f"{who}{how}", ""
        if code == 0:
            return Status.COMPLETED, "the command exited with status 0", ""
        # As on every executor (launch.output.failure): how it ended, its stderr's last line where it exited by
        # itself, and its stderr's last lines quoted.
        how = f"killed by {killed_by} (signal {-code})" if code < 0 else f"exited with status {code}"
        first, error = failure(how, list(self.stderr_tail), own_exit=code > 0)
        return Status.FAILED, first, error[:4000]


class OutputWriter:
    """The lines of one start of a launched job, numbered on from `seq`: kept (OutputLine, the newest
    settings.LAUNCH_OUTPUT_MAX_MB) and published on the job's topic at each flush, whoever read them (a node's
    Supervisor from the process's pipes, a cluster's follower from the scheduler's log)."""

    def __init__(self, job_id, seq):
        self.job_id, self.seq = job_id, seq
        self.pending = []  # OutputLine rows not yet written
        self.partial = {}

    def add(self, stream, text):
        self.seq += 1
        self.pending.append(OutputLine(job_id=self.job_id, seq=self.seq, stream=stream, text=text, at=timezone.now()))

    def say(self, text):
        """A line of Yardstick's own in the job's output (the stop steps, the start and the end), written now."""
        self.add("yardstick", text)
        self.flush()

    def flush(self, partial=None):
        """Write and publish the lines added since the last flush; `partial`: {stream: the line being written}."""
        partial = partial or {}
        if not self.pending and partial == self.partial:
            return
        lines = self.pending  # kept until written: a flush the database refused is tried again with them
        size = sum(line_bytes(line.text) for line in lines)
        with transaction.atomic():
            OutputLine.objects.bulk_create(lines)
            Launch.objects.filter(pk=self.job_id).update(output_seq=self.seq, output_bytes=F("output_bytes") + size)
            dropped = trim(self.job_id, output_cap_bytes())
            publish(f"job.{self.job_id}", "output", {
                "job": self.job_id, "lines": [line.to_list() for line in lines], "partial": partial,
                "dropped": dropped, "marker": marker(dropped, output_cap_bytes())})
        self.pending, self.partial = [], partial


def signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_text(code):
    """A process's exit status, for people: "exit status 1", "killed by SIGKILL"."""
    return f"killed by {signal_name(-code)}" if code < 0 else f"exit status {code}"


def trim(job_id, cap_bytes):
    """Drop the job's oldest output lines past `cap_bytes` (kept: the newest that fit); return how many are dropped
    in all now. Only when the lines kept are a twentieth over the cap, so a full log is not trimmed every flush."""
    launch = Launch.objects.filter(pk=job_id).values("output_bytes", "output_dropped").first()
    if launch["output_bytes"] <= cap_bytes + cap_bytes // 20:
        return launch["output_dropped"]
    table = OutputLine._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"""
            DELETE FROM {table} WHERE job_id = %s AND seq <= (
                SELECT max(seq) FROM (SELECT seq, sum(octet_length(text) + 1) OVER (ORDER BY seq DESC) AS newer
                                      FROM {table} WHERE job_id = %s) t WHERE newer > %s)
            RETURNING octet_length(text) + 1""", [job_id, job_id, cap_bytes])
        sizes = [r[0] for r in cur.fetchall()]
    Launch.objects.filter(pk=job_id).update(output_bytes=F("output_bytes") - sum(sizes),
                                            output_dropped=F("output_dropped") + len(sizes))
    return launch["output_dropped"] + len(sizes)
