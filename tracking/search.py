"""MLflow's search filter and order_by strings, turned into querysets of runs and experiments.

A filter is comparisons joined by AND, as MLflow's own server reads them:

    metrics.reward > 0.5 AND params.lr = '1e-5' AND tags.`mlflow.runName` LIKE 'grpo%'
    AND attributes.status IN ('RUNNING', 'FINISHED') AND attributes.start_time >= 1700000000000

Entity prefixes: metric(s)., param(s)., tag(s)., attribute(s)./attr./run. (an
unprefixed name is an attribute). Keys may be quoted with backticks or double
quotes. Metrics and the time attributes compare numbers (=, !=, <, <=, >, >=,
against a run's latest value of the metric); the rest compare strings (=, !=,
LIKE, ILIKE, IN, NOT IN). A bad filter raises INVALID_PARAMETER_VALUE naming
the part that could not be read.
"""

import re
from datetime import datetime, timezone

from django.db.models import Exists, F, OuterRef, Q, Subquery

from tracking.models import Experiment, Metric, Param, Run, RunTag, Stage, invalid

TOKEN = re.compile(r"""\s*(?:
    (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<backtick>`[^`]*`)
  | (?P<op><=|>=|!=|<>|=|<|>)
  | (?P<punct>[(),])
  | (?P<number>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?(?![\w.]))
  | (?P<word>[\w.\-/:@]+)
)""", re.VERBOSE)

PREFIXES = {"metric": "metric", "metrics": "metric", "param": "param", "params": "param", "parameter": "param",
            "parameters": "param", "tag": "tag", "tags": "tag", "attribute": "attribute", "attributes": "attribute",
            "attr": "attribute", "run": "attribute"}
RUN_STRING_ATTRIBUTES = {"run_id": "run_id", "run_name": "run_name", "status": "status", "user_id": "user_id",
                         "artifact_uri": "artifact_uri", "lifecycle_stage": "lifecycle_stage"}
RUN_NUMBER_ATTRIBUTES = {"start_time": "start_time", "end_time": "end_time", "created": "start_time"}
NUMBER_OPS = {"=": "exact", "!=": "ne", "<>": "ne", "<": "lt", "<=": "lte", ">": "gt", ">=": "gte"}
STRING_OPS = ("=", "!=", "<>", "LIKE", "ILIKE", "IN", "NOT IN")
VIEW_TYPES = {"ACTIVE_ONLY": [Stage.ACTIVE], "DELETED_ONLY": [Stage.DELETED], "ALL": [Stage.ACTIVE, Stage.DELETED],
              1: [Stage.ACTIVE], 2: [Stage.DELETED], 3: [Stage.ACTIVE, Stage.DELETED]}


def runs(experiment_ids, filter_string="", order_by=(), view_type=None):
    ids = []
    for value in experiment_ids:
        if not re.fullmatch(r"\d{1,18}", str(value).strip()):
            raise invalid(f"experiment_ids must be experiment ids (digits, e.g. '1'), got {value!r}")
        ids.append(int(str(value).strip()))
    rows = Run.objects.filter(experiment_id__in=ids, lifecycle_stage__in=_stages(view_type))
    rows = rows.select_related("experiment", "job")
    for i, (entity, key, op, value) in enumerate(parse(filter_string)):
        if entity == "metric":  # against the run's latest value of the metric; a run without it never matches
            field = f"_filter_{i}"
            rows = rows.alias(**{field: _run_value(entity, key)}).filter(
                _number_condition(field, op, _number(f"metrics.{key}", op, value)), **{f"{field}__isnull": False})
        else:
            rows = rows.filter(_run_condition(entity, key, op, value))
    ordering = []
    for i, (entity, key, descending) in enumerate(_order(order_by)):
        if entity == "attribute":
            field = RUN_NUMBER_ATTRIBUTES.get(key) or RUN_STRING_ATTRIBUTES.get(key)
            if field is None:
                raise invalid(f"Invalid order_by attribute '{key}': one of "
                              f"{', '.join([*RUN_STRING_ATTRIBUTES, *RUN_NUMBER_ATTRIBUTES])}")
        else:
            field = f"_order_{i}"
            rows = rows.annotate(**{field: _run_value(entity, key)})
        expr = F(field)
        ordering.append(expr.desc(nulls_last=True) if descending else expr.asc(nulls_last=True))
    return rows.order_by(*ordering, F("start_time").desc(), "run_id")


