"""runs/search reads its page in a fixed number of queries, however many runs it holds."""

import json

from django.db import connection
from django.test.utils import CaptureQueriesContext

from tracking import store


def _runs(n, experiment_id, user):
    for i in range(n):
        run = store.create_run(experiment_id, run_name=f"r{i}", created_by=user)
        store.log_batch(run.run_id, metrics=[{"key": "loss", "value": 0.5, "timestamp": 1, "step": 1}],
                        params=[{"key": "lr", "value": "0.1"}], tags=[{"key": "team", "value": "rl"}])
        store.log_inputs(run.run_id, datasets=[{"dataset": {"name": "gsm8k", "digest": "abc", "source_type": "local",
                                                            "source": "/data"}, "tags": []}])


def _search(client, experiment_id):
    with CaptureQueriesContext(connection) as queries:
        answer = client.post("/api/2.0/mlflow/runs/search", json.dumps({"experiment_ids": [experiment_id]}),
                             content_type="application/json")
    assert answer.status_code == 200, answer.content
    return answer.json()["runs"], len(queries)


def test_a_search_of_twenty_runs_costs_what_a_search_of_two_does(client, operator):
    client.force_login(operator)
    few = store.create_experiment("few").pk
    many = store.create_experiment("many").pk
    _runs(2, few, operator)
    _runs(20, many, operator)
    runs_few, queries_few = _search(client, str(few))
    runs_many, queries_many = _search(client, str(many))
    assert len(runs_many) == 20 and queries_many == queries_few
    one = runs_many[0]
    assert one["data"]["params"] == [{"key": "lr", "value": "0.1"}]
    assert one["inputs"]["dataset_inputs"][0]["dataset"]["name"] == "gsm8k"
