"""Generated strings, numbers and dates at every parameter of every endpoint: never a 5xx, and a refusal stores nothing.

The endpoints come from the URL conf (path parts by their converters); the
parameters each one reads from tests/fuzz/params.py, which must name every URL
of the conf. Values: text with NUL, lone surrogates (in JSON, where a client
can send them), odd and huge unicode; integers and floats at and past every
edge (NaN, infinities, 10^400); dates and times at the calendar's edges; raw
bodies that are not JSON or are nested 100,000 deep. Each example is a request
from the Django test client as an admin (every role), so a 500 surfaces as the
exception that caused it.
"""

import functools
import json
import os
import re
from collections import Counter
from datetime import date, datetime

import pytest
from django.apps import apps
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.dashboard import builders as b
from tests.fuzz.params import CONFIG_FIELDS, MEANS_SOMETHING, PARAMS

OUR_APPS = ("alerts", "campaigns", "collector", "costs", "launch", "serving", "sweeps", "trainer", "tracking",
            "yardstick")
# A modest number keeps the suite fast; YARDSTICK_FUZZ_EXAMPLES=500 looks harder (derandomized: same examples each run).
EXAMPLES = int(os.environ.get("YARDSTICK_FUZZ_EXAMPLES", "12"))

# -- values ---------------------------------------------------------------------------------------------

EDGE_TEXT = ["", " ", "\x00", "a\x00b", "²", "٣", "１", "-1", "0", "1e308", "-1e308", "nan", "NaN", "inf", "-Infinity",
             "99999999999999999999", "1" + "0" * 5000, "9999-12-31", "0001-01-01", "0001-01-01T00:00:00",
             "9999-12-31T23:59:59", "2025-02-30", "1970-01-01T00:00:00Z", "true", "null", "[]", "{}", "%00", "../..",
             "<script>", "=1+2", "\u202e", "\U0010ffff", "é" * 300, "x" * 20_000]
# Text an HTTP client can send in a URL or form: no lone surrogates (UTF-8 cannot carry them).
url_text = st.one_of(st.sampled_from(EDGE_TEXT), st.text(max_size=40),
                     st.text(st.characters(min_codepoint=0, max_codepoint=0x2000), max_size=10))
# JSON strings can hold lone surrogates ("\ud800").
json_text = st.one_of(url_text, st.text(st.characters(codec=None, categories=["Cs", "Cc", "Lo"]), max_size=10))
numbers = st.one_of(st.integers(), st.integers(min_value=-2**70, max_value=2**70), st.sampled_from(
    [0, -1, 2**31, 2**63, 2**64, 10**20, 10**400, -10**400]), st.floats(allow_nan=True, allow_infinity=True))
moments = st.one_of(st.dates(min_value=date(1, 1, 1)).map(date.isoformat),
                    st.datetimes(min_value=datetime(1, 1, 1)).map(datetime.isoformat))
scalars = st.one_of(json_text, numbers, moments, st.booleans(), st.none())
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(json_text, inner, max_size=3)), max_leaves=6)
url_values = st.one_of(url_text, numbers.map(str), moments)
raw_bodies = st.sampled_from([b"", b"{", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000,
                              b'{"name": NaN}', b"1e999999", b"[" + b"1," * 10_000 + b"1]"])


def _config(fields):
    return st.dictionaries(st.sampled_from(fields), json_values, max_size=4)


def json_body(fields):
    if not fields:
        return st.one_of(st.just(b""), raw_bodies)
    values = {f: (st.one_of(_config(CONFIG_FIELDS), json_values) if f == "config" else json_values) for f in fields}
    objects = st.fixed_dictionaries({}, optional=values).map(lambda d: json.dumps(d, allow_nan=True).encode())
    return st.one_of(objects, objects, objects, raw_bodies)


def form_or_query(fields):
    return st.fixed_dictionaries({}, optional={f: url_values for f in fields})


# -- endpoints ------------------------------------------------------------------------------------------


def _named_patterns(patterns=None):
    for p in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(p, URLResolver):
            if not str(p.pattern).startswith("admin"):
                yield from _named_patterns(p.url_patterns)
        elif isinstance(p, URLPattern) and p.name:
            yield p


