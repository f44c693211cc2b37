"""Differential tests: the same REST requests to a real MLflow 3.17.2 tracking server and to Yardstick.

A real `mlflow server` (the `mlflow` package of requirements-dev.txt, SQLite backend, proxied artifacts,
loopback only) runs once per session; Yardstick is pytest-django's live server, reached with a reporter's
API token (MLflow's server is reached without one: it has no access control). Each call goes to both and
the answers must agree: the HTTP status, the JSON body, and for an error its `error_code` and `message`.

What legitimately differs is normalised before comparing (`normalise`), and nothing else:

- ids each server hands out: an experiment's id (also inside artifact URIs and messages) and a run's id
  become `<exp:NAME>` / `<run:NAME>`, named for the test's own label of what it created;
- times a server takes from its clock (creation_time, last_update_time, and start_time or a metric's
  timestamp where the request sent none) become `<time>`;
- MLflow's `sqlstate` and `error_class` (machine classifications its client does not read) are not
  compared, and neither is the database error MLflow's SQLite store appends to a RESOURCE_ALREADY_EXISTS
  message ("... Error: (sqlite3.IntegrityError) ...").

Deliberate differences are tested on their own at the end of this file and listed in docs/mlflow-api.md:
Yardstick asks for a token and a role, and a run's user_id defaults to the token's user.
"""

import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest
import requests

from tests.conftest import free_port

MLFLOW_START_S = 90
TIME_KEYS = {"creation_time", "last_update_time"}


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """The URL of a real MLflow tracking server (SQLite store, proxied artifacts) on a loopback port, for this module.

    Without MLflow's job runner (MLFLOW_SERVER_ENABLE_JOB_EXECUTION, on by default), which serves its GenAI jobs,
    no tracking request: it starts eight more Python processes (half a minute of CPU) that poll all the while
    (about half a core), and outlive the server when it is stopped."""
    if shutil.which("mlflow", path=os.path.dirname(sys.executable)) is None:
        pytest.fail("the mlflow server package is missing: `make test` installs it from requirements-dev.txt")
    home = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")},
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}",
         "--serve-artifacts", "--artifacts-destination", str(home / "artifacts"),
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + MLFLOW_START_S
    while True:
        try:
            if requests.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except requests.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"mlflow server did not start: {(home / 'server.log').read_text()[-2000:]}")
        time.sleep(0.3)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


class Ref:
    """A value each server knows by its own id: the experiment or run the test labelled `name`."""

    def __init__(self, name):
        self.name = name


class Server:
    def __init__(self, label, url, headers):
        self.label, self.url, self.headers = label, url, headers
        self.ids = {}  # test label -> this server's id

    def resolve(self, value):
        if isinstance(value, Ref):
            return self.ids[value.name]
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        return value

    def send(self, method, endpoint, body=None, raw=None, base="api/2.0/mlflow"):
        url = f"{self.url}/{base}/{endpoint}"
        if method == "GET":
            resp = requests.get(url, params=self.resolve(body or {}), headers=self.headers, timeout=30)
        elif raw is not None:
            resp = requests.request(method, url, data=raw, headers={**self.headers, "Content-Type":
                                    "application/json"}, timeout=30)
        else:
            resp = requests.request(method, url, json=self.resolve(body or {}), headers=self.headers, timeout=30)
        return resp


