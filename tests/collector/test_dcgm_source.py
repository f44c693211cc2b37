"""The dcgm source, on real dcgm-exporter output and on a MIG-partitioned GPU."""

from datetime import datetime, timezone

import pytest

from collector.agent import schema
from collector.agent.sources.dcgm import DcgmSource, parse_metrics, readings_from_metrics

TS = datetime(2025, 1, 1, tzinfo=timezone.utc)


def values(reading):
    return dict(zip(schema.SAMPLE_FIELDS, reading.values))


def test_it_reads_every_gpu_of_the_real_h100_node_export(telemetry_data):
    text = (telemetry_data / "dcgm_h100x8_sample.prom").read_text()
    readings = DcgmSource("http://unused", fetch=lambda: text).read(TS)

    assert len(readings) == 8
    assert [r.device.index for r in readings] == list(range(8))
    first = readings[0]
    assert first.device.uuid == "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005"
    assert first.device.node == "gpu-node-1"
    assert first.device.model == "NVIDIA H100 80GB HBM3"
    assert first.device.source == "dcgm"
    v = values(first)
    assert v["power_w"] == 113.611
    assert v["temp_c"] == 30.0
    assert v["util_pct"] == 0.0
    assert v["mem_util_pct"] == 0.0
    # this export has no energy, memory or SM-activity fields
    assert v["energy_j"] is None and v["mem_used_mib"] is None and v["sm_active_pct"] is None
    assert values(readings[7])["power_w"] == 66.997


def test_it_records_the_pod_holding_a_gpu(telemetry_data):
    text = (telemetry_data / "dcgm_h100x8_sample.prom").read_text()
    readings = readings_from_metrics(parse_metrics(text), "fallback")

    assert [h.holder for h in readings[0].holders] == ["pod:dynamo-workload/vllm-agg-0-vllmdecodeworker-s65j5"]
    assert all(not r.holders for r in readings[1:])


MIG = """
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-m",GPU_I_ID="1",GPU_I_PROFILE="3g.40gb",modelName="NVIDIA A100-SXM4-80GB",Hostname="mig-node"} 250.5
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-m",GPU_I_ID="2",GPU_I_PROFILE="1g.10gb",modelName="NVIDIA A100-SXM4-80GB",Hostname="mig-node"} 250.5
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-m",GPU_I_ID="1",GPU_I_PROFILE="3g.40gb",Hostname="mig-node"} 123456789
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-m",GPU_I_ID="2",GPU_I_PROFILE="1g.10gb",Hostname="mig-node"} 123456789
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-m",GPU_I_ID="1",GPU_I_PROFILE="3g.40gb",Hostname="mig-node"} 0.8
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-m",GPU_I_ID="2",GPU_I_PROFILE="1g.10gb",Hostname="mig-node"} 0.4
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-m",GPU_I_ID="1",GPU_I_PROFILE="3g.40gb",Hostname="mig-node"} 30000
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-m",GPU_I_ID="2",GPU_I_PROFILE="1g.10gb",Hostname="mig-node"} 5000
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-m",GPU_I_ID="1",GPU_I_PROFILE="3g.40gb",Hostname="mig-node"} 10000
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-m",GPU_I_ID="2",GPU_I_PROFILE="1g.10gb",Hostname="mig-node"} 5000
"""


def test_mig_instances_of_one_gpu_count_its_power_and_energy_once():
    [reading] = readings_from_metrics(parse_metrics(MIG), "fallback")
    v = values(reading)

    assert reading.device.uuid == "GPU-m"
    assert v["power_w"] == 250.5
    assert v["energy_j"] == 123456.789  # mJ -> J, once
    assert v["mem_used_mib"] == 35000 and v["mem_total_mib"] == 50000
    # graphics-engine activity weighted by compute slices: (0.8*3 + 0.4*1) / 4
    assert abs(v["sm_active_pct"] - 70.0) < 1e-9


def test_sm_active_is_preferred_over_graphics_engine_activity():
    text = (
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-x"} 0.25\n'
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-x"} 0.9\n'
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-x"} 1980\n'
    )
    [reading] = readings_from_metrics(parse_metrics(text), "node-from-flag")

    assert values(reading)["sm_active_pct"] == 25.0
    assert values(reading)["sm_clock_mhz"] == 1980
    assert reading.device.node == "node-from-flag"


