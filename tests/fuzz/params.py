"""Every URL name of the URL conf and the input it reads, for the fuzz test.

name -> list of (method, kind, fields): kind "query" sends the fields as query
parameters, "form" as a posted form, "json" as a JSON body. The fuzz test
fails when the URL conf has a name missing here, so a new endpoint is fuzzed
from the day it exists; () marks one that reads no parameter (its path parts
are fuzzed all the same).
"""

RANGE = ["range", "from", "to", "live"]
STOP_LOSS_FORM = ["stop_loss.usd", "stop_loss.points", "stop_loss.reward_drop", "stop_loss.kl_max",
                  "stop_loss.entropy_min", "stop_loss.steps"]
MLFLOW_GET = {
    "mlflow-experiments-get": ["experiment_id"],
    "mlflow-experiments-get-by-name": ["experiment_name"],
    "mlflow-runs-get": ["run_id", "run_uuid"],
    "mlflow-metrics-get-history": ["run_id", "metric_key", "max_results", "page_token"],
    "mlflow-artifacts-list": ["path"],
    "mlflow-artifact": [],
}
MLFLOW_POST = {
    "mlflow-experiments-create": ["name", "artifact_location", "tags"],
    "mlflow-experiments-search": ["filter", "order_by", "view_type", "max_results", "page_token"],
    "mlflow-experiments-update": ["experiment_id", "new_name"],
    "mlflow-experiments-delete": ["experiment_id"],
    "mlflow-experiments-restore": ["experiment_id"],
    "mlflow-experiments-set-experiment-tag": ["experiment_id", "key", "value"],
    "mlflow-experiments-delete-experiment-tag": ["experiment_id", "key"],
    "mlflow-runs-create": ["experiment_id", "user_id", "start_time", "tags", "run_name"],
    "mlflow-runs-update": ["run_id", "status", "end_time", "run_name"],
    "mlflow-runs-delete": ["run_id"],
    "mlflow-runs-restore": ["run_id"],
    "mlflow-runs-search": ["experiment_ids", "filter", "order_by", "run_view_type", "max_results", "page_token"],
    "mlflow-runs-log-batch": ["run_id", "metrics", "params", "tags"],
    "mlflow-runs-log-metric": ["run_id", "key", "value", "timestamp", "step"],
    "mlflow-runs-log-parameter": ["run_id", "key", "value"],
    "mlflow-runs-set-tag": ["run_id", "key", "value"],
    "mlflow-runs-delete-tag": ["run_id", "key"],
    "mlflow-runs-log-inputs": ["run_id", "datasets"],
    "mlflow-logged-models-search": ["experiment_ids", "max_results"],
}

