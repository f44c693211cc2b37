"""Read logs written by `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] [-l N | -lms N]`.

Columns: the header decides them, in any subset and order; a log written with
`noheader` needs them given (`columns`, the list the user gave --query-gpu). A
header is read tolerantly: case, spacing, `_` for `.`, and the unit in
brackets with or without a space or as the last word (`memory.used [MiB]`,
`memory.used[MiB]`, `memory_used_mib`, `gpu_utilization[%]`) all name the same
column. Columns that name no stored figure are listed in
`SmiLog.unused_columns`; a log with no metric column at all is refused.

Values: units come from the header or the values (`250.00 W`, `754 MiB`);
`[N/A]`, `[Not Supported]`, `[Unknown Error]` and `[GPU is Lost]` become
empty. A header repeated mid-file is skipped; a last line without its line end
(a log cut off while nvidia-smi was writing it) is skipped, since its last
value may be cut short. A byte-order mark and CRLF line ends are accepted.

Devices: rows split into devices by the first of `uuid`, `index`, `pci.bus_id`,
`gpu` that can tell GPUs apart (a column with one value on every row
cannot, when a timestamp has several rows); one device when none can. `name`
gives the model, else the `model` argument, else an explicit unknown.

Time: nvidia-smi prints local time without a zone, read in `tz` (UTC unless
told); an ISO 8601 timestamp with an offset (`2025-09-08T17:26:50+08:00`)
keeps its own offset. Energy: nvidia-smi has no energy counter column, so the
rows' `energy_j` stays empty and the rollups integrate `power.draw` over time
(trapezoid), labelling that energy `power`, not `counter`.
"""

import csv
import re
import uuid as uuidlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

from . import schema
from .batch import DeviceInfo

UNKNOWN_MODEL = "unknown (nvidia-smi log)"

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
# Names people write in hand-made headers for the query fields above.
ALIASES = {
    "gpu.utilization": "utilization.gpu",
    "gpu.util": "utilization.gpu",
    "util.gpu": "utilization.gpu",
    "memory.utilization": "utilization.memory",
    "mem.util": "utilization.memory",
    "util.memory": "utilization.memory",
    "utilization.mem": "utilization.memory",
    "mem.used": "memory.used",
    "mem.total": "memory.total",
    "temperature": "temperature.gpu",
    "temp": "temperature.gpu",
    "gpu.temp": "temperature.gpu",
    "power": "power.draw",
    "gpu.uuid": "uuid",
    "gpu.name": "name",
    "gpu.id": "gpu",
    "gpu.index": "index",
    "gpu.bus.id": "pci.bus_id",
    "pci.bus.id": "pci.bus_id",
}
# Columns that identify a device, in the order they are tried.
_KEYS = ("uuid", "index", "pci.bus_id", "gpu")
_IDENTITY = {"timestamp", "name", *_KEYS}
_POWER_ORDER = ("power.draw", "power.draw.average", "power.draw.instant")
_INT_FIELDS = {"mem_used_mib", "mem_total_mib", "sm_clock_mhz"}
# What nvidia-smi prints where it has no value (lower case).
_EMPTY = {"", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "unknown error",
          "[gpu is lost]", "[insufficient permissions]", "[gpu requires reset]"}
_TS_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")
_MEM_SCALE = {"mib": 1.0, "gib": 1024.0, "kib": 1 / 1024.0, "b": 1 / 2**20, "mb": 1.0, "gb": 1024.0}
_UNIT = re.compile(r"^(.*?)\s*[\[(]([^\])]*)[\])]\s*$")
# Units written as a header's last word (memory_used_mib, power_draw_w), and what they mean.
_SUFFIX_UNITS = {"pct": "%", "percent": "%", "mib": "mib", "mb": "mib", "gib": "gib", "w": "w", "watts": "w",
                 "c": "c", "celsius": "c", "mhz": "mhz"}


class SmiFormatError(ValueError):
    pass