class Twins:
    """Send each request to MLflow and to Yardstick; assert the answers agree (after `normalise`)."""

    def __init__(self, mlflow, ours):
        self.mlflow, self.ours = mlflow, ours
        self.tag = uuid.uuid4().hex[:8]  # experiment names unique in the session-long MLflow server

    def name(self, text):
        return f"{text}-{self.tag}"

    def call(self, method, endpoint, body=None, *, save=None, raw=None, times=(), same=True, base="api/2.0/mlflow"):
        """Send to both; `save={label: path}` keeps each server's id found at that dotted path of its
        answer; `times` names more keys holding clock times. Return (mlflow's, ours) parsed answers."""
        answers = []
        for server in (self.mlflow, self.ours):
            resp = server.send(method, endpoint, body, raw=raw, base=base)
            data = _json(resp)
            for label, where in (save or {}).items():
                server.ids[label] = _dig(data, where)
            answers.append((resp.status_code, data))
        given = set(_literals(body))
        theirs, ours = (self.normalise(s, a, set(times), given) for s, a in zip((self.mlflow, self.ours), answers))
        if same:
            assert ours == theirs, f"{method} {endpoint} {body!r}\n  mlflow:    {theirs}\n  yardstick: {ours}"
        return theirs, ours

    def post(self, endpoint, body=None, **kw):
        return self.call("POST", endpoint, body, **kw)

    def get(self, endpoint, body=None, **kw):
        return self.call("GET", endpoint, body, **kw)

    def normalise(self, server, answer, times, given=frozenset()):
        """`given`: the request's own literal values; a message quoting one back (run_name 5) keeps it, even
        where a server's experiment happens to have that id."""
        status, data = answer
        names = {str(v): k for k, v in server.ids.items()}
        exp_labels = {str(v): k for k, v in server.ids.items() if not _is_run_id(v)}

        def text(value):
            value = re.sub(r"\b[0-9a-f]{32}\b", lambda m: f"<run:{names.get(m.group(0), '?')}>", value)
            value = re.sub(r"mlflow-artifacts:/(\d+)",
                           lambda m: f"mlflow-artifacts:/<exp:{exp_labels.get(m.group(1), m.group(1))}>", value)
            return value

        def walk(value, key=None):
            if isinstance(value, dict):
                out = {}
                for k, v in value.items():
                    if k in ("sqlstate", "error_class"):
                        continue
                    out[k] = walk(v, k)
                return out
            if isinstance(value, list):
                items = [walk(v) for v in value]
                if items and all(isinstance(i, dict) and "key" in i for i in items):
                    items.sort(key=lambda i: str(i["key"]))  # tags, params, metrics: maps to every client
                return items
            if key in TIME_KEYS | times and isinstance(value, (int, str)) and value not in ("", None):
                return "<time>"
            if key == "experiment_id" and str(value) in exp_labels:
                return f"<exp:{exp_labels[str(value)]}>"
            if key == "message" and isinstance(value, str):
                value = value.split(" Error: (sqlite3.")[0]
                for exp_id, label in exp_labels.items():
                    if exp_id in given:
                        continue
                    value = re.sub(rf"(?<![\w.]){re.escape(exp_id)}(?![\w.])", f"<exp:{label}>", value)
            if isinstance(value, str):
                return text(value)
            return value

        return status, walk(data)


