"""Every URL of the URL conf, pages and API, requested as each role on a database holding what the product ships and
every state a user can reach (tests/shipped_world.py): never a 5xx. Then the fuzzer's generated input at every
endpoint on that same state.

Where the other tests build their own fixtures, this one starts from what a user has after importing the example
recipes and running for a while, so a page that breaks on shipped data (a recipe naming {init_from}, a job on a
cluster that stopped answering, a campaign of launched runs) fails here.
"""

import itertools

import plotly
import pytest
from django.test import Client
from django.urls import NoReverseMatch, reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.params import MEANS_SOMETHING, PARAMS
from tests.fuzz.test_no_5xx import _named_patterns, form_or_query, json_body, url_text
from tests.shipped_world import seed

ROLES = ("anonymous", "viewer", "operator", "admin")
EXAMPLES = 3  # a few per endpoint: the generated input is test_no_5xx's; here the point is the state it meets


@pytest.fixture
def shipped(db, admin_user, operator, viewer):
    world = seed(admin_user, operator)
    clients = {"anonymous": Client()}
    for role, user in (("viewer", viewer), ("operator", operator), ("admin", admin_user)):
        clients[role] = Client()
        clients[role].force_login(user)
    return world, clients


def path_values(url_name, part, world):
    """The values of path part `part` of URL `url_name` that name something in the seeded world."""
    if part == "name":
        return (world["recipes"] if "recipe" in url_name else world["clusters"] if "cluster" in url_name else
                world["deployments"] if "deployment" in url_name else world["nodes"])
    return {"job_id": list(world["jobs"].values()), "part": ["controls", "launch", "base_build"], "run_id": world["runs"],
            "experiment_id": world["experiments"], "campaign_id": world["campaigns"], "sweep_id": world["sweeps"], "alert_id": world["alerts"],
            "rule_id": world["rules"], "uuid": world["devices"], "version": [plotly.__version__],
            "path": ["model/config.json"]}[part]


def urls(world):
    """(URL name, path) of every named URL with every combination of the world's values for its path parts."""
    for pattern in _named_patterns():
        parts = list(pattern.pattern.converters)
        for values in itertools.product(*(path_values(pattern.name, p, world) for p in parts)):
            yield pattern.name, reverse(pattern.name, kwargs=dict(zip(parts, map(str, values), strict=True)))


def test_every_url_answers_every_role_without_a_5xx_on_what_the_product_ships(shipped):
    world, clients = shipped
    assert {"node failed", "ray running", "slurm queued", "trl cuda", "eval", "outside"} <= set(world["jobs"])
    answered, broken = 0, []
    for name, path in urls(world):
        for role in ROLES:
            resp = clients[role].get(path)
            answered += 1
            if resp.status_code >= 500 and resp.status_code not in MEANS_SOMETHING.get(name, ()):
                broken.append(f"{role} GET {path} ({name}): {resp.status_code}")
    assert answered > 1000, answered
    assert broken == [], "\n".join(broken)
    # The pages a person sees first, looked at as a viewer: the jobs of each kind and state are there.
    jobs_page = clients["viewer"].get("/jobs").content.decode()
    assert all(f'<tr data-job="{pk}">' in jobs_page for pk in world["jobs"].values())
    campaign = clients["viewer"].get(f"/campaigns/{world['campaigns'][0]}").content.decode()
    assert ">not measured</td>" in campaign.replace("not measured\n", "not measured"), "a run nothing measured says so"


def test_the_fuzzer_meets_the_shipped_state_without_a_5xx(shipped):
    world, clients = shipped
    for pattern in _named_patterns():
        for method, kind, fields in PARAMS.get(pattern.name, []):
            _fuzz(clients["admin"], world, pattern, method, kind, fields)


def _fuzz(client, world, pattern, method, kind, fields):
    """test_no_5xx's generated input at one endpoint, its path parts the world's names or generated text."""
    name = pattern.name
    kwargs = st.fixed_dictionaries({p: st.one_of(st.sampled_from(path_values(name, p, world)).map(str), url_text)
                                    for p in pattern.pattern.converters})
    body = json_body(fields) if kind == "json" else form_or_query(fields)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(kw=kwargs, data=body)
    def probe(kw, data):
        try:
            url = reverse(name, kwargs=kw)
        except NoReverseMatch:  # generated text its converter does not route: nothing to send
            return
        if method == "GET":
            resp = client.get(url, data)
        elif kind == "json":
            resp = getattr(client, method.lower())(url, data, content_type="application/json")
        else:
            resp = client.post(url, data)
        assert resp.status_code < 500 or resp.status_code in MEANS_SOMETHING.get(name, ()), (
            method, url, data, resp.content[:500])

    probe()
