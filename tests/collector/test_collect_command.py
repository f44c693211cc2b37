"""`manage.py collect`: the agent, on the database in Django's settings."""

import psycopg
from django.core.management import call_command
from django.db import connection

from collector.management.commands.collect import settings_dsn
from collector.models import Device, Node


def test_it_runs_the_agent_against_the_projects_database(telemetry_dsn, tmp_path):
    call_command("collect", "--source", "sim", "--gpus", "2", "--interval", "0.01", "--ticks", "3",
                 "--spool-dir", str(tmp_path), "--label", "team=infra")

    node = Node.objects.get()
    assert (node.name, node.owner) == ("sim-node-00", "infra")
    assert Device.objects.filter(simulated=True).count() == 2
    with psycopg.connect(settings_dsn(connection.settings_dict)) as conn:
        assert conn.execute("SELECT count(*) FROM telemetry_sample").fetchone()[0] == 6


def test_the_dsn_handles_a_unix_socket_folder_as_host():
    dsn = settings_dsn({"HOST": "/srv/yard stick/run", "PORT": "5432", "NAME": "yardstick", "USER": "postgres",
                        "PASSWORD": "", "OPTIONS": {}})

    assert dsn == "host='/srv/yard stick/run' port=5432 dbname=yardstick user=postgres"
