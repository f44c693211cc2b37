"""Where a launch is placed, and what a refusal says: a GPU nobody has is not a GPU somebody holds."""

import sys

import pytest

from launch.kind import start
from trainer.models import Worker
from yardstick.inputs import InputError

PY = sys.executable
H100 = {"index": 0, "uuid": "GPU-22222222-bbbb-4000-8000-000000000001", "name": "NVIDIA H100", "memory_mib": 81920}


def test_a_gpu_recipe_on_a_machine_without_gpus_says_no_worker_has_one_not_to_wait(db, recipe, operator):
    Worker.report("launch@laptop", "laptop", ["launch@laptop"], ["cpu"], cores=8)
    recipe("gpu", [PY, "-c", "pass"], devices={"kind": "cuda", "count": 1})

    with pytest.raises(InputError) as refused:
        start(recipe="gpu", team="research", created_by=operator)

    assert refused.value.field == "devices"
    assert refused.value.message.startswith("needs 1 × GPU; no launch worker has a cuda device in the shared pool: "
                                            "launch@laptop: no GPUs; 8 of 8 cores free;")
    assert "wait" not in refused.value.message


def test_two_gpus_on_a_one_gpu_node_is_more_than_any_worker_has(db, recipe, operator):
    Worker.report("launch@gpu-a", "gpu-a", ["launch@gpu-a"], ["cpu"], cores=8, gpus=[H100])
    recipe("two", [PY, "-c", "pass"], devices={"kind": "cuda", "count": 2})

    with pytest.raises(InputError, match=r"^needs 2 × GPUs; no launch worker has 2 GPUs in the shared pool") as refused:
        start(recipe="two", team="research", created_by=operator)
    assert "wait" not in refused.value.message


def test_a_gpu_held_by_another_job_is_busy_and_the_launch_waits_in_line_for_it(db, recipe, operator):
    Worker.report("launch@gpu-a", "gpu-a", ["launch@gpu-a"], ["cpu"], cores=8, gpus=[H100])
    recipe("gpu", [PY, "-c", "pass"], devices={"kind": "cuda", "count": 1})
    first = start(recipe="gpu", team="research", created_by=operator)

    second = start(recipe="gpu", team="research", created_by=operator)

    assert (first.in_line, first.launch.gpus, second.in_line, second.launch.worker) == (False, [0], True, "")
    assert second.status_note == ("waiting for 1 × GPU in the shared pool: 1st in line (every GPU that would do is "
                                  "held)")


def test_a_launch_refused_for_a_deleted_experiment_uses_up_no_job_id(db, recipe, operator):
    from tracking import store

    Worker.report("launch@laptop", "laptop", ["launch@laptop"], ["cpu"], cores=8)
    recipe("script", [PY, "-c", "pass"])
    store.set_experiment_stage(store.create_experiment("gone").pk, "deleted")
    first = start(recipe="script", team="research", created_by=operator)

    with pytest.raises(InputError, match="^env: the experiment 'gone' is deleted") as refused:
        start(recipe="script", team="research", env="gone", created_by=operator)
    second = start(recipe="script", team="research", created_by=operator)

    assert refused.value.field == "env" and second.pk == first.pk + 1
