"""The clusters on the pages, without a browser: /clusters (an admin registers one through the form; a bad value is
named beside its field with the typed values kept and nothing stored; others read and are refused a POST), a
cluster's page (its nodes as it reports them, or plainly that it did not answer; its jobs; Forget, refused while it
runs a job), a launch on a Ray cluster on the job page (where it runs, what Ray says, the unreachable label), the
Start form's Cluster select and the recipe page's "runs on". No page ever holds a header's value, only its name."""

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import Client
from django.utils import timezone

from launch import kind
from launch.models import Cluster, Launch, Recipe
from tests.dashboard.builders import node
from trainer.models import Job, Status

# Nothing listens on the discard port: a cluster there does not answer, at once.
NOWHERE = "http://127.0.0.1:9"
SECRETS = ("Bearer s3cret-t0ken", "pr0xy-key-value")
HEADERS = f"Authorization: {SECRETS[0]}\n\nX-Proxy-Key:  {SECRETS[1]}  \n"
RAY_RECIPE = {"argv": ["{python}", "-c", "print('on ray')"], "executor": "ray", "cluster": "gpu-a",
              "devices": {"kind": "cpu", "count": 1}}


def logged_in(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin_client(admin_user):
    return logged_in(admin_user)


@pytest.fixture
def gpu_a(admin_user):
    return Cluster.register({"name": "gpu-a", "address": NOWHERE, "headers": {"Authorization": SECRETS[0]}},
                            admin_user)[0]


def register_post(**fields):
    return {"name": "gpu-a", "kind": "ray", "address": NOWHERE + "/", "python": "/opt/venv/bin/python",
            "description": "the lab's Ray cluster", "headers": HEADERS, **fields}


def flat(html):
    """The HTML with each run of white space one space: what the assertions read."""
    return " ".join(html.split())


def part(html, start, end):
    """The (flat) part of `html` from `start` to the first `end` after it."""
    html = flat(html)
    at = html.index(start)
    return html[at:html.index(end, at)]


def no_secret_in(html):
    for secret in SECRETS:
        assert secret not in html


def test_an_admin_registers_a_cluster_through_the_form_and_no_page_shows_a_header_value(
        admin_client, admin_user, operator):
    resp = admin_client.post("/clusters", register_post())
    assert resp.status_code == 302 and resp["Location"] == "/clusters/gpu-a"
    cluster = Cluster.objects.get()
    assert (cluster.name, cluster.kind, cluster.address, cluster.python, cluster.description, cluster.created_by) == (
        "gpu-a", "ray", NOWHERE, "/opt/venv/bin/python", "the lab's Ray cluster", admin_user)
    assert cluster.headers == {"Authorization": SECRETS[0], "X-Proxy-Key": SECRETS[1]}, "values as typed, trimmed"

    page = admin_client.get("/clusters/gpu-a")
    html = page.content.decode()
    assert "Cluster gpu-a registered." in html
    assert '<td id="cluster-headers"><code>Authorization</code>, <code>X-Proxy-Key</code>' in flat(html)
    no_secret_in(html)
    listing = admin_client.get("/clusters").content.decode()
    row = part(listing, '<tr data-cluster="gpu-a">', "</tr>")
    assert f"<code>{NOWHERE}</code>" in row and "<code>/opt/venv/bin/python</code>" in row
    assert '<code>Authorization</code>, <code>X-Proxy-Key</code>' in row
    assert "not asked yet: no job has run on it" in row
    assert 'class="num">0</td>' in row, "no live jobs"
    no_secret_in(listing)
    assert 'id="f-headers" name="headers"' in listing and "></textarea>" in listing, "the textarea starts empty"

    # Registering the name again changes it; a refused change shows the form again without the values typed.
    resp = admin_client.post("/clusters", register_post(python="x" * 1001))
    assert resp.status_code == 400
    html = resp.content.decode()
    assert 'id="e-python">python must be text of at most 1000 characters' in html
    assert "Type the headers again</strong> (Authorization, X-Proxy-Key)" in html
    no_secret_in(html)
    assert Cluster.objects.get().python == "/opt/venv/bin/python", "nothing changed"
    Recipe.define("on-ray", RAY_RECIPE, admin_user)
    for client in (admin_client, logged_in(operator)):
        for url in ("/jobs?what=recipe:on-ray", "/recipes/on-ray", "/clusters", "/clusters/gpu-a"):
            no_secret_in(client.get(url).content.decode())


def test_a_bad_address_is_named_beside_its_field_with_the_values_kept_and_nothing_stored(admin_client):
    resp = admin_client.post("/clusters", register_post(name="gpu-b", address="ftp://x"))
    assert resp.status_code == 400
    html = resp.content.decode()
    assert resp.context["errors"] == {"address": "address must be the dashboard's http(s)://host:port (Ray's is port "
                                                 "8265), got 'ftp://x'"}
    assert ('<input id="f-address" name="address" value="ftp://x" spellcheck="false" autocomplete="off" '
            'placeholder="http://ray-head:8265" required aria-required="true" aria-invalid="true" '
            'aria-describedby="e-address">') in flat(html)
    assert ('<span class="field-error" id="e-address">address must be the dashboard&#x27;s http(s)://host:port (Ray&#x27;s '
            'is port 8265), got &#x27;ftp://x&#x27;</span>') in html
    assert 'value="gpu-b"' in html and 'value="the lab&#x27;s Ray cluster"' in html and 'value="/opt/venv/bin/python"' in html
    no_secret_in(html)
    assert not Cluster.objects.exists()

    # A headers line that is no "Name: value" is named by its number, never echoed (it may be a pasted secret).
    resp = admin_client.post("/clusters", register_post(headers=f"Authorization: x\n{SECRETS[1]}"))
    assert resp.status_code == 400
    assert resp.context["errors"] == {"headers": "headers: line 2 is not 'Name: value' (one header a line, e.g. "
                                                 "'Authorization: Bearer …')"}
    assert 'id="e-headers"' in resp.content.decode()
    no_secret_in(resp.content.decode())
    resp = admin_client.post("/clusters", register_post(headers="Bad Name: x"))
    assert resp.context["errors"] == {"headers": "header names are letters, digits and '-', got 'Bad Name'"}
    assert not Cluster.objects.exists()


def test_a_viewer_sees_the_clusters_but_no_form_and_a_post_is_refused(viewer_client, gpu_a):
    html = viewer_client.get("/clusters").content.decode()
    assert '<tr data-cluster="gpu-a">' in html and '<a href="/clusters">Clusters</a>' not in html
    assert 'aria-current="page">Clusters</a>' in html, "the nav link, current"
    assert 'id="register-cluster"' not in html and 'name="headers"' not in html and "<textarea" not in html
    page = viewer_client.get("/clusters/gpu-a").content.decode()
    assert 'id="forget-cluster"' not in page
    for url, form in (("/clusters", register_post(name="mine")), ("/clusters/gpu-a/forget", {})):
        resp = viewer_client.post(url, form)
        assert resp.status_code == 403 and "This needs the admin role" in resp.content.decode(), url
    assert list(Cluster.objects.values_list("name", flat=True)) == ["gpu-a"]


def test_the_page_of_a_cluster_that_does_not_answer_says_so(viewer_client, gpu_a):
    resp = viewer_client.get("/clusters/gpu-a")
    assert resp.status_code == 200
    html = resp.content.decode()
    error = html[html.index('<p class="error" role="alert" id="nodes-error">'):]
    assert error.split(">", 1)[1].startswith("the cluster did not answer: ")
    assert 'id="nodes-table"' not in html
    assert "No job has been launched on it." in html
    assert viewer_client.get("/clusters/nope").status_code == 404


# What a Ray dashboard's state API answers GET /api/v0/nodes with (ray.util.state's ListApiResponse, as Ray 2.x sends it).
RAY_NODES = [
    {"node_id": "a1", "node_ip": "10.0.0.5", "is_head_node": True, "state": "ALIVE", "state_message": None,
     "node_name": "10.0.0.5", "resources_total": {"CPU": 16.0, "GPU": 2.0, "memory": 1e11}, "labels": {}},
    {"node_id": "b2", "node_ip": "10.0.0.6", "is_head_node": False, "state": "DEAD", "state_message": "lost",
     "node_name": "gpu-w1", "resources_total": {"CPU": 8.0, "GPU": 0.5}, "labels": {}},
]


@pytest.fixture
def ray_dashboard():
    """A stand-in for a Ray head's dashboard on a free loopback port: the state API's node list (what the cluster page
    asks, over real HTTP through Ray's own client), and the headers each request carried."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append(dict(self.headers))
            if not self.path.startswith("/api/v0/nodes"):
                self.send_error(404)
                return
            body = json.dumps({"result": True, "msg": "", "data": {"result": {
                "result": RAY_NODES, "total": len(RAY_NODES), "num_after_truncation": len(RAY_NODES),
                "num_filtered": len(RAY_NODES), "partial_failure_warning": "", "warnings": None}}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", seen
    server.shutdown()
    server.server_close()


def test_the_page_of_a_cluster_lists_its_nodes_tied_to_yardstick_nodes_or_flagged_unmeasured(
        viewer_client, admin_user, ray_dashboard):
    address, seen = ray_dashboard
    Cluster.register({"name": "lab", "address": address, "headers": {"Authorization": SECRETS[0]}}, admin_user)
    head = node("gpu-head")
    head.labels = {"address": "10.0.0.5"}
    head.save(update_fields=["labels"])
    html = viewer_client.get("/clusters/lab").content.decode()
    assert seen and seen[0].get("Authorization") == SECRETS[0], "the cluster's headers go with the request"
    no_secret_in(html)
    assert 'id="nodes-error"' not in html
    assert part(html, '<tr data-node="10.0.0.5">', "</tr>") == (
        '<tr data-node="10.0.0.5"><th scope="row">10.0.0.5</th><td><code>10.0.0.5</code></td> <td>head</td><td>alive</td> '
        '<td class="num">2</td><td class="num">16</td> <td class="node-tie"><a href="/nodes/gpu-head">gpu-head</a></td>')
    worker = part(html, '<tr data-node="gpu-w1">', "</tr>")
    assert '<td>worker</td><td><span class="badge warn">dead</span></td> <td class="num">0.5</td><td class="num">8</td>' in worker
    assert "no telemetry from this node: its cost cannot be measured" in worker
    assert "1 node sends no telemetry to Yardstick" in flat(html)


@pytest.fixture
def ray_job(admin_user, operator, gpu_a, django_capture_on_commit_callbacks):
    """A job launched on gpu-a (start creates it queued and sends its follower after commit: no Ray needed)."""
    Recipe.define("on-ray", RAY_RECIPE, admin_user)
    with django_capture_on_commit_callbacks(execute=False):
        job = kind.start(recipe="on-ray", team="research", created_by=operator)
    return Job.objects.get(pk=job.pk)


def card_of(html):
    return part(html, 'id="launch-card"', "</section>")


def test_a_launch_on_a_ray_cluster_says_where_it_runs_and_that_its_cluster_is_unreachable(viewer_client, ray_job):
    card = card_of(viewer_client.get(f"/jobs/{ray_job.pk}").content.decode())
    assert 'on Ray cluster <a href="/clusters/gpu-a">gpu-a</a>' in card
    assert "not submitted yet" in card and 'id="launch-unreachable"' not in card
    assert "Not submitted yet: Yardstick fills version 1's argv when it submits the run to the cluster." in card
    assert "asked for 1 × CPU core; the cluster's scheduler gives them" in card and "not placed yet" not in card

    since = timezone.now() - timedelta(minutes=5)
    Launch.objects.filter(pk=ray_job.pk).update(remote_id=f"yardstick-job-{ray_job.pk}-1", remote_status="RUNNING",
                                                unreachable_since=since)
    for url in (f"/jobs/{ray_job.pk}", f"/jobs/{ray_job.pk}/part/launch"):
        card = card_of(viewer_client.get(url).content.decode())
        assert part(card, 'id="launch-unreachable"', "</p>") == (f'id="launch-unreachable" role="status"><strong>Cluster unreachable</strong> since '
                                           f'{since:%Y-%m-%d %H:%M:%S} UTC: the job is not failed; Yardstick follows it again '
                                           'when the cluster answers.')
        assert f"as <code>yardstick-job-{ray_job.pk}-1</code>; Ray says <code>RUNNING</code>" in card
    cluster_page = viewer_client.get("/clusters/gpu-a").content.decode()
    row = part(cluster_page, f'<tr data-job="{ray_job.pk}">', "</tr>")
    assert f'<a href="/jobs/{ray_job.pk}">#{ray_job.pk} on-ray</a>' in row and "cluster unreachable" in row
    assert f"<code>yardstick-job-{ray_job.pk}-1</code>" in row and "<td>RUNNING</td>" in row
    assert 'data-status="queued">queued</span>' in row

    # Ray's words when it failed it.
    Launch.objects.filter(pk=ray_job.pk).update(remote_status="FAILED", unreachable_since=None,
                                                remote_message="Job entrypoint command failed with exit code 3")
    card = card_of(viewer_client.get(f"/jobs/{ray_job.pk}").content.decode())
    assert 'id="launch-unreachable"' not in card
    assert 'id="launch-remote-message">Job entrypoint command failed with exit code 3</span>' in card


def test_forget_is_refused_while_the_cluster_runs_a_job_and_then_forgets_it(admin_client, ray_job):
    page = flat(admin_client.get("/clusters/gpu-a").content.decode())
    assert f'refused while it runs job <a href="/jobs/{ray_job.pk}">#{ray_job.pk}</a>: Yardstick follows them there' in page
    resp = admin_client.post("/clusters/gpu-a/forget", follow=True)
    assert resp.redirect_chain == [("/clusters/gpu-a", 302)]
    assert (f"Cluster gpu-a is not forgotten: it runs job #{ray_job.pk}, which Yardstick follows there. Stop them "
            "first.") in resp.content.decode()
    assert Cluster.objects.filter(name="gpu-a").exists()

    Job.objects.filter(pk=ray_job.pk).update(status=Status.FAILED)
    resp = admin_client.post("/clusters/gpu-a/forget", follow=True)
    assert resp.redirect_chain == [("/clusters", 302)]
    assert "Cluster gpu-a forgotten: its ended jobs keep their history." in resp.content.decode()
    assert not Cluster.objects.exists() and Launch.objects.get(pk=ray_job.pk).cluster is None
    card = card_of(admin_client.get(f"/jobs/{ray_job.pk}").content.decode())
    assert 'on Ray cluster <span class="muted">(since forgotten)</span>' in card


def test_the_start_form_offers_the_clusters_of_a_ray_recipe_and_names_a_bad_choice(
        operator_client, admin_user, gpu_a, django_capture_on_commit_callbacks):
    Cluster.register({"name": "gpu-b", "address": "http://ray-b:8265"}, admin_user)
    Recipe.define("on-ray", RAY_RECIPE, admin_user)
    Recipe.define("on-node", {"argv": ["echo", "hi"]}, admin_user)
    html = operator_client.get("/jobs?what=recipe:on-ray").content.decode()
    assert "Recipe on-ray (version 1) · needs 1 × CPU core · on a Ray cluster</option>" in flat(html)
    fields = part(html, 'data-what="recipe:on-ray"', "</fieldset>")
    assert '<select id="f-on-ray-cluster" name="cluster">' in fields
    assert "<option selected>gpu-a</option><option>gpu-b</option>" in fields, "the recipe's cluster by default"
    assert 'name="cluster"' not in part(html, 'data-what="recipe:on-node"', "</fieldset>"), "a node recipe has none"

    post = {"what": "recipe:on-ray", "name": "", "team": "research", "env": "", "budget_usd": "", "node": "",
            "pool": ""}
    resp = operator_client.post("/jobs/start", {**post, "cluster": "gpu-z"})
    assert resp.status_code == 400
    assert resp.context["form_errors"] == {"cluster": "there is no ray cluster 'gpu-z'; ray clusters: gpu-a, gpu-b"}
    html = resp.content.decode()
    assert ('<span class="field-error" id="e-on-ray-cluster">there is no ray cluster &#x27;gpu-z&#x27;; ray clusters: '
            'gpu-a, gpu-b</span>') in html
    assert '<a href="#f-on-ray-cluster">' in html, "the list of what to fix links to the select"
    assert '<option value="gpu-z" selected>gpu-z (not registered)</option>' in html, "the choice kept"
    assert not Job.objects.exists()

    with django_capture_on_commit_callbacks(execute=False) as sent:
        resp = operator_client.post("/jobs/start", {**post, "cluster": "gpu-b"})
    job = Job.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{job.pk}" and sent
    launch = Launch.objects.get(pk=job.pk)
    assert (launch.executor, launch.cluster.name) == ("ray", "gpu-b")


def test_the_recipe_page_says_where_a_recipe_runs(viewer_client, admin_user, gpu_a):
    Recipe.define("on-ray", {**RAY_RECIPE, "shared_dir": "/mnt/shared/ys", "working_dir": "/src/train"}, admin_user)
    Recipe.define("on-other", {**RAY_RECIPE, "cluster": "gpu-z"}, admin_user)
    Recipe.define("on-node", {"argv": ["echo", "hi"]}, admin_user)

    def runs_on(name):
        return part(viewer_client.get(f"/recipes/{name}").content.decode(), '<p id="recipe-runs-on">', "</p>")

    assert runs_on("on-ray") == ('<p id="recipe-runs-on"><strong>runs on:</strong> Ray cluster <a href="/clusters/gpu-a">'
                                 'gpu-a</a> (shared dir <code>/mnt/shared/ys</code>, working dir <code>/src/train</code>)')
    assert runs_on("on-other").startswith('<p id="recipe-runs-on"><strong>runs on:</strong> Ray cluster <code>gpu-z</code> '
                                          '<span class="badge warn">not registered</span>')
    assert runs_on("on-node") == '<p id="recipe-runs-on"><strong>runs on:</strong> node launch worker'
