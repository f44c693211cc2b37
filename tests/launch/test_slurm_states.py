"""What a Slurm job's record says, as the follower reads it (launch/on_slurm.py state_of): the states this one-node
test cluster cannot bring about (a node failing, memory running out, preemption), from records shaped as
`scontrol show job --oneliner` prints them."""

import pytest

from launch.on_slurm import fields, state_of

LINE = ("JobId=41 JobName=yardstick-7 JobState={state} Reason={reason} ExitCode={code} RunTime=00:10:00 "
        "TimeLimit=02:00:00 StartTime=2026-12-03T10:00:00 EndTime=2026-12-03T10:10:00 NodeList=gpu[01-02] "
        "NumNodes=2 NumCPUs=64 TRES=cpu=64,node=2,billing=64,gres/gpu=16 Comment=yardstick-job-7-1")


@pytest.mark.parametrize("state, reason, code, status, message, exit_code", [
    ("OUT_OF_MEMORY", "OutOfMemory", "0:125", "FAILED",
     "OUT_OF_MEMORY: a process of it used more memory than it asked for, and Slurm killed it", 125),
    ("NODE_FAIL", "NodeDown", "0:0", "FAILED", "NODE_FAIL: a node of its allocation (gpu[01-02]) failed", 0),
    ("PREEMPTED", "None", "0:15", "FAILED", "PREEMPTED: a job of higher priority took its resources", -15),
    ("TIMEOUT", "TimeLimit", "0:15", "FAILED",
     "TIMEOUT: it ran past its time limit (02:00:00) and Slurm ended it", -15),
    ("FAILED", "NonZeroExitCode", "2:0", "FAILED", "FAILED: its batch script ended with exit code 2", 2),
    ("COMPLETED", "None", "0:0", "SUCCEEDED", "", 0),
    ("CANCELLED", "None", "0:9", "STOPPED", "", -9),
    ("PENDING", "QOSMaxGRESPerUser", "0:0", "PENDING",
     "waiting: QOSMaxGRESPerUser — its user holds the most GPUs (GRES) the QOS allows", None),
    ("PENDING", "SomethingNew", "0:0", "PENDING", "waiting: SomethingNew — as Slurm gives it", None),
])
def test_slurms_states_map_onto_the_followers_keeping_slurms_word_and_reason(state, reason, code, status, message,
                                                                             exit_code):
    got = state_of(fields(LINE.format(state=state, reason=reason, code=code)))
    assert (got.status, got.said, got.message, got.exit_code) == (status, state, message, exit_code)


def test_the_allocation_counts_the_gpus_slurm_gave_on_every_node():
    got = state_of(fields(LINE.format(state="COMPLETED", reason="None", code="0:0"))).allocation
    assert (got["nodes"], got["hosts"], got["node_count"], got["gpus"], got["cpus"]) == (
        "gpu[01-02]", ["gpu01", "gpu02"], 2, 16, 64)
    assert got["start"].startswith("2026-12-03T10:00:00") and got["end"].startswith("2026-12-03T10:10:00")
    pending = state_of(fields(LINE.format(state="PENDING", reason="Priority", code="0:0")))
    assert pending.allocation is None, "nothing is given before it starts"
