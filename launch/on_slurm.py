"""Launched jobs on a Slurm cluster, as batch jobs: the scheduler calls of launch/remote.py's RemoteExecutor, made
with Slurm's own commands on the machine Yardstick's follower runs on (a login node of the cluster), each reading
the slurm.conf the cluster was registered with (SLURM_CONF).

- submit: a batch script written from the recipe (`batch_script`): #SBATCH lines for the job name
  `yardstick-<job>`, its start as the comment (`yardstick-job-<job>-<start>`), the output file in the job's output
  directory on the shared storage, the recipe's partition, account, QOS, nodes and time limit, its GPUs per node
  (`--gpus-per-node=N`, or `--gres=gpu:N`) or CPUs; then the run's variables exported (its MLflow run and scoped
  token, YARDSTICK_JOB_ID: every process of the job inherits them, so each node's agent charges the job's GPUs to
  it) and the argv, every item quoted whole, run with exec. The script goes to `sbatch --parsable` on its standard
  input (the token is never written to a file of ours), which runs with a clean environment: nothing of the control
  plane's reaches the job. A start Slurm already took (its comment is in the queue) is not submitted again.
- state: `scontrol show job -o` (then `sacct`, where the cluster keeps accounting, for a job scontrol has
  forgotten): Slurm's state mapped onto the follower's (`STATES`), its reason (`REASONS`: why a job waits), the exit
  code, and the allocation (nodes, GPUs, CPUs, start, end).
- log: the batch job's output file, read from the shared storage.
- cancel: `scancel --signal=TERM --full` (the batch shell and every step); kill, once the second grace is over:
  `scancel`, and Slurm says CANCELLED.
- nodes: `scontrol show node -o`.

Every command is bounded (COMMAND_TIMEOUT_S). A controller that does not answer (or commands that are missing) is
unreachable; Slurm refusing a job is a refusal, in its words.
"""

import os
import re
import shlex
import subprocess
from datetime import datetime
from pathlib import Path

from launch import remote
from launch.executor import LaunchError
from launch.models import slurm_option_problem
from launch.remote import Refused, RemoteExecutor, RemoteNode, RemoteState, Unreachable
from yardstick.inputs import InputError

COMMAND_TIMEOUT_S = 20
# Slurm's job states onto the follower's (launch/remote.py). Slurm's own word is kept and shown.
STATES = {
    **dict.fromkeys(("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"),
                    remote.PENDING),
    **dict.fromkeys(("RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING", "SUSPENDED", "STOPPED"),
                    remote.RUNNING),
    "COMPLETED": remote.SUCCEEDED,
    "CANCELLED": remote.STOPPED,
    **dict.fromkeys(("FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
                     "SPECIAL_EXIT", "REVOKED"), remote.FAILED),
}
# Why a job waits (squeue's REASON), for people; any other reason is shown as Slurm gives it.
REASONS = {
    "None": "it has not been looked at by the scheduler yet",
    "Resources": "the resources it asks for are in use by other jobs",
    "Priority": "jobs of higher priority are ahead of it",
    "Dependency": "it waits for a job it depends on",
    "BeginTime": "its start time has not come",
    "JobHeldUser": "its user holds it",
    "JobHeldAdmin": "an admin holds it",
    "PartitionDown": "its partition is down",
    "PartitionTimeLimit": "its time limit is longer than its partition allows",
    "PartitionNodeLimit": "it asks for more nodes than its partition allows",
    "ReqNodeNotAvail": "a node it needs is not available (down, drained or reserved)",
    "QOSMaxGRESPerUser": "its user holds the most GPUs (GRES) the QOS allows",
    "QOSMaxCpuPerUserLimit": "its user holds the most CPUs the QOS allows",
    "QOSMaxJobsPerUserLimit": "its user runs the most jobs the QOS allows",
    "AssocGrpGRES": "its account holds the most GPUs (GRES) its association allows",
    "AssocGrpCpuLimit": "its account holds the most CPUs its association allows",
    "AssocMaxJobsLimit": "its account runs the most jobs its association allows",
    "InvalidAccount": "its account is not valid on this cluster",
    "InvalidQOS": "its QOS is not valid for its account",
}
# How a failed end reads, by Slurm's state (the job's reason: the first line).
ENDINGS = {
    "TIMEOUT": "TIMEOUT: it ran past its time limit ({TimeLimit}) and Slurm ended it",
    "OUT_OF_MEMORY": "OUT_OF_MEMORY: a process of it used more memory than it asked for, and Slurm killed it",
    "NODE_FAIL": "NODE_FAIL: a node of its allocation ({NodeList}) failed",
    "PREEMPTED": "PREEMPTED: a job of higher priority took its resources",
    "BOOT_FAIL": "BOOT_FAIL: a node of its allocation failed to boot",
    "DEADLINE": "DEADLINE: it could not end before its deadline",
}
UNREACHABLE = re.compile(r"unable to contact slurm controller|connection refused|socket timed out|"
                         r"communication connection failure|zero bytes were transmitted|slurm_load_jobs error: "
                         r"unable to contact|could not open|no such file or directory", re.I)