@dataclass
class SmiLog:
    devices: list  # [DeviceInfo]
    rows: list  # sample rows (uuid, ts, *values), per device in time order
    skipped: Counter = field(default_factory=Counter)  # reason -> rows
    empty_values: Counter = field(default_factory=Counter)  # column -> values left empty
    unused_columns: list = field(default_factory=list)  # header cells that name no stored figure
    device_key: str | None = None  # the column that split the rows into devices


def parse_columns(text):
    """Split a --columns value ("timestamp,name,utilization.gpu [%]") into header cells."""
    return [c.strip() for c in next(csv.reader([text]), []) if c.strip()]


def read_smi_log(lines, node, model=None, tz=timezone.utc, columns=None):
    """Parse the lines of an nvidia-smi CSV log into devices and sample rows.

    `columns`: the header cells of a log written with `noheader` (its first
    line is then data). Raise SmiFormatError saying what to do when the log
    cannot be read: no header, no timestamp column, no metric column.
    """
    log = SmiLog(devices=[], rows=[])
    reader = csv.reader(_complete_lines(lines, log), skipinitialspace=True)
    first = next((r for r in reader if any(c.strip() for c in r)), None)
    if first is None:
        raise SmiFormatError("the file is empty; expected an nvidia-smi --format=csv log")
    first = [c.strip() for c in first]
    pending = []
    if columns:
        header = list(columns)
        if _canonical(first) == _canonical(header):
            pass  # the log has the same header: nothing to put back
        elif _timestamp(first[0], tz) is None and _name(first[0]) == "timestamp":
            raise SmiFormatError(
                f"the file has its own header ({', '.join(first)}), which differs from --columns; "
                "leave out --columns to use the file's header"
            )
        else:
            pending.append(first)
    else:
        header = first
        if _is_data(first, tz):
            raise SmiFormatError(
                f"the first line is data, not a header ({', '.join(first[:3])}, ...): a log written with "
                '--format=csv,noheader; give its columns with --columns "timestamp,name,..." '
                "(the list given to --query-gpu, which must include timestamp)"
            )
    names = [_name(h) for h in header]
    units = [_unit(h) for h in header]
    if "timestamp" not in names:
        raise SmiFormatError(
            f"no timestamp column among {', '.join(header)}; log with --query-gpu=timestamp,... "
            'so rows can be placed in time, or name the columns with --columns "timestamp,..."'
        )
    col = {n: i for i, n in reversed(list(enumerate(names)))}
    power = next((p for p in _POWER_ORDER if p in col), None)
    mapped = [(col[q], f, units[col[q]]) for q, f in FIELDS.items() if q in col and (f != "power_w" or q == power)]
    if not mapped:
        raise SmiFormatError(
            f"none of the columns ({', '.join(header)}) is a figure Yardstick stores; it reads "
            f"{', '.join(sorted(FIELDS))} (units in brackets optional), so nothing would be imported"
        )
    used = {i for i, _, _ in mapped}
    t_col = col["timestamp"]

    parsed = []  # (ts, cells)
    for row in _with_pending(pending, reader):
        cells = [c.strip() for c in row]
        if not any(cells):
            continue
        if _canonical(cells) == _canonical(header) or _name(cells[0]) == "timestamp":
            log.skipped["repeated header"] += 1
            continue
        if len(cells) != len(header):
            log.skipped[f"wrong number of columns (expected {len(header)})"] += 1
            continue
        ts = _timestamp(cells[t_col], tz)
        if ts is None:
            log.skipped["unreadable timestamp"] += 1
            continue
        parsed.append((ts, cells))

    key_col = _device_key(parsed, col)
    log.device_key = None if key_col is None else header[key_col]
    identity = {col[n] for n in _IDENTITY if n in col and (n not in _KEYS or col[n] == key_col)}
    log.unused_columns = [h for i, h in enumerate(header) if i not in used and i not in identity]

    out_index = {f: i for i, f in enumerate(schema.SAMPLE_FIELDS)}
    per_device = {}  # key -> (DeviceInfo, [rows])
    seen = set()
    for ts, cells in parsed:
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
            per_device[key] = (_device(node, key, len(per_device), cells, col, key_col, model), [])
        info = per_device[key][0]
        per_device[key][1].append([info.uuid, ts, *values])
    for info, rows in per_device.values():
        rows.sort(key=lambda r: r[1])
        log.devices.append(info)
        log.rows.extend(tuple(r) for r in rows)
    return log


