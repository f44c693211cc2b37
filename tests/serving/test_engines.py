"""Engines' metrics pages (collector/agent/engines.py, a pure core): each engine's page read to the figures worked out by hand
from its fixture (tests/serving/data, README.md says where each comes from), renames across versions, what a scrape
counted across restarts, Prometheus's histogram_quantile, and pages that cannot be read."""

import gzip
import math
from pathlib import Path

import pytest

from collector.agent.engines import (
    ENGINES,
    MAX_BYTES,
    Histogram,
    MetricsError,
    ModelDelta,
    ModelReading,
    delta,
    detect,
    quantile,
    read,
)

DATA = Path(__file__).parent / "data"


def page(name):
    return (DATA / f"{name}.prom").read_text()


def only(reading):
    (model,) = reading.models.values()
    return model


# ---- each engine's page ------------------------------------------------------------------------------------------


def test_vllm_v1_page_sums_its_data_parallel_engines_and_reads_cached_tokens_by_source():
    r = read(page("vllm-new"))
    assert r.engine == "vllm" and list(r.models) == ["meta-llama/Llama-3.1-8B-Instruct"]
    m = r.models["meta-llama/Llama-3.1-8B-Instruct"]
    # engine="0" + engine="1"
    assert m.prompt_tokens == 120000 + 80000
    assert m.generation_tokens == 45000 + 30000
    assert m.requests == (300 + 20 + 5) + (200 + 10 + 0)  # finished_reason stop, length, abort
    # local_cache_hit of prompt_tokens_by_source (48000 + 30000), not prefix_cache_hits (60000 + 35000: lookups)
    # nor prompt_tokens_cached (local + external: 50000 + 30000)
    assert m.cached_prompt_tokens == 48000 + 30000
    assert m.sources["cached_prompt_tokens"] == 'vllm:prompt_tokens_by_source_total{source="local_cache_hit"}'
    assert m.prefill_seconds == 25.0 + 15.5
    assert m.decode_seconds == 900.0 + 600.25
    assert (m.running, m.waiting) == (7 + 5, 2 + 0)
    assert m.kv_cache_usage == (0.25 + 0.75) / 2, "each engine has its own KV cache: the mean, not the sum"
    # The earliest _created of the series read (TTFT's of engine 0), not process_start_time_seconds (1767225571.02).
    assert m.created == 1767225600.118
    assert m.ttft.count == 325 + 210 and m.ttft.sum == pytest.approx(19.5 + 11.2)
    assert m.ttft.buckets[:5] == ((0.001, 0), (0.005, 0), (0.01, 0), (0.02, 10 + 5), (0.04, 100 + 60))
    assert m.ttft.buckets[-1] == (math.inf, 535)
    # inter_token_latency_seconds, not request_time_per_output_token_seconds (a per-request mean)
    assert m.sources["itl"] == "vllm:inter_token_latency_seconds"
    assert m.itl.count == 44675 + 29790 and m.itl.sum == 700.5 + 450.25
    assert m.itl.buckets[:5] == ((0.01, 35000), (0.025, 68000), (0.05, 73700), (0.075, 74390), (0.1, 74465))