def _literals(value):
    """Every string or integer in a request body, however deeply nested (a tag's value 41 quoted back)."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            yield from _literals(item)
    elif isinstance(value, (str, int)) and not isinstance(value, bool):
        yield str(value)


def _is_run_id(value):
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{32}", value) is not None


def _json(resp):
    try:
        return resp.json()
    except ValueError:
        return {"<not json>": resp.text[:200]}


def _dig(data, path):
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


@pytest.fixture
def twins(mlflow_server, live_server, reporter, api_token):
    return Twins(Server("mlflow", mlflow_server, {}),
                 Server("yardstick", live_server.url, {"Authorization": f"Bearer {api_token(reporter)}"}))


def _experiment(twins, label="exp", **fields):
    twins.post("experiments/create", {"name": twins.name(label), **fields}, save={label: "experiment_id"})


def _run(twins, label="run", exp="exp", **fields):
    twins.post("runs/create", {"experiment_id": Ref(exp), "run_name": label, "user_id": "u",
                               "start_time": 1_700_000_000_000, **fields}, save={label: "run.info.run_id"})


# -- experiments ----------------------------------------------------------------------------------------


def test_experiments_are_created_read_renamed_deleted_and_restored_alike(twins):
    _experiment(twins, tags=[{"key": "team", "value": "rl"}])
    twins.get("experiments/get", {"experiment_id": Ref("exp")})
    twins.get("experiments/get-by-name", {"experiment_name": twins.name("exp")})
    twins.post("experiments/update", {"experiment_id": Ref("exp"), "new_name": twins.name("renamed")})
    twins.get("experiments/get", {"experiment_id": Ref("exp")})
    twins.post("experiments/set-experiment-tag", {"experiment_id": Ref("exp"), "key": "k", "value": "v"})
    twins.post("experiments/delete-experiment-tag", {"experiment_id": Ref("exp"), "key": "k"})
    twins.post("experiments/delete", {"experiment_id": Ref("exp")})
    twins.get("experiments/get", {"experiment_id": Ref("exp")})
    twins.post("experiments/restore", {"experiment_id": Ref("exp")})
    twins.get("experiments/get", {"experiment_id": Ref("exp")})


def test_the_default_experiment_reads_alike(twins):
    twins.get("experiments/get", {"experiment_id": "0"})
    twins.get("experiments/get-by-name", {"experiment_name": "Default"})


@pytest.mark.parametrize("body", [
    {},
    {"name": ""},
    {"name": 5},
    {"name": ["a"]},
    {"name": "x", "artifact_location": 9.0},
    {"name": "x", "tags": "abc"},
])
def test_a_bad_experiment_is_refused_alike(twins, body):
    body = {**body, "name": twins.name(body["name"])} if isinstance(body.get("name"), str) and body["name"] else body
    twins.post("experiments/create", body)


def test_a_duplicate_experiment_name_is_refused_alike(twins):
    _experiment(twins)
    twins.post("experiments/create", {"name": twins.name("exp")})


def test_renaming_to_a_taken_name_is_refused_with_yardsticks_own_error(twins):
    """Deliberate: MLflow's SQLite store answers BAD_REQUEST with its SQL statement as the message."""
    _experiment(twins)
    _experiment(twins, "other")
    theirs, ours = twins.post("experiments/update", {"experiment_id": Ref("other"), "new_name": twins.name("exp")},
                              same=False)
    assert theirs[0] == 400 and theirs[1]["error_code"] == "BAD_REQUEST"
    assert ours == (400, {"error_code": "RESOURCE_ALREADY_EXISTS",
                          "message": f"Experiment(name={twins.name('exp')}) already exists."})
    twins.get("experiments/get", {"experiment_id": Ref("other")})


@pytest.mark.parametrize("params", [{}, {"experiment_id": "abc"}, {"experiment_id": "987654"},
                                    {"experiment_id": "-1"}])
def test_a_missing_or_bad_experiment_id_is_refused_alike(twins, params):
    twins.get("experiments/get", params)


@pytest.mark.parametrize("body", [{"experiment_id": 7}, {"experiment_id": "987654"}, {}])
def test_deleting_a_bad_experiment_is_refused_alike(twins, body):
    twins.post("experiments/delete", body)


def test_an_unknown_experiment_name_is_refused_alike(twins):
    twins.get("experiments/get-by-name", {"experiment_name": twins.name("nope")})
    twins.get("experiments/get-by-name", {})


def test_experiments_are_searched_alike(twins):
    _experiment(twins, "a", tags=[{"key": "k", "value": "1"}])
    _experiment(twins, "b")
    twins.post("experiments/search", {"filter": f"name LIKE '%{twins.tag}'", "order_by": ["name DESC"],
                                      "max_results": 10})
    twins.post("experiments/search", {"filter": f"name = '{twins.name('a')}' AND tags.k = '1'", "max_results": 10})
    twins.post("experiments/search", {"filter": f"name = '{twins.name('none')}'", "max_results": 10})
    twins.get("experiments/search", {"filter": f"name LIKE '%{twins.tag}'", "max_results": "1"},
              same=False)  # page tokens are each server's own; the page is compared below
    theirs, ours = twins.post("experiments/search", {"filter": f"name LIKE '%{twins.tag}'", "max_results": 1,
                                                     "order_by": ["name"]}, same=False)
    assert ours[0] == theirs[0] == 200
    assert ours[1]["experiments"] == theirs[1]["experiments"]
    assert "next_page_token" in ours[1] and "next_page_token" in theirs[1]


# -- runs -----------------------------------------------------------------------------------------------


