"""What an inference engine's metrics page says, per model served, and what it counted between two scrapes.

Yardstick prices a serving deployment (a model served by an engine on a node's GPUs) in dollars per 1M tokens from
the engine's own Prometheus counters. The collector agent scrapes the deployment's metrics URL every 10 s; this
module turns one page into a `Reading` (`read`) and two readings of one model into what was counted between them
(`delta`), which is what the agent sends. It imports no Django and nothing else of the project's (it runs inside the
agent: .importlinter, contract pure-cores), and parses with prometheus_client's own parsers: Prometheus text 0.0.4,
or OpenMetrics 1.0 where the page ends with `# EOF`.

    reading = read(page)                      # the engine found from the metric names, or read(page, "vllm")
    m = reading.models["meta-llama/Llama-3.1-8B-Instruct"]    # None: the one model of TGI or llama.cpp
    d = delta(last.get(m.model), m)           # tokens, requests, seconds since the last scrape: never negative
    quantile(m.ttft, 0.95)                    # Prometheus's histogram_quantile

A page that cannot be read (empty, HTML, JSON, not text, over MAX_BYTES, not Prometheus text, no metric of a known
engine) raises MetricsError with a sentence for a person; the agent reports it as "metrics unreadable: <sentence>"
and goes on with its other deployments. A page over MAX_BYTES is refused before it is parsed (the agent should also
stop reading a body at MAX_BYTES + 1).

## The figures of a model (ModelReading)

Counters, as the engine counted them since it started: `prompt_tokens`, `generation_tokens`, `requests` (finished,
every finish reason), `cached_prompt_tokens` (prompt tokens served from the prefix cache, read only where the page
counts them in tokens), `prefill_seconds` and `decode_seconds` (the sums, over requests, of the time each spent in
prefill and in decode: overlapping requests add up, so this is not wall time). Histograms `ttft` (time to first
token) and `itl` (inter-token latency): `Histogram(buckets=((upper bound, cumulative count), ...), sum, count)`.
Gauges, as they are now: `running`, `waiting` (requests), `kv_cache_usage` (0 to 1). `created`: when the counters
started (epoch seconds), from the `_created` samples of the counters read (the earliest), else the page's
`process_start_time_seconds`; None where the page has neither. `sources`: field -> the series it was read from
(as prometheus_client names it: a counter's ends in _total), or why a series the page has was not read.

A figure the engine does not expose is None, never 0. Counters and histograms are summed across label sets other
than the model (vLLM's `engine` of data parallelism, `finished_reason`, ...); `running` and `waiting` are summed,
`kv_cache_usage` is their mean (each data-parallel engine has its own KV cache). Names renamed across versions are
tried newest first; `sources` says which one the page had. Where one name has counted different units across
versions, the figure is read only where the metric's HELP text names the unit: never guessed.

| field | vLLM | SGLang | TGI | llama.cpp | Dynamo frontend |
| --- | --- | --- | --- | --- | --- |
| prompt_tokens | vllm:prompt_tokens_total (all prompt tokens, cached included) | sglang:prompt_tokens_total (cached included) | tgi_request_input_length_sum (every validated request) | llamacpp:prompt_tokens_total (computed only: cache hits excluded) | dynamo_frontend_input_sequence_tokens_sum |
| generation_tokens | vllm:generation_tokens_total | sglang:generation_tokens_total | tgi_request_generated_tokens_sum (successful requests) | llamacpp:tokens_predicted_total | dynamo_frontend_output_tokens_total, else dynamo_frontend_output_sequence_tokens_sum |
| requests | vllm:request_success_total (every finished_reason, abort included) | sglang:num_requests_total | tgi_request_success | None | dynamo_frontend_requests_total{status="success"} |
| cached_prompt_tokens | vllm:prompt_tokens_by_source_total{source="local_cache_hit"}, else vllm:prefix_cache_hits_total, else vllm:gpu_prefix_cache_hits_total (V1 0.8 to 0.10), these two only where their HELP says tokens (early V1 counted blocks under the same name); None in V0 (a hit-rate gauge only) | sglang:cached_tokens_total (every cache_source) | None | None | dynamo_frontend_cached_tokens_sum (where the backend reports it) |
| prefill_seconds, decode_seconds | vllm:request_prefill_time_seconds_sum, vllm:request_decode_time_seconds_sum | None | None (tgi_batch_inference_duration{method} is batch wall time, another measure) | llamacpp:prompt_seconds_total, llamacpp:tokens_predicted_seconds_total | None |
| ttft | vllm:time_to_first_token_seconds | sglang:time_to_first_token_seconds | None | None (no histograms) | dynamo_frontend_time_to_first_token_seconds |
| itl | vllm:inter_token_latency_seconds, else vllm:time_per_output_token_seconds (older) | sglang:inter_token_latency_seconds, else sglang:time_per_output_token_seconds | None (tgi_request_mean_time_per_token_duration is a per-request mean) | None | dynamo_frontend_inter_token_latency_seconds |
| running, waiting | vllm:num_requests_running, vllm:num_requests_waiting | sglang:num_running_reqs, sglang:num_queue_reqs | tgi_batch_current_size, tgi_queue_size | llamacpp:requests_processing, llamacpp:requests_deferred | dynamo_frontend_inflight_requests, dynamo_frontend_queued_requests |
| kv_cache_usage | vllm:kv_cache_usage_perc, else vllm:gpu_cache_usage_perc (both 0 to 1) | sglang:token_usage | None | llamacpp:kv_cache_usage_ratio (older builds) | None |
| created | _created (V1; V0 disabled them: process_start_time_seconds) | None (multiprocess mode: neither) | None | None (its Process-Start-Time-Unix is a header) | None |
| model label | model_name | model_name (name in early versions) | none: one model | none: one model | model |

vLLM counts prefix_cache_hits at each cache lookup (KVCacheManager.get_computed_blocks), which its scheduler
repeats for a waiting request it could not place yet, so a prompt can count more than once; prompt_tokens_by_source
counts each prompt once, when its prefill is done, hence read first. llama.cpp prints its values with six
significant digits (1.52341e+06): above a million its counters move in steps.

## What a scrape counted (delta)

`delta(previous, current)`: per counter current - previous; per histogram the same bucket by bucket, and for its sum
and count. The engine restarted, and counts from zero again, when `created` changed or any counter or histogram
figure went down (a restart the page did not date: TGI, llama.cpp, Dynamo and SGLang give no start time); then each
delta is the current value. So a delta is never negative, and nothing is counted twice unless a series of a sum
vanished without a restart (read as one). A figure None now is None in the delta; a figure None before and present
now (a series created at its first use: SGLang's cached tokens, Dynamo's per-model series) counts whole.

The first reading of a model (previous None) counts nothing: zeros, None where not exposed. What the counters held
when we started watching was counted before we watched, by no one we can ask. For a model that appears on a page
the agent already watches, pass `previous=ModelReading(model)` (nothing counted before): its counters count whole.
"""

