"""The node agent reads its node's serving deployments (collector/agent/serving.py) from real HTTP servers, and
what their counters gained reaches the database through its write path and spool: counted once across a database
outage, an agent restart and an engine restart; a page that cannot be read is reported on its deployment, and the
other deployments are read all the same."""

import re
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.db.models import Sum
from django.utils import timezone

from collector.agent.runner import Agent
from collector.agent.serving import Scraper
from collector.agent.sources.sim import SimSource
from collector.agent.spool import Spool
from collector.models import ScrapeTarget, ServedCount
from serving.models import Deployment

DATA = Path(__file__).parent / "data"
DOWN_DSN = "host=127.0.0.1 port=9 dbname=nothing user=nobody connect_timeout=1"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
T0 = datetime(2026, 12, 7, 14, 2, tzinfo=UTC)


class Engine:
    """A metrics page served over real HTTP; `body` and `status` are what the next request gets."""

    def __init__(self, body):
        self.body, self.status = body, 200
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                data = engine.body.encode()
                self.send_response(engine.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def vllm(prompt=(120000, 80000), generated=(45000, 30000), created_shift=0):
    """The vLLM fixture page with engine 0's and 1's prompt and generated token counters set, its counters'
    _created moved by `created_shift` seconds (an engine restart)."""
    page = (DATA / "vllm-new.prom").read_text()
    for name, values in (("prompt_tokens_total", prompt), ("generation_tokens_total", generated)):
        for engine, value in zip("01", values):
            page = re.sub(rf'(vllm:{name}{{engine="{engine}",model_name="[^"]+"}}) \S+', rf"\g<1> {value}.0", page)
    if created_shift:
        page = re.sub(r"(_created\{[^}]*\}) (\S+)", lambda m: f"{m[1]} {float(m[2]) + created_shift!r}", page)
    return page


@pytest.fixture
def engines():
    made = []

    def make(body):
        made.append(Engine(body))
        return made[-1]

    yield make
    for engine in made:
        engine.close()


def counted(name, field="prompt_tokens"):
    return ServedCount.objects.filter(target__name=name).aggregate(n=Sum(field))["n"]


def test_counts_reach_the_database_once_through_an_outage_and_restarts(pg_dsn, tmp_path, engines, client, viewer):
    llama, tgi = engines(vllm()), engines((DATA / "tgi.prom").read_text())
    Deployment.register({"name": "llama-8b", "team": "serve", "engine": "vllm", "metrics_url": llama.url,
                         "model": LLAMA, "node": "gpu-t"})
    Deployment.register({"name": "tgi", "team": "serve", "metrics_url": tgi.url, "node": "gpu-t"})
    Deployment.register({"name": "elsewhere", "team": "serve", "metrics_url": "http://127.0.0.1:9/metrics",
                         "node": "gpu-u"})

    def agent():
        return Agent(SimSource(gpus=1), pg_dsn, Spool(tmp_path / "spool"),
                     serving=Scraper("gpu-t", pg_dsn, str(tmp_path / "spool")))

    first = agent()
    first.scrape(T0)  # the first look counts nothing: what the counters held was counted before anyone watched
    assert counted("llama-8b") == 0 and counted("tgi") == 0
    assert not ServedCount.objects.filter(target__name="elsewhere").exists(), "another node's agent reads it"
    row = ScrapeTarget.objects.get(name="tgi")
    assert (row.engine_read, row.read_at, row.unreadable_since) == ("tgi", T0, None), "auto: found from its names"

    llama.body = vllm(prompt=(121000, 80500), generated=(45400, 30100))
    first.scrape(T0 + timedelta(seconds=10))
    assert (counted("llama-8b"), counted("llama-8b", "generation_tokens")) == (1500, 500)

    first.dsn = first.serving.dsn = DOWN_DSN  # the database goes away
    first._drop_connection()
    llama.body = vllm(prompt=(122000, 81000), generated=(46000, 30200))
    first.scrape(T0 + timedelta(seconds=20))  # the list of deployments and the counts: from memory, to the spool
    assert not first.spool.is_empty() and counted("llama-8b") == 1500
    first.dsn = first.serving.dsn = pg_dsn
    first._retry_at = 0
    first.drain()
    assert (counted("llama-8b"), counted("llama-8b", "generation_tokens")) == (3000, 1200), "nothing lost"
    first.drain()
    assert counted("llama-8b") == 3000, "nothing counted twice"
    first.close()

    llama.body = vllm(prompt=(122100, 81000), generated=(46000, 30200))
    second = agent()  # the agent restarted: it counts from its last reading, kept beside the spool
    second.scrape(T0 + timedelta(seconds=30))
    assert counted("llama-8b") == 3100

    llama.body = vllm(prompt=(40, 60), generated=(10, 5), created_shift=3600)  # the engine restarted
    second.scrape(T0 + timedelta(seconds=40))
    newest = ServedCount.objects.filter(target__name="llama-8b").latest("ts")
    assert (newest.prompt_tokens, newest.generation_tokens, newest.restarted) == (100, 15, True), "from zero"
    assert ServedCount.objects.filter(prompt_tokens__lt=0).count() == 0

    llama.body = "<!doctype html><html><body>Login</body></html>"
    second.scrape(T0 + timedelta(seconds=50))
    second.scrape(T0 + timedelta(seconds=60))
    row = Deployment.objects.get(name="llama-8b")
    assert row.target.unreadable_since == T0 + timedelta(seconds=50), "since the first scrape that failed"
    since = timezone.localtime(T0 + timedelta(seconds=50)).strftime("%Y-%m-%d %H:%M")
    assert row.state == (f"metrics unreadable since {since}: the page is HTML, not Prometheus text "
                         "(starts '<!doctype html><html><body>Login</body><...')")
    assert ScrapeTarget.objects.get(name="tgi").read_at == T0 + timedelta(seconds=60), "the other is read all the same"
    client.force_login(viewer)
    page = client.get("/serving").content.decode()
    assert f'<span\n      class="error metrics-state">metrics unreadable since {since}: the page is HTML' in page

    llama.status = 503
    llama.body = "overloaded"
    second.scrape(T0 + timedelta(seconds=70))
    assert ScrapeTarget.objects.get(name="llama-8b").unreadable == "the server answered HTTP 503 Service Unavailable"
    llama.status, llama.body = 200, vllm(prompt=(50, 60), generated=(10, 5), created_shift=3600)
    second.scrape(T0 + timedelta(seconds=80))
    row = ScrapeTarget.objects.get(name="llama-8b")
    assert (row.unreadable_since, row.unreadable, row.read_at) == (None, "", T0 + timedelta(seconds=80))
    assert counted("llama-8b") == 3100 + 100 + 10
    second.close()


def test_a_page_without_the_registered_model_or_a_dead_port_says_so(pg_dsn, tmp_path, engines):
    llama = engines(vllm())
    Deployment.register({"name": "qwen", "team": "serve", "engine": "vllm", "metrics_url": llama.url,
                         "model": "Qwen/Qwen3-8B", "node": "gpu-t"})
    Deployment.register({"name": "gone", "team": "serve", "metrics_url": "http://127.0.0.1:9/metrics", "node": "gpu-t"})
    agent = Agent(SimSource(gpus=1), pg_dsn, Spool(tmp_path), serving=Scraper("gpu-t", pg_dsn, str(tmp_path)))
    agent.scrape(T0)
    agent.close()
    qwen, gone = ScrapeTarget.objects.get(name="qwen"), ScrapeTarget.objects.get(name="gone")
    assert qwen.unreadable == f"the page counts no model 'Qwen/Qwen3-8B': it counts {LLAMA}"
    assert (gone.unreadable, gone.unreadable_since) == ("could not connect: Connection refused", T0)
    assert not ServedCount.objects.exists()


def test_manage_py_collect_reads_its_nodes_deployments_and_the_api_says_what_it_counted(
        pg_dsn, tmp_path, engines, client, viewer, settings):
    """What `up`'s collector runs: the host source on this machine, YARDSTICK_SERVE_SCRAPE_S apart; a sim fleet's
    agent beside it reads no deployment (it would count this node's tokens twice)."""
    from django.core.management import call_command

    llama = engines(vllm())
    Deployment.register({"name": "llama-8b", "team": "serve", "metrics_url": llama.url, "node": "gpu-t"})
    call_command("collect", "--source", "sim", "--node", "gpu-t", "--interval", "0.05", "--ticks", "2",
                 "--spool-dir", str(tmp_path / "sim"))
    assert ScrapeTarget.objects.get().checked_at is None
    call_command("collect", "--source", "host", "--node", "gpu-t", "--interval", "0.05", "--ticks", "10",
                 "--serve-scrape", "0.05", "--spool-dir", str(tmp_path / "host"))
    row = Deployment.objects.get()
    t = row.target
    assert (t.engine_read, t.unreadable, t.read_at is not None) == ("vllm", "", True), (t.checked_at, t.unreadable)
    assert ServedCount.objects.filter(target=row.target).exists()

    ServedCount.objects.create(target=row.target, ts=row.target.read_at + timedelta(seconds=10), model=LLAMA, prompt_tokens=1234.0,
                         generation_tokens=56.0, requests=7.0)
    client.force_login(viewer)
    body = client.get("/api/serving/llama-8b").json()
    assert (body["engine_read"], body["unreadable"]) == ("vllm", None)
    assert {k: body["counted"][k] for k in ("prompt_tokens", "generation_tokens", "requests", "restarts")} == {
        "prompt_tokens": 1234.0, "generation_tokens": 56.0, "requests": 7.0, "restarts": 0}
    page = client.get("/serving").content.decode()
    assert '<td class="num prompt-tokens">1,234</td>' in page and 'vLLM\n      <span class="hint">(found from its page)' in page
    assert f"read at {timezone.localtime(row.target.read_at):%Y-%m-%d %H:%M}" in page

    settings.YARDSTICK_SERVE_SCRAPE_S = 0  # the flag's default comes from the setting
    from collector.management.commands.collect import Command

    parser = Command().create_parser("manage.py", "collect")
    assert parser.parse_args(["--source", "host"]).serve_scrape == 0
    assert parser.parse_args(["--source", "host", "--serve-scrape", "2.5"]).serve_scrape == 2.5


def test_what_the_agent_reads_follows_the_registration(db, client, admin_user):
    """Register, change, delete (API and page): the node's agent reads the page registered now, on the node
    registered now; a deleted deployment is read no more, and what was read of it goes with it."""
    client.force_login(admin_user)
    body = {"name": "llama-8b", "team": "serve", "metrics_url": "http://gpu-7:8000/metrics", "node": "gpu-7"}
    assert client.post("/api/serving", body, content_type="application/json").status_code == 201
    target = ScrapeTarget.objects.get()
    assert (target.name, target.node, target.engine, target.metrics_url) == ("llama-8b", "gpu-7", "auto", body["metrics_url"])
    ServedCount.objects.create(target=target, ts=T0, prompt_tokens=5.0)
    moved = {**body, "node": "gpu-8", "engine": "vllm", "metrics_url": "http://gpu-8:8000/metrics"}
    assert client.post("/api/serving", moved, content_type="application/json").status_code == 200
    target = ScrapeTarget.objects.get()
    assert (target.node, target.engine, target.metrics_url, target.counts.count()) == ("gpu-8", "vllm",
                                                                                      moved["metrics_url"], 1)
    assert client.delete("/api/serving/llama-8b").status_code == 200
    assert not ScrapeTarget.objects.exists() and not ServedCount.objects.exists()
    Deployment.register(body)
    assert client.post("/serving/llama-8b/delete").status_code == 302
    assert not ScrapeTarget.objects.exists()


def test_a_read_says_which_gpus_the_process_serving_the_page_holds(pg_dsn, tmp_path, engines):
    """The page is served here (this process listens on its port); the last tick's NVML process lists show this
    process on one GPU and a process it started on another: the deployment holds those two at the read, not a GPU
    of an unrelated process. A page on another machine holds none."""
    import os

    from collector.agent.batch import Holder
    from collector.models import Device, TargetHold

    llama = engines(vllm())
    Deployment.register({"name": "llama-8b", "team": "serve", "metrics_url": llama.url, "node": "gpu-t"})
    Deployment.register({"name": "remote", "team": "serve", "metrics_url": "http://10.255.255.1:8000/metrics",
                         "node": "gpu-t"})
    agent = Agent(SimSource(gpus=3), pg_dsn, Spool(tmp_path), serving=Scraper("gpu-t", pg_dsn, str(tmp_path)))
    agent.tick(T0)  # registers the three GPUs
    gpus = sorted(Device.objects.values_list("uuid", flat=True))
    me = os.getpid()
    agent.last_holders = ((gpus[0], Holder(f"pid:{me}", me)), (gpus[1], Holder("pid:4242", 4242, ancestors=(me, 1))),
                          (gpus[2], Holder("pid:777", 777, ancestors=(1,))))
    agent.scrape(T0 + timedelta(seconds=1))
    agent.close()
    held = TargetHold.objects.filter(target__name="llama-8b")
    assert sorted(held.values_list("device", flat=True)) == gpus[:2]
    assert set(held.values_list("ts", flat=True)) == {T0 + timedelta(seconds=1)}
    assert ScrapeTarget.objects.get(name="llama-8b").pid == me
    assert not TargetHold.objects.filter(target__name="remote").exists()
    assert ScrapeTarget.objects.get(name="remote").pid is None


def test_a_page_registered_anew_is_a_first_look_and_the_last_deployment_deleted_is_read_no_more(
        pg_dsn, tmp_path, engines):
    old, new = engines(vllm(prompt=(500000, 0))), engines(vllm(prompt=(1000, 0)))
    Deployment.register({"name": "llama-8b", "team": "serve", "metrics_url": old.url, "node": "gpu-t"})
    agent = Agent(SimSource(gpus=1), pg_dsn, Spool(tmp_path), serving=Scraper("gpu-t", pg_dsn, str(tmp_path)))
    agent.scrape(T0)
    Deployment.register({"name": "llama-8b", "team": "serve", "metrics_url": new.url, "node": "gpu-t"})
    agent.scrape(T0 + timedelta(seconds=10))
    assert counted("llama-8b") == 0, "another engine's counters are no delta of the old one's"
    new.body = vllm(prompt=(1700, 0))
    agent.scrape(T0 + timedelta(seconds=20))
    assert counted("llama-8b") == 700
    Deployment.objects.get().delete()
    assert agent.serving.scrape(T0 + timedelta(seconds=30)) == [], "deleted: read no more"
    agent.close()


def test_a_page_with_a_huge_model_label_or_many_models_breaks_no_write(pg_dsn, tmp_path, engines):
    """Labels past what the columns hold are cut, not refused: a refused write would take every deployment's
    counts of that read with it."""
    long_name = "m" * 700
    many = "\n".join(f'vllm:prompt_tokens_total{{model_name="model-{i:04d}-{"x" * 40}"}} 1.0' for i in range(100))
    huge = engines(vllm().replace(LLAMA, long_name))
    crowded = engines("# TYPE vllm:prompt_tokens_total counter\n" + many + "\n")
    Deployment.register({"name": "huge", "team": "serve", "engine": "vllm", "metrics_url": huge.url, "node": "gpu-t"})
    Deployment.register({"name": "crowded", "team": "serve", "engine": "vllm", "metrics_url": crowded.url,
                         "model": "absent", "node": "gpu-t"})
    agent = Agent(SimSource(gpus=1), pg_dsn, Spool(tmp_path), serving=Scraper("gpu-t", pg_dsn, str(tmp_path)))
    agent.scrape(T0)
    agent.close()
    assert ServedCount.objects.get(target__name="huge").model == "m" * 500
    unreadable = ScrapeTarget.objects.get(name="crowded").unreadable
    assert len(unreadable) == 2000 and unreadable.startswith("the page counts no model 'absent'")
