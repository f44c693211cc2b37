"""The fold (costs/fold.py): allocations past the horizon kept per day, every figure a person reads unchanged.

120 days of known telemetry on three devices of two nodes (an hour a day, across midnight) and four jobs, one of them
running across the horizon (90 days, the default), attributed; then every figure read before the fold is read
again after it, to the micro-dollar: each job's cost and money (what campaigns and sweeps sum), the cost review by
every grouping over periods within, across and outside the folded days (JSON and CSV), and /metrics. A fold killed
in the middle of a batch and run again counts every minute once; a late sample for a folded day is refused, saying
why, and changes nothing; a period that starts inside a folded day says it was read at the day's grain.
"""

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from decimal import Decimal

import psycopg
import pytest
from cost_builders import set_prices, utc
from django.db import connection

from collector.importer import review_line
from collector.models import Rollup1m
from costs import fold
from costs.attribution import attribute, attribute_window
from costs.intelligence import jobs_money, score_cost_curve
from costs.ledger import job_costs
from costs.models import Allocation, DailyUsage
from costs.report import Period, build, to_csv, to_json
from exporter import metrics
from tests.conftest import ROOT, database_url
from tests.waiting import wait_for

NOW = utc(2026, 6, 1, 12, 0)
FIRST = NOW - timedelta(days=120)
DAY = timedelta(days=1)
HORIZON = fold.midnight(fold.horizon(NOW))  # 2026-03-03: the first day kept per minute


def build_fleet(fleet):
    set_prices(("*", "2.50", "0.12", "1.3", FIRST.date() - DAY),
               ("NVIDIA H100*", "4.10", "0.15", "1.4", (NOW - timedelta(days=60)).date()))
    owned, shared = fleet.node("n1", team="infra"), fleet.node("n2")
    gpus = [fleet.device(owned), fleet.device(owned), fleet.device(shared, model="NVIDIA A100-SXM4-80GB")]
    for day in range(121):
        for i, gpu in enumerate(gpus):
            fleet.minutes(gpu, fold.midnight((FIRST + day * DAY).date()) - timedelta(minutes=30), 60,
                          power_w=200 + 37 * i + day % 7, covered_s=59.5 if (day + i) % 3 else 60.0)
    early, across, late = fleet.job("early", "red"), fleet.job("across", "blue"), fleet.job("late", "red")
    shared_job = fleet.job("shares", "green")
    fleet.stint(early, gpus[0], FIRST, FIRST + timedelta(days=40, minutes=7))
    fleet.stint(across, gpus[1], FIRST + timedelta(days=20, seconds=45), NOW - timedelta(days=50, minutes=13))
    fleet.stint(shared_job, gpus[1], FIRST + timedelta(days=25), FIRST + timedelta(days=26))  # beside "across"
    fleet.stint(late, gpus[2], NOW - timedelta(days=30, seconds=20))  # open
    fleet.evals(across, (0, FIRST + timedelta(days=20, minutes=1), 40.0),
                (10, FIRST + timedelta(days=50, minutes=3), 55.0), (20, NOW - timedelta(days=40), 61.5))
    attribute(now=NOW)
    return gpus, [early, across, late, shared_job]


PERIODS = [
    (fold.midnight(FIRST.date()) - DAY, NOW),  # everything
    (fold.midnight(FIRST.date()), HORIZON),  # the folded days only
    (HORIZON - timedelta(days=7), HORIZON + timedelta(days=7)),  # across the horizon
    (HORIZON, NOW),  # the minutes kept
    (HORIZON + timedelta(days=3, hours=5), NOW - timedelta(hours=1)),  # cut days, both kept per minute
]


def figures(jobs):
    ids = [j.pk for j in jobs]
    metrics.warm(NOW)  # what a scrape reads, computed now
    out = {"costs": job_costs(ids), "money": jobs_money(ids), "metrics": metrics.render(NOW),
           "curve": score_cost_curve(jobs[1])[-1:]}  # its dollars by its last eval, which is past its end
    for start, end in PERIODS:
        for group in ("team", "job", "node", "day"):
            report = build(Period(start, end), group)
            json = to_json(report)
            assert json["read_at"] is None, "every period here begins and ends on a day's edge or after the horizon"
            t = report.totals
            assert abs(t["attributed_usd"] + t["idle_usd"] - t["fleet_usd"]) <= Decimal("0.01"), (start, end, group)
            out[start, end, group] = (json, to_csv(report))
    return out


def day_rows():
    return sorted(DailyUsage.objects.values_list("device_id", "day", "job_id", "team", "minutes", "device_s",
                                                 "energy_j"), key=lambda r: (r[0], r[1], r[2] or 0, r[3]))


def minutes_left_before(edge):
    return Allocation.objects.filter(minute__lt=edge).count()


