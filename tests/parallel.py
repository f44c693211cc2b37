"""Under pytest-xdist (`make test` runs two workers) each worker gets servers of its own.

Loaded with `-p tests.parallel` (the Makefile passes it), which imports it
before pytest-django reads the settings. With the embedded servers each
worker starts its own PostgreSQL and Redis under YARDSTICK_DATA_DIR/<worker>
(gw0, gw1, ...): no shared broker queue, test database or checkpoint folder.
With REDIS_URL given (redis://host:port/N), worker k uses database N + k + 1,
so no worker's Celery takes another's tasks; each worker already gets its
own test database on a DATABASE_URL server. The processes a test starts
inherit the worker's settings.
"""

import os
from urllib.parse import urlsplit, urlunsplit

_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    os.environ["YARDSTICK_DATA_DIR"] = os.path.join(os.environ.get("YARDSTICK_DATA_DIR", "var/test"), _worker)
    _redis = urlsplit(os.environ.get("REDIS_URL", ""))
    if _redis.scheme in ("redis", "rediss"):
        _db = int(_redis.path.strip("/") or 0) + int(_worker.removeprefix("gw")) + 1
        os.environ["REDIS_URL"] = urlunsplit(_redis._replace(path=f"/{_db}"))
