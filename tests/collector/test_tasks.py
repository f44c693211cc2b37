"""The periodic tasks, and their entries on the beat schedule that runs (settings.CELERY_BEAT_SCHEDULE)."""

from datetime import datetime, timedelta, timezone

from django.conf import settings

from collector import tasks
from collector.agent.batch import Batch, DeviceInfo
from collector.agent.writer import Writer
from collector.models import Rollup1m


def test_every_collector_task_is_on_the_beat_schedule_that_runs():
    scheduled = {e["task"]: e["schedule"] for e in settings.CELERY_BEAT_SCHEDULE.values()}
    mine = {task: every for task, every in scheduled.items() if task.startswith("collector.tasks.")}
    assert sorted(mine) == ["collector.tasks.apply_retention", "collector.tasks.create_partitions",
                            "collector.tasks.roll_up"]
    for task, every in mine.items():
        assert callable(getattr(tasks, task.rpartition(".")[2])) and every > 0


def test_the_roll_up_task_rolls_up_what_was_written(pg_conn):
    t0 = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(minutes=2)
    gpu = DeviceInfo("GPU-t", "n", 0, "H100", "nvml")
    Writer(pg_conn).write(Batch([gpu], [("GPU-t", t0 + timedelta(seconds=s), 1.0, 1.0, 100.0, 100.0 * s, 1, 1, 1.0, 1, 1.0)
                                          for s in range(3)]))

    assert tasks.roll_up.apply().get() == 1
    assert Rollup1m.objects.get().energy_j == 200.0
