"""The spool: batches kept on local disk while the database is away, replayed in order."""

import logging
import os
from datetime import datetime, timedelta, timezone

import pytest

from collector.agent.batch import Batch, DeviceInfo, Holder
from collector.agent.spool import Spool, SpoolInUse

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
DEV = DeviceInfo("GPU-1", "n1", 0, "H100", "nvml")


def batch(i, rows=1):
    ts = T0 + timedelta(seconds=i)
    return Batch(
        devices=[DEV],
        rows=[("GPU-1", ts + timedelta(milliseconds=k), 50.0, 10.0, 300.0, 1000.0 + i, 1024, 81920, 60.0, 1980, None)
              for k in range(rows)],
        holders=[("GPU-1", ts, Holder("pid:1", 1, 100))],
        labels={"team": "rl"},
    )


def test_it_replays_batches_in_the_order_they_were_spooled(tmp_path):
    spool = Spool(tmp_path)
    for i in range(5):
        spool.append(batch(i))
    written = []

    replayed = spool.replay(written.append)

    assert replayed == 5
    assert [r[1] for b in written for r in b.rows] == [T0 + timedelta(seconds=i) for i in range(5)]
    assert written[0].rows[0] == batch(0).rows[0]
    assert written[0].holders[0] == batch(0).holders[0]
    assert written[0].labels == {"team": "rl"}
    assert spool.is_empty() and spool.segments() == []


def test_a_failed_write_keeps_the_batch_spooled_for_the_next_replay(tmp_path):
    spool = Spool(tmp_path)
    spool.append(batch(0))

    def fail(_):
        raise ConnectionError("database went away again")

    with pytest.raises(ConnectionError):
        spool.replay(fail)
    written = []
    spool.replay(written.append)

    assert len(written) == 1 and spool.is_empty()


def test_a_new_agent_replays_what_a_killed_one_left_and_skips_a_torn_record(tmp_path, caplog):
    first = Spool(tmp_path)
    first.append(batch(0))
    first.append(batch(1))
    path = first.segments()[-1]
    with open(path, "ab") as f:
        f.write(b"1234abcd {\"devices\": [")  # the record SIGKILL cut short
    # the killed agent never closes its spool
    second = Spool(tmp_path)
    second.append(batch(2))
    written = []

    second.replay(written.append)

    assert [r[1].second for b in written for r in b.rows] == [0, 1, 2]
    assert "torn by a crash" in caplog.text


def test_over_its_cap_it_drops_the_oldest_data_with_a_clear_warning(tmp_path, caplog):
    spool = Spool(tmp_path, max_bytes=20_000, segment_bytes=4_000)
    with caplog.at_level(logging.WARNING, logger="collector.agent"):
        for i in range(120):
            spool.append(batch(i))
    written = []
    spool.replay(written.append)
    seconds = [r[1].second + 60 * r[1].minute for b in written for r in b.rows]

    assert sum(p.stat().st_size for p in spool.segments()) == 0
    assert seconds == list(range(seconds[0], 120))  # the newest survive, in order
    assert seconds[0] > 0
    assert "over its cap of 0.0 MiB: dropped its oldest" in caplog.text


def test_replay_merges_small_batches_into_bigger_writes(tmp_path):
    spool = Spool(tmp_path)
    for i in range(100):
        spool.append(batch(i, rows=8))
    written = []

    spool.replay(written.append)

    assert len(written) == 1 and len(written[0].rows) == 800


def test_a_spool_directory_is_held_by_one_agent_at_a_time(tmp_path):
    first, second = Spool(tmp_path), Spool(tmp_path)
    first.claim()

    with pytest.raises(SpoolInUse) as refused:
        second.claim()
    assert str(refused.value) == (
        f"spool directory {tmp_path} is in use by another agent (pid {os.getpid()}): "
        "give each agent on a machine its own --spool-dir"
    )

    first.close()
    second.claim()  # the directory is free once its holder is done
    second.close()
