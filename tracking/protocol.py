"""MLflow's request reading, as its tracking server (mlflow 3.17, mlflow/server/handlers.py) does it.

MLflow reads a request in two passes, and its answers to bad input come from them:

1. the JSON body (or the GET query, each value a string; a repeated field a list) is parsed into the
   endpoint's protobuf message. Protobuf refuses a value of the wrong JSON type (a number for a string,
   a string for a list, a fraction for an integer); the parse then stops at that field.
2. the endpoint's schema checks its fields: `required` ones always ("Missing value for required
   parameter 'run_id'."), type checks only when the parse failed ("Invalid value 31 for parameter
   'run_id' supplied:  Hint: Value was of type 'int'.").

`parse(endpoint, request_json)` does both and returns the message as MLflow's handler sees it: each
field converted (int64 from a string, "NaN" as a float, an enum by name), and the proto's default for
the fields not given. Where the parse failed and the schema found nothing wrong, MLflow goes on with what
protobuf had read; Yardstick refuses the request instead, naming the field (see `parse`).
"""

import json
import math

from tracking.models import TrackingError

# -- field types (the protobuf messages of mlflow/protos/service.proto that the endpoints take) -------

STRING, INT64, INT32, DOUBLE, BOOL = "string", "int64", "int32", "double", "bool"
VIEW_TYPE = ("enum", {"ACTIVE_ONLY": 1, "DELETED_ONLY": 2, "ALL": 3})
RUN_STATUS = ("enum", {"RUNNING": 1, "SCHEDULED": 2, "FINISHED": 3, "FAILED": 4, "KILLED": 5})
KEY_VALUE = {"key": STRING, "value": STRING}
METRIC = {"key": STRING, "value": DOUBLE, "timestamp": INT64, "step": INT64, "model_id": STRING,
          "dataset_name": STRING, "dataset_digest": STRING, "run_id": STRING}
DATASET = {"name": STRING, "digest": STRING, "source_type": STRING, "source": STRING, "schema": STRING,
           "profile": STRING}
DATASET_INPUT = {"tags": [KEY_VALUE], "dataset": DATASET}
MODEL_INPUT = {"model_id": STRING}
RUN_REF = {"run_id": STRING, "run_uuid": STRING}

# -- schema checks (handlers.py's _assert_* functions) -------------------------------------------------

REQUIRED, IS_STRING, IS_INTLIKE, IS_FLOATLIKE, IS_ARRAY = "required", "string", "intlike", "floatlike", "array"
TYPE_CHECKS = {IS_STRING, IS_INTLIKE, IS_FLOATLIKE, IS_ARRAY}


def _fields_present(kind, keys):
    """log-batch's check that each metric, param or tag names its key (and a metric its value and time)."""
    def check(entries):
        for i, entry in enumerate(entries or []):
            for key in keys:
                value = entry.get(key) if isinstance(entry, dict) else None
                if value is None or value == "":
                    return f"Missing value for required parameter '{kind}[{i}].{key}'."
        return None
    return check