def _cases():
    return [(p.name, method, kind, fields) for p in _named_patterns() for method, kind, fields in PARAMS.get(p.name, [])]


def path_kwargs(name, job_ids):
    """Path parts for URL `name`: generated values that its converters' patterns match (else it would not route)."""
    converters = {n: c for p in _named_patterns() if p.name == name for n, c in p.pattern.converters.items()}
    parts = {
        "IntConverter": st.one_of(st.sampled_from(job_ids), st.integers(min_value=0), st.just(2**63)),
        "StringConverter": st.one_of(st.just("gpu-a"), url_text),
        "PathConverter": st.one_of(st.just("1/x"), url_text),
    }
    return st.fixed_dictionaries({
        n: parts[type(c).__name__].map(str).filter(lambda t, c=c: re.fullmatch(c.regex, t) and not t.startswith("/"))
        for n, c in converters.items()})


@functools.cache
def _fingerprint_query():
    """(the tables, one query giving the md5 of each one's rows as text in order): built once, run per example."""
    from django.db import connection

    tables = sorted({m._meta.db_table for m in apps.get_models() if m._meta.app_label in OUR_APPS})
    quote = connection.ops.quote_name
    select = ", ".join(f"(SELECT md5(coalesce(string_agg(r::text, E'\\n' ORDER BY r::text), '')) FROM {quote(t)} r)"
                       for t in tables)
    return tables, f"SELECT {select}"


def _fingerprint():
    """Every row of our apps' tables (the collector's, made by its own SQL, too), so a refused request can be shown to
    have stored nothing: every table in one query (a query per table took most of this module's time)."""
    from django.db import connection

    tables, query = _fingerprint_query()
    with connection.cursor() as cursor:
        cursor.execute(query)
        return dict(zip(tables, cursor.fetchone()))


@pytest.fixture
def world(db, admin_user):
    b.prices()
    node = b.node("gpu-a", team="infra")
    b.device(node, 0)
    job = b.job(name="fuzzed", status="failed", created_by=admin_user)
    b.steps(job, 3)
    from alerts.models import AlertRule

    rule = AlertRule.create({"name": "fuzzed", "kind": "job_failed"}, by=admin_user)
    return [job.pk, rule.pk]


def test_the_parameter_list_names_every_url_of_the_conf():
    names = {p.name for p in _named_patterns()}
    assert names - set(PARAMS) == set(), "add these to tests/fuzz/params.py"
    assert set(PARAMS) - names == set(), "these are no URL names any more"


# Requests sent and how they were answered, by status class: printed at the end of the module (pytest -s).
ANSWERED = Counter()


@pytest.fixture(scope="module", autouse=True)
def _say_what_was_sent():
    yield
    if ANSWERED:
        print(f"\nfuzz: {sum(ANSWERED.values())} requests, answered "
              + ", ".join(f"{k}: {v}" for k, v in sorted(ANSWERED.items())))


@pytest.mark.parametrize("name, method, kind, fields", _cases(), ids=lambda v: v if isinstance(v, str) else None)
def test_it_never_answers_5xx_and_a_refusal_stores_nothing(client, admin_user, world, name, method, kind, fields):
    body = json_body(fields) if kind == "json" else form_or_query(fields)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                     HealthCheck.data_too_large])
    @given(kwargs=path_kwargs(name, world), data=body)
    def probe(kwargs, data):
        client.force_login(admin_user)
        url = reverse(name, kwargs=kwargs)
        before = _fingerprint()
        if method == "GET":
            resp = client.get(url, data)
        elif kind == "json":
            send = {"POST": client.post, "PUT": client.put, "PATCH": client.patch, "DELETE": client.delete}[method]
            resp = send(url, data, content_type="application/json")
        else:
            resp = client.post(url, data)
        meant = resp.status_code in MEANS_SOMETHING.get(name, ())  # /healthz's 503: a part is down
        ANSWERED[f"{resp.status_code} from {name}" if meant else f"{resp.status_code // 100}xx"] += 1
        assert resp.status_code < 500 or resp.status_code in MEANS_SOMETHING.get(name, ()), (url, data, resp.content[:500])
        if resp.status_code >= 400:
            assert _fingerprint() == before, f"{method} {url} answered {resp.status_code} and changed stored rows"

    probe()
