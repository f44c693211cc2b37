"""Scrape an existing dcgm-exporter endpoint (Prometheus text format).

Fields: DCGM_FI_DEV_GPU_UTIL (%), DCGM_FI_DEV_MEM_COPY_UTIL (%),
DCGM_FI_DEV_POWER_USAGE (W), DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ -> J),
DCGM_FI_DEV_FB_USED / FB_FREE (MiB), DCGM_FI_DEV_GPU_TEMP (C),
DCGM_FI_DEV_SM_CLOCK (MHz), DCGM_FI_PROF_SM_ACTIVE (ratio -> %), else
DCGM_FI_PROF_GR_ENGINE_ACTIVE (ratio -> %). Labels give UUID, gpu (index),
modelName, Hostname, and pod/namespace of the workload holding a GPU.

MIG instances of one GPU repeat the physical GPU's power and energy: each
UUID is one device, its power and energy taken once; utilization is the
mean over its instances weighted by their compute slices ("3g.40gb" -> 3).
"""

import logging
import re
import urllib.request

from ..batch import DeviceInfo, Holder, Reading

log = logging.getLogger("collector.agent")

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SLICES = re.compile(r"^(\d+)g\.")

# Fields shared by every MIG instance of a GPU: take them once.
_PER_GPU = {
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
}


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


def readings_from_metrics(metrics, default_node):
    """Group parsed metrics by GPU UUID into Readings (one per physical GPU)."""
    gpus = {}  # uuid -> {"labels":..., "fields": {name: value}, "parts": {instance: {name: value}}, "holders": set}
    for name, labels, value in metrics:
        uuid = labels.get("UUID")
        if not uuid or not name.startswith("DCGM_FI_"):
            continue
        gpu = gpus.setdefault(uuid, {"labels": labels, "fields": {}, "parts": {}, "holders": {}})
        instance = labels.get("GPU_I_ID", "")
        if name in _PER_GPU:
            gpu["fields"].setdefault(name, value)
        else:
            gpu["parts"].setdefault(instance, {"profile": labels.get("GPU_I_PROFILE", "")})[name] = value
        if labels.get("pod"):
            key = f"pod:{labels.get('namespace', '')}/{labels['pod']}"
            gpu["holders"][key] = Holder(holder=key)
    readings = []
    for uuid, gpu in gpus.items():
        labels, fields, parts = gpu["labels"], gpu["fields"], list(gpu["parts"].values())
        util = _weighted(parts, "DCGM_FI_DEV_GPU_UTIL")
        sm = _weighted(parts, "DCGM_FI_PROF_SM_ACTIVE")
        if sm is None:
            sm = _weighted(parts, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        used = _sum(parts, "DCGM_FI_DEV_FB_USED")
        free = _sum(parts, "DCGM_FI_DEV_FB_FREE")
        total = None if used is None or free is None else int(used + free)
        energy_mj = fields.get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        info = DeviceInfo(
            uuid=uuid,
            node=labels.get("Hostname") or default_node,
            index=int(labels.get("gpu", 0)),
            model=labels.get("modelName", ""),
            source="dcgm",
            mem_total_mib=total,
        )
        values = (
            util,
            _weighted(parts, "DCGM_FI_DEV_MEM_COPY_UTIL"),
            fields.get("DCGM_FI_DEV_POWER_USAGE"),
            None if energy_mj is None else energy_mj / 1000.0,
            None if used is None else int(used),
            total,
            fields.get("DCGM_FI_DEV_GPU_TEMP"),
            None if "DCGM_FI_DEV_SM_CLOCK" not in fields else int(fields["DCGM_FI_DEV_SM_CLOCK"]),
            None if sm is None else sm * 100.0,
        )
        readings.append(Reading(info, values, tuple(gpu["holders"].values())))
    readings.sort(key=lambda r: (r.device.node, r.device.index))
    return readings


def _weighted(parts, name):
    total, weight = 0.0, 0
    for part in parts:
        if name in part:
            m = _SLICES.match(part["profile"])
            w = int(m.group(1)) if m else 1
            total += part[name] * w
            weight += w
    return total / weight if weight else None


def _sum(parts, name):
    values = [p[name] for p in parts if name in p]
    return sum(values) if values else None


class DcgmSource:
    name = "dcgm"

    def __init__(self, url, node=None, timeout_s=2.0, fetch=None):
        self.url = url
        self.node = node or _hostname()
        self.timeout_s = timeout_s
        self.fetch = fetch or self._fetch
        self._failing = False

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
        return readings_from_metrics(parse_metrics(text), self.node)

    def close(self):
        pass


def _hostname():
    import socket

    return socket.gethostname()