def test_runs_are_created_read_updated_deleted_and_restored_alike(twins):
    _experiment(twins)
    _run(twins, tags=[{"key": "stage", "value": "dev"}])
    twins.get("runs/get", {"run_id": Ref("run")})
    twins.post("runs/update", {"run_id": Ref("run"), "status": "FINISHED", "end_time": 1_700_000_100_000})
    twins.post("runs/update", {"run_id": Ref("run"), "run_name": "renamed"})
    twins.get("runs/get", {"run_id": Ref("run")})
    twins.post("runs/delete", {"run_id": Ref("run")})
    twins.get("runs/get", {"run_id": Ref("run")})
    twins.post("runs/restore", {"run_id": Ref("run")})
    twins.get("runs/get", {"run_uuid": Ref("run")})


@pytest.mark.parametrize("params", [{}, {"run_id": ""}, {"run_id": "0" * 32}, {"run_id": "not-a-run"}])
def test_a_missing_or_unknown_run_is_refused_alike(twins, params):
    twins.get("runs/get", params)


@pytest.mark.parametrize("body", [{"run_id": 31}, {"run_id": ["a"]}, {}, {"run_id": "0" * 32}])
def test_a_bad_run_id_is_refused_alike_when_writing(twins, body):
    twins.post("runs/log-parameter", {**body, "key": "k", "value": "v"})
    twins.post("runs/delete", body)


@pytest.mark.parametrize("body", [
    {"status": 3},
    {"end_time": "soon"},
    {"run_name": 5},
])
def test_a_bad_run_update_is_refused_alike(twins, body):
    _experiment(twins)
    _run(twins)
    twins.post("runs/update", {"run_id": Ref("run"), **body})
    twins.get("runs/get", {"run_id": Ref("run")})


@pytest.mark.parametrize("body", [
    {"experiment_id": "987654"},
    {"start_time": "noon"},
    {"run_name": 5},
])
def test_a_bad_run_is_refused_alike(twins, body):
    _experiment(twins)
    twins.post("runs/create", {"experiment_id": Ref("exp"), "user_id": "u", "start_time": 1, "run_name": "r",
                               **body})


def test_runs_are_searched_alike(twins):
    _experiment(twins)
    _run(twins, "a")
    _run(twins, "b", start_time=1_700_000_000_001)
    twins.post("runs/log-metric", {"run_id": Ref("a"), "key": "reward", "value": 0.5, "timestamp": 1, "step": 1})
    twins.post("runs/log-parameter", {"run_id": Ref("b"), "key": "lr", "value": "1e-5"})
    twins.post("runs/search", {"experiment_ids": [Ref("exp")]})
    twins.post("runs/search", {"experiment_ids": [Ref("exp")], "filter": "metrics.reward > 0.1"})
    twins.post("runs/search", {"experiment_ids": [Ref("exp")], "filter": "params.lr = '1e-5'"})
    twins.post("runs/search", {"experiment_ids": [Ref("exp")], "order_by": ["attributes.start_time ASC"]})
    twins.post("runs/search", {"experiment_ids": [Ref("exp")], "filter": "tags.`mlflow.runName` = 'a'"})


# -- metrics, params, tags ------------------------------------------------------------------------------


def test_metrics_params_and_tags_are_logged_and_read_back_alike(twins):
    _experiment(twins)
    _run(twins)
    twins.post("runs/log-metric", {"run_id": Ref("run"), "key": "loss", "value": 2.5, "timestamp": 10, "step": 3})
    twins.post("runs/log-metric", {"run_id": Ref("run"), "key": "loss", "value": "NaN", "timestamp": 11,
                                   "step": 4})
    twins.post("runs/log-metric", {"run_id": Ref("run"), "key": "loss", "value": 1.5, "timestamp": 12})
    twins.post("runs/log-parameter", {"run_id": Ref("run"), "key": "lr", "value": "1e-5"})
    twins.post("runs/log-parameter", {"run_id": Ref("run"), "key": "lr", "value": "1e-5"})
    twins.post("runs/set-tag", {"run_id": Ref("run"), "key": "note", "value": "hello"})
    twins.post("runs/log-batch", {"run_id": Ref("run"),
                                  "metrics": [{"key": "kl", "value": 0.1, "timestamp": 13, "step": 1}],
                                  "params": [{"key": "beta", "value": "0.04"}],
                                  "tags": [{"key": "a", "value": "b"}]})
    twins.post("runs/delete-tag", {"run_id": Ref("run"), "key": "a"})
    twins.get("runs/get", {"run_id": Ref("run")})
    twins.get("metrics/get-history", {"run_id": Ref("run"), "metric_key": "loss"})
    twins.get("metrics/get-history", {"run_id": Ref("run"), "metric_key": "never"})


