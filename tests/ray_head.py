"""A real local Ray head for the tests (and bench/launched_jobs.py), from the pinned package, with no network: `ray start
--head` on free loopback ports, 2 CPUs, usage stats off, its own temp folder; `stop()` ends it, `start()` again
brings a fresh head up on the same ports (its job history gone, as after a head's crash). And `Proxy`: a TCP
forwarder in front of its dashboard that can be paused and resumed, what a cluster behind a dead link looks like."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_DISABLE_DOCKER_CPU_WARNING="1")
    return env


class RayHead:
    def __init__(self):
        self.port, self.dashboard_port, self.agent_port = free_port(), free_port(), free_port()
        # Ray's sockets live under its temp folder: a short path keeps them under the 107-character limit.
        self.temp_dir = tempfile.mkdtemp(prefix="ys-ray-", dir="/tmp")
        self.address = f"http://127.0.0.1:{self.dashboard_port}"

    def start(self, timeout_s=90):
        out = subprocess.run(
            [RAY, "start", "--head", "--port", str(self.port), "--dashboard-port", str(self.dashboard_port),
             "--dashboard-host", "127.0.0.1", "--node-ip-address", "127.0.0.1", "--num-cpus", "2", "--num-gpus", "0",
             "--dashboard-agent-listen-port", str(self.agent_port), "--disable-usage-stats",
             "--include-dashboard", "true", "--temp-dir", self.temp_dir],
            env=_env(), capture_output=True, text=True, timeout=timeout_s)
        if out.returncode != 0:
            raise RuntimeError(f"ray start failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        self.wait_answering(timeout_s)
        return self

    def wait_answering(self, timeout_s=60):
        from ray.job_submission import JobSubmissionClient

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                JobSubmissionClient(self.address).list_jobs()
                return
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def client(self):
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.address)

    def processes(self):
        """This head's processes (each names its temp folder or its GCS port on its command line) and all their
        children: not
        `ray stop`, which ends every Ray on the machine (a benchmark's, another test process's)."""
        import psutil

        found = {}
        for proc in psutil.process_iter(["cmdline"]):
            line = " ".join(proc.info["cmdline"] or ()) + " "
            if self.temp_dir in line or f":{self.port} " in line or f"_port={self.port} " in line:
                found[proc.pid] = proc
                try:
                    found.update((child.pid, child) for child in proc.children(recursive=True))
                except psutil.Error:
                    pass
        return list(found.values())

    def stop(self):
        """Kill the head as a crash would (SIGKILL, every process of it), and wait until its ports are free."""
        import psutil

        procs = self.processes()
        for proc in procs:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=30)

    def close(self):
        self.stop()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