PARAMS = {
    "login": [("POST", "form", ["username", "password", "next"])],
    "logout": [],
    "run": [("GET", "query", [])],
    "experiment": [("GET", "query", [])],
    "job-bind": [("POST", "form", ["node", "device"])],
    "fleet": [("GET", "query", RANGE)],
    "healthz": [("GET", "query", [])],
    "whoami": [("GET", "query", [])],
    "plotly-js": [("GET", "query", [])],
    "node": [("GET", "query", RANGE)],
    "node-owner": [("POST", "form", ["team"])],
    "jobs": [("GET", "query", ["status"])],
    "job-start": [("POST", "form", ["preset", "name", "team", "env", "budget_usd", "device", "devices", "node", "pool", "steps",
                                    "prompts_per_step", "group_size", "lr", "kl_coef", "eval_every", *STOP_LOSS_FORM])],
    "job": [("GET", "query", ["step", "live"])],
    "job-stop": [("POST", "form", ["next"])],
    "job-resume": [("POST", "form", ["next"])],
    "job-score-key": [("POST", "form", ["score_key"])],
    "job-stop-loss": [("POST", "form", [*STOP_LOSS_FORM, "remove"])],
    "compare": [("GET", "query", ["jobs", "pick", "x"])],
    "costs": [("GET", "query", ["from", "to", "group"])],
    "api-fleet": [("GET", "query", [])],
    "api-device-samples": [("GET", "query", ["resolution", "from", "to"])],
    "api-jobs": [("GET", "query", ["status", "team", "limit"]),
                 ("POST", "json", ["name", "team", "env", "config", "budget_usd", "device", "devices", "node", "pool",
                                   "init_from", "init_step", "stop_loss"])],
    "api-job": [("GET", "query", [])],
    "api-job-stop": [("POST", "json", [])],
    "api-job-stop-loss": [("PUT", "json", ["usd", "points", "reward_drop", "kl_max", "entropy_min", "steps"]),
                          ("DELETE", "json", [])],
    "api-job-resume": [("POST", "json", [])],
    "api-job-steps": [("GET", "query", ["after", "limit"])],
    "api-job-samples": [("GET", "query", ["step"])],
    "api-costs": [("GET", "query", ["from", "to", "group", "format"])],
    "api-costs-job": [("GET", "query", [])],
    "job-continue": [("POST", "form", ["env", "steps", "name", "next"])],
    "campaigns": [("GET", "query", [])],
    "campaign-create": [("POST", "form", ["name", "team", "envs", "schedule", "steps", "budget_usd", "loop"])],
    "campaign": [("GET", "query", ["points", "live", "part"])],
    "campaign-loop-start": [("POST", "form", [])],
    "campaign-loop-stop": [("POST", "form", [])],
    "api-campaigns": [("GET", "query", []),
                      ("POST", "json", ["name", "team", "envs", "schedule", "run_config", "budget_usd", "device",
                                        "eval_size", "start_from", "start_step", "loop"])],
    "api-campaign": [("GET", "query", ["points"])],
    "api-campaign-runs": [("POST", "json", ["job"])],
    "api-campaign-loop-start": [("POST", "json", [])],
    "api-campaign-loop-stop": [("POST", "json", [])],
    "api-campaign-csv": [("GET", "query", [])],
    "api-workers": [("GET", "query", [])],
    "api-alerts": [("GET", "query", ["state", "limit"])],
    "api-alert-ack": [("POST", "json", [])],
    "api-alert-silence": [("POST", "json", ["minutes"])],
    "api-alert-rules": [("GET", "query", []),
                        ("POST", "json", ["name", "kind", "threshold", "duration", "scope", "channels", "enabled"])],
    "api-alert-rule": [("GET", "query", []),
                       ("PATCH", "json", ["name", "kind", "threshold", "duration", "scope", "channels", "enabled"]),
                       ("DELETE", "json", [])],
    "api-alert-channels": [("GET", "query", []), ("POST", "json", ["name", "kind", "target"])],
    "alerts": [("GET", "query", ["part"])],
    "alert-ack": [("POST", "form", [])],
    "alert-silence": [("POST", "form", ["minutes"])],
    "alert-rule-create": [("POST", "form", ["name", "kind", "scope", "threshold", "duration", "enabled", "channels"])],
    "alert-rule-edit": [("POST", "form", ["name", "kind", "scope", "threshold", "duration", "enabled", "channels"])],
    "alert-channel-create": [("POST", "form", ["name", "kind", "target"])],
    "metrics": [("GET", "query", [])],
    **{name: [("GET", "query", fields)] for name, fields in MLFLOW_GET.items()},
    **{name: [("POST", "json", fields)] for name, fields in MLFLOW_POST.items()},
}

# TrainConfig's fields, fuzzed inside api-jobs' "config" object.
CONFIG_FIELDS = ["steps", "seed", "prompts_per_step", "group_size", "temperature", "top_k", "max_new_tokens", "lr",
                 "weight_decay", "kl_coef", "clip_eps", "inner_epochs", "minibatch_size", "max_grad_norm",
                 "warmup_steps", "lr_schedule", "eval_every", "eval_size", "checkpoint_every", "keep_checkpoints",
                 "samples_per_step", "torch_threads"]

# 5xx statuses that are an endpoint's answer, not a fault: /healthz is 503 while a service it checks is down.
MEANS_SOMETHING = {"healthz": {503}}
