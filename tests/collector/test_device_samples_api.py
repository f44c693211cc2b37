"""GET /api/devices/<uuid>/samples: raw, 1m, 1h series with energy per point; bad parameters are 400s."""

from datetime import datetime, timedelta, timezone

import pytest

from collector import store
from collector.agent.batch import Batch, DeviceInfo
from collector.agent.writer import Writer

T0 = datetime(2025, 4, 1, 9, 0, tzinfo=timezone.utc)
GPU = DeviceInfo("GPU-s", "n", 0, "H100", "nvml")
URL = "/api/devices/GPU-s/samples"

@pytest.fixture
def series(pg_conn):
    rows = [("GPU-s", T0 + timedelta(seconds=s), 50.0, 1.0, 200.0, 10_000.0 + 200.0 * s, 1, 1, 1.0, 1, 2.0)
            for s in range(180)]
    Writer(pg_conn).write(Batch([GPU], rows))
    store.roll_up()

def get(client, **params):
    return client.get(URL, params)

def test_raw_points_carry_the_energy_of_their_interval(client, viewer, series):
    client.force_login(viewer)

    body = get(client, resolution="raw", **{"from": "2025-04-01T09:00:00Z", "to": "2025-04-01T09:00:05Z"}).json()

    assert body["device"] == {"uuid": "GPU-s", "node": "n", "index": 0, "label": "GPU 0", "model": "H100", "source": "nvml",
                              "simulated": False, "power_estimated": False, "mem_total_mib": None,
                              "arch": "", "mig_mode": None, "power_scopes": ""}
    points = body["points"]
    assert len(points) == 5
    assert [p["energy_j"] for p in points] == [None, 200.0, 200.0, 200.0, 200.0]
    assert points[1]["energy_counter_j"] == 10_200.0 and points[1]["energy_from"] == "counter"

def test_minute_points_are_the_rollups(client, viewer, series):
    client.force_login(viewer)

    points = get(client, resolution="1m", **{"from": "2025-04-01T09:00:00Z", "to": "2025-04-01T10:00:00Z"}).json()["points"]

    assert [p["samples"] for p in points] == [60, 60, 60]
    assert [p["energy_j"] for p in points] == [59 * 200.0, 60 * 200.0, 60 * 200.0]
    assert points[0]["ts"] == "2025-04-01T09:00:00Z"

def test_hour_points_sum_their_minutes(client, viewer, series):
    client.force_login(viewer)

    [point] = get(client, resolution="1h", **{"from": "1743498000", "to": "1743501600"}).json()["points"]

    assert point["energy_j"] == 179 * 200.0 and point["energy_from"] == "counter"

@pytest.mark.parametrize(
    "params, message",
    [
        ({"resolution": "5m"}, "resolution must be one of raw, 1m, 1h, got '5m'"),
        ({"from": "yesterday"}, "from must be an ISO 8601 time like 2025-01-31T12:00:00Z or Unix seconds, got 'yesterday'"),
        ({"to": "soon"}, "to must be an ISO 8601 time"),
        ({"from": "2025-04-02T00:00:00Z", "to": "2025-04-01T00:00:00Z"}, "from must be before to"),
        ({"resolution": "raw", "from": "2025-03-01T00:00:00Z", "to": "2025-04-01T00:00:00Z"},
         "from..to may span at most 1 day(s) at resolution raw"),
        # The calendar's edges overflowed (500) when the default range was taken off them.
        ({"to": "0001-01-01T00:00:00"}, "to must be a time from 1970-01-01 to 2100-01-01 (UTC), got 0001-01-01"),
        ({"to": "9999-12-31T23:59:59"}, "to must be a time from 1970-01-01 to 2100-01-01 (UTC), got 9999-12-31"),
        ({"from": "1e300"}, "from must be an ISO 8601 time"),
    ],
)
def test_bad_parameters_are_a_400_naming_the_parameter_and_what_is_accepted(client, viewer, series, params, message):
    client.force_login(viewer)

    response = get(client, **params)

    assert response.status_code == 400
    assert message in response.json()["error"]

def test_a_nul_in_the_uuid_is_a_400_naming_it(client, viewer, db):
    client.force_login(viewer)
    resp = client.get("/api/devices/%00/samples")
    assert resp.status_code == 400
    assert resp.json()["field"] == "uuid" and "uuid contains a NUL (U+0000) character" in resp.json()["error"]


def test_an_unknown_device_is_a_404(client, viewer, db):
    client.force_login(viewer)

    response = client.get("/api/devices/GPU-nope/samples")

    assert response.status_code == 404 and "GPU-nope" in response.json()["error"]

def test_anonymous_callers_get_401(client, db):
    assert client.get(URL).status_code == 401
