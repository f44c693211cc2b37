"""Read logs written by `nvidia-smi --query-gpu=... --format=csv [-l N | -lms N]`.

The header decides the columns, in any subset and order. Units come from the
header (`power.draw [W]`) or the values (`250.00 W`); `[N/A]` and
`[Not Supported]` become empty. A header repeated mid-file is skipped. Rows
split into devices by `uuid`, else `index`, else `pci.bus_id` (one device when
none is present); `name` gives the model, else the `model` argument.

nvidia-smi prints local time without a zone: timestamps are read in `tz`
(UTC unless told). Energy: nvidia-smi has no energy counter column, so the
rows' `energy_j` (a counter as reported) stays empty and the rollups integrate
`power.draw` over time (trapezoid), labelling that energy `power`, not `counter`.
"""

import csv
import uuid as uuidlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

from . import schema
from .batch import DeviceInfo

# Query field -> sample field. The first power column present wins, in this order.
FIELDS = {
    "utilization.gpu": "util_pct",
    "utilization.memory": "mem_util_pct",
    "power.draw": "power_w",
    "power.draw.average": "power_w",
    "power.draw.instant": "power_w",
    "memory.used": "mem_used_mib",
    "memory.total": "mem_total_mib",
    "temperature.gpu": "temp_c",
    "clocks.current.sm": "sm_clock_mhz",
    "clocks.sm": "sm_clock_mhz",
}
_POWER_ORDER = ("power.draw", "power.draw.average", "power.draw.instant")
_INT_FIELDS = {"mem_used_mib", "mem_total_mib", "sm_clock_mhz"}
_EMPTY = {"", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "[gpu is lost]"}
_TS_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")
_MEM_SCALE = {"mib": 1.0, "gib": 1024.0, "kib": 1 / 1024.0, "b": 1 / 2**20}


class SmiFormatError(ValueError):
    pass


@dataclass
class SmiLog:
    devices: list  # [DeviceInfo]
    rows: list  # sample rows (uuid, ts, *values), per device in time order
    skipped: Counter = field(default_factory=Counter)  # reason -> rows
    empty_values: Counter = field(default_factory=Counter)  # column -> values left empty


def read_smi_log(lines, node, model=None, tz=timezone.utc):
    """Parse the lines of an nvidia-smi CSV log into devices and sample rows."""
    reader = csv.reader(lines, skipinitialspace=True)
    header_row = next(reader, None)
    if not header_row:
        raise SmiFormatError("the file is empty; expected an nvidia-smi --format=csv log with a header line")
    header = [h.strip() for h in header_row]
    names = [h.split(" [")[0].strip().lower() for h in header]
    units = [h.split(" [", 1)[1].rstrip("]").strip().lower() if " [" in h else "" for h in header]
    if "timestamp" not in names:
        raise SmiFormatError(
            "the header has no timestamp column; log with --query-gpu=timestamp,... so rows can be placed in time"
        )
    col = {n: i for i, n in reversed(list(enumerate(names)))}
    t_col = col["timestamp"]
    key_col = next((col[k] for k in ("uuid", "index", "pci.bus_id") if k in col), None)
    name_col = col.get("name")
    power = next((p for p in _POWER_ORDER if p in col), None)
    mapped = [
        (col[q], f, units[col[q]])
        for q, f in FIELDS.items()
        if q in col and (f != "power_w" or q == power)
    ]
    out_index = {f: i for i, f in enumerate(schema.SAMPLE_FIELDS)}
    log = SmiLog(devices=[], rows=[])
    per_device = {}  # key -> (DeviceInfo, [rows])
    seen = set()
    for row in reader:
        cells = [c.strip() for c in row]
        if not any(cells):
            continue
        if [c.lower() for c in cells] == [h.lower() for h in header] or (cells and cells[0].lower() == "timestamp"):
            log.skipped["repeated header"] += 1
            continue
        if len(cells) != len(header):
            log.skipped[f"wrong number of columns (expected {len(header)})"] += 1
            continue
        ts = _timestamp(cells[t_col], tz)
        if ts is None:
            log.skipped["unreadable timestamp"] += 1
            continue
        key = cells[key_col] if key_col is not None else "0"
        if (key, ts) in seen:
            log.skipped["repeats the timestamp of an earlier row of the same device"] += 1
            continue
        seen.add((key, ts))
        values = [None] * len(schema.SAMPLE_FIELDS)
        for i, f, unit in mapped:
            value = _number(cells[i], unit, f)
            if value is _BAD:
                log.empty_values[header[i]] += 1
                continue
            values[out_index[f]] = value
        if key not in per_device:
            per_device[key] = (_device(node, key, names, cells, col, name_col, model), [])
        info = per_device[key][0]
        per_device[key][1].append([info.uuid, ts, *values])
    for info, rows in per_device.values():
        rows.sort(key=lambda r: r[1])
        log.devices.append(info)
        log.rows.extend(tuple(r) for r in rows)
    return log


def _device(node, key, names, cells, col, name_col, model):
    if "uuid" in col and cells[col["uuid"]]:
        uuid = cells[col["uuid"]]
    else:
        uuid = "SMI-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{node}/{key}"))
    if "index" in col and cells[col["index"]].isdigit():
        index = int(cells[col["index"]])
    else:
        index = int(key) if key.isdigit() else 0
    total = None
    if "memory.total" in col:
        value = _number(cells[col["memory.total"]], "mib", "mem_total_mib")
        total = None if value is _BAD else value
    return DeviceInfo(
        uuid=uuid,
        node=node,
        index=index,
        model=(cells[name_col] if name_col is not None else "") or model or "unknown (nvidia-smi log)",
        source="smi",
        mem_total_mib=total,
    )


_BAD = object()


def _number(text, unit, field_name):
    """Parse '250.00 W', '754 MiB', '16 %', '43'; None for N/A; _BAD for junk."""
    if text.lower() in _EMPTY:
        return None
    parts = text.split()
    try:
        number = float(parts[0])
    except (ValueError, IndexError):
        return _BAD
    suffix = (parts[1] if len(parts) > 1 else unit).lower()
    if field_name in ("mem_used_mib", "mem_total_mib"):
        number *= _MEM_SCALE.get(suffix, 1.0)
    elif field_name == "power_w" and suffix == "mw":
        number /= 1000.0
    if field_name in _INT_FIELDS:
        return int(round(number))
    return number


def _timestamp(text, tz):
    for fmt in _TS_FORMATS:
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=tz).astimezone(timezone.utc)
        except ValueError:
            continue
    return None