def test_vllm_v0_page_reads_the_old_names_and_leaves_what_it_lacks_none():
    m = only(read(page("vllm-old")))
    assert m.model == "mistralai/Mistral-7B-Instruct-v0.3"
    assert (m.prompt_tokens, m.generation_tokens, m.requests) == (98765, 43210, 160 + 15)
    assert m.kv_cache_usage == 0.4375 and m.sources["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert m.sources["itl"] == "vllm:time_per_output_token_seconds"
    assert (m.itl.count, m.itl.sum) == (43035, 860.7)
    # V0 had a prefix-cache hit-rate gauge only, and no prefill/decode histograms: not exposed is None, never 0.
    assert m.cached_prompt_tokens is None and m.prefill_seconds is None and m.decode_seconds is None
    # disable_created_metrics(): no _created; the process's start says when the counters started.
    assert m.created == 1719830000.5


MIDDLE_VLLM = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
# HELP vllm:gpu_prefix_cache_hits_total GPU prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 4096.0
# TYPE vllm:gpu_prefix_cache_hits_created gauge
vllm:gpu_prefix_cache_hits_created{engine="0",model_name="m"} 1.75e+09
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 9000.0
"""


def test_vllm_between_renames_reads_gpu_prefix_cache_hits_in_tokens_and_prefers_the_new_name_when_both_are_there():
    m = only(read(MIDDLE_VLLM))  # V1 0.8: gpu_prefix_cache_hits (tokens), gpu_cache_usage_perc
    assert m.cached_prompt_tokens == 4096 and m.sources["cached_prompt_tokens"] == "vllm:gpu_prefix_cache_hits_total"
    assert m.kv_cache_usage == 0.5 and m.created == 1.75e9
    both = MIDDLE_VLLM + """\
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 4000.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
"""  # 0.9 and 0.10: both names
    m = only(read(both))
    assert (m.cached_prompt_tokens, m.kv_cache_usage) == (4000, 0.25)
    assert m.sources["cached_prompt_tokens"] == "vllm:prefix_cache_hits_total"


def test_vllm_prefix_cache_hits_counted_in_blocks_or_in_no_unit_the_page_names_are_not_read_as_tokens():
    # Early V1 (0.8.0) counted gpu_prefix_cache_hits in blocks under the same name; a page without HELP names none.
    blocks = MIDDLE_VLLM.replace("number of cached tokens", "number of cached blocks")
    m = only(read(blocks))
    assert m.cached_prompt_tokens is None and m.prompt_tokens == 9000
    assert m.sources["cached_prompt_tokens"] == ("vllm:gpu_prefix_cache_hits_total: not read, its HELP does not say "
                                                 "it counts tokens")
    m = only(read("\n".join(line for line in MIDDLE_VLLM.splitlines() if not line.startswith("# HELP"))))
    assert m.cached_prompt_tokens is None
    # A name passed over for its unit does not hide an older name that counts tokens.
    newer_in_blocks = MIDDLE_VLLM + """\
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached blocks.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 256.0
"""
    m = only(read(newer_in_blocks))
    assert m.cached_prompt_tokens == 4096 and m.sources["cached_prompt_tokens"] == "vllm:gpu_prefix_cache_hits_total"


def test_sglang_page():
    r = read(page("sglang"))
    m = r.models["Qwen/Qwen2.5-7B-Instruct"]
    assert r.engine == "sglang"
    assert (m.prompt_tokens, m.generation_tokens, m.requests) == (8128902, 7557572, 15000)  # 8.128902e+06 ...
    assert m.cached_prompt_tokens == 2.5e6
    assert (m.running, m.waiting, m.kv_cache_usage) == (24, 3, 0.28)
    assert (m.ttft.count, m.ttft.sum) == (15000, 2100.5)
    assert (m.itl.count, m.itl.sum) == (7542572, 75800.25)
    assert m.ttft.buckets[:3] == ((0.1, 9000), (0.2, 12000), (0.4, 14000))
    # No per-request prefill/decode times; multiprocess mode: no _created, no process_start_time_seconds.
    assert (m.prefill_seconds, m.decode_seconds, m.created) == (None, None, None)


def test_tgi_page_takes_tokens_from_its_histograms_sums_and_has_no_latency_histograms_we_read():
    r = read(page("tgi"))
    assert r.engine == "tgi" and list(r.models) == [None], "TGI serves one model and does not name it"
    m = r.models[None]
    assert m.prompt_tokens == 456789, "tgi_request_input_length_sum"
    assert m.generation_tokens == 234567, "tgi_request_generated_tokens_sum"
    assert m.requests == 1200, "tgi_request_success, not tgi_request_count (1215)"
    assert (m.running, m.waiting) == (16, 4)
    assert m.ttft is None and m.itl is None
    assert (m.cached_prompt_tokens, m.prefill_seconds, m.decode_seconds, m.kv_cache_usage, m.created) == (None,) * 5


def test_llamacpp_page_reads_six_digit_counters_and_its_prefill_and_decode_seconds():
    m = only(read(page("llamacpp")))
    assert m.model is None
    assert m.prompt_tokens == 1523410, "printed 1.52341e+06"
    assert (m.generation_tokens, m.prefill_seconds, m.decode_seconds) == (402118, 912.337, 8765.43)
    assert (m.running, m.waiting) == (2, 1)
    assert (m.requests, m.cached_prompt_tokens, m.ttft, m.itl, m.kv_cache_usage, m.created) == (None,) * 6


OLD_LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 4096
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.125
# HELP llamacpp:kv_cache_tokens KV-cache tokens.
# TYPE llamacpp:kv_cache_tokens gauge
llamacpp:kv_cache_tokens 512
"""


def test_older_llamacpp_builds_give_their_kv_cache_usage():
    m = only(read(OLD_LLAMACPP))
    assert (m.prompt_tokens, m.kv_cache_usage) == (4096, 0.125)


def test_dynamo_frontend_page_reads_each_model_and_counts_only_successful_requests():
    r = read(page("dynamo"))
    assert r.engine == "dynamo"
    assert set(r.models) == {"Qwen/Qwen3-0.6B", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"}
    a, b = r.models["Qwen/Qwen3-0.6B"], r.models["deepseek-ai/DeepSeek-R1-Distill-Llama-8B"]
    assert (a.prompt_tokens, b.prompt_tokens) == (61234, 9100)
    # output_tokens_total (updated as tokens stream), not output_sequence_tokens_sum (20100: finished requests)
    assert (a.generation_tokens, b.generation_tokens) == (20480, 14000)
    assert a.requests == 40 + 10, "status=success of every endpoint; the 2 cancelled are left out"
    assert b.requests == 7
    assert a.cached_prompt_tokens == 30000
    assert b.cached_prompt_tokens is None, "its backend reports no cached tokens: None, not 0"
    assert (a.running, a.waiting, b.running, b.waiting) == (3, 1, 0, 0)
    assert (a.ttft.count, a.ttft.sum, b.itl.count, b.itl.sum) == (52, 3.64, 13993, 419.79)
    assert a.ttft.buckets[0] == (0.0, 0)
    assert (a.prefill_seconds, a.kv_cache_usage, a.created) == (None, None, None)


def test_a_dynamo_frontend_before_its_first_request_has_no_models_yet():
    fresh = "# HELP dynamo_frontend_requests_total Total\n# TYPE dynamo_frontend_requests_total counter\n"
    assert read(fresh).models == {}


def test_openmetrics_pages_read_the_same():
    om = """\
# TYPE vllm:prompt_tokens counter
# HELP vllm:prompt_tokens Number of prefill tokens processed.
vllm:prompt_tokens_total{model_name="m",engine="0"} 1200.0
vllm:prompt_tokens_created{model_name="m",engine="0"} 1.7672256e+09
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="m",engine="0",le="0.1"} 3
vllm:time_to_first_token_seconds_bucket{model_name="m",engine="0",le="+Inf"} 4
vllm:time_to_first_token_seconds_count{model_name="m",engine="0"} 4
vllm:time_to_first_token_seconds_sum{model_name="m",engine="0"} 0.75
vllm:time_to_first_token_seconds_created{model_name="m",engine="0"} 1.7672255e+09
# EOF
"""
    m = only(read(om))
    assert m.prompt_tokens == 1200
    assert m.ttft == Histogram(((0.1, 3), (math.inf, 4)), 0.75, 4)
    assert m.created == 1.7672255e9


def test_a_model_name_of_ten_thousand_characters_survives():
    name = "m" * 10_000
    m = only(read(f'vllm:prompt_tokens_total{{model_name="{name}"}} 5\n'))
    assert m.model == name and m.prompt_tokens == 5


def test_a_page_given_as_the_bodys_bytes_reads_the_same():
    assert read(page("sglang").encode()) == read(page("sglang"))


# ---- detection ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, engine", [("vllm-new", "vllm"), ("vllm-old", "vllm"), ("sglang", "sglang"),
                                          ("tgi", "tgi"), ("llamacpp", "llamacpp"), ("dynamo", "dynamo")])
