"""The run-context provider: where a run runs, as tags on the run.

Yardstick reads these to match the run to the GPU holders its node agents
record: on `yardstick.host`, the holders whose process is `yardstick.pid` or
descends from it (ranks, rollout workers); on any node, the holders whose
environment carries the same launcher id (the other nodes of a multi-node run).
"""

import os
import socket

from mlflow.tracking.context.abstract_context import RunContextProvider

# Tag name -> the environment variable a launcher sets for every process of one job.
LAUNCHER_TAGS = {
    "yardstick.torchelastic_run_id": "TORCHELASTIC_RUN_ID",  # torchrun / torch.distributed.elastic
    "yardstick.slurm_job_id": "SLURM_JOB_ID",
    "yardstick.ray_job_id": "RAY_JOB_ID",
}


def run_context_tags(environ=None):
    """The tags for a run started by this process."""
    environ = os.environ if environ is None else environ
    tags = {
        # The node name its agent records holders under (collector.agent.sources.node_name).
        "yardstick.host": environ.get("YARDSTICK_NODE", "").strip() or socket.gethostname(),
        "yardstick.pid": str(os.getpid()),
        "yardstick.ppid": str(os.getppid()),
    }
    for tag, var in LAUNCHER_TAGS.items():
        value = environ.get(var, "").strip()
        if value:
            tags[tag] = value
    return tags


class YardstickRunContext(RunContextProvider):
    def in_context(self):
        return True  # every run has a host and a process

    def tags(self):
        return run_context_tags()