UNKNOWN_JOB = re.compile(r"invalid job id", re.I)
FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z/:]*)=(\S*)")


def _env(cluster):
    """The commands' environment: a clean one (nothing of the control plane's reaches a job: sbatch passes its
    environment on), with the cluster's slurm.conf."""
    # passed on, not read as settings: the login node's own PATH (where Slurm's commands are), home and locale
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ")}
    return {**keep, "SLURM_CONF": cluster.address}


def run(cluster, argv, stdin=None):
    """Run a Slurm command for `cluster`; (return code, stdout, stderr). Unreachable when the command is missing or
    hangs, the controller does not answer, or the cluster's slurm.conf is not on this machine (Slurm's commands
    would wait a minute for it to appear)."""
    if not os.path.isfile(cluster.address):
        raise Unreachable(f"{cluster.address} is not on this machine: the follower runs Slurm's commands with the "
                          "cluster's slurm.conf, so it must run on a login node of the cluster")
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=_env(cluster),
                              timeout=COMMAND_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise Unreachable(f"{argv[0]} is not installed on this machine: the follower runs Slurm's commands, so it "
                          "must run on a login node of the cluster") from None
    except subprocess.TimeoutExpired:
        raise Unreachable(f"{argv[0]} did not answer within {COMMAND_TIMEOUT_S} s") from None
    err = done.stderr.strip()
    if done.returncode != 0 and UNREACHABLE.search(err):
        raise Unreachable(f"{argv[0]}: {_short(err)}")
    return done.returncode, done.stdout, err


def fields(line):
    """scontrol's one-line `Key=Value ...` record as a dict."""
    return dict(FIELD.findall(line))


def batch_script(submission):
    """The batch script of `submission` (launch.remote.Submission): #SBATCH lines, the run's variables exported,
    the argv. LaunchError names a filled option Slurm would not take."""
    options = dict(submission.options)
    job = submission.metadata.get("yardstick_job", "")
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name=yardstick-{job}",
             f"#SBATCH --comment={submission.id}",
             f"#SBATCH --output={submission.job_dir}/slurm-%j.out",
             f"#SBATCH --error={submission.job_dir}/slurm-%j.out"]
    try:
        for key, flag in (("partition", "partition"), ("account", "account"), ("qos", "qos"),
                          ("time_limit", "time")):
            if options.get(key) not in (None, ""):
                lines.append(f"#SBATCH --{flag}={slurm_option_problem(key, options[key])}")
        lines.append(f"#SBATCH --nodes={slurm_option_problem('nodes', options.get('nodes', 1))}")
    except InputError as err:
        raise LaunchError(f"the recipe's {err.field} was filled as Slurm will not take it: {err.message}") from None
    count = submission.devices["count"]
    if submission.devices["kind"] == "cuda":
        lines.append(f"#SBATCH --gres=gpu:{count}" if options.get("gpus_as") == "gres"
                     else f"#SBATCH --gpus-per-node={count}")
    else:
        lines.append(f"#SBATCH --cpus-per-task={count}")
    lines.append(f"# {submission.id}, written by Yardstick: the run's variables, then its argv (each item whole)")
    lines += [f"export {name}={shlex.quote(value)}" for name, value in sorted(submission.env.items())]
    if submission.cwd:
        lines.append(f"cd {shlex.quote(submission.cwd)} || exit 1")
    lines.append(f"exec {shlex.join(submission.argv)}")
    return "\n".join(lines) + "\n"