import math
from dataclasses import dataclass, field

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as text_families

ENGINES = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "tgi": "Text Generation Inference",
    "llamacpp": "llama.cpp server",
    "dynamo": "NVIDIA Dynamo",
}
MAX_BYTES = 4_000_000

COUNTERS = ("prompt_tokens", "generation_tokens", "requests", "cached_prompt_tokens", "prefill_seconds",
            "decode_seconds")
HISTOGRAMS = ("ttft", "itl")
GAUGES = ("running", "waiting", "kv_cache_usage")


class MetricsError(Exception):
    """A metrics page that cannot be read; the message says why, for a person."""


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram: buckets ((upper bound, cumulative count), ...) ascending, +Inf last where the page
    has it; sum and count of the observations."""

    buckets: tuple
    sum: float
    count: float

    @property
    def mean(self):
        return self.sum / self.count if self.count > 0 else None


@dataclass(frozen=True)
class ModelReading:
    """One model's figures on one page (the module's docstring says each); None where the engine does not expose it."""

    model: str | None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    requests: float | None = None
    cached_prompt_tokens: float | None = None
    prefill_seconds: float | None = None
    decode_seconds: float | None = None
    ttft: Histogram | None = None
    itl: Histogram | None = None
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    created: float | None = None
    sources: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Reading:
    """A page read: its engine (a key of ENGINES) and {model name: ModelReading}; the name is None for an engine
    that serves one model and does not name it (TGI, llama.cpp)."""

    engine: str
    models: dict


@dataclass(frozen=True)
class ModelDelta:
    """What one model's counters and histograms counted between two readings; `restarted`: the engine restarted in
    between, and each figure is what it counted since."""

    model: str | None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    requests: float | None = None
    cached_prompt_tokens: float | None = None
    prefill_seconds: float | None = None
    decode_seconds: float | None = None
    ttft: Histogram | None = None
    itl: Histogram | None = None
    restarted: bool = False


# How each engine's page is read: for each field, the metrics to try, newest name first. A "counter" is read from
# NAME_total (a bare NAME where the page gives the counter no type), a "sum" from a histogram's NAME_sum, a
# "histogram" from NAME_bucket/_sum/_count, a "gauge" from NAME; `where`: labels a sample must carry; `unit`: a word
# the metric's HELP text must have, where one name has counted different things across versions.
@dataclass(frozen=True)
class _Metric:
    kind: str
    name: str
    where: tuple = ()
    unit: str = ""


def _counter(name, unit="", **where):
    return _Metric("counter", name, tuple(where.items()), unit)


def _sum(name):
    return _Metric("sum", name)


def _histogram(name):
    return _Metric("histogram", name)


def _gauge(name):
    return _Metric("gauge", name)


_READ = {
    "vllm": {
        "prompt_tokens": [_counter("vllm:prompt_tokens")],
        "generation_tokens": [_counter("vllm:generation_tokens")],
        "requests": [_counter("vllm:request_success")],
        "cached_prompt_tokens": [_counter("vllm:prompt_tokens_by_source", source="local_cache_hit"),
                                 _counter("vllm:prefix_cache_hits", unit="token"),
                                 _counter("vllm:gpu_prefix_cache_hits", unit="token")],
        "prefill_seconds": [_sum("vllm:request_prefill_time_seconds")],
        "decode_seconds": [_sum("vllm:request_decode_time_seconds")],
        "ttft": [_histogram("vllm:time_to_first_token_seconds")],
        "itl": [_histogram("vllm:inter_token_latency_seconds"), _histogram("vllm:time_per_output_token_seconds")],
        "running": [_gauge("vllm:num_requests_running")],
        "waiting": [_gauge("vllm:num_requests_waiting")],
        "kv_cache_usage": [_gauge("vllm:kv_cache_usage_perc"), _gauge("vllm:gpu_cache_usage_perc")],
    },
    "sglang": {
        "prompt_tokens": [_counter("sglang:prompt_tokens")],
        "generation_tokens": [_counter("sglang:generation_tokens")],
        "requests": [_counter("sglang:num_requests")],
        "cached_prompt_tokens": [_counter("sglang:cached_tokens")],
        "ttft": [_histogram("sglang:time_to_first_token_seconds")],
        "itl": [_histogram("sglang:inter_token_latency_seconds"), _histogram("sglang:time_per_output_token_seconds")],
        "running": [_gauge("sglang:num_running_reqs")],
        "waiting": [_gauge("sglang:num_queue_reqs")],
        "kv_cache_usage": [_gauge("sglang:token_usage")],
    },
    "tgi": {
        "prompt_tokens": [_sum("tgi_request_input_length")],
        "generation_tokens": [_sum("tgi_request_generated_tokens")],
        "requests": [_counter("tgi_request_success")],
        "running": [_gauge("tgi_batch_current_size")],
        "waiting": [_gauge("tgi_queue_size")],
    },
    "llamacpp": {
        "prompt_tokens": [_counter("llamacpp:prompt_tokens")],
        "generation_tokens": [_counter("llamacpp:tokens_predicted")],
        "prefill_seconds": [_counter("llamacpp:prompt_seconds")],
        "decode_seconds": [_counter("llamacpp:tokens_predicted_seconds")],
        "running": [_gauge("llamacpp:requests_processing")],
        "waiting": [_gauge("llamacpp:requests_deferred")],
        "kv_cache_usage": [_gauge("llamacpp:kv_cache_usage_ratio")],
    },
    "dynamo": {
        "prompt_tokens": [_sum("dynamo_frontend_input_sequence_tokens")],
        "generation_tokens": [_counter("dynamo_frontend_output_tokens"),
                              _sum("dynamo_frontend_output_sequence_tokens")],
        "requests": [_counter("dynamo_frontend_requests", status="success")],
        "cached_prompt_tokens": [_sum("dynamo_frontend_cached_tokens")],
        "ttft": [_histogram("dynamo_frontend_time_to_first_token_seconds")],
        "itl": [_histogram("dynamo_frontend_inter_token_latency_seconds")],
        "running": [_gauge("dynamo_frontend_inflight_requests")],
        "waiting": [_gauge("dynamo_frontend_queued_requests")],
    },
}
# The label that names the model, in the order tried; an engine without one serves one model, named None.
_MODEL_LABELS = {"vllm": ("model_name",), "sglang": ("model_name", "name"), "tgi": (), "llamacpp": (),
                 "dynamo": ("model",)}
# The metric names that say which engine served a page.
_PREFIXES = {"vllm": "vllm:", "sglang": "sglang:", "tgi": "tgi_", "llamacpp": "llamacpp:",
             "dynamo": "dynamo_frontend_"}
_MEAN_GAUGES = {"kv_cache_usage"}


def _sample_names(metric):
    """The sample names `metric` is read from, and the name of its `_created` samples."""
    base = metric.name
    if metric.kind == "counter":
        return (base + "_total", base), base + "_created"
    if metric.kind in ("sum", "histogram"):
        return (base + "_bucket", base + "_sum", base + "_count"), base + "_created"
    return (base,), None


def _size(page):
    return len(page) if isinstance(page, bytes) or page.isascii() else len(page.encode("utf-8"))


def _size_text(size):
    """The page's size in MB, or in bytes where MB would read as the limit itself."""
    return f"{size / 1e6:.1f} MB" if round(size / 1e6, 1) > MAX_BYTES / 1e6 else f"{size:,} bytes"


