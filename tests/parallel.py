"""Under pytest-xdist (`make test` runs three workers) each worker gets servers of its own.

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

import pytest

_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    os.environ["YARDSTICK_DATA_DIR"] = os.path.join(os.environ.get("YARDSTICK_DATA_DIR", "var/test"), _worker)
    _redis = urlsplit(os.environ.get("REDIS_URL", ""))
    if _redis.scheme in ("redis", "rediss"):
        _db = int(_redis.path.strip("/") or 0) + int(_worker.removeprefix("gw")) + 1
        os.environ["REDIS_URL"] = urlunsplit(_redis._replace(path=f"/{_db}"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Keep `--dist loadgroup` grouping: the tests of one xdist_group run in one worker, in turn (the Ray tests share
    one head, the Slurm tests one cluster).

    pytest-xdist 3.8 names an item's group by appending "@<group>" to `item._nodeid`, which pytest 9.2 no longer
    reads (a node's id is the structured `item._id`): every group's tests were spread over both workers, each
    starting its own head and cluster, both waiting on them at once. So the group is appended here, where xdist
    did not; and a run whose groups would still not hold stops before any test."""
    if not getattr(config.option, "loadgroup", False) or not hasattr(config, "workerinput"):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if not names:
            continue
        suffix = "@" + "_".join(names)
        if not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)
        if not item.nodeid.endswith(suffix):
            raise pytest.UsageError(f"--dist loadgroup cannot name {item.nodeid}'s group (pytest or pytest-xdist "
                                    "changed how a node's id is kept): tests/parallel.py")