def test_each_engine_is_told_from_its_metric_names(name, engine):
    assert detect(page(name)) == engine and engine in ENGINES


NODE_EXPORTER = """\
# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.
# TYPE node_cpu_seconds_total counter
node_cpu_seconds_total{cpu="0",mode="idle"} 2.4e+06
# HELP node_load1 1m load average.
# TYPE node_load1 gauge
node_load1 0.42
"""


def test_a_page_of_some_other_exporter_is_no_engine_and_says_what_it_saw():
    assert detect(NODE_EXPORTER) is None
    with pytest.raises(MetricsError, match=r"^no metric of a known engine: saw node_cpu_seconds_total, node_load1$"):
        read(NODE_EXPORTER)
    many = "".join(f"m{i} {i}\n" for i in range(8))
    with pytest.raises(MetricsError, match=r"saw m0, m1, m2, m3, m4 and 3 more$"):
        read(many)


def test_a_page_with_two_engines_metrics_needs_the_engine_named():
    both = page("dynamo") + page("llamacpp")
    assert detect(both) is None
    with pytest.raises(MetricsError, match=r"more than one engine \(llama\.cpp server, NVIDIA Dynamo\)"):
        read(both)
    assert read(both, "llamacpp").models[None].prompt_tokens == 1523410
    assert read(both, engine="dynamo").engine == "dynamo"


