"""Scrape an existing dcgm-exporter endpoint (Prometheus text format), or read a saved scrape.

Fields: DCGM_FI_DEV_GPU_UTIL (%), DCGM_FI_DEV_MEM_COPY_UTIL (%),
DCGM_FI_DEV_POWER_USAGE (W), DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ -> J),
DCGM_FI_DEV_FB_USED / FB_FREE / FB_RESERVED (MiB; the total is their sum, the
size NVML reports), DCGM_FI_DEV_GPU_TEMP (C), DCGM_FI_DEV_SM_CLOCK (MHz),
DCGM_FI_PROF_SM_ACTIVE (ratio -> %), else DCGM_FI_PROF_GR_ENGINE_ACTIVE
(ratio -> %); dcgm-exporter 1.x's lower-case names (dcgm_power_usage{uuid=...})
mean the same; DCGM's blank markers (9223372036854775794 for a temperature
the GPU does not report) are no value. Newer GPUs' figures where the exporter is set to send them: DCGM_FI_PROF_PIPE_TENSOR_ACTIVE and
DCGM_FI_PROF_SM_OCCUPANCY (ratios -> %), DCGM_FI_PROF_NVLINK_TX_BYTES / RX_BYTES (bytes per second),
DCGM_FI_DEV_CLOCKS_EVENT_REASONS (or the older DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, NVML's bitmask),
DCGM_FI_DEV_POWER_MGMT_LIMIT (W). Health, as events against the previous scrape (the running source only:
a saved file has no previous scrape): DCGM_FI_DEV_XID_ERRORS (the last XID; a new value is an event),
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL (uncorrected ECC errors), DCGM_FI_DEV_ROW_REMAP_FAILURE and
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, judged critical as the NVML source judges them.
Labels give UUID, gpu (index), the model (modelName; exporters
1.x/2.x send none, then another label that names it, else an explicit
unknown), Hostname, and pod/namespace of the workload holding a GPU.

MIG: rows carrying GPU_I_ID belong to one GPU instance; a row without it is
the whole GPU. Each UUID is one physical GPU, one device. A figure the
whole-GPU row has is taken from it. Otherwise it is combined from the
instance rows by what it means: power, temperature and clock are the GPU's own,
repeated on every instance row (read at slightly different moments), so their
mean, counted once; the energy counter the highest reading; memory the sum of
the instances' memory; utilization and activity the mean over the instances
weighted by their compute slices ("3g.40gb" -> 3).
"""

import logging
import re
import urllib.request

from ..batch import DeviceInfo, Holder, Reading
from .base import CRITICAL_XIDS, node_name

log = logging.getLogger("collector.agent")

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SLICES = re.compile(r"^(\d+)g\.")

UNKNOWN_MODEL = "unknown (dcgm-exporter)"
# Labels that name the model, in the order they are tried: exporters before 3.x
# send no modelName; Kubernetes relabelling often carries the GPU product.
MODEL_LABELS = ("modelName", "model_name", "gpu_model", "model", "product",
                "label_nvidia_com_gpu_product", "nvidia_com_gpu_product")

_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
# dcgm-exporter 1.x (gpu-monitoring-tools) named the same fields in lower case, its labels too.
_LEGACY_NAMES = {
    "dcgm_gpu_utilization": "DCGM_FI_DEV_GPU_UTIL",
    "dcgm_mem_copy_utilization": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "dcgm_power_usage": "DCGM_FI_DEV_POWER_USAGE",
    "dcgm_total_energy_consumption": _ENERGY,
    "dcgm_fb_used": "DCGM_FI_DEV_FB_USED",
    "dcgm_fb_free": "DCGM_FI_DEV_FB_FREE",
    "dcgm_gpu_temp": "DCGM_FI_DEV_GPU_TEMP",
    "dcgm_sm_clock": "DCGM_FI_DEV_SM_CLOCK",
}
_LEGACY_LABELS = {"uuid": "UUID", "pod_name": "pod", "pod_namespace": "namespace"}
# DCGM's "no value" markers (DCGM_INT32_BLANK, DCGM_FP64_BLANK and the codes just above them:
# not found, not supported, no permission), which an exporter may print as if they were readings.
_BLANKS = ((0x7FFFFFF0, 0x80000000), (140737488355328.0, 140737488355344.0))
_INT64_BLANK = 9.2e18  # DCGM_INT64_BLANK is 0x7ffffffffffffff0; as a float, beyond any reading


