"""A one-node Slurm cluster on this machine for the tests: Debian's slurmctld and slurmd (`make slurm` installs
them), a generated slurm.conf in a folder of its own, on free ports, with this machine's CPUs as the node's and two
GPUs as a generic resource (gres) the scheduler counts: no machine here has a GPU, so their device files are plain
files, which slurmd logs as not a device and counts all the same.

The daemons authenticate with auth/none: both run here as the same user, so munge (the key every node of a real
cluster shares) adds nothing to what the tests check. Every command of the tests and of Yardstick's executor reads
this cluster's slurm.conf through SLURM_CONF, so a Slurm the machine may run of its own is never touched.
"""

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.ray_head import free_port

DAEMONS = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd")
GPUS = 2


def missing():
    """Why this machine cannot run the cluster ("" when it can)."""
    absent = [d for d in (*DAEMONS, "/usr/bin/sbatch") if not os.access(d, os.X_OK)]
    return (f"{', '.join(absent)} not installed: run `make slurm` (as root it installs Debian's slurm-wlm; "
            "otherwise `sudo apt-get install slurm-wlm munge`)") if absent else ""


class SlurmCluster:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="ys-slurm-"))
        self.conf = self.dir / "slurm.conf"
        self.node = socket.gethostname().split(".")[0]
        self.cpus = os.cpu_count() or 1
        self.user = pwd.getpwuid(os.getuid()).pw_name

    def env(self):
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_conf(self):
        for sub in ("state", "spool", "log"):
            (self.dir / sub).mkdir(exist_ok=True)
        gpus = [self.dir / f"gpu{i}" for i in range(GPUS)]
        for path in gpus:
            path.touch()
        d = self.dir
        self.conf.write_text("\n".join([
            "ClusterName=yardstick-test",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            f"SlurmUser={self.user}",
            f"SlurmdUser={self.user}",
            "AuthType=auth/none",
            "CredType=cred/none",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/slurmd.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log",
            f"SlurmdLogFile={d}/log/slurmd.log",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=2",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "ReturnToService=2",
            "MinJobAge=600",
            "KillWait=2",
            "InactiveLimit=0",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "GresTypes=gpu",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} Gres=gpu:{GPUS} State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]) + "\n")
        (self.dir / "gres.conf").write_text(f"NodeName={self.node} Name=gpu File={d}/gpu[0-{GPUS - 1}]\n")

    def start(self):
        self.write_conf()
        subprocess.run([DAEMONS[0], "-i"], env=self.env(), check=True, timeout=30)
        subprocess.run([DAEMONS[1], "-N", self.node], env=self.env(), check=True, timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = self.scontrol("show", "node", self.node, check=False)
            if "State=IDLE" in state:
                return self
            time.sleep(0.5)
        raise RuntimeError(f"the test Slurm node did not come up idle: {state}\n{self.logs()}")

    def scontrol(self, *args, check=True):
        done = subprocess.run(["scontrol", *args], env=self.env(), capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise RuntimeError(f"scontrol {' '.join(args)}: {done.stderr}")
        return done.stdout + done.stderr

    def job(self, slurm_id):
        """scontrol's record of job `slurm_id`, as a dict."""
        from launch.on_slurm import fields

        return fields(self.scontrol("show", "job", "--oneliner", str(slurm_id)).strip())

    def cancel_all(self):
        subprocess.run(["scancel", f"--user={self.user}"], env=self.env(), capture_output=True, timeout=30)

    def logs(self):
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in (self.dir / "log").glob("*.log"))

    def stop(self):
        self.cancel_all()
        for name in ("slurmd.pid", "slurmctld.pid"):
            try:
                os.kill(int((self.dir / name).read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any((self.dir / n).exists() for n in ("slurmd.pid", "slurmctld.pid")):
            time.sleep(0.2)
        shutil.rmtree(self.dir, ignore_errors=True)
