"""Continue: a job starts from another job's checkpoint (init_from) instead of its environment's base policy."""

import json

import pytest
import torch
from django.test import Client

from tests.trainer.helpers import TINY
from trainer import runner
from trainer.models import Job
from yardstick.inputs import InputError


@pytest.fixture
def finished(make_job):
    job = runner.run(make_job(steps=4).pk)
    assert job.status == "completed", job.error
    return job


def test_a_continued_job_trains_on_another_env_from_the_final_checkpoint(finished, make_job, data_dir):
    job = Job.start(name="next", team="research", env="toolcalc", config={**TINY, "steps": 2},
                    init_from=finished.pk, enqueue=False)
    assert (job.init_from_id, job.init_step) == (finished.pk, 4)
    job = runner.run(job.pk)

    assert job.status == "completed", job.error
    assert job.steps_done == 2 and job.baseline_pass1 is not None
    # It started from the arithmetic job's policy: that is its KL reference, kept in its own checkpoint.
    source = torch.load(runner.checkpoint_path(finished, 4), weights_only=True)["model"]
    mine = torch.load(runner.latest_checkpoint(job), weights_only=True)
    for name, weight in source.items():
        torch.testing.assert_close(mine["reference"][name], weight)
    # No toolcalc base policy was built for it.
    assert not (data_dir / "models" / "base-toolcalc.pt").exists()
    assert job.to_dict()["init_from"] == finished.pk and job.to_dict()["init_step"] == 4


def test_any_kept_checkpoint_can_be_chosen(finished):
    job = Job.start(name="next", team="research", env="arithmetic", config={**TINY, "steps": 1},
                    init_from=str(finished.pk), init_step=2, enqueue=False)
    assert job.init_step == 2
    job = runner.run(job.pk)
    source = torch.load(runner.checkpoint_path(finished, 2), weights_only=True)["model"]
    reference = torch.load(runner.latest_checkpoint(job), weights_only=True)["reference"]
    torch.testing.assert_close(reference["wte.weight"], source["wte.weight"])


@pytest.mark.parametrize("init_from, init_step, field, says", [
    (999999, None, "init_from", "there is no job 999999"),
    ("x", None, "init_from", "must be the id of an ended job"),
    (True, None, "init_from", "must be the id of an ended job"),
    ("SOURCE", 3, "init_step", "must be one of the checkpoint steps job"),
    ("SOURCE", "two", "init_step", "(2, 4)"),
    (None, 2, "init_step", "init_step needs init_from"),
])
def test_bad_init_from_names_the_field_and_creates_nothing(finished, init_from, init_step, field, says):
    before = Job.objects.count()
    with pytest.raises(InputError) as err:
        Job.start(name="n", team="t", env="arithmetic", config=TINY, enqueue=False,
                  init_from=finished.pk if init_from == "SOURCE" else init_from, init_step=init_step)
    assert err.value.field == field and says in err.value.message
    assert Job.objects.count() == before


def test_a_job_that_has_not_ended_cannot_be_continued(make_job):
    queued = make_job()
    assert not queued.can_continue
    with pytest.raises(InputError, match=r"init_from: job \d+ is queued; only an ended job"):
        Job.start(name="n", team="t", env="arithmetic", config=TINY, enqueue=False, init_from=queued.pk)


def test_the_api_starts_a_continued_job_and_refuses_bad_init_from(finished, operator):
    client = Client()
    client.force_login(operator)
    body = {"name": "next", "team": "research", "env": "toolcalc", "config": {**TINY, "steps": 2},
            "init_from": finished.pk, "device": "cpu"}
    bad = client.post("/api/jobs", json.dumps({**body, "init_step": 5}), content_type="application/json")
    assert bad.status_code == 400 and bad.json()["field"] == "init_step"
    resp = client.post("/api/jobs", json.dumps(body), content_type="application/json")
    assert resp.status_code == 201, resp.content
    assert (resp.json()["init_from"], resp.json()["init_step"]) == (finished.pk, 4)
    from tests.trainer.helpers import purge_jobs_queue

    purge_jobs_queue()


def test_a_job_whose_source_was_deleted_fails_instead_of_training_from_the_base(finished):
    job = Job.start(name="next", team="research", env="arithmetic", config={**TINY, "steps": 1},
                    init_from=finished.pk, enqueue=False)
    Job.objects.filter(pk=finished.pk).delete()
    job = runner.run(job.pk)
    assert job.status == "failed" and "the job it continues was deleted" in job.error
    assert job.steps_done == 0
