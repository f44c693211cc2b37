"""A sweep through a restart of the real `manage.py up` (Ctrl-C, then `up` again on the same data dir), as a team
leaving a sweep running for a week meets one: two trials running at their first gate, a third about to launch.
Walked by tests/platform/test_up.py, whose one `up` and its second run on the kept data this rides on (an `up`
costs tens of seconds to start).

On Ctrl-C the parts shut down: the launch worker stops the two trials, marking them interrupted, and though their
ends free their devices no part that is going away starts a trial. After `up` again the sweep's pass runs their
parameters again as new trials (the script keeps no checkpoint to resume from) and finishes; nothing is left
queued or running on a worker that does not hold it, the interrupted trials are no result (not on the front, not
best, told to the search as failed) and count once in max_trials.

The servers are the embedded ones `up` starts; the test reads their database on its unix socket, and sets up the
recipe and the sweep with `manage.py shell`, run while `up` holds the data dir (it attaches to its servers)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.conftest import ROOT
from tests.waiting import wait_for
from yardstick.embedded import DB_NAME, PG_PORT, socket_dir

PY = sys.executable
SCRIPT = str(Path(__file__).with_name("surface_script.py"))

SET_UP = """
import json, sys
from django.contrib.auth import get_user_model
from launch.models import Recipe
from sweeps.models import Sweep
admin = get_user_model().objects.get(username="admin")
params = [{"name": "x", "kind": "float", "default": 0.5, "minimum": 0.0, "maximum": 1.0, "help": "x"},
          {"name": "steps", "kind": "integer", "default": 4, "minimum": 1, "maximum": 40, "help": "steps"},
          {"name": "gate", "kind": "string", "default": "", "help": "gate"}]
Recipe.define("surface", {"argv": [sys.executable, SCRIPT, "--x", "{x}", "--steps", "{steps}", "--gate", "{gate}"],
                          "params": params, "score_key": "score", "devices": {"kind": "cpu", "count": 1},
                          "stop_grace_s": [3, 2]}, admin)
sweep = Sweep.create(created_by=admin, name="week", team="research", recipe="surface",
                     space={"x": {"low": 0.0, "high": 1.0}}, params={"steps": 4, "gate": GATE},
                     objective="per_dollar", budget_usd="100", parallel=2, max_trials=3, seed=5, stop_share=0)
print(json.dumps({"sweep": sweep.pk}))
"""

READ = """
import json
from sweeps.figures import summary
from sweeps.models import Sweep
sweep = Sweep.objects.get(pk=PK)
s = summary(sweep)
told = {f.trial.number: f.told.state for f in sweep.figures()}
print(json.dumps({"front": s["front"], "best": s["best"], "told": told, "state": sweep.state, "reason": sweep.reason,
                  "rows": [[r["number"], r["status"], r["stop_reason"]] for r in s["trials"]]}))
"""


def shell(data_dir, code, env):
    """`manage.py shell -c code` on `data_dir`'s servers (its own, started and stopped, when no `up` runs), with
    the `up`'s settings `env`; the JSON its last line printed."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}, **env}
    done = subprocess.run([PY, str(ROOT / "manage.py"), "shell", "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, env={**env, "YARDSTICK_DATA_DIR": str(data_dir)})
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def rows(data_dir, env, sql, *args):
    port = int(env.get("YARDSTICK_PG_PORT", PG_PORT))  # it names the socket file
    with psycopg.connect(host=str(socket_dir(data_dir)), port=port, user="postgres", dbname=DB_NAME) as conn:
        return conn.execute(sql, args).fetchall()


TRIALS = """SELECT t.number, j.id, j.status, j.interrupted_by, t.params::text, a.number
            FROM sweeps_sweeptrial t JOIN trainer_job j ON j.id = t.job_id
            LEFT JOIN sweeps_sweeptrial a ON a.id = t.run_again_as_id WHERE t.sweep_id = %s ORDER BY t.number"""


def start(data_dir, gate, env):
    """While `up` runs: the recipe and a sweep of it, two trials at once, waiting at their first gate. Return its
    id."""
    pk = shell(data_dir, SET_UP.replace("SCRIPT", repr(SCRIPT)).replace("GATE", repr(str(gate))), env)["sweep"]
    wait_for(lambda: len(rows(data_dir, env, """SELECT DISTINCT o.job_id FROM launch_outputline o
                                           JOIN sweeps_sweeptrial t ON t.job_id = o.job_id
                                           WHERE t.sweep_id = %s AND o.text = 'waiting at step 2'""", pk)) == 2,
             timeout_s=120, what="both trials at their first gate", logs=[data_dir / "log" / "launch.log"])
    return pk


def after_ctrl_c(data_dir, pk, gate, env):
    """Once `up` stopped: both trials stopped, interrupted, and no trial started on the way down. Then opens every
    gate, so the trials of the next `up` run through."""
    before = shell(data_dir, f"""
import json
from trainer.models import Job
print(json.dumps([[j.status, j.interrupted_by] for j in Job.objects.filter(sweep_trial__sweep_id={pk})
                  .order_by("sweep_trial__number")]))
""", env)
    logs = "\n".join(line for name in ("up", "launch", "worker") for line in
                     (data_dir / "log" / f"{name}.log").read_text().splitlines()[-25:])
    assert len(before) == 2, f"no trial started on the way down: {before}\n{logs}"
    assert all(status == "stopped" and why for status, why in before), before
    for job_id in range(1, 40):
        for step in (2, 4):
            (gate / f"{job_id}-{step}").touch()


def after_up_again(data_dir, pk, env):
    """While the next `up` runs: the sweep ends, nothing stranded, the interrupted trials run again and no result."""
    wait_for(lambda: rows(data_dir, env, "SELECT state FROM sweeps_sweep WHERE id = %s", pk) == [("ended",)],
             timeout_s=180, what=lambda: f"the sweep to end: {rows(data_dir, env, TRIALS, pk)}",
             logs=[data_dir / "log" / "worker.log", data_dir / "log" / "launch.log"])
    trials = rows(data_dir, env, TRIALS, pk)
    stranded = rows(data_dir, env, "SELECT id, status FROM trainer_job WHERE status IN ('queued', 'running', "
                                   "'stopping')")
    seen = shell(data_dir, READ.replace("PK", str(pk)), env)
    assert stranded == [], "no job left queued or running"
    by_number = {t[0]: t for t in trials}
    assert [t[0] for t in trials] == [0, 1, 2, 3, 4], (trials, seen["reason"])
    # Trials 0 and 1 were interrupted and run again as 2 and 3, with their parameters; 4 is the third of max_trials.
    assert sorted(by_number[n][5] for n in (0, 1)) == [2, 3], trials
    for n in (0, 1):
        assert by_number[n][3].startswith("worker shutting down"), by_number[n]
        assert json.loads(by_number[by_number[n][5]][4]) == json.loads(by_number[n][4])
    assert {by_number[n][2] for n in (2, 3, 4)} == {"completed"}, trials
    assert seen["told"]["0"] == seen["told"]["1"] == "failed"
    assert not {0, 1} & set(seen["front"]) and seen["best"]["per_dollar"] not in (0, 1), seen
    assert seen["reason"] == "all 3 trials started", "a trial run again counts once"
    assert seen["rows"][0][2].startswith("interrupted: worker shutting down"), seen["rows"]