def test_every_figure_is_the_same_after_the_fold_and_a_late_sample_for_a_folded_day_is_refused(
        fleet, caplog, client, viewer):
    gpus, jobs = build_fleet(fleet)
    before = figures(jobs)
    assert before["metrics"].count(b"yardstick_job_cost_dollars_total{") == 4
    days_before = day_rows()
    folded_minutes = minutes_left_before(HORIZON)
    assert folded_minutes > 3 * 60 * 29  # an hour a day of three devices over the 30 folded days

    done = fold.fold(now=NOW, batch=1000)
    assert done == {"folded_before": HORIZON.date().isoformat(), "deleted": folded_minutes,
                    "batches": folded_minutes // 1000 + 1, "done": True}
    assert minutes_left_before(HORIZON) == 0 and Allocation.objects.filter(minute__gte=HORIZON).exists()
    assert day_rows() == days_before, "the days keep what they folded"
    assert figures(jobs) == before
    assert fold.fold(now=NOW)["deleted"] == 0

    # A late sample for a folded day: the import's attribution refuses it and says why; nothing changes.
    day = fold.midnight((FIRST + 10 * DAY).date())
    Rollup1m.objects.filter(device=gpus[1], bucket=day + timedelta(minutes=5)).update(energy_j=999999.0, samples=61)
    summary = attribute_window(day - timedelta(hours=1), day + timedelta(hours=1), now=NOW)
    assert summary["rows"] == 0
    assert "180 device-minutes before 2026-03-03 not charged" in summary["refused"]
    assert "folded into one row per device, job and day" in review_line(summary)
    attribute(now=NOW + timedelta(minutes=1), since=day - timedelta(hours=1))  # a backfill from a folded day
    assert "not charged" in caplog.text and minutes_left_before(HORIZON) == 0
    assert figures(jobs) == before

    # A period that starts inside a folded day is read from that whole day, and says so.
    inside = Period(day + timedelta(hours=7), NOW)
    report = build(inside, "team")
    assert report.read_at["from"] == day and report.read_at["to"] == NOW
    assert to_json(report)["read_at"]["text"].startswith(f"read at the day's grain, {day:%Y-%m-%d} 00:00 to ")
    assert to_json(report)["totals"] == to_json(build(Period(day, NOW), "team"))["totals"]
    assert to_json(build(Period(HORIZON, NOW), "team"))["read_at"] is None
    # ... on the API and on the cost review's page, where a person asks for it.
    client.force_login(viewer)
    asked = {"from": inside.start.isoformat(), "to": NOW.isoformat()}
    assert client.get("/api/costs", asked).json()["read_at"]["from"] == day.isoformat()
    page = client.get("/costs", asked).content.decode()
    assert 'id="read-at-text">Read at the day&#x27;s grain, 2026-02-11 00:00 to 2026-06-01 12:00 UTC' in page
    assert "read-at" not in client.get("/costs", {"from": HORIZON.date().isoformat()}).content.decode()


def fold_process(settings, tmp_path):
    """`fold` in a process of its own, as beat's worker runs it: batches of 500 rows."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "yardstick.settings", "DATABASE_URL": database_url(),
           "REDIS_URL": settings.REDIS_URL, "SECRET_KEY": settings.SECRET_KEY,
           "YARDSTICK_DATA_DIR": str(tmp_path / "fold")}
    code = ("import django; django.setup(); from datetime import datetime; from costs.fold import fold; "
            f"print(fold(now=datetime.fromisoformat({NOW.isoformat()!r}), batch=500, budget_s=600))")
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.slow
def test_a_fold_killed_in_the_middle_of_a_batch_and_run_again_counts_each_minute_once(
        fleet, clean_telemetry, settings, tmp_path):
    gpus, jobs = build_fleet(fleet)
    before = figures(jobs)
    total = minutes_left_before(HORIZON)
    # Another session holds one folded minute's row: the batch that reaches it waits there, half deleted.
    held = Allocation.objects.filter(minute__lt=HORIZON).order_by("-minute").values_list("pk", flat=True).first()
    with psycopg.connect(database_url()) as holder:
        holder.execute("SELECT 1 FROM costs_allocation WHERE id = %s FOR UPDATE", [held])
        proc = fold_process(settings, tmp_path)
        try:
            def waiting():
                with connection.cursor() as cur:
                    cur.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                "AND query LIKE 'DELETE FROM costs_allocation%%'")
                    return cur.fetchone()[0] == 1
            wait_for(waiting, 60, "the fold's batch to wait on the held row")
            left = minutes_left_before(HORIZON)
            assert 0 < left < total, "some batches committed before it"
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        holder.rollback()
    # The killed batch rolled back whole: what it had deleted is there again, no day lost or kept it twice.
    wait_for(lambda: minutes_left_before(HORIZON) == left, 30, "the killed batch's rollback")
    assert figures(jobs) == before
    time.sleep(0.1)
    again = fold_process(settings, tmp_path)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert f"'deleted': {left}," in out and "'done': True" in out
    assert minutes_left_before(HORIZON) == 0
    assert figures(jobs) == before