def test_naming_an_engine_the_page_is_not_says_what_it_looks_like():
    with pytest.raises(MetricsError, match=r"^no vLLM metric on the page \(it looks like SGLang's\): saw sglang:"):
        read(page("sglang"), "vllm")
    with pytest.raises(ValueError, match="unknown engine 'ollama'"):
        read(page("sglang"), "ollama")


# ---- pages that cannot be read -----------------------------------------------------------------------------------


@pytest.mark.parametrize("body, message", [
    ("", "the page is empty"),
    ("  \n\n", "the page is empty"),
    ("<!doctype html>\n<html><body>Login</body></html>",
     "the page is HTML, not Prometheus text (starts '<!doctype html>')"),
    ('{"detail": "Not Found"}', "the page is JSON, not Prometheus text (starts '{\"detail\": \"Not Found\"}')"),
    ("hello world\n", "the page is not Prometheus text (could not convert string to float: 'world'; "
                      "starts 'hello world')"),
    ("vllm:prompt_tokens_total{model_name=m} 1\n", "the page is not Prometheus text (Invalid labels: "),
    ("a 1\x00\n", "the page is binary, not Prometheus text (it has NUL bytes)"),
    (gzip.compress(b"vllm:prompt_tokens_total 1\n", mtime=0), "the page is not UTF-8 text (byte 0x8b at 1): compressed or "
                                                     "binary?"),
    ("# TYPE x counter\nx 1\n# EOF\n", "the page is not OpenMetrics text ("),
])
def test_unreadable_pages_say_why(body, message):
    with pytest.raises(MetricsError) as e:
        read(body)
    assert str(e.value).startswith(message)
    with pytest.raises(MetricsError):
        detect(body)