ENDPOINTS = {
    "experiments/create": ({"name": STRING, "artifact_location": STRING, "tags": [KEY_VALUE]},
                           {"name": [REQUIRED, IS_STRING], "artifact_location": [IS_STRING], "tags": [IS_ARRAY]}),
    "experiments/get": ({"experiment_id": STRING}, {"experiment_id": [REQUIRED, IS_STRING]}),
    "experiments/get-by-name": ({"experiment_name": STRING}, {"experiment_name": [REQUIRED, IS_STRING]}),
    "experiments/search": ({"max_results": INT64, "page_token": STRING, "filter": STRING, "order_by": [STRING],
                            "view_type": VIEW_TYPE},
                           {"view_type": [IS_INTLIKE], "max_results": [IS_INTLIKE], "order_by": [IS_ARRAY],
                            "filter": [IS_STRING], "page_token": [IS_STRING]}),
    "experiments/update": ({"experiment_id": STRING, "new_name": STRING},
                           {"experiment_id": [REQUIRED, IS_STRING], "new_name": [IS_STRING, REQUIRED]}),
    "experiments/delete": ({"experiment_id": STRING}, {"experiment_id": [REQUIRED, IS_STRING]}),
    "experiments/restore": ({"experiment_id": STRING}, {"experiment_id": [REQUIRED, IS_STRING]}),
    "experiments/set-experiment-tag": ({"experiment_id": STRING, "key": STRING, "value": STRING},
                                       {"experiment_id": [REQUIRED, IS_STRING], "key": [REQUIRED, IS_STRING],
                                        "value": [IS_STRING]}),
    "experiments/delete-experiment-tag": ({"experiment_id": STRING, "key": STRING},
                                          {"experiment_id": [REQUIRED, IS_STRING], "key": [REQUIRED, IS_STRING]}),
    "runs/create": ({"experiment_id": STRING, "user_id": STRING, "start_time": INT64, "tags": [KEY_VALUE],
                     "run_name": STRING},
                    {"experiment_id": [IS_STRING], "start_time": [IS_INTLIKE], "run_name": [IS_STRING]}),
    "runs/get": (RUN_REF, {"run_id": [REQUIRED, IS_STRING]}),
    "runs/update": ({**RUN_REF, "status": RUN_STATUS, "end_time": INT64, "run_name": STRING},
                    {"run_id": [REQUIRED, IS_STRING], "end_time": [IS_INTLIKE], "status": [IS_STRING],
                     "run_name": [IS_STRING]}),
    "runs/delete": ({"run_id": STRING}, {"run_id": [REQUIRED, IS_STRING]}),
    "runs/restore": ({"run_id": STRING}, {"run_id": [REQUIRED, IS_STRING]}),
    "runs/search": ({"experiment_ids": [STRING], "filter": STRING, "run_view_type": VIEW_TYPE,
                     "max_results": INT32, "order_by": [STRING], "page_token": STRING},
                    {"experiment_ids": [IS_ARRAY], "filter": [IS_STRING], "max_results": [IS_INTLIKE],
                     "order_by": [IS_ARRAY]}),
    "runs/log-batch": ({"run_id": STRING, "metrics": [METRIC], "params": [KEY_VALUE], "tags": [KEY_VALUE]},
                       {"run_id": [IS_STRING, REQUIRED],
                        "metrics": [IS_ARRAY, _fields_present("metrics", ("key", "value", "timestamp"))],
                        "params": [IS_ARRAY, _fields_present("params", ("key",))],
                        "tags": [IS_ARRAY, _fields_present("tags", ("key",))]}),
    "runs/log-metric": ({**RUN_REF, **{k: v for k, v in METRIC.items() if k != "run_id"}},
                        {"run_id": [REQUIRED, IS_STRING], "key": [REQUIRED, IS_STRING],
                         "value": [REQUIRED, IS_FLOATLIKE], "timestamp": [IS_INTLIKE, REQUIRED],
                         "step": [IS_INTLIKE], "model_id": [IS_STRING], "dataset_name": [IS_STRING],
                         "dataset_digest": [IS_STRING]}),
    "runs/log-parameter": ({**RUN_REF, "key": STRING, "value": STRING},
                           {"run_id": [REQUIRED, IS_STRING], "key": [REQUIRED, IS_STRING], "value": [IS_STRING]}),
    "runs/set-tag": ({**RUN_REF, "key": STRING, "value": STRING},
                     {"run_id": [REQUIRED, IS_STRING], "key": [REQUIRED, IS_STRING], "value": [IS_STRING]}),
    "runs/delete-tag": ({"run_id": STRING, "key": STRING},
                        {"run_id": [REQUIRED, IS_STRING], "key": [REQUIRED, IS_STRING]}),
    "runs/log-inputs": ({"run_id": STRING, "datasets": [DATASET_INPUT], "models": [MODEL_INPUT]},
                        {"run_id": [REQUIRED, IS_STRING], "datasets": [IS_ARRAY], "models": [IS_ARRAY]}),
    "logged-models/search": ({}, {}),
    "metrics/get-history": ({**RUN_REF, "metric_key": STRING, "page_token": STRING, "max_results": INT32},
                            {"run_id": [IS_STRING, REQUIRED], "metric_key": [IS_STRING, REQUIRED],
                             "page_token": [IS_STRING]}),
}


class Message(dict):
    """A parsed request: the fields the parse set, and `field(name)` giving the proto default otherwise."""

    def __init__(self, fields, values):
        super().__init__(values)
        self.fields = fields

    def has(self, name):
        return name in self

    def field(self, name):
        if name in self:
            return self[name]
        kind = self.fields[name]
        return [] if isinstance(kind, list) else _default(kind)