def _start(text, length=40):
    """The page's first line, cut to `length` characters, quoted: what a person recognises it by."""
    line = text.lstrip().split("\n", 1)[0].strip()
    return repr(line if len(line) <= length else line[:length] + "...")


def _text(page):
    """The page as text, or MetricsError saying what it is instead."""
    size = _size(page)
    if size > MAX_BYTES:
        raise MetricsError(f"the page is {_size_text(size)}, over the {MAX_BYTES / 1e6:g} MB limit")
    if isinstance(page, bytes):
        try:
            page = page.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MetricsError(f"the page is not UTF-8 text (byte 0x{page[e.start]:02x} at {e.start}): compressed "
                               "or binary?") from None
    text = page.lstrip("\ufeff")
    head = text.lstrip()
    if not head:
        raise MetricsError("the page is empty")
    if head.startswith("<"):
        raise MetricsError(f"the page is HTML, not Prometheus text (starts {_start(text)})")
    if head[0] in "{[":
        raise MetricsError(f"the page is JSON, not Prometheus text (starts {_start(text)})")
    if "\x00" in text:
        raise MetricsError("the page is binary, not Prometheus text (it has NUL bytes)")
    return text


def _parse(text):
    """{sample name: [(labels, value)]} of every finite sample, the names on the page in its order, and {metric
    family: its HELP text}."""
    openmetrics = text.rstrip().endswith("# EOF")
    try:
        families = list((openmetrics_families if openmetrics else text_families)(text))
    except Exception as e:  # noqa: BLE001 - the parsers raise ValueError, IndexError, ... on a malformed page: each
        # one means the same to whoever reads the page, and the message says which.
        kind = "OpenMetrics" if openmetrics else "Prometheus"
        raise MetricsError(f"the page is not {kind} text ({e}; starts {_start(text)})") from None
    samples, names, helps = {}, [], {}
    for family in families:
        names += [s.name for s in family.samples] or [family.name]
        helps[family.name] = family.documentation or ""
        for s in family.samples:
            if isinstance(s.value, (int, float)) and math.isfinite(s.value):
                samples.setdefault(s.name, []).append((s.labels, float(s.value)))
    return samples, list(dict.fromkeys(names)), helps