@pytest.mark.parametrize("endpoint, body, path, shown", [
    ("experiments/create", {"tags": [{"key": "k", "value": 41}]}, "tags[0].value", "41"),
    ("runs/create", {"tags": [{"key": "k", "value": 41}]}, "tags[0].value", "41"),
    ("runs/log-batch", {"metrics": [{"key": "m", "value": "lots", "timestamp": 1}]}, "metrics[0].value", '"lots"'),
    ("runs/log-batch", {"tags": [{"key": "t", "value": 41}]}, "tags[0].value", "41"),
    ("runs/search", {"run_view_type": {"a": 1}}, "run_view_type", '{"a":1}'),
    ("runs/update", {"status": "DONE"}, "status", '"DONE"'),
    ("runs/log-metric", {"key": "m", "value": 1.0, "timestamp": 1, "step": 2**63}, "step", str(2**63)),
])
def test_a_value_protobuf_cannot_read_is_refused_where_mlflow_stores_a_default(twins, endpoint, body, path, shown):
    """Deliberate: where MLflow's schema does not check a field, its server goes on with what protobuf read
    and keeps the field's default (a tag '' for 41, a metric 0.0 for 'lots'). Yardstick refuses the request
    in MLflow's words, and stores nothing."""
    _experiment(twins)
    _run(twins)
    fields = {"experiments/create": {"name": twins.name("tagged")},
              "runs/create": {"experiment_id": Ref("exp"), "start_time": 1, "run_name": "r"},
              "runs/search": {"experiment_ids": [Ref("exp")]}}.get(endpoint, {"run_id": Ref("run")})
    theirs, ours = twins.post(endpoint, {**fields, **body}, same=False)
    assert theirs[0] == 200
    assert ours == (400, {"error_code": "INVALID_PARAMETER_VALUE", "message": (
        f"Invalid value {shown} for parameter '{path}' supplied:  Hint: Value was of type "
        f"'{type(_dig(body, path.replace('[0]', '.0')) if '[0]' in path else body[path]).__name__}'. "
        "See the API docs for more information about request parameters.")})
    if endpoint == "runs/log-batch":
        _, stored = twins.get("runs/get", {"run_id": Ref("run")}, same=False)
        assert stored[1]["run"]["data"] == {"tags": [{"key": "mlflow.runName", "value": "run"}]}


@pytest.mark.parametrize("step", [-1, 2**31, 2**40, -(2**40)])
def test_a_metric_step_outside_32_bits_is_kept_alike(twins, step):
    _experiment(twins)
    _run(twins)
    twins.post("runs/log-metric", {"run_id": Ref("run"), "key": "m", "value": 1.0, "timestamp": 5, "step": step})
    twins.post("runs/log-batch", {"run_id": Ref("run"), "metrics": [{"key": "b", "value": 2.0, "timestamp": 6,
                                                                     "step": step}],
                                  "params": [{"key": "p", "value": "1"}], "tags": [{"key": "t", "value": "1"}]})
    twins.get("metrics/get-history", {"run_id": Ref("run"), "metric_key": "m"})
    twins.get("metrics/get-history", {"run_id": Ref("run"), "metric_key": "b"})
    twins.get("runs/get", {"run_id": Ref("run")})


