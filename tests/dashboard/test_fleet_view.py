"""The fleet page's own parameters: the node table searched, sorted and paged on the server, and every wrong
value answered with what was wrong and what is accepted."""

import html
from datetime import UTC, datetime

import pytest

from dashboard import readings
from tests.dashboard import builders as b


@pytest.fixture
def fleet(db):
    now = datetime.now(UTC)
    for i in range(60):
        n = b.node(f"node-{i:02d}", interval_s=30, team="infra" if i % 2 else "research")
        for j in range(2):
            b.latest(b.device(n, j, model="NVIDIA B200" if i % 3 == 0 else "NVIDIA H100 80GB HBM3"),
                     util_pct=i + j * 0.5, power_w=100 + i, ts=now)
    return now


def rows(resp):
    return [r["name"] for r in resp.context["table"]["rows"]]


def test_the_node_table_is_paged_sorted_and_searched_on_the_server(viewer_client, fleet):
    first = viewer_client.get("/")
    assert rows(first) == [f"node-{i:02d}" for i in range(readings.NODES_PER_PAGE)]
    table = first.context["table"]
    assert (table["total"], table["pages"], table["page"]) == (60, 2, 1)
    assert rows(viewer_client.get("/?page=2")) == [f"node-{i:02d}" for i in range(50, 60)]
    # Util now: each device's whole percent (half to even), their mean half up. node-58: 58 and 58.5 -> 58 and 58
    # -> 58; node-57: 57 and 57.5 -> 57 and 58 -> 57.5 -> 58. A tie keeps the name order.
    by_util = viewer_client.get("/?sort=util&order=desc")
    assert rows(by_util)[:3] == ["node-59", "node-57", "node-58"]
    assert [r["util_mean_pct"] for r in by_util.context["table"]["rows"][:3]] == [60, 58, 58]
    assert rows(viewer_client.get("/?q=node-1")) == [f"node-{i:02d}" for i in range(10, 20)]
    assert rows(viewer_client.get("/?q=RESEARCH&sort=power&order=desc"))[:2] == ["node-58", "node-56"], "a label"
    b200 = viewer_client.get("/?model=NVIDIA+B200")
    assert rows(b200) == [f"node-{i:02d}" for i in range(0, 60, 3)]
    assert rows(viewer_client.get("/?label:team=infra&q=node-0")) == ["node-01", "node-03", "node-05", "node-07",
                                                                      "node-09"]
    part = viewer_client.get("/fleet/nodes?sort=name&order=desc&page=1")
    assert part.status_code == 200 and part.content.decode().index("node-59") < part.content.decode().index("node-58")
    assert "?sort=name&amp;order=asc" in part.content.decode(), "a second click on the header reverses it"


@pytest.mark.parametrize("query, says", [
    ("sort=cost", "sort must be one of name, util, power, newest, status, devices, got 'cost'"),
    ("order=up", "order must be asc or desc, got 'up'"),
    ("page=0", "page must be a whole number from 1, got '0'"),
    ("page=two", "page must be a whole number from 1, got 'two'"),
    ("group=rack", "group must be one of auto, device, node, model or label:<key>, got 'rack'"),
    ("cell=max", "cell must be one of mean, worst, got 'max'"),
    ("q=" + "x" * 201, "the search must be at most 200 characters, got 201"),
])
def test_a_wrong_parameter_gets_a_400_that_says_what_is_accepted(viewer_client, fleet, query, says):
    for path in ("/", "/fleet/nodes"):
        resp = viewer_client.get(f"{path}?{query}")
        assert resp.status_code == 400, (path, query)
        assert says in html.unescape(resp.content.decode()), resp.content.decode()[-800:]
