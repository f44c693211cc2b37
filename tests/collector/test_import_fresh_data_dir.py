"""A command that needs the schema brings it up to date first, or refuses with one line saying what to run.

Importing old logs is many people's first step: `import_smi` on a fresh data dir must not end in
`relation "collector_node" does not exist`. Real subprocesses, as a person runs them.
"""

import os
import re
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tests.conftest import ROOT, connection_dsn, database_url, manage

LOG = ROOT / "tests" / "data" / "telemetry" / "smi_rtx4090_vlm.csv"


def without_servers(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    return {**env, **extra}


@pytest.mark.slow  # starts a fresh embedded PostgreSQL: about 5 s
def test_import_smi_on_a_fresh_data_dir_migrates_first_and_imports(service_dir):
    env = without_servers(YARDSTICK_DATA_DIR=str(service_dir))
    first = manage("import_smi", str(LOG), "--node", "desk", env=env)

    assert first.returncode == 0, first.stderr
    assert f"migration(s) to the database in {service_dir} before import_smi" in first.stderr
    assert "imported 30 samples for 1 device(s) on node desk" in first.stdout
    assert "Traceback" not in first.stderr

    second = manage("import_smi", str(LOG), "--node", "desk", env=env)  # the schema is there now
    assert second.returncode == 0 and "migration" not in second.stderr
    assert "30 samples were already stored" in second.stdout


def test_a_database_it_does_not_own_is_not_migrated_behind_its_back(db):
    from django.db import connection

    name = f"yardstick_empty_{uuid.uuid4().hex[:8]}"
    admin = connection_dsn(connection.settings_dict)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = database_url().rsplit("/", 1)[0] + "/" + name
        result = manage("import_smi", str(LOG), "--node", "desk", env={"DATABASE_URL": url})

        assert result.returncode == 1
        assert re.fullmatch(r"Error: the database schema is behind this code \(\d+ migration\(s\) not applied\); "
                            r"run: python manage.py migrate", result.stderr.strip()), result.stderr
        with psycopg.connect(make_conninfo(admin, dbname=name)) as conn:
            assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