def experiments(filter_string="", order_by=(), view_type=None):
    Experiment.default()  # MLflow's experiment 0 always exists
    rows = Experiment.objects.filter(lifecycle_stage__in=_stages(view_type))
    for entity, key, op, value in parse(filter_string):
        if entity == "tag":
            rows = rows.filter(_string_condition(f"tags__{_json_key(key)}", op, value))
        elif key == "name":
            rows = rows.filter(_string_condition("name", op, value))
        elif key in ("creation_time", "last_update_time"):
            number = _number(key, op, value)
            when = datetime.fromtimestamp(number / 1000, tz=timezone.utc)
            field = "created_at" if key == "creation_time" else "updated_at"
            rows = rows.filter(_number_condition(field, op, when))
        else:
            raise invalid(f"Invalid experiment filter on '{key}': name, tags.<key>, creation_time or "
                          "last_update_time are accepted")
    fields = {"name": "name", "experiment_id": "id", "creation_time": "created_at",
              "last_update_time": "updated_at"}
    ordering = []
    for _entity, key, descending in _order(order_by):
        if key not in fields:
            raise invalid(f"Invalid order_by key '{key}' for experiments: one of {', '.join(fields)}")
        ordering.append(F(fields[key]).desc() if descending else F(fields[key]).asc())
    return rows.order_by(*ordering, F("created_at").desc(), "id")


# -- parsing --------------------------------------------------------------------------------


def parse(filter_string):
    """[(entity, key, op, value)] of a filter string; value is a str, a float or a list of str."""
    if not filter_string or not str(filter_string).strip():
        return []
    tokens = _tokens(str(filter_string))
    clauses, i = [], 0
    while i < len(tokens):
        entity, key, i = _identifier(tokens, i, filter_string)
        op, i = _operator(tokens, i, filter_string)
        value, i = _value(tokens, i, op, filter_string)
        clauses.append((entity, key, op, value))
        if i < len(tokens):
            if tokens[i] != ("word", "AND") and not (tokens[i][0] == "word" and tokens[i][1].upper() == "AND"):
                raise invalid(f"Invalid filter '{filter_string}': expected AND between comparisons, got "
                              f"'{tokens[i][1]}' (only AND joins comparisons; OR is not supported)")
            i += 1
            if i == len(tokens):
                raise invalid(f"Invalid filter '{filter_string}': it ends with AND")
    return clauses


def _tokens(text):
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise invalid(f"Invalid filter '{text}': cannot read it from '{text[pos:].strip()[:30]}'")
        kind = match.lastgroup
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


def _identifier(tokens, i, text):
    kind, token = tokens[i]
    if kind == "word":
        if "." in token:
            prefix, _, key = token.partition(".")
            if prefix.lower() in PREFIXES:
                entity = PREFIXES[prefix.lower()]
                if key == "" and i + 1 < len(tokens) and tokens[i + 1][0] in ("backtick", "string"):
                    return entity, tokens[i + 1][1][1:-1], i + 2
                if key:
                    return entity, key, i + 1
        elif token.lower() in (*RUN_STRING_ATTRIBUTES, *RUN_NUMBER_ATTRIBUTES, "name", "creation_time",
                               "last_update_time", "experiment_id"):
            return "attribute", token.lower(), i + 1
    raise invalid(f"Invalid filter '{text}': '{token}' is not an identifier; use metrics.<key>, params.<key>, "
                  "tags.<key> or attributes.<name> (quote keys with backticks)")


def _operator(tokens, i, text):
    if i >= len(tokens):
        raise invalid(f"Invalid filter '{text}': a comparison is missing its operator and value")
    kind, token = tokens[i]
    if kind == "op":
        return ("!=" if token == "<>" else token), i + 1
    if kind == "word" and token.upper() in ("LIKE", "ILIKE", "IN"):
        return token.upper(), i + 1
    if kind == "word" and token.upper() == "NOT" and i + 1 < len(tokens) and tokens[i + 1][1].upper() == "IN":
        return "NOT IN", i + 2
    raise invalid(f"Invalid filter '{text}': '{token}' is not a comparator; one of =, !=, <, <=, >, >=, LIKE, "
                  "ILIKE, IN, NOT IN")