def exit_code(text):
    """scontrol's ExitCode=status:signal as Launch.exit_code (negative: killed by that signal); None if unknown."""
    match = re.match(r"^(\d+):(\d+)$", text or "")
    if not match:
        return None
    status, signal = int(match[1]), int(match[2])
    if signal > 64:  # no signal: Slurm's own code there (125 for a job it ended for running out of memory)
        return signal
    return -signal if signal else status


def _when(text):
    """A Slurm time (the controller's local time, no zone) as ISO 8601 with this machine's offset; None if none."""
    try:
        return datetime.fromisoformat(text).astimezone().isoformat()
    except (TypeError, ValueError):
        return None


def hostnames(nodelist):
    """Slurm's compressed node list ("gpu[01-03,07],login1") as names; a form it does not know stays as given."""
    names = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", nodelist or ""):
        match = re.fullmatch(r"([^\[]*)\[([0-9,\-]+)\](.*)", part)
        if not match:
            names.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for piece in ranges.split(","):
            low, _, high = piece.partition("-")
            width = len(low)
            for number in range(int(low), int(high or low) + 1):
                names.append(f"{prefix}{number:0{width}d}{suffix}")
    return names


def allocation(record, final):
    """What Slurm gave the job (from its scontrol or sacct record), or None before it started."""
    nodes = record.get("NodeList", "")
    start = _when(record.get("StartTime"))
    if not nodes or nodes == "(null)" or start is None or record.get("JobState") == "PENDING":
        return None
    node_count = int(record.get("NumNodes") or 1)
    tres = dict(part.split("=", 1) for part in record.get("TRES", record.get("AllocTRES", "")).split(",") if "=" in part)
    gpus = tres.get("gres/gpu")
    if gpus is None:  # not among the cluster's accounted TRES: what it asked per node, times its nodes
        per_node = re.search(r"gres[:/]gpu(?::[^:,]+)?:(\d+)", record.get("TresPerNode", ""))
        gpus = int(per_node[1]) * node_count if per_node else 0
    return {"nodes": nodes, "hosts": hostnames(nodes), "node_count": node_count, "gpus": int(gpus), "cpus": int(record.get("NumCPUs") or
                                                                                    tres.get("cpu") or 0),
            "start": start, "end": _when(record.get("EndTime")) if final else None,
            "time_limit": record.get("TimeLimit", "")}


def state_of(record):
    """The RemoteState of a job's scontrol (or sacct) record."""
    said = record.get("JobState", "").split()[0] if record.get("JobState") else ""
    status = STATES.get(said, remote.RUNNING)
    reason = record.get("Reason", "None")
    code = exit_code(record.get("ExitCode"))
    if status == remote.PENDING:
        message = f"waiting: {reason} — {REASONS.get(reason, 'as Slurm gives it')}"
    elif said in ENDINGS:
        message = ENDINGS[said].format(TimeLimit=record.get("TimeLimit", "?"), NodeList=record.get("NodeList", "?"))
    elif status == remote.FAILED:
        why = f" ({reason})" if reason not in ("None", "NonZeroExitCode", "") else ""
        message = f"{said}: its batch script ended with exit code {code}{why}"
    else:
        message = ""
    final = status in (remote.SUCCEEDED, remote.FAILED, remote.STOPPED)
    return RemoteState(status=status, message=message, exit_code=code if final else None, said=said,
                       allocation=allocation(record, final))