def _engines_on(names):
    return [e for e, prefix in _PREFIXES.items() if any(n.startswith(prefix) for n in names)]


def _saw(names):
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return ", ".join(names[:5]) + more if names else "no metric at all"


def detect(page):
    """The engine (a key of ENGINES) whose metrics the page has, from their names; None where it has none, or those
    of several. MetricsError where the page cannot be read at all."""
    found = _engines_on(_parse(_text(page))[1])
    return found[0] if len(found) == 1 else None


def read(page, engine=None):
    """The Reading of a metrics page (str, or the body's bytes); `engine`: a key of ENGINES, found from the metric
    names where not given. MetricsError where the page cannot be read, or has no metric of the engine."""
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}: one of {', '.join(ENGINES)}")
    samples, names, helps = _parse(_text(page))
    found = _engines_on(names)
    if engine is None:
        if not found:
            raise MetricsError(f"no metric of a known engine: saw {_saw(names)}")
        if len(found) > 1:
            raise MetricsError(f"the page has metrics of more than one engine ({', '.join(ENGINES[e] for e in found)})"
                               ": say which engine serves the deployment")
        engine = found[0]
    elif engine not in found:
        looks = f" (it looks like {ENGINES[found[0]]}'s)" if len(found) == 1 else ""
        raise MetricsError(f"no {ENGINES[engine]} metric on the page{looks}: saw {_saw(names)}")
    return Reading(engine, _models(engine, samples, helps))


