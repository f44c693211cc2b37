"""Where a launched job runs: the executor interface and its registry.

A recipe (or a launch) names its executor; everything else about the job is the same whichever runs it: the
parameters, the MLflow run and its scoped token, the output log, the stop steps, Resume and Continue, budget and
stop-loss. Two kinds of executor implement the interface:

- the node executor (launch/kind.py `NodeExecutor`, with launch/executor.py on the node): Yardstick places the job
  on a GPU node's launch worker with free devices, and that worker starts the argv as a process group;
- a remote executor (launch/remote.py `RemoteExecutor`): a scheduler places the job; Yardstick submits it, then
  follows it by polling (state, log, stop), holding nothing in memory, so a restarted control plane picks up where
  it was. Ray (launch/on_ray.py, its Jobs API) and Slurm (launch/on_slurm.py, sbatch / scontrol / sacct / scancel)
  are the two; another scheduler is one more module of that shape and one line in launch/apps.py.
"""

from yardstick.inputs import InputError


class Executor:
    """One way of running a launched job. `name` is what a recipe's `executor` field says."""

    name = ""
    # True when a scheduler outside Yardstick places the job and gives it its devices (a cluster's executor).
    remote = False

    def place(self, definition, *, node="", pool="", cluster=None, job=None):
        """Where a launch of `definition` goes now: a trainer.workers.Placement (launch.kind.LaunchPlacement).
        None when the job is to wait in the line (trainer/queue.py) for its devices. Raise InputError naming what
        nobody can meet. `job`: a job being resumed."""
        raise NotImplementedError

    def dispatch(self, job, placement):
        """Send `job` to run at `placement` once the transaction commits; write on its Launch where it went."""
        raise NotImplementedError

    def held_on(self, workers):
        """{node: what this executor's live jobs hold there} for the nodes of Yardstick's `workers`: {"gpus": {index:
        job id}, "cores": {job id: cores}} (trainer.kinds.Kind.held_on). A scheduler's jobs hold nothing of them."""
        return {w.host: {"gpus": {}, "cores": {}} for w in workers}


_EXECUTORS = {}


def register(executor):
    """Make `executor` the one for recipes whose executor field is `executor.name` (launch/apps.py)."""
    _EXECUTORS[executor.name] = executor
    return executor


def executor_named(name, field="executor"):
    """The registered Executor called `name`; InputError naming the ones there are."""
    try:
        return _EXECUTORS[name or "node"]
    except KeyError:
        raise InputError(field, f"there is no executor {name!r}; executors: {', '.join(sorted(_EXECUTORS))}") from None


def executors():
    return list(_EXECUTORS.values())
