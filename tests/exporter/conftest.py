"""A small charged fleet for the exporter's tests, written into the real tables."""

from datetime import datetime, timedelta, timezone

import pytest

from tests.dashboard import builders as b

UTC = timezone.utc
SCRAPE_TOKEN = "scrape-" + "s3cret-" * 4  # at least 24 characters, as settings demand


def reading(device, power_w, util_pct, energy_j=None, ts=None):
    """The device's newest sample (telemetry_latest), with the NVML energy counter when given."""
    from collector.models import LatestSample

    return LatestSample.objects.update_or_create(device=device, defaults=dict(
        ts=ts or datetime.now(UTC), util_pct=util_pct, power_w=power_w, energy_j=energy_j, temp_c=61.0,
        mem_used_mib=20000, sm_active_pct=util_pct / 2))[0]


def charged_scene():
    """Node gpu-a (owner infra): GPU 0 (NVML, 412.5 W, 87 %, energy counter 123456 J) held 20 minutes by job
    "grpo" (team research, 10 steps); GPU 1 simulated, estimated power, 200 W, idle, no energy counter;
    $3.60/h, $0.10/kWh, PUE 1.5; attributed. Returns {"job", "gpu0", "gpu1"}."""
    grpo = b.charged_fleet()
    from collector.models import Device

    gpu0, gpu1 = Device.objects.order_by("index")
    Device.objects.filter(pk=gpu1.pk).update(power_estimated=True)
    reading(gpu0, 412.5, 87.0, energy_j=123456.0)
    reading(gpu1, 200.0, 0.0)
    return {"job": grpo, "gpu0": gpu0, "gpu1": gpu1}


def ended_job(name, hours_ago):
    """A completed job that finished `hours_ago` hours ago."""
    from trainer.models import Job

    job = b.job(name=name, team="research", status="completed")
    Job.objects.filter(pk=job.pk).update(finished_at=datetime.now(UTC) - timedelta(hours=hours_ago))
    return job


@pytest.fixture
def scrape_token(settings):
    settings.METRICS_TOKEN = SCRAPE_TOKEN
    return SCRAPE_TOKEN


@pytest.fixture(autouse=True)
def no_spend_left_by_earlier_tests(request):
    """Today's spend (the teams' and the fleet's) and the jobs' money wait in the shared Redis cache for a minute or
    more: start without them, so a scrape computes this test's."""
    if {"db", "transactional_db"} & set(request.fixturenames):
        from django.core.cache import cache
        from django.utils import timezone

        from costs.live import fleet_today_key
        from exporter.metrics import cache_keys

        request.getfixturevalue("embedded_services")
        today = timezone.now().date()
        cache.delete_many([fleet_today_key(today), *cache_keys(today).values()])
