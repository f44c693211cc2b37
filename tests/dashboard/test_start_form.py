"""The Start form: presets, and every bad field named with what is accepted (the trainer's own messages)."""

from decimal import Decimal

from trainer.models import Job


def test_it_starts_a_job_from_a_preset_with_the_form_overrides(operator_client, operator, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        resp = operator_client.post("/jobs/start", {
            "preset": "smoke", "name": "from the form", "team": "research", "env": "arithmetic",
            "steps": "7", "prompts_per_step": "4", "group_size": "2", "lr": "0.0005", "kl_coef": "0.02",
            "eval_every": "2", "budget_usd": "12.50", "device": "cpu",
        })
    job = Job.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}"
    assert (job.name, job.team, job.env, job.device, job.budget_usd) == ("from the form", "research", "arithmetic", "cpu",
                                                                         Decimal("12.50"))
    assert job.config["steps"] == 7 and job.config["max_new_tokens"] == 12, "the preset supplies the rest"
    assert job.created_by == operator and job.status == "queued"
    assert callbacks, "enqueued after commit, like the API"


def test_it_names_each_bad_field_and_creates_nothing(operator_client):
    resp = operator_client.post("/jobs/start", {
        "preset": "smoke", "name": "", "team": "research", "env": "arithmetic",
        "steps": "0", "prompts_per_step": "four", "group_size": "2", "lr": "-1", "kl_coef": "0.02",
        "eval_every": "2", "budget_usd": "-3", "device": "tpu",
    })
    assert resp.status_code == 400
    errors = resp.context["form_errors"]
    assert set(errors) == {"name", "steps", "prompts_per_step", "lr", "budget_usd", "device"}
    assert errors["steps"] == "steps must be an integer from 1 to 100000, got 0"
    assert errors["prompts_per_step"] == "prompts_per_step must be an integer from 1 to 4096, got 'four'"
    assert errors["device"] == "device must be auto, cpu, cuda or cuda:N, got 'tpu'"
    assert "budget_usd must be a number of dollars >= 0" in errors["budget_usd"]
    html = resp.content.decode()
    assert 'aria-invalid="true"' in html and "fix 6 fields" in html
    assert 'value="four"' in html, "what was typed stays in the form"
    assert Job.objects.count() == 0


def test_the_form_and_the_api_give_the_same_message(operator_client):
    import json

    api = operator_client.post("/api/jobs", json.dumps({"name": "x", "team": "t", "env": "arithmetic",
                                                        "config": {"steps": 0}}), content_type="application/json")
    form = operator_client.post("/jobs/start", {"preset": "smoke", "name": "x", "team": "t", "env": "arithmetic",
                                                "steps": "0"})
    assert api.json()["error"] == form.context["form_errors"]["steps"]


def test_a_viewer_cannot_start(viewer_client):
    resp = viewer_client.post("/jobs/start", {"preset": "smoke", "name": "x", "team": "t"})
    assert resp.status_code == 403 and Job.objects.count() == 0


def test_a_device_no_jobs_worker_has_is_named_on_the_form_with_what_they_have(operator_client):
    from trainer.models import Worker

    Worker.report("jobs@host-a", "host-a", ["jobs"], ["cpu"], cores=2)
    resp = operator_client.post("/jobs/start", {"preset": "smoke", "name": "gpu run", "team": "research",
                                                "env": "arithmetic", "device": "cuda", "devices": "x",
                                                "node": "host-z"})
    assert resp.status_code == 400
    assert resp.context["form_errors"] == {
        "devices": "devices must be a whole number from 1 to 64, got 'x'",
        "node": "no jobs worker is on node host-z: workers have jobs@host-a on host-a: 2 cores, shared; use one "
                "of their nodes, or none for any",
        "device": "device cuda is not on any jobs worker: workers have jobs@host-a on host-a: 2 cores, shared; use "
                  "auto or one of those"}
    assert Job.objects.count() == 0


def test_required_fields_are_marked_and_hyperparameters_have_human_labels(operator_client):
    from html.parser import HTMLParser

    class Fields(HTMLParser):
        def __init__(self):
            super().__init__()
            self.inputs, self.labels, self.label_for, self.text = {}, {}, None, ""

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag in ("input", "select") and attrs.get("id", "").startswith("f-"):
                self.inputs[attrs["name"]] = attrs
            if tag == "label":
                self.label_for, self.text = attrs.get("for"), ""

        def handle_data(self, data):
            if self.label_for:
                self.text += data

        def handle_endtag(self, tag):
            if tag == "label" and self.label_for:
                self.labels[self.label_for.removeprefix("f-")] = " ".join(self.text.split())
                self.label_for = None

    page = Fields()
    page.feed(operator_client.get("/jobs").content.decode())
    required = {name for name, attrs in page.inputs.items() if "required" in attrs}
    assert required == {"name", "team", "env"}
    assert all(page.inputs[n]["aria-required"] == "true" for n in required)
    assert all(page.labels[n].endswith("*") for n in required) and not page.labels["budget_usd"].endswith("*")
    assert page.labels["steps"] == "Training steps (GRPO updates)" and page.labels["kl_coef"] == "KL penalty coefficient"
    assert page.labels["prompts_per_step"] == "Prompts per step" and page.inputs["prompts_per_step"]["title"] == "prompts_per_step"
    assert not any("_" in page.labels[n] for n in ("prompts_per_step", "group_size", "kl_coef", "eval_every"))


def test_a_nul_in_a_field_is_a_400_naming_the_field_and_creates_nothing(operator_client):
    # PostgreSQL cannot store NUL in text: this was a DataError (500).
    resp = operator_client.post("/jobs/start", {"preset": "smoke", "name": "a\x00b", "team": "research",
                                                "env": "arithmetic", "device": "cpu"})
    assert resp.status_code == 400
    assert "name contains a NUL (U+0000) character; it must be text without" in resp.content.decode()
    assert not Job.objects.exists()


def test_a_step_count_past_any_real_run_is_named_not_accepted(operator_client):
    # 10^4300 steps was accepted by the form (and 99,999,999,999 ran, blocking the one-slot jobs queue).
    for steps in ("1" + "0" * 4300, "99999999999", "100001"):
        resp = operator_client.post("/jobs/start", {"preset": "smoke", "name": "big", "team": "research",
                                                    "env": "arithmetic", "device": "cpu", "steps": steps})
        assert resp.status_code == 400
        assert resp.context["form_errors"]["steps"].startswith("steps must be an integer from 1 to 100000, got ")
    assert not Job.objects.exists()


def test_a_refused_form_uses_up_no_job_id(operator_client):
    good = {"preset": "smoke", "name": "ok", "team": "research", "env": "arithmetic", "device": "cpu"}
    operator_client.post("/jobs/start", good)
    first = Job.objects.get()

    refused = operator_client.post("/jobs/start", {**good, "steps": "0"})
    operator_client.post("/jobs/start", good)

    assert refused.status_code == 400 and set(refused.context["form_errors"]) == {"steps"}
    assert list(Job.objects.order_by("pk").values_list("pk", flat=True)) == [first.pk, first.pk + 1]