def parse(endpoint, request_json):
    """The request as MLflow's handler for `endpoint` reads it; TrackingError as MLflow refuses it."""
    fields, schema = ENDPOINTS[endpoint]
    values = {}
    failed = None
    try:
        for name, value in request_json.items():
            if name in fields and value is not None:
                values[name] = _convert(fields[name], value, name)
    except _ParseError as err:
        failed = err
    for name, checks in schema.items():
        if name not in request_json and REQUIRED not in checks:
            continue
        value = request_json.get(name)
        if name == "run_id" and value is None and "run_uuid" in request_json:
            value = request_json.get("run_uuid")
        _check(name, value, checks, parsed=failed is None)
    if failed is not None:
        # Deliberately not MLflow's: where its schema misses the field (a tag's value, a metric's value in a
        # batch), MLflow goes on with what protobuf had read and stores the field's default ('' for a tag
        # value of 41, 0.0 for a metric value 'lots'). Yardstick refuses the request; nothing is stored.
        raise TrackingError("INVALID_PARAMETER_VALUE", invalid_value(
            failed.path, failed.value, f" Hint: Value was of type '{type(failed.value).__name__}'.") + API_DOCS)
    return Message(fields, values)


def query_json(fields, args):
    """A GET query (a QueryDict) as MLflow turns it into JSON: repeated fields as lists, others one string
    (the first given, as Flask reads it; Django's QueryDict.get would give the last)."""
    out = {}
    for name, kind in fields.items():
        if name in args:
            out[name] = args.getlist(name) if isinstance(kind, list) else args.getlist(name)[0]
    return out


def invalid_value(path, value, hint=None):
    """MLflow's message for a value of the wrong kind (mlflow.utils.validation.invalid_value)."""
    shown = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return f"Invalid value {shown} for parameter '{path}' supplied" + (f": {hint}" if hint else ".")


def missing_value(path):
    return f"Missing value for required parameter '{path}'."


def exceeds_maximum_length(path, limit):
    return f"'{path}' exceeds the maximum length of {limit} characters"


API_DOCS = " See the API docs for more information about request parameters."


def _check(name, value, checks, parsed):
    for check in checks:
        if check in TYPE_CHECKS and parsed:
            continue
        if callable(check):
            message = check(value)
        elif check == REQUIRED:
            message = missing_value(name) if value is None or value == "" else None
        else:
            ok = {IS_STRING: isinstance(value, str), IS_ARRAY: isinstance(value, list),
                  IS_INTLIKE: _intlike(value), IS_FLOATLIKE: _floatlike(value)}[check]
            message = None if ok else invalid_value(name, value, f" Hint: Value was of type '{type(value).__name__}'.")
        if message:
            raise TrackingError("INVALID_PARAMETER_VALUE", message + API_DOCS)


def _intlike(value):
    try:
        value = int(value)
    except (ValueError, TypeError):
        pass
    return isinstance(value, int)


def _floatlike(value):
    try:
        value = float(value)
    except (ValueError, TypeError):
        pass
    return isinstance(value, float)


class _ParseError(Exception):
    """Protobuf stopped at `value`, found at `path` (e.g. 'tags[0].value')."""

    def __init__(self, path, value):
        super().__init__(path)
        self.path, self.value = path, value


def _default(kind):
    if isinstance(kind, dict):
        return {}
    if isinstance(kind, tuple):
        return None
    return {STRING: "", INT64: 0, INT32: 0, DOUBLE: 0.0, BOOL: False}[kind]


def _convert(kind, value, path):
    """One JSON value as protobuf's json_format.ParseDict converts it into a field of `kind`; _ParseError
    naming `path` where it cannot."""
    if isinstance(kind, list):
        if not isinstance(value, list):
            raise _ParseError(path, value)
        return [_convert(kind[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(kind, dict):
        if not isinstance(value, dict):
            raise _ParseError(path, value)
        return {k: _convert(kind[k], v, f"{path}.{k}") for k, v in value.items() if k in kind and v is not None}
    try:
        return _scalar(kind, value)
    except (ValueError, TypeError):
        raise _ParseError(path, value) from None


def _scalar(kind, value):
    if isinstance(kind, tuple):  # an enum: by name, or by number
        names = kind[1]
        if isinstance(value, str) and value in names:
            return value
        if isinstance(value, str) and value.lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and value in names.values():
            return next(n for n, v in names.items() if v == value)
        raise ValueError(value)
    if kind in (STRING, BOOL):
        if not isinstance(value, str if kind == STRING else bool):
            raise TypeError(value)
        return value
    if kind == DOUBLE:
        return _double(value)
    return _integer(value, 64 if kind == INT64 else 32)


def _double(value):
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(value)
    if isinstance(value, str):
        if value in ("NaN", "Infinity", "-Infinity"):
            return float(value.replace("Infinity", "inf"))
        number = float(value)
        if not math.isfinite(number):  # 'nan', 'inf': protobuf takes only its own spellings
            raise ValueError(value)
        return number
    return float(value)


def _integer(value, bits):
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(value)
    if isinstance(value, str):
        if " " in value:
            raise ValueError(value)
        try:
            value = int(value)
        except ValueError:
            value = float(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        value = int(value)
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise ValueError(value)
    return value