class SlurmExecutor(RemoteExecutor):
    name = "slurm"

    def submit(self, cluster, submission):
        taken = self._taken(cluster, submission)
        if taken:
            return taken
        Path(submission.job_dir).mkdir(parents=True, exist_ok=True)  # where Slurm opens the output file
        code, out, err = run(cluster, ["sbatch", "--parsable"], stdin=batch_script(submission))
        if code != 0:
            raise Refused(_short(err or out))
        return out.strip().split(";")[0]

    def _taken(self, cluster, submission):
        """The Slurm job id of `submission` when Slurm already has it (its transaction was lost), else ""."""
        job = submission.metadata.get("yardstick_job", "")
        code, out, _err = run(cluster, ["squeue", "--noheader", f"--name=yardstick-{job}", "--format=%i|%k"])
        for line in out.splitlines() if code == 0 else ():
            slurm_id, _, comment = line.partition("|")
            if comment.strip() == submission.id:
                return slurm_id.strip()
        return ""

    def record(self, cluster, remote_id):
        """The job's record: scontrol's, else sacct's (where the cluster keeps accounting); None when neither knows
        it."""
        code, out, err = run(cluster, ["scontrol", "show", "job", "--oneliner", remote_id])
        if code == 0 and out.strip():
            return fields(out.strip().splitlines()[0])
        if code != 0 and not UNKNOWN_JOB.search(err):
            raise Unreachable(f"scontrol: {_short(err)}")
        columns = ("JobID", "JobName", "State", "ExitCode", "Reason", "NodeList", "NNodes", "AllocTRES", "Start",
                   "End", "Timelimit", "NCPUS")
        code, out, _err = run(cluster, ["sacct", "--jobs", remote_id, "--allocations", "--noheader", "--parsable2",
                                        f"--format={','.join(columns)}"])
        rows = [line.split("|") for line in out.splitlines() if line.strip()] if code == 0 else []
        if not rows:
            return None
        row = dict(zip(columns, rows[0]))
        return {"JobState": row["State"].split()[0] if row["State"] else "", "ExitCode": row["ExitCode"],
                "Reason": row["Reason"], "NodeList": row["NodeList"], "NumNodes": row["NNodes"],
                "AllocTRES": row["AllocTRES"], "StartTime": row["Start"], "EndTime": row["End"],
                "TimeLimit": row["Timelimit"], "NumCPUs": row["NCPUS"]}

    def state(self, cluster, remote_id):
        record = self.record(cluster, remote_id)
        return None if record is None else state_of(record)

    def log(self, cluster, remote_id, job_dir=""):
        path = Path(job_dir) / f"slurm-{remote_id}.out"
        try:
            return path.read_text(errors="replace") if job_dir else ""
        except FileNotFoundError:
            return ""  # not started yet

    def cancel(self, cluster, remote_id):
        code, _out, err = run(cluster, ["scancel", "--signal=TERM", "--full", remote_id])
        if code != 0 and "pending" in err.lower():
            code, _out, err = run(cluster, ["scancel", remote_id])  # nothing runs yet to signal
        if code != 0 and not re.search(r"already completing or completed|invalid job id", err, re.I):
            raise Unreachable(f"scancel: {_short(err)}")

    def kill(self, cluster, remote_id):
        code, _out, err = run(cluster, ["scancel", remote_id])
        if code != 0 and not re.search(r"already completing or completed|invalid job id", err, re.I):
            raise Unreachable(f"scancel: {_short(err)}")
        return True

    def nodes(self, cluster):
        code, out, err = run(cluster, ["scontrol", "show", "node", "--oneliner"])
        if code != 0:
            raise Unreachable(f"scontrol: {_short(err)}")
        out_nodes = []
        for line in out.splitlines():
            row = fields(line)
            if not row.get("NodeName"):
                continue
            gpus = re.search(r"gpu(?::[^:,(]+)?:(\d+)", row.get("Gres", ""))
            state = row.get("State", "")
            out_nodes.append(RemoteNode(name=row["NodeName"], address=row.get("NodeAddr", ""),
                                        alive=not re.search(r"DOWN|NOT_RESPONDING|FAIL|DRAIN|INVALID", state),
                                        head=False, gpus=float(gpus[1]) if gpus else 0.0,
                                        cpus=float(row.get("CPUTot") or 0)))
        return sorted(out_nodes, key=lambda n: n.name)


def _short(text):
    text = str(text).strip() or "no message"
    return text if len(text) <= 500 else text[:500] + "…"