def _models(engine, samples, helps):
    labels = _MODEL_LABELS[engine]

    def model_of(sample_labels):
        return next((sample_labels[k] for k in labels if k in sample_labels), None)

    # Each sample of a metric the engine is read from, by model: {sample name: {model: [(labels, value)]}}.
    by_model, created_names = {}, set()
    for metrics in _READ[engine].values():
        for metric in metrics:
            names, created = _sample_names(metric)
            created_names.add(created)
            for name in (*names, created):
                for sample_labels, value in samples.get(name, ()):
                    by_model.setdefault(name, {}).setdefault(model_of(sample_labels), []).append((sample_labels, value))
    models = {m for per_model in by_model.values() for m in per_model}
    if not labels:
        models = {None}
    started = [v for _, v in samples.get("process_start_time_seconds", ())]
    start = min(started) if started else None
    return {m: _model_reading(engine, m, by_model, helps, start) for m in sorted(models, key=str)}


def _model_reading(engine, model, by_model, helps, process_start):
    def of(name, where=()):
        return [(lb, v) for lb, v in by_model.get(name, {}).get(model, ()) if all(lb.get(k) == x for k, x in where)]

    values, sources, created = {}, {}, []
    for name, metrics in _READ[engine].items():
        for metric in metrics:
            found = _value(metric, of, mean=name in _MEAN_GAUGES)
            if found is None:
                continue
            if metric.unit and metric.unit not in helps.get(metric.name, "").lower():
                # One name that has counted something else (vLLM's gpu_prefix_cache_hits: blocks, then tokens).
                sources.setdefault(name, f"{found[1]}: not read, its HELP does not say it counts {metric.unit}s")
                continue
            values[name], sources[name] = found
            _, created_name = _sample_names(metric)
            if created_name:
                created += [v for _, v in of(created_name, metric.where)]
            break
    return ModelReading(model, **values, created=min(created) if created else process_start, sources=sources)


def _value(metric, of, mean=False):
    """(value, the series it was read from) of `metric` for one model, or None."""
    where = metric.where
    labels = "{" + ",".join(f'{k}="{v}"' for k, v in where) + "}" if where else ""
    if metric.kind == "counter":
        for name in (metric.name + "_total", metric.name):
            found = of(name, where)
            if found:
                return math.fsum(v for _, v in found), name + labels
        return None
    if metric.kind == "gauge":
        found = [v for _, v in of(metric.name, where)]
        if not found:
            return None
        return (math.fsum(found) / len(found) if mean else math.fsum(found)), metric.name + labels
    sums = [v for _, v in of(metric.name + "_sum", where)]
    if metric.kind == "sum":
        return (math.fsum(sums), metric.name + "_sum" + labels) if sums else None
    counts = {}
    for sample_labels, v in of(metric.name + "_bucket", where):
        le = _bound(sample_labels.get("le"))
        if le is not None:
            counts.setdefault(le, []).append(v)
    if not counts:
        return None
    buckets = tuple(sorted((le, math.fsum(vs)) for le, vs in counts.items()))
    count = [v for _, v in of(metric.name + "_count", where)]
    total = math.fsum(count) if count else (buckets[-1][1] if math.isinf(buckets[-1][0]) else None)
    if total is None:
        return None
    return Histogram(buckets, math.fsum(sums), total), metric.name + labels


