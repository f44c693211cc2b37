"""Binding an external run to devices by hand (no yardstick-mlflow in its environment), on its job page."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import log_in, user_in_role
from tracking import store
from tracking.matching import BOUND_PID, match_runs
from trainer.models import Stint

START = timezone.now().replace(microsecond=0) - timedelta(minutes=30)


@pytest.fixture
def fleet(db):
    from collector.models import Device, Node

    now = timezone.now()
    node = Node.objects.create(name="gpu-7", labels={}, first_seen=now, registered_at=now)
    other = Node.objects.create(name="gpu-8", labels={}, first_seen=now, registered_at=now)
    for n, i in ((node, 0), (node, 1), (other, 0)):
        Device.objects.create(uuid=f"GPU-{n.name}-{i}", node=n, index=i, model="NVIDIA H200", source="nvml",
                              first_seen=now, registered_at=now)
    return node


def start_run():
    return store.create_run("0", start_time=int(START.timestamp() * 1000))


def bound(run):
    return list(Stint.objects.filter(job=run.job).order_by("device")
                .values_list("node", "device", "pid", "started_at", "ended_at"))


def test_an_operator_binds_a_run_to_devices_of_a_node_from_its_start(client, operator, fleet):
    run = start_run()
    client.force_login(operator)

    response = client.post(f"/jobs/{run.job_id}/bind", {"node": "gpu-7", "device": ["GPU-gpu-7-0", "GPU-gpu-7-1"]})

    assert response.status_code == 302 and response.url == f"/jobs/{run.job_id}"
    assert bound(run) == [("gpu-7", "GPU-gpu-7-0", BOUND_PID, START, None), ("gpu-7", "GPU-gpu-7-1", BOUND_PID, START, None)]
    client.post(f"/jobs/{run.job_id}/bind", {"node": "gpu-7", "device": ["GPU-gpu-7-0"]})
    assert len(bound(run)) == 2, "binding a device twice adds nothing"


def test_a_device_of_another_node_is_refused_with_the_nodes_devices_named(client, operator, fleet):
    run = start_run()
    client.force_login(operator)

    response = client.post(f"/jobs/{run.job_id}/bind", {"node": "gpu-7", "device": ["GPU-gpu-8-0"]}, follow=True)

    assert bound(run) == []
    assert ("Not bound: device 'GPU-gpu-8-0' is not on node 'gpu-7'; its devices are GPU-gpu-7-0, GPU-gpu-7-1."
            in [str(m) for m in response.context["messages"]])


def test_a_viewer_cannot_bind(client, viewer, fleet):
    run = start_run()
    client.force_login(viewer)

    assert client.post(f"/jobs/{run.job_id}/bind", {"node": "gpu-7", "device": ["GPU-gpu-7-0"]}).status_code == 403
    assert bound(run) == []


def test_bound_devices_are_released_when_the_run_ends_and_holder_matching_leaves_them_alone(client, operator, fleet):
    run = start_run()
    client.force_login(operator)
    client.post(f"/jobs/{run.job_id}/bind", {"node": "gpu-7", "device": ["GPU-gpu-7-0"]})
    match_runs()  # no holder is seen for it: a bound stint is not "gone"
    assert bound(run)[0][4] is None
    end = START + timedelta(minutes=20)
    store.update_run(run.run_id, status="FINISHED", end_time=int(end.timestamp() * 1000))

    match_runs()

    assert bound(run) == [("gpu-7", "GPU-gpu-7-0", BOUND_PID, START, end)]


@pytest.mark.browser
def test_the_bind_form_on_an_external_jobs_page_binds_the_checked_gpu(  # noqa: F811
        live_server, page, django_user_model, fleet, output_dir, request):
    run = start_run()
    user_in_role(django_user_model, "olga", "operator")

    log_in(page, live_server.url, "olga", f"/jobs/{run.job_id}")
    form = page.locator("#bind-run fieldset", has_text="gpu-7")
    form.get_by_label("GPU 1 · NVIDIA H200").check()
    form.get_by_role("button", name="Bind to gpu-7").click()
    page.wait_for_load_state()

    assert page.locator(".messages, .flash, [role=status]").filter(has_text="bound to NVIDIA H200 on gpu-7").count() >= 1
    rows = page.locator("#stints-body tr")
    assert rows.count() == 1 and "gpu-7" in rows.first.inner_text() and "running" in rows.first.inner_text()
    page.screenshot(path=str(output_dir / f"{request.node.name}.png"), full_page=True)
    assert bound(run) == [("gpu-7", "GPU-gpu-7-1", BOUND_PID, START, None)]
