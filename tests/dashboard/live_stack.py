"""The real thing for live browser tests: Daphne (HTTP + WebSockets) and a Celery worker, as subprocesses.

`live_stack`: both run against this suite's test database, with a Redis of
their own (an embedded redis-server in a throwaway folder), so no other
suite's worker on the shared test Redis can take our jobs, nor we theirs. A
data dir holding a tiny base policy (one layer, 32 wide) makes a GRPO step
take well under a second.

`live_web`: Daphne alone, on this suite's database and Redis, so what the test
publishes (yardstick.live, or a task run in the test) reaches the pages it
serves. One Daphne serves every such test of a test process (`shared_web` in
tests/conftest.py; started again should it die): a Daphne costs a second or
two of CPU to start, and holds nothing of one test that the next could see (the
database is emptied between tests; its caches live in the suite's Redis, as
any web process's do). Everything started here is stopped on the way out, by
process group.
"""

import os
import shutil
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.conftest import database_url, free_port
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]




def tiny_models(path):
    """Write a tiny arithmetic base policy where the runner looks for base models."""
    from trainer.rl.model import GPTConfig
    from trainer.rl.pretrain import pretrain

    pretrain("arithmetic", path, "cpu", model_config=GPTConfig(n_layer=1, n_head=2, n_embd=32),
             max_steps=30, batch_size=32, target_pass1=101.0, probe_every=1000, probe_size=4)


def _http_ok(url):
    try:
        urllib.request.urlopen(url, timeout=2)
        return True
    except urllib.error.HTTPError:
        return True  # it answered
    except Exception:  # noqa: BLE001 - not up yet
        return False


class LiveStack:
    def __init__(self, tmp, worker=True, database=None, daphne_args=(), web_processes=1, environ=None):
        from django.conf import settings

        from yardstick.embedded import EmbeddedRedis

        self.tmp = tmp
        self.worker = worker
        self.daphne_args = list(daphne_args)
        self.web_processes = web_processes
        self.listener = None
        self.services = ROOT / "var" / "test-services" / uuid.uuid4().hex[:12]
        self.services.mkdir(parents=True)
        self.redis = EmbeddedRedis(self.services) if worker else None
        self.data_dir = tmp / "data"
        (self.data_dir / "models").mkdir(parents=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs = []
        self.env = {
            **(os.environ if environ is None else environ), "DJANGO_SETTINGS_MODULE": "yardstick.settings", "YARDSTICK_DATA_DIR": str(self.data_dir),
            "DATABASE_URL": database or database_url(), "REDIS_URL": self.redis.url if worker else settings.REDIS_URL,
            "SECRET_KEY": settings.SECRET_KEY,
            "PYTHONUNBUFFERED": "1", "DJANGO_ALLOW_ASYNC_UNSAFE": "",
        }

    def start(self):
        if self.worker:
            tiny_models(self.data_dir / "models")
            self.redis.start(daemonize=True)
        if self.web_processes == 1:
            self._spawn("daphne", [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                                   *self.daphne_args, "yardstick.asgi:application"])
        else:  # as `up --web-processes N` runs them: one listening socket, N Daphnes accepting on it
            from yardstick.runner import listening_socket, web_argv

            self.listener = listening_socket("127.0.0.1", self.port)
            for i in range(1, self.web_processes + 1):
                argv = web_argv("127.0.0.1", self.port, self.listener.fileno())
                self._spawn(f"daphne{i}", argv[:-1] + self.daphne_args + argv[-1:], pass_fds=(self.listener.fileno(),))
        if self.worker:
            self._spawn("worker", [sys.executable, "-m", "celery", "-A", "yardstick", "worker", "-Q", "jobs,default",
                                   "-P", "solo", "-n", f"dashboard-test-{os.getpid()}@%h", "--without-heartbeat",
                                   "--without-mingle", "--without-gossip", "--loglevel", "INFO"])
        logs = [self.log("daphne"), self.log("worker"), *(self.log(f"daphne{i}") for i in range(1, self.web_processes + 1))]
        # The login page, not /healthz, whose Celery ping waits a second when no worker is up yet.
        wait_for(lambda: _http_ok(self.url + "/accounts/login/"), 60, "Daphne to answer", every_s=0.2, logs=logs)
        if self.worker:
            wait_for(lambda: "ready" in self.log("worker").read_text(), 90, "the Celery worker to be ready", every_s=0.2,
                     logs=logs)
        return self

    def log(self, name):
        return self.tmp / f"{name}.log"

    def alive(self):
        return all(proc.poll() is None for proc, _ in self.procs)

    def _spawn(self, name, argv, pass_fds=()):
        out = open(self.log(name), "w")
        self.procs.append((subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True, pass_fds=pass_fds), out))

    def stop(self):
        for proc, _ in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, out in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            out.close()
        if self.listener is not None:
            self.listener.close()
        if self.redis is not None:
            self.redis.stop()
        shutil.rmtree(self.services, ignore_errors=True)


@pytest.fixture
def live_stack(transactional_db, tmp_path):
    """Daphne and a worker on this test's database (its name is only final inside a test)."""
    stack = LiveStack(tmp_path)
    try:
        yield stack.start()
    finally:
        stack.stop()


class LogSince:
    """A log file as one test wrote it: from where it ended when the test began."""

    def __init__(self, path):
        self.path, self.start = path, path.stat().st_size if path.exists() else 0

    def read_text(self):
        with open(self.path, "rb") as f:
            f.seek(self.start)
            return f.read().decode(errors="replace")


class LiveWeb:
    """The test process's shared Daphne as one test sees it: its URL, and its log from the test's start."""

    def __init__(self, stack):
        self.url, self.logs = stack.url, {"daphne": LogSince(stack.log("daphne"))}

    def log(self, name):
        return self.logs[name]


@pytest.fixture
def live_web(transactional_db, shared_web):
    """Daphne alone on this test's database and the suite's Redis: the test publishes, the pages hear it. No fleet
    frame of an earlier test is left in Redis for this test's first page to be welcomed with."""
    forget_fleet_frames()
    return LiveWeb(shared_web())


def forget_fleet_frames():
    """Remove the fleet's layout, frame, reading and publisher from the suite's Redis; the Redis client."""
    import redis
    from django.conf import settings

    from dashboard import broadcast

    r = redis.Redis.from_url(settings.REDIS_URL)
    r.delete(broadcast.LAYOUT_KEY, broadcast.SNAPSHOT_KEY, broadcast.PUBLISHER_KEY, broadcast.READING_KEY)
    return r


@pytest.fixture
def fresh_fleet_keys():
    """No fleet layout, frame or publisher left in the suite's Redis by an earlier test (a publisher's lock
    outlives its process by up to a lock's life); the Redis client."""
    from dashboard import broadcast

    r = forget_fleet_frames()
    yield r
    r.delete(broadcast.PUBLISHER_KEY)