def test_a_page_over_the_limit_is_refused_before_it_is_parsed():
    big = "x" * (3 * MAX_BYTES)  # not Prometheus text either: the size is said first
    with pytest.raises(MetricsError, match=r"^the page is 12\.0 MB, over the 4 MB limit$"):
        read(big)
    with pytest.raises(MetricsError, match=r"^the page is 12\.0 MB, over the 4 MB limit$"):
        read(big.encode())
    multibyte = "é" * (MAX_BYTES // 2 + 1)  # 2 bytes a character: two bytes over
    with pytest.raises(MetricsError, match=r"^the page is 4,000,002 bytes, over the 4 MB limit$"):
        read(multibyte)
    body = "llamacpp:requests_deferred 1\n"
    at_the_limit = "# " + "x" * (MAX_BYTES - len(body) - 3) + "\n" + body  # a comment pads it to MAX_BYTES
    assert len(at_the_limit) == MAX_BYTES and read(at_the_limit).models[None].waiting == 1


@pytest.mark.parametrize("junk", ["}{", "a{", "# TYPE", "a 1\n b", "\ufeff<html>", "x{le=\"1\"} 1 2 3 4 5 6 7",
                                  "a\tb\tc", "vllm:x{model_name=\"a\"} NaN\n", "[1, 2]", b"\xff\xfe"])
def test_junk_raises_metrics_error_or_reads_nothing_of_an_engine_never_anything_else(junk):
    try:
        reading = read(junk)
    except MetricsError:
        return
    assert all(v is None for m in reading.models.values() for k, v in vars(m).items() if k not in ("model",
                                                                                                  "sources"))


def test_non_finite_samples_are_left_out():
    m = only(read('vllm:prompt_tokens_total{model_name="m"} NaN\nvllm:generation_tokens_total{model_name="m"} 7\n'))
    assert m.prompt_tokens is None and m.generation_tokens == 7


# ---- what a scrape counted ---------------------------------------------------------------------------------------


def reading(created=100.0, **figures):
    return ModelReading("m", created=created, **figures)


def hist(*cumulative, total_sum=0.0):
    bounds = (0.1, 0.5, math.inf)
    return Histogram(tuple(zip(bounds, cumulative)), total_sum, cumulative[-1])


def test_the_first_reading_counts_nothing_and_keeps_none_where_not_exposed():
    d = delta(None, reading(prompt_tokens=5000, generation_tokens=100, ttft=hist(1, 2, 3, total_sum=0.9)))
    assert d == ModelDelta("m", prompt_tokens=0, generation_tokens=0, ttft=hist(0, 0, 0))
    assert d.requests is None and d.itl is None and not d.restarted


def test_a_delta_is_what_each_counter_and_bucket_counted_since():
    before = reading(prompt_tokens=5000, generation_tokens=100, requests=3, ttft=hist(1, 2, 3, total_sum=0.9))
    after = reading(prompt_tokens=5600, generation_tokens=180, requests=5, ttft=hist(2, 4, 5, total_sum=1.5),
                    running=2)
    d = delta(before, after)
    assert (d.prompt_tokens, d.generation_tokens, d.requests) == (600, 80, 2)
    assert d.ttft.buckets == ((0.1, 1), (0.5, 2), (math.inf, 2))
    assert (d.ttft.count, d.ttft.sum) == (2, pytest.approx(0.6))
    assert d.cached_prompt_tokens is None and not d.restarted


def test_a_restart_the_page_dates_counts_from_zero_even_where_the_counters_already_passed_the_old_values():
    before = reading(created=100.0, prompt_tokens=500, generation_tokens=50)
    after = reading(created=900.0, prompt_tokens=700, generation_tokens=60)  # restarted, and busy since
    d = delta(before, after)
    assert d.restarted and (d.prompt_tokens, d.generation_tokens) == (700, 60)


def test_a_restart_the_page_does_not_date_is_a_counter_going_down_and_counts_every_counter_from_zero():
    before = reading(created=None, prompt_tokens=5000, generation_tokens=50, ttft=hist(1, 2, 3))
    after = reading(created=None, prompt_tokens=1200, generation_tokens=80, ttft=hist(1, 1, 1))
    d = delta(before, after)
    assert d.restarted
    assert (d.prompt_tokens, d.generation_tokens) == (1200, 80), "generation went up, but the process is new"
    assert d.ttft == hist(1, 1, 1)


def test_a_histogram_going_down_or_changing_buckets_is_a_restart_too():
    before = reading(prompt_tokens=10, itl=hist(5, 6, 7))
    assert delta(before, reading(prompt_tokens=12, itl=hist(1, 6, 7))).restarted
    other = Histogram(((0.2, 5), (math.inf, 7)), 0.0, 7)
    d = delta(before, reading(prompt_tokens=12, itl=other))
    assert d.restarted and d.prompt_tokens == 12 and d.itl == other


def test_a_series_that_appears_counts_whole_and_a_new_model_on_a_watched_page_too():
    before = reading(prompt_tokens=100)
    d = delta(before, reading(prompt_tokens=150, cached_prompt_tokens=40))
    assert (d.prompt_tokens, d.cached_prompt_tokens, d.restarted) == (50, 40, False)
    d = delta(ModelReading("m"), reading(prompt_tokens=150, ttft=hist(1, 1, 1)))
    assert (d.prompt_tokens, d.ttft) == (150, hist(1, 1, 1))
    d = delta(before, reading(prompt_tokens=None))
    assert d.prompt_tokens is None


def test_deltas_are_never_negative_and_add_up_to_what_the_engine_counted_across_restarts():
    # An engine counting 37 tokens a scrape, restarted at scrapes 4 (dated: created changes) and 9 (undated), and
    # a page that lost its start time from scrape 7 on; the sum of the deltas after the first reading is what it
    # counted after the first reading.
    total, counted, created, previous, added = 0, 0, 1.0, None, 0
    for scrape in range(1, 15):
        if scrape == 4:
            created, total = 2.0, 0
        if scrape == 9:
            total = 0
        total += 37
        if previous is not None:
            counted += 37
        current = reading(created=created if scrape < 7 else None, prompt_tokens=total,
                          ttft=hist(total // 3, total // 2, total))
        d = delta(previous, current)
        assert d.prompt_tokens >= 0 and all(c >= 0 for _, c in d.ttft.buckets) and d.ttft.count >= 0
        assert d.restarted == (scrape in (4, 9))
        added += d.prompt_tokens
        previous = current
    assert added == counted == 13 * 37


def test_readings_of_two_models_are_not_subtracted():
    with pytest.raises(ValueError, match="two models"):
        delta(ModelReading("a"), ModelReading("b"))


def test_the_same_page_twice_counts_nothing_and_after_a_reading_of_nothing_counts_whole():
    m = only(read(page("vllm-old")))
    assert delta(m, m) == ModelDelta(m.model, 0, 0, 0, None, None, None, _zero_like(m.ttft), _zero_like(m.itl))
    assert delta(ModelReading(m.model), m).prompt_tokens == 98765


def _zero_like(h):
    return Histogram(tuple((le, 0.0) for le, _ in h.buckets), 0.0, 0.0)


# ---- quantiles ---------------------------------------------------------------------------------------------------


def test_quantiles_interpolate_within_the_bucket_as_prometheus_does():
    b = ((0.1, 10), (0.5, 30), (1.0, 40), (math.inf, 40))
    assert quantile(b, 0.5) == pytest.approx(0.1 + 0.4 * (20 - 10) / 20)  # rank 20 in (0.1, 0.5]: 0.3
    assert quantile(b, 0.25) == pytest.approx(0.1 * 10 / 10)  # rank 10: the top of the first bucket
    assert quantile(b, 0.1) == pytest.approx(0.04), "the first bucket starts at 0"
    assert quantile(b, 0.9) == pytest.approx(0.5 + 0.5 * (36 - 30) / 10)
    assert quantile(b, 1.0) == 1.0
    assert quantile(Histogram(b, 9.0, 40), 0.5) == quantile(b, 0.5)


def test_the_fixtures_ttft_quantiles_by_hand():
    ttft = read(page("vllm-new")).models["meta-llama/Llama-3.1-8B-Instruct"].ttft
    # p50: rank 267.5 of 535 falls in (0.04, 0.06] holding 350 - 160 = 190: 0.04 + 0.02 * 107.5 / 190
    assert quantile(ttft, 0.5) == pytest.approx(0.04 + 0.02 * 107.5 / 190)
    # p99: rank 529.65 in (0.25, 0.5] holding 530 - 515 = 15: 0.25 + 0.25 * 14.65 / 15
    assert quantile(ttft, 0.99) == pytest.approx(0.25 + 0.25 * 14.65 / 15)


def test_a_rank_in_the_inf_bucket_answers_the_highest_finite_bound():
    assert quantile(((0.1, 1), (0.5, 2), (math.inf, 10)), 0.99) == 0.5


def test_a_first_bucket_at_zero_or_below_answers_its_bound():
    # Dynamo's histograms start with le="0": requests that cached nothing.
    assert quantile(((0.0, 4), (430.0, 20), (math.inf, 20)), 0.1) == 0.0
    assert quantile(((0.0, 4), (430.0, 20), (math.inf, 20)), 0.6) == pytest.approx(430 * (12 - 4) / 16)


def test_quantiles_of_nothing_are_none_and_of_no_quantile_an_error():
    assert quantile(((0.1, 0), (math.inf, 0)), 0.5) is None, "no observations"
    assert quantile(((0.1, 3), (0.5, 5)), 0.5) is None, "no +Inf bucket"
    assert quantile(((math.inf, 5),), 0.5) is None, "one bucket"
    assert quantile((), 0.5) is None
    with pytest.raises(ValueError):
        quantile(((0.1, 1), (math.inf, 1)), 1.5)


def test_buckets_out_of_order_or_not_monotonic_are_fixed_as_prometheus_does():
    assert quantile(((math.inf, 40), (0.5, 30), (0.1, 10), (1.0, 40)), 0.5) == pytest.approx(0.3)
    # A bucket below the one before it counts as the one before it: rank 15 in (0.5, 1.0] holding 20 - 10.
    assert quantile(((0.1, 10), (0.5, 8), (1.0, 20), (math.inf, 20)), 0.75) == pytest.approx(0.5 + 0.5 * 5 / 10)


def test_a_histograms_mean():
    assert Histogram(((math.inf, 4),), 2.0, 4).mean == 0.5
    assert Histogram(((math.inf, 0),), 0.0, 0).mean is None