def _is_data(cells, tz):
    """True when a first line is a row of values: a time in it, or values where names would be."""
    if any(_timestamp(c, tz) is not None for c in cells):
        return True
    return all(c[:1].isdigit() or c[:1] in "[-" or c.lower() in _EMPTY for c in cells)


def _complete_lines(lines, log):
    """Yield the lines, without a byte-order mark, leaving out a last line that has no line end."""
    previous = None
    for line in lines:
        if previous is None and line.startswith("\ufeff"):
            line = line[1:]
        if previous is not None:
            yield previous
        previous = line
    if previous is not None:
        if previous.endswith(("\n", "\r")) or not previous.strip():
            yield previous
        else:
            log.skipped["last line cut off (no line end: the log was still being written)"] += 1


def _with_pending(pending, reader):
    yield from pending
    yield from reader


def _device_key(parsed, col):
    """The column index that tells the GPUs apart, or None when no column can."""
    several = len({ts for ts, _ in parsed}) < len(parsed)  # some timestamp has several rows
    for name in _KEYS:
        if name not in col:
            continue
        i = col[name]
        if several and len({cells[i] for _, cells in parsed}) == 1:
            continue  # one value on every row: not what tells these GPUs apart
        return i
    return None


def _device(node, key, order, cells, col, key_col, model):
    if key_col is not None and key_col == col.get("uuid") and cells[key_col]:
        uuid = cells[key_col]
    else:
        uuid = "SMI-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{node}/{key}"))
    if key_col is not None and key_col in (col.get("index"), col.get("gpu")) and key.isdigit():
        index = int(key)
    elif key_col is not None and "index" in col and cells[col["index"]].isdigit():
        index = int(cells[col["index"]])
    else:
        index = order  # in the order the log first names them
    total = None
    if "memory.total" in col:
        value = _number(cells[col["memory.total"]], "mib", "mem_total_mib")
        total = None if value is _BAD else value
    name = cells[col["name"]] if "name" in col else ""
    if name.lower() in _EMPTY:
        name = ""
    return DeviceInfo(
        uuid=uuid,
        node=node,
        index=index,
        model=name or model or UNKNOWN_MODEL,
        source="smi",
        mem_total_mib=total,
    )


def _column(cell):
    """(query field, unit) a header cell names: 'Memory.Used[MiB]' -> ('memory.used', 'mib'),
    'gpu_utilization' -> ('utilization.gpu', ''), 'power_draw_w' -> ('power.draw', 'w')."""
    m = _UNIT.match(cell.strip())
    name = (m.group(1) if m else cell).strip().lower()
    unit = m.group(2).strip().lower() if m else ""
    name = re.sub(r"[\s_\-]+", ".", name).strip(".")
    head, _, last = name.rpartition(".")
    if head and last in _SUFFIX_UNITS and not unit:  # a unit written as the name's last word
        name, unit = head, _SUFFIX_UNITS[last]
    return ALIASES.get(name, name), unit


def _name(cell):
    return _column(cell)[0]


def _unit(cell):
    return _column(cell)[1]


def _canonical(cells):
    return [_name(c) for c in cells]


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
    """An aware UTC datetime for nvidia-smi's local time (read in `tz`) or an ISO 8601 time; None when unreadable."""
    for fmt in _TS_FORMATS:
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=tz).astimezone(timezone.utc)
        except ValueError:
            continue
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        return None
    if ts.tzinfo is None:  # no offset in the data: local time, as nvidia-smi's own
        ts = ts.replace(tzinfo=tz)
    return ts.astimezone(timezone.utc)