@pytest.mark.parametrize("body", [
    {"key": "m", "value": "high", "timestamp": 1},
    {"key": "m", "value": 1.0},
    {"key": "m", "timestamp": 1},
    {"key": "", "value": 1.0, "timestamp": 1},
    {"key": "bad..//key", "value": 1.0, "timestamp": 1},
    {"key": "m", "value": 1.0, "timestamp": "x"},
    {"key": "m", "value": 1.0, "timestamp": 1, "step": "x"},
    {"key": 5, "value": 1.0, "timestamp": 1},
])
def test_a_bad_metric_is_refused_alike(twins, body):
    _experiment(twins)
    _run(twins)
    twins.post("runs/log-metric", {"run_id": Ref("run"), **body})
    twins.get("runs/get", {"run_id": Ref("run")})


@pytest.mark.parametrize("body", [
    {"key": "p", "value": 41},
    {"key": "p"},
    {"value": "v"},
])
def test_a_bad_param_is_refused_alike(twins, body):
    _experiment(twins)
    _run(twins)
    twins.post("runs/log-parameter", {"run_id": Ref("run"), **body})
    twins.get("runs/get", {"run_id": Ref("run")})


def test_changing_a_param_is_refused_alike(twins):
    _experiment(twins)
    _run(twins)
    twins.post("runs/log-parameter", {"run_id": Ref("run"), "key": "p", "value": "1"})
    twins.post("runs/log-parameter", {"run_id": Ref("run"), "key": "p", "value": "2"})
    twins.post("runs/log-batch", {"run_id": Ref("run"), "params": [{"key": "p", "value": "3"}]})


@pytest.mark.parametrize("body", [
    {"key": "t", "value": 41},
    {"key": "t"},
    {"value": "v"},
])
def test_a_bad_tag_is_refused_alike(twins, body):
    _experiment(twins)
    _run(twins)
    twins.post("runs/set-tag", {"run_id": Ref("run"), **body})
    twins.post("experiments/set-experiment-tag", {"experiment_id": Ref("exp"), **body})
    twins.get("runs/get", {"run_id": Ref("run")})


def test_deleting_a_missing_tag_is_refused_alike(twins):
    _experiment(twins)
    _run(twins)
    twins.post("runs/delete-tag", {"run_id": Ref("run"), "key": "never"})
    twins.post("experiments/delete-experiment-tag", {"experiment_id": Ref("exp"), "key": "never"})


@pytest.mark.parametrize("body", [
    {"metrics": "abc"},
    {"params": "abc"},
    {"tags": {"k": "v"}},
    {"metrics": [{"key": "m", "value": 1.0}]},
    {"params": [{"key": "p"}]},
    {"tags": [{"value": "v"}]},
    {"params": [{"key": "p", "value": "1"}, {"key": "p", "value": "2"}]},
    {"metrics": [{"key": "m", "value": 1.0, "timestamp": 1}] * 1001},
])
def test_a_bad_batch_is_refused_alike_and_keeps_nothing(twins, body):
    _experiment(twins)
    _run(twins)
    twins.post("runs/log-batch", {"run_id": Ref("run"), **body})
    twins.get("runs/get", {"run_id": Ref("run")})


def test_logging_to_a_deleted_run_is_refused_alike(twins):
    _experiment(twins)
    _run(twins)
    twins.post("runs/delete", {"run_id": Ref("run")})
    twins.post("runs/log-metric", {"run_id": Ref("run"), "key": "m", "value": 1.0, "timestamp": 1})
    twins.post("runs/set-tag", {"run_id": Ref("run"), "key": "t", "value": "v"})


@pytest.mark.parametrize("params", [{"metric_key": "m"}, {"run_id": "r1"}, {}])
def test_a_bad_history_request_is_refused_alike(twins, params):
    twins.get("metrics/get-history", params)


def test_the_history_of_an_unknown_run_is_an_error_where_mlflow_answers_nothing(twins):
    """Deliberate: MLflow answers 200 and no points for a run that does not exist; Yardstick says so."""
    theirs, ours = twins.get("metrics/get-history", {"run_id": "0" * 32, "metric_key": "m"}, same=False)
    assert theirs == (200, {})
    assert ours == (404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "Run with id=<run:?> not found"})