def test_labels_with_escaped_quotes_and_commas_parse():
    [(name, labels, value)] = parse_metrics('DCGM_FI_DEV_GPU_TEMP{UUID="GPU-1",pod="a,\\"b\\""} 41 1700000000000\n')

    assert (name, labels["pod"], value) == ("DCGM_FI_DEV_GPU_TEMP", 'a,"b"', 41.0)


def test_an_exporter_that_does_not_answer_yields_no_readings_and_one_message(caplog):
    def refuse():
        raise ConnectionRefusedError("connection refused")

    source = DcgmSource("http://127.0.0.1:9/metrics", fetch=refuse)

    assert source.read(TS) == [] and source.read(TS) == []
    assert caplog.text.count("does not answer") == 1


# -- real scrapes of current exporters (FB_RESERVED), older ones (no modelName), MIG ------------


def reading_of(path):
    [reading] = readings_from_metrics(parse_metrics(path.read_text()), "fallback")
    return reading


def test_memory_total_includes_reserved_so_it_is_the_size_nvml_reports(telemetry_data):
    # used + free + reserved: within 2 MiB of the memory.total nvidia-smi shows for these models (23034 MiB
    # for an L4, 46068 for an L40S), where used + free alone falls 470 and 608 MiB short
    for name, used, total in (("dcgm_t4_scrape.prom", 5120, 5120 + 9791 + 447),
                              ("dcgm_l4_scrape.prom", 0, 22563 + 470),
                              ("dcgm_l40s_scrape.prom", 0, 45459 + 608)):
        reading = reading_of(telemetry_data / name)
        v = values(reading)
        assert (v["mem_used_mib"], v["mem_total_mib"], reading.device.mem_total_mib) == (used, total, total), name
    assert [values(reading_of(telemetry_data / n))["mem_total_mib"] for n in
            ("dcgm_t4_scrape.prom", "dcgm_l4_scrape.prom", "dcgm_l40s_scrape.prom")] == [15358, 23033, 46067]


def test_an_exporter_without_model_name_stores_an_explicit_unknown_or_the_label_that_names_it(telemetry_data):
    text = (telemetry_data / "dcgm_a100_mig_whole_and_instance.prom").read_text()  # exporter 2.x: no modelName
    [reading] = readings_from_metrics(parse_metrics(text), "fallback")
    assert reading.device.model == "unknown (dcgm-exporter)"

    relabelled = text.replace('Hostname="ub20-a100-k8s"', 'Hostname="ub20-a100-k8s",label_nvidia_com_gpu_product="A100-SXM4-40GB"')
    [reading] = readings_from_metrics(parse_metrics(relabelled), "fallback")
    assert reading.device.model == "A100-SXM4-40GB"


def test_mig_figures_come_from_the_whole_gpu_row_where_there_is_one(telemetry_data):
    reading = reading_of(telemetry_data / "dcgm_a100_mig_whole_and_instance.prom")
    v = values(reading)

    assert reading.device.uuid == "GPU-34319582-d595-d1c7-d1d2-179bcfa61660" and reading.device.index == 0
    # the whole GPU's 0.995630, not its mean with instance 13's 0.995687
    assert v["sm_active_pct"] == pytest.approx(99.5630, abs=1e-9)
    assert v["power_w"] == 409.692 and v["energy_j"] == pytest.approx(319159.391)
    assert (v["mem_used_mib"], v["mem_total_mib"], v["temp_c"], v["sm_clock_mhz"]) == (4845, 4845 + 35690, 61.0, 1215)