def _bound(le):
    try:
        return float(le)
    except (TypeError, ValueError):
        return None


def delta(previous, current):
    """What `current` (a ModelReading) counted since `previous` (the same model's reading before it, or None: the
    first look, which counts nothing). The module's docstring says the rules: never negative, a restart counts from
    zero again, None stays None."""
    if previous is not None and previous.model != current.model:
        raise ValueError(f"readings of two models: {previous.model!r} and {current.model!r}")
    if previous is None:
        counters = {f: None if getattr(current, f) is None else 0.0 for f in COUNTERS}
        histograms = {f: _zero(getattr(current, f)) for f in HISTOGRAMS}
        return ModelDelta(current.model, **counters, **histograms)
    restarted = _restarted(previous, current)
    counters, histograms = {}, {}
    for f in COUNTERS:
        now, before = getattr(current, f), getattr(previous, f)
        counters[f] = now if now is None or before is None or restarted else max(0.0, now - before)
    for f in HISTOGRAMS:
        now, before = getattr(current, f), getattr(previous, f)
        histograms[f] = now if now is None or before is None or restarted else _minus(now, before)
    return ModelDelta(current.model, **counters, **histograms, restarted=restarted)


def _restarted(previous, current):
    if previous.created is not None and current.created is not None and previous.created != current.created:
        return True
    for f in COUNTERS:
        now, before = getattr(current, f), getattr(previous, f)
        if now is not None and before is not None and now < before:
            return True
    for f in HISTOGRAMS:
        now, before = getattr(current, f), getattr(previous, f)
        if now is None or before is None:
            continue
        if [le for le, _ in now.buckets] != [le for le, _ in before.buckets]:
            return True
        if now.sum < before.sum or now.count < before.count:
            return True
        if any(c < b for (_, c), (_, b) in zip(now.buckets, before.buckets)):
            return True
    return False


def _zero(histogram):
    if histogram is None:
        return None
    return Histogram(tuple((le, 0.0) for le, _ in histogram.buckets), 0.0, 0.0)


def _minus(now, before):
    buckets = tuple((le, c - b) for (le, c), (_, b) in zip(now.buckets, before.buckets))
    return Histogram(buckets, now.sum - before.sum, now.count - before.count)


def quantile(buckets, q):
    """Prometheus's histogram_quantile: the q-quantile (0 <= q <= 1) of a Histogram, or of its buckets ((upper
    bound, cumulative count), ...), by linear interpolation within the bucket the rank falls in (the first bucket
    from 0 where its bound is above 0). A rank in the +Inf bucket answers the highest finite bound. None where there
    are no observations, fewer than two buckets or no +Inf bucket (Prometheus answers NaN)."""
    if not 0 <= q <= 1:
        raise ValueError(f"a quantile is between 0 and 1, not {q}")
    if isinstance(buckets, Histogram):
        buckets = buckets.buckets
    ordered = sorted((float(le), float(c)) for le, c in buckets)
    if len(ordered) < 2 or ordered[-1][0] != math.inf:
        return None
    fixed, top = [], 0.0  # cumulative counts made monotonic, as Prometheus does
    for le, c in ordered:
        top = max(top, c)
        fixed.append((le, top))
    observations = fixed[-1][1]
    if observations <= 0:
        return None
    rank = q * observations
    b = next((i for i in range(len(fixed) - 1) if fixed[i][1] >= rank), len(fixed) - 1)
    if b == len(fixed) - 1:
        return fixed[-2][0]
    if b == 0 and fixed[0][0] <= 0:
        return fixed[0][0]
    start, below = (fixed[b - 1][0], fixed[b - 1][1]) if b > 0 else (0.0, 0.0)
    end, count = fixed[b][0], fixed[b][1] - below
    if count <= 0:  # q == 0 and an empty first bucket: Prometheus answers NaN; the bucket's lower bound here
        return start
    return start + (end - start) * (rank - below) / count