@pytest.mark.parametrize("endpoint, body, message", [
    ("runs/log-parameter", {"key": "p", "value": "x" * 6001}, "'Param value' exceeds the maximum length of 6000 characters"),
    ("runs/set-tag", {"key": "t", "value": "x" * 8001}, "'value' exceeds the maximum length of 8000 characters"),
    ("runs/log-batch", {"params": [{"key": "p", "value": "x" * 6001}]},
     "'Param value' exceeds the maximum length of 6000 characters"),
])
def test_a_value_over_mlflows_limit_is_refused_where_mlflow_cuts_it_short(twins, endpoint, body, message):
    """Deliberate: MLflow's server keeps the first 6000 (param) or 8000 (tag) characters of a longer value
    (MLFLOW_TRUNCATE_LONG_VALUES); Yardstick refuses it with MLflow's own message, so no value is kept that
    the run did not log."""
    _experiment(twins)
    _run(twins)
    theirs, ours = twins.post(endpoint, {"run_id": Ref("run"), **body}, same=False)
    assert theirs == (200, {})
    assert ours == (400, {"error_code": "INVALID_PARAMETER_VALUE", "message": message})
    _, stored = twins.get("runs/get", {"run_id": Ref("run")}, same=False)
    assert "params" not in stored[1]["run"]["data"] and len(stored[1]["run"]["data"]["tags"]) == 1


# -- inputs ---------------------------------------------------------------------------------------------

DATASET = {"name": "gsm8k", "digest": "abc123", "source_type": "hf", "source": '{"path": "openai/gsm8k"}',
           "schema": '{"mlflow_colspec": []}', "profile": '{"num_rows": 10}'}


def test_logged_dataset_inputs_are_kept_and_read_back_alike(twins):
    _experiment(twins)
    _run(twins)
    twins.post("runs/log-inputs", {"run_id": Ref("run"), "datasets": [
        {"dataset": DATASET, "tags": [{"key": "mlflow.data.context", "value": "train"}]}]})
    twins.post("runs/log-inputs", {"run_id": Ref("run"), "datasets": [
        {"dataset": DATASET, "tags": [{"key": "mlflow.data.context", "value": "train"}]},
        {"dataset": {**DATASET, "name": "math", "digest": "d2"}}]})
    twins.get("runs/get", {"run_id": Ref("run")})
    twins.post("runs/search", {"experiment_ids": [Ref("exp")]})


@pytest.mark.parametrize("body", [{"datasets": "abc"}, {"datasets": [{"dataset": {"name": "n"}}]}, {}])
def test_bad_inputs_are_refused_alike(twins, body):
    _experiment(twins)
    _run(twins)
    twins.post("runs/log-inputs", {"run_id": Ref("run"), **body})
    twins.get("runs/get", {"run_id": Ref("run")})


# -- artifacts ------------------------------------------------------------------------------------------

ARTIFACTS = "api/2.0/mlflow-artifacts"


def _artifact_path(server, run="run", rel=""):
    run_id = server.ids[run]
    exp_id = server.ids["exp"]
    return f"{exp_id}/{run_id}/artifacts" + (f"/{rel}" if rel else "")


def test_artifacts_are_uploaded_listed_and_downloaded_alike(twins):
    _experiment(twins)
    _run(twins)
    answers = []
    for server in (twins.mlflow, twins.ours):
        up = requests.put(f"{server.url}/{ARTIFACTS}/artifacts/{_artifact_path(server, rel='dir/a.txt')}",
                          data=b"hello", headers=server.headers, timeout=30)
        down = requests.get(f"{server.url}/{ARTIFACTS}/artifacts/{_artifact_path(server, rel='dir/a.txt')}",
                            headers=server.headers, timeout=30)
        listings = [requests.get(f"{server.url}/{ARTIFACTS}/artifacts", params={"path": p},
                                 headers=server.headers, timeout=30)
                    for p in (_artifact_path(server), _artifact_path(server, rel="dir"),
                              _artifact_path(server, rel="dir/a.txt"), _artifact_path(server, rel="."),
                              _artifact_path(server, rel="none"))]
        answers.append(((up.status_code, up.content), (down.status_code, down.content),
                        [(r.status_code, _json(r)) for r in listings]))
    assert answers[1] == answers[0]
