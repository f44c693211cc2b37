"""The agent: ticks, writes, spools while PostgreSQL is away, replays every sample exactly once."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import psycopg
import pytest

from collector.agent import schema
from collector.agent.runner import Agent, first_phased_tick, tick_offset
from collector.agent.sources.sim import SimSource
from collector.agent.spool import Spool
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
DOWN_DSN = "host=127.0.0.1 port=9 dbname=nothing user=nobody connect_timeout=1"


def counts(dsn):
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*), count(DISTINCT ts), count(DISTINCT device_id) FROM telemetry_sample").fetchone()


def test_it_writes_one_sample_per_device_per_tick(telemetry_dsn, tmp_path):
    agent = Agent(SimSource(gpus=4), telemetry_dsn, Spool(tmp_path), interval_s=0.01, labels={"team": "rl"})

    agent.run(ticks=5)

    assert counts(telemetry_dsn) == (20, 5, 4)
    assert agent.samples_written == 20


def test_agents_tick_at_moments_of_their_own_within_the_interval(telemetry_dsn, tmp_path):
    # Ten nodes' offsets in a 10 s interval: each in [0, 10), the same for the same key, spread apart.
    offsets = [tick_offset(f"gpu-node-{n:02d}", 10.0) for n in range(10)]
    assert all(0 <= o < 10 for o in offsets) and offsets == [tick_offset(f"gpu-node-{n:02d}", 10.0) for n in range(10)]
    assert len({int(o) for o in offsets}) >= 5  # not all in one second
    assert tick_offset("gpu-node-00", 1.0) == pytest.approx(offsets[0] / 10)
    # The first phased tick: the next wall-clock instant at the offset, never within a tenth of an interval.
    assert first_phased_tick(3.0, 10.0, wall=1_000_001.0, mono=50.0) == pytest.approx(52.0)
    assert first_phased_tick(3.0, 10.0, wall=1_000_002.5, mono=50.0) == pytest.approx(60.5)

    # Started half an interval off its moment: ticks counted from the start would all be 0.25 s off it.
    interval = 0.5
    offset = tick_offset("gpu-node-07", interval)
    while abs((time.time() - offset) % interval - interval / 2) > 0.02:
        time.sleep(0.005)
    agent = Agent(SimSource(gpus=1), telemetry_dsn, Spool(tmp_path), interval_s=interval, phase_key="gpu-node-07")
    agent.run(ticks=4)

    with psycopg.connect(telemetry_dsn) as conn:
        stamps = [ts.timestamp() for (ts,) in conn.execute("SELECT ts FROM telemetry_sample ORDER BY ts")]
    assert len(stamps) == 4 and agent.offset_s == offset
    off_phase = [min(p, interval - p) for p in ((ts - offset) % interval for ts in stamps)]
    # The first at once (off its moment), then every tick on the key's moment of the wall clock's half-seconds
    # (a quarter of the interval allowed for a busy machine's late wake-ups).
    assert off_phase[0] > interval / 4 and all(p < interval / 4 for p in off_phase[1:]), off_phase
    assert all(abs(b - a - interval) < interval / 4 for a, b in zip(stamps[1:], stamps[2:])), stamps


def test_while_the_database_is_unreachable_it_spools_and_keeps_sampling(tmp_path, caplog):
    spool = Spool(tmp_path)
    agent = Agent(SimSource(gpus=2), DOWN_DSN, spool, interval_s=0.01)

    agent.run(ticks=5)

    written = []
    spool.replay(written.append)
    assert sum(len(b.rows) for b in written) == 10
    assert caplog.text.count("database unreachable") == 1


def test_a_spool_left_by_a_killed_agent_is_replayed_by_the_next_one(telemetry_dsn, tmp_path):
    spool_dir = tmp_path / "spool"
    cmd = [sys.executable, "-m", "collector.agent", "--dsn", DOWN_DSN, "--source", "sim", "--gpus", "2",
           "--interval", "0.05", "--spool-dir", str(spool_dir)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert wait_for(lambda: Spool(spool_dir).segments() and sum(
        p.read_bytes().count(b"\n") for p in Spool(spool_dir).segments()) >= 5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    spooled_ticks = sum(p.read_bytes().count(b"\n") for p in Spool(spool_dir).segments())

    agent = Agent(SimSource(gpus=2), telemetry_dsn, Spool(spool_dir), interval_s=0.01)
    agent.run(ticks=1)

    total, distinct_ts, devices = counts(telemetry_dsn)
    assert (total, distinct_ts, devices) == (2 * (spooled_ticks + 1), spooled_ticks + 1, 2)
    assert Spool(spool_dir).is_empty()


def test_postgres_stopped_and_restarted_under_a_running_agent_loses_and_doubles_nothing(embedded_pg_factory, tmp_path):
    server = embedded_pg_factory(tmp_path / "pg")
    server.start()
    with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
        conn.execute(schema.SCHEMA_SQL)
    dsn = server.dsn("postgres")
    agent = Agent(SimSource(gpus=3, seed=5), dsn, Spool(tmp_path / "spool"), interval_s=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: counts(dsn)[0] >= 15)
        server.stop()
        ticks_at_stop = agent.ticks
        assert wait_for(lambda: agent.ticks >= ticks_at_stop + 20)  # sampling goes on into the spool
        assert not agent.spool.is_empty()
        server.start()
        assert wait_for(lambda: agent.spool.is_empty() and agent.conn is not None, timeout_s=60)
        written = agent.samples_written
        assert wait_for(lambda: agent.samples_written >= written + 3 * 4)  # live writes go on after the replay
    finally:
        stop.set()
        thread.join(timeout=30)

    total, distinct_ts, devices = counts(dsn)
    assert devices == 3
    assert distinct_ts == agent.ticks  # every tick stored
    assert total == 3 * agent.ticks  # and each sample once


# The hang is 3 s here; YARDSTICK_HANG_S=60 reruns the probe that measured samples lost across a 60 s hang.
HANG_S = float(os.environ.get("YARDSTICK_HANG_S", "3"))


def test_a_hung_database_loses_no_sample(embedded_pg_factory, tmp_path, caplog):
    """PostgreSQL stopped with SIGSTOP (it answers nothing): the agent keeps sampling, spools, loses nothing."""
    server = embedded_pg_factory(tmp_path / "pg")
    server.start()
    with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
        conn.execute(schema.SCHEMA_SQL)
    dsn = server.dsn("postgres")
    interval = 0.1
    agent = Agent(SimSource(gpus=4, seed=3), dsn, Spool(tmp_path / "spool"), interval_s=interval, db_timeout_s=1.0)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    postmaster = psutil.Process(server.pid())
    frozen = []
    try:
        assert wait_for(lambda: agent.samples_written >= 20)
        frozen = [postmaster, *postmaster.children(recursive=True)]
        for proc in frozen:
            proc.suspend()  # SIGSTOP: sockets stay open, nothing answers
        ticks_at_hang = agent.ticks
        time.sleep(HANG_S)
        ticks_in_hang = agent.ticks - ticks_at_hang
        abandoned = agent.writes_abandoned
    finally:
        for proc in frozen:
            proc.resume()
    try:
        assert wait_for(lambda: agent.spool.is_empty() and agent.conn is not None, timeout_s=60)
    finally:
        stop.set()
        thread.join(timeout=30)

    # Sampling never waited on the database: about one tick per interval throughout.
    assert ticks_in_hang >= 0.8 * HANG_S / interval
    # The write in flight was abandoned at its deadline, not left blocked.
    assert abandoned >= 1
    assert "got no answer from the database in 1s" in caplog.text
    total, distinct_ts, devices = counts(dsn)
    assert distinct_ts == agent.ticks  # every tick stored, the hung ones too
    assert total == 4 * agent.ticks  # and each sample once
    print(f"hang {HANG_S:g}s: {ticks_in_hang} ticks sampled during it, {agent.ticks} ticks, "
          f"{4 * agent.ticks - total} samples lost, {abandoned} writes abandoned")


def test_the_agent_command_exits_cleanly_on_sigterm(telemetry_dsn, tmp_path):
    cmd = [sys.executable, "-m", "collector.agent", "--dsn", telemetry_dsn, "--source", "sim", "--gpus", "2",
           "--interval", "0.05", "--spool-dir", str(tmp_path), "--label", "team=rl"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for(lambda: counts(telemetry_dsn)[0] >= 4)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)

    assert proc.returncode == 0
    assert "collecting from sim every 0.05s" in out
    assert "stopped after" in out


def test_an_unknown_source_or_bad_label_is_refused_with_the_reason():
    proc = subprocess.run([sys.executable, "-m", "collector.agent", "--dsn", DOWN_DSN, "--source", "sim",
                           "--label", "teamrl"], cwd=ROOT, capture_output=True, text=True, timeout=30)

    assert proc.returncode == 2
    assert "must look like KEY=VALUE (e.g. team=rl), got 'teamrl'" in proc.stderr


def test_without_a_gpu_driver_the_nvml_source_stops_with_one_clear_message(tmp_path):
    import pynvml  # the real one: this checks its real exception on a machine with no driver

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    proc = subprocess.run([sys.executable, "-m", "collector.agent", "--dsn", DOWN_DSN, "--source", "nvml",
                           "--spool-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=30)

    assert proc.returncode == 2
    assert "NVML library (libnvidia-ml.so) not found: this machine has no NVIDIA driver" in proc.stdout


def test_health_events_spooled_while_the_database_is_away_are_stored_once_when_it_is_back(telemetry_dsn, tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fake_pynvml import FakeGpu, FakeNvml

    from collector.agent.sources.nvml import NvmlSource

    gpu = FakeGpu.hopper("GPU-xid")
    fake = FakeNvml([gpu])
    source = NvmlSource("node-x", nvml=fake)
    fake.xid(source.event_set, gpu, 79)
    gpu.ecc_uncorrected = 3
    Agent(source, DOWN_DSN, Spool(tmp_path), interval_s=0.01).run(ticks=2)  # the database is away: spooled

    agent = Agent(NvmlSource("node-x", nvml=FakeNvml([FakeGpu.hopper("GPU-xid", ecc_uncorrected=3)])), telemetry_dsn,
                  Spool(tmp_path), interval_s=0.01)
    agent.run(ticks=1)  # replays the spool, then its own tick (its first health read sees the same 3 errors)

    with psycopg.connect(telemetry_dsn) as conn:
        rows = conn.execute("SELECT kind, code, critical FROM telemetry_device_event ORDER BY ts, kind").fetchall()
    assert rows == [("ecc_uncorrected", 3, True), ("xid", 79, True), ("ecc_uncorrected", 3, True)]


def test_an_xid_from_a_gpu_that_then_cannot_be_read_is_stored_and_the_gpu_gets_no_sample(telemetry_dsn, tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fake_pynvml import FakeGpu, FakeNvml

    from collector.agent.sources.nvml import NvmlSource

    lost, fine = FakeGpu.hopper("GPU-lost"), FakeGpu.hopper("GPU-fine")
    fake = FakeNvml([lost, fine])
    source = NvmlSource("node-l", nvml=fake)
    agent = Agent(source, telemetry_dsn, Spool(tmp_path), interval_s=0.01)
    agent.tick()  # one tick, delivered at once
    fake.xid(source.event_set, lost, 79)  # fallen off the bus: NVML cannot read it any more
    lost.lost = True
    agent.tick()
    agent.close()

    with psycopg.connect(telemetry_dsn) as conn:
        events = conn.execute("SELECT d.uuid, e.kind, e.code, e.critical FROM telemetry_device_event e "
                              "JOIN collector_device d ON d.id = e.device_id").fetchall()
        samples = dict(conn.execute("SELECT d.uuid, count(*) FROM telemetry_sample s "
                                    "JOIN collector_device d ON d.id = s.device_id GROUP BY d.uuid").fetchall())
    assert events == [("GPU-lost", "xid", 79, True)]
    assert samples == {"GPU-lost": 1, "GPU-fine": 2}


def test_a_second_agent_on_a_running_agents_spool_is_refused_and_the_first_goes_on(telemetry_dsn, tmp_path):
    # Two agents on one spool directory would replay, and delete, each other's segments.
    cmd = [sys.executable, "-m", "collector.agent", "--dsn", telemetry_dsn, "--source", "sim", "--gpus", "2",
           "--interval", "0.05", "--spool-dir", str(tmp_path)]
    first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: counts(telemetry_dsn)[0] >= 2)
        second = subprocess.run([*cmd, "--seed", "1"], cwd=ROOT, capture_output=True, text=True, timeout=30)
        written = counts(telemetry_dsn)[0]
        assert wait_for(lambda: counts(telemetry_dsn)[0] >= written + 4)
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=20)

    assert second.returncode == 2
    assert (f"spool directory {tmp_path} is in use by another agent (pid {first.pid}): "
            "give each agent on a machine its own --spool-dir") in second.stdout
    assert first.returncode == 0


class _OneBadReading(SimSource):
    """A source that returns, on its second tick, a value no column can take (a source's own fault)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.reads = 0

    def read(self, ts):
        self.reads += 1
        readings = super().read(ts)
        if self.reads == 2:
            readings[0].values = ("not a number",) + readings[0].values[1:]
        return readings


def test_a_spooled_batch_that_fails_for_a_reason_of_its_own_is_dropped_alone_and_replay_goes_on(
        telemetry_dsn, tmp_path, caplog):
    """What a loaded machine does: the delivery thread is busy, so the ticks wait in the spool, the bad one among
    them, and replay merges them. Only the bad tick is dropped; those behind it are written."""
    agent = Agent(_OneBadReading(gpus=2), telemetry_dsn, Spool(tmp_path), interval_s=0.05)
    agent._threaded, agent._busy = True, True  # each tick spooled, as behind a delivery still running
    for _ in range(6):
        agent.tick()
    agent._threaded, agent._busy = False, False
    assert agent.drain() == 10 and agent.spool.is_empty()
    assert counts(telemetry_dsn)[:2] == (10, 5)  # every tick but the bad one
    assert "dropped a batch of 2 samples that cannot be written" in caplog.text


def test_a_batch_that_fails_for_a_reason_of_its_own_is_logged_and_delivery_goes_on(telemetry_dsn, tmp_path, caplog):
    agent = Agent(_OneBadReading(gpus=2), telemetry_dsn, Spool(tmp_path), interval_s=0.05)

    agent.run(ticks=6)

    total, distinct_ts, _ = counts(telemetry_dsn)
    assert "delivery failed" in caplog.text
    assert (total, distinct_ts) == (10, 5)  # every tick but the bad one