def _value(tokens, i, op, text):
    if i >= len(tokens):
        raise invalid(f"Invalid filter '{text}': the comparison with {op} has no value")
    if op in ("IN", "NOT IN"):
        if tokens[i] != ("punct", "("):
            raise invalid(f"Invalid filter '{text}': {op} takes a list in parentheses, e.g. ('a', 'b')")
        values, i = [], i + 1
        while i < len(tokens) and tokens[i] != ("punct", ")"):
            kind, token = tokens[i]
            if kind != "string":
                raise invalid(f"Invalid filter '{text}': {op} lists quoted strings, got {token}")
            values.append(_unquote(token))
            i += 1
            if i < len(tokens) and tokens[i] == ("punct", ","):
                i += 1
        if i >= len(tokens):
            raise invalid(f"Invalid filter '{text}': the list after {op} is not closed")
        return values, i + 1
    kind, token = tokens[i]
    if kind == "number":
        return float(token), i + 1
    if kind == "string":
        return _unquote(token), i + 1
    raise invalid(f"Invalid filter '{text}': '{token}' is not a value; quote strings ('RUNNING') and write numbers "
                  "plainly (0.5)")


def _unquote(token):
    return re.sub(r"\\(.)", r"\1", token[1:-1])


def _order(order_by):
    out = []
    for clause in order_by:
        match = re.fullmatch(r"\s*(.+?)(?:\s+(ASC|DESC))?\s*", str(clause), re.IGNORECASE)
        tokens = _tokens(match.group(1)) if match else []
        if not tokens:
            raise invalid(f"Invalid order_by clause '{clause}'")
        entity, key, used = _identifier(tokens, 0, clause)
        if used != len(tokens):
            raise invalid(f"Invalid order_by clause '{clause}': expected '<identifier> [ASC|DESC]'")
        out.append((entity, key, (match.group(2) or "ASC").upper() == "DESC"))
    return out


def _stages(view_type):
    if view_type in (None, ""):
        return [Stage.ACTIVE]
    if isinstance(view_type, str) and view_type.isdigit():
        view_type = int(view_type)
    if view_type not in VIEW_TYPES:
        raise invalid(f"view type must be ACTIVE_ONLY, DELETED_ONLY or ALL, got {view_type!r}")
    return VIEW_TYPES[view_type]


# -- conditions -----------------------------------------------------------------------------


def _run_value(entity, key):
    model = {"metric": Metric, "param": Param, "tag": RunTag}[entity]
    rows = model.objects.filter(run=OuterRef("pk"), key=key)
    if entity == "metric":
        rows = rows.order_by("-step", "-timestamp", "-id")
    return Subquery(rows.values("value")[:1])


def _run_condition(entity, key, op, value):
    if entity in ("param", "tag"):
        model = Param if entity == "param" else RunTag
        return Exists(model.objects.filter(run=OuterRef("pk"), key=key).filter(_string_condition("value", op, value)))
    if key in RUN_NUMBER_ATTRIBUTES:
        return _number_condition(RUN_NUMBER_ATTRIBUTES[key], op, _number(key, op, value))
    if key in RUN_STRING_ATTRIBUTES:
        return _string_condition(RUN_STRING_ATTRIBUTES[key], op, value)
    raise invalid(f"Invalid attribute key '{key}': one of {', '.join([*RUN_STRING_ATTRIBUTES, *RUN_NUMBER_ATTRIBUTES])}")


def _number(what, op, value):
    if op not in NUMBER_OPS:
        raise invalid(f"Invalid comparator '{op}' for {what}: it compares numbers with =, !=, <, <=, > or >=")
    if not isinstance(value, float):
        raise invalid(f"Invalid value {value!r} for {what}: expected a number")
    return value


def _number_condition(field, op, value):
    lookup = NUMBER_OPS[op]
    if lookup == "ne":
        return ~Q(**{field: value})
    return Q(**{f"{field}__{lookup}": value})


def _string_condition(field, op, value):
    if op not in STRING_OPS:
        raise invalid(f"Invalid comparator '{op}' for {field}: it compares strings with =, !=, LIKE, ILIKE, IN or "
                      "NOT IN")
    if op in ("IN", "NOT IN"):
        q = Q(**{f"{field}__in": value})
        return ~q if op == "NOT IN" else q
    if not isinstance(value, str):
        raise invalid(f"Invalid value {value!r} for {field}: expected a quoted string")
    if op == "=":
        return Q(**{field: value})
    if op == "!=":
        return ~Q(**{field: value})
    pattern = "^" + "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in value) + "$"
    return Q(**{f"{field}__{'regex' if op == 'LIKE' else 'iregex'}": pattern})


def _json_key(key):
    if not re.fullmatch(r"[\w.\-/: ]+", key) or "__" in key:
        raise invalid(f"Invalid tag key '{key}' in the filter")
    return key