def test_mig_instances_alone_combine_power_once_and_activity_by_size():
    # dcgm-exporter 3.x+ on a MIG GPU: instance rows only, each repeating the GPU's power as read at its moment
    text = (
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-m",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1"} 250.0\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-m",GPU_I_PROFILE="1g.10gb",GPU_I_ID="9"} 254.0\n'
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-m",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1"} 0.8\n'
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-m",GPU_I_PROFILE="1g.10gb",GPU_I_ID="9"} 0.4\n'
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-m",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1"} 1000000\n'
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-m",GPU_I_PROFILE="1g.10gb",GPU_I_ID="9"} 1000250\n'
    )
    [reading] = readings_from_metrics(parse_metrics(text), "n")
    v = values(reading)

    assert v["power_w"] == 252.0  # one GPU's power, read twice: not 250 (first row), not 504 (a sum)
    assert v["energy_j"] == 1000.25  # the counter's latest reading
    assert v["sm_active_pct"] == pytest.approx(70.0)  # (0.8*3 + 0.4*1) / 4


def test_an_exporter_1x_scrape_with_lower_case_names_and_pod_labels_reads_the_same(telemetry_data):
    one = reading_of(telemetry_data / "dcgm1x_1gpu_node_exporter.prom")
    v = values(one)
    assert one.device.uuid == "GPU-8f640a3c-7e9a-608d-02a3-f4372d72b323" and one.device.model == "unknown (dcgm-exporter)"
    assert (v["power_w"], v["energy_j"], v["temp_c"], v["sm_clock_mhz"], v["util_pct"]) == (31.737, 7824.041, 34.0, 135, 0.0)

    two = readings_from_metrics(parse_metrics((telemetry_data / "dcgm1x_2gpu_pod.prom").read_text()), "node-7")
    assert [(r.device.index, r.device.node, values(r)["temp_c"]) for r in two] == [(0, "node-7", 33.0), (1, "node-7", 34.0)]
    assert [[h.holder for h in r.holders] for r in two] == [["pod:default/pod1"], ["pod:default/pod1"]]


def test_dcgm_blank_markers_are_no_value_not_a_reading():
    # DCGM prints its "not supported" markers as numbers (NVIDIA's dcgm-exporter page shows a
    # DCGM_FI_DEV_MEMORY_TEMP of 9223372036854775794); a GPU that reports no temperature or power
    # must not store one that large
    text = (
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-b"} 9223372036854775794\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-b"} 140737488355330\n'
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-b"} 2147483634\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-b"} 12\n'
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-b"} 2147483640\n'  # a counter passing by
    )
    [reading] = readings_from_metrics(parse_metrics(text), "n")
    v = values(reading)

    assert (v["temp_c"], v["power_w"], v["sm_clock_mhz"]) == (None, None, None)
    assert (v["util_pct"], v["energy_j"]) == (12.0, 2147483.64)


def test_tensor_activity_comes_from_the_real_l40s_scrape_and_health_changes_between_scrapes_are_events(
        telemetry_data):
    first = (telemetry_data / "dcgm_l40s_scrape.prom").read_text()
    # The same exporter a scrape later: two rows remapped for uncorrectable errors, the remapping failed, and an
    # XID 79 (written as the exporter writes its other lines, with the same labels).
    labels = first.split("DCGM_FI_DEV_ROW_REMAP_FAILURE{", 1)[1].split("}", 1)[0]
    later = (first.replace("DCGM_FI_DEV_ROW_REMAP_FAILURE{" + labels + "} 0",
                           "DCGM_FI_DEV_ROW_REMAP_FAILURE{" + labels + "} 1")
             .replace("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{" + labels + "} 0",
                      "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{" + labels + "} 2")
             + "DCGM_FI_DEV_XID_ERRORS{" + labels + "} 79\n")
    scrapes = iter([first, later])
    source = DcgmSource("http://unused", fetch=lambda: next(scrapes))

    [reading] = source.read(TS)
    v = values(reading)
    assert v["tensor_active_pct"] == 0.0, "reported as idle, not missing"
    assert v["sm_occupancy_pct"] is None and v["module_power_w"] is None and v["power_limit_w"] is None
    assert reading.events == (), "a healthy GPU at the first scrape"

    [reading] = source.read(TS)
    assert reading.events == (
        ("xid", 79, "XID 79", True),
        ("row_remap_failure", 1, "a row remapping failed: the GPU needs service", True),
        ("rows_remapped", 2, "2 more rows remapped for uncorrectable errors", False),
    )
    # A saved scrape read on its own (an import) has no previous scrape: no events.
    assert readings_from_metrics(parse_metrics(later), "n")[0].events == ()