def _blank(name, value):
    if value >= _INT64_BLANK:
        return True
    # the energy counter is an int64 that passes through the int32 markers' range as it counts
    return name != _ENERGY and any(lo <= value < hi for lo, hi in _BLANKS)


def parse_metrics(text):
    """Parse Prometheus text exposition; return [(name, labels dict, float value)]."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name, labels, value = m.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        parsed = {k: _unescape(v) for k, v in _LABEL.findall(labels or "")}
        out.append((name, parsed, number))
    return out


def _unescape(value):
    return value.replace(r"\"", '"').replace(r"\n", "\n").replace("\\\\", "\\")


def readings_from_metrics(metrics, default_node, health=None):
    """Group parsed metrics by GPU UUID into Readings (one per physical GPU). `health` ({uuid: last figures},
    kept by the caller between scrapes) turns changes in the health figures into the readings' events."""
    gpus = {}  # uuid -> {"labels", "whole": {name: value}, "instances": {id: {name: value}}, "holders"}
    for name, labels, value in metrics:
        if name in _LEGACY_NAMES:
            name = _LEGACY_NAMES[name]
            labels = {_LEGACY_LABELS.get(k, k): v for k, v in labels.items()}
        uuid = labels.get("UUID")
        if not uuid or not name.startswith("DCGM_FI_") or _blank(name, value):
            continue
        gpu = gpus.setdefault(uuid, {"labels": dict(labels), "whole": {}, "instances": {}, "holders": {}})
        for key in MODEL_LABELS:  # a later row may name the model the first did not
            if labels.get(key) and not any(gpu["labels"].get(k) for k in MODEL_LABELS):
                gpu["labels"][key] = labels[key]
        instance = labels.get("GPU_I_ID")
        if instance is None or instance == "":
            gpu["whole"].setdefault(name, value)
        else:
            part = gpu["instances"].setdefault(instance, {"profile": labels.get("GPU_I_PROFILE", "")})
            part.setdefault(name, value)
        if labels.get("pod"):
            key = f"pod:{labels.get('namespace', '')}/{labels['pod']}"
            gpu["holders"][key] = Holder(holder=key)
    readings = []
    for uuid, gpu in gpus.items():
        labels = gpu["labels"]
        figure = _Figures(gpu["whole"], list(gpu["instances"].values()))
        sm = figure.activity("DCGM_FI_PROF_SM_ACTIVE")
        if sm is None:
            sm = figure.activity("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        used = figure.memory("DCGM_FI_DEV_FB_USED")
        free = figure.memory("DCGM_FI_DEV_FB_FREE")
        reserved = figure.memory("DCGM_FI_DEV_FB_RESERVED") or 0
        total = None if used is None or free is None else int(used + free + reserved)
        energy_mj = figure.energy_mj()
        clock = figure.per_gpu("DCGM_FI_DEV_SM_CLOCK")
        info = DeviceInfo(
            uuid=uuid,
            node=labels.get("Hostname") or default_node,
            index=int(labels.get("gpu", 0) or 0),
            model=next((labels[k] for k in MODEL_LABELS if labels.get(k)), UNKNOWN_MODEL),
            source="dcgm",
            mem_total_mib=total,
        )
        values = (
            figure.activity("DCGM_FI_DEV_GPU_UTIL"),
            figure.activity("DCGM_FI_DEV_MEM_COPY_UTIL"),
            figure.per_gpu("DCGM_FI_DEV_POWER_USAGE"),
            None if energy_mj is None else energy_mj / 1000.0,
            None if used is None else int(used),
            total,
            figure.per_gpu("DCGM_FI_DEV_GPU_TEMP"),
            None if clock is None else int(round(clock)),
            None if sm is None else sm * 100.0,
            None,  # module power, memory power and module energy: dcgm-exporter sends none of them
            None,
            None,
            _percent(figure.activity("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")),
            _percent(figure.activity("DCGM_FI_PROF_SM_OCCUPANCY")),
            figure.per_gpu("DCGM_FI_PROF_NVLINK_TX_BYTES"),
            figure.per_gpu("DCGM_FI_PROF_NVLINK_RX_BYTES"),
            _int(figure.per_gpu("DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
                 if figure.per_gpu("DCGM_FI_DEV_CLOCKS_EVENT_REASONS") is not None
                 else figure.per_gpu("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")),
            figure.per_gpu("DCGM_FI_DEV_POWER_MGMT_LIMIT"),
        )
        events = () if health is None else _health_events(uuid, figure, health)
        readings.append(Reading(info, values, tuple(gpu["holders"].values()), events))
    readings.sort(key=lambda r: (r.device.node, r.device.index))
    return readings


def _percent(ratio):
    return None if ratio is None else ratio * 100.0


def _int(value):
    return None if value is None else int(value)


def _health_events(uuid, figure, health):
    """Events for what changed in a GPU's health figures since the previous scrape (its first: what is there)."""
    now = {"xid": figure.per_gpu("DCGM_FI_DEV_XID_ERRORS"), "ecc": figure.per_gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
           "failure": figure.per_gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE"),
           "rows": figure.per_gpu("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")}
    before = health.get(uuid, {})
    events = []
    if now["xid"] and now["xid"] != before.get("xid"):
        xid = int(now["xid"])
        events.append(("xid", xid, f"XID {xid}", xid in CRITICAL_XIDS))
    if now["ecc"] and now["ecc"] > (before.get("ecc") or 0):
        ecc = int(now["ecc"])
        events.append(("ecc_uncorrected", ecc, f"{ecc - int(before.get('ecc') or 0)} more uncorrected ECC errors "
                                               f"({ecc} since the driver loaded)", True))
    if now["failure"] and not before.get("failure"):
        events.append(("row_remap_failure", 1, "a row remapping failed: the GPU needs service", True))
    if now["rows"] and now["rows"] > (before.get("rows") or 0):
        rows = int(now["rows"])
        events.append(("rows_remapped", rows, f"{rows - int(before.get('rows') or 0)} more rows remapped for "
                                              "uncorrectable errors", False))
    health[uuid] = {k: v if v is not None else before.get(k) for k, v in now.items()}
    return tuple(events)


class _Figures:
    """One physical GPU's figures: from its whole-GPU row where it has one, else combined from its MIG instances."""

    def __init__(self, whole, instances):
        self.whole = whole
        self.instances = instances

    def per_gpu(self, name):
        if name in self.whole:
            return self.whole[name]
        values = [p[name] for p in self.instances if name in p]
        return sum(values) / len(values) if values else None

    def energy_mj(self):
        if _ENERGY in self.whole:
            return self.whole[_ENERGY]
        values = [p[_ENERGY] for p in self.instances if _ENERGY in p]
        return max(values) if values else None  # a counter: the latest reading is the highest

    def memory(self, name):
        if name in self.whole:
            return self.whole[name]
        values = [p[name] for p in self.instances if name in p]
        return sum(values) if values else None

    def activity(self, name):
        if name in self.whole:
            return self.whole[name]
        total, weight = 0.0, 0
        for part in self.instances:
            if name in part:
                m = _SLICES.match(part["profile"])
                w = int(m.group(1)) if m else 1
                total += part[name] * w
                weight += w
        return total / weight if weight else None


class DcgmSource:
    name = "dcgm"

    def __init__(self, url, node=None, timeout_s=2.0, fetch=None):
        self.url = url
        self.node = node or _default_node()
        self.timeout_s = timeout_s
        self.fetch = fetch or self._fetch
        self._failing = False
        self.health = {}  # uuid -> the health figures of its last scrape

    def _fetch(self):
        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as response:
            return response.read().decode("utf-8", "replace")

    def read(self, ts):
        try:
            text = self.fetch()
        except OSError as exc:
            if not self._failing:
                log.error("dcgm-exporter at %s does not answer (%s); retrying every tick", self.url, exc)
            self._failing = True
            return []
        if self._failing:
            log.info("dcgm-exporter at %s answers again", self.url)
            self._failing = False
        return readings_from_metrics(parse_metrics(text), self.node, self.health)

    def close(self):
        pass


def _default_node():
    return node_name()
