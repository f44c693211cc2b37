"""The periodic tasks and the beat entries asked of the settings."""

from datetime import datetime, timedelta, timezone

from collector import tasks
from collector.agent.batch import Batch, DeviceInfo
from collector.agent.writer import Writer
from collector.models import Rollup1m


def test_every_beat_entry_names_a_task_of_this_module():
    for entry in tasks.BEAT_SCHEDULE.values():
        module, _, name = entry["task"].rpartition(".")
        assert module == "collector.tasks" and callable(getattr(tasks, name))
        assert entry["schedule"] > 0


def test_the_roll_up_task_rolls_up_what_was_written(pg_conn):
    t0 = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(minutes=2)
    gpu = DeviceInfo("GPU-t", "n", 0, "H100", "nvml")
    Writer(pg_conn).write(Batch([gpu], [("GPU-t", t0 + timedelta(seconds=s), 1.0, 1.0, 100.0, 100.0 * s, 1, 1, 1.0, 1, 1.0)
                                          for s in range(3)]))

    assert tasks.roll_up.apply().get() == 1
    assert Rollup1m.objects.get().energy_j == 200.0
