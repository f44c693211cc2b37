"""The fleet as its page draws it: a layout, and four small numbers per device, for every viewer at once.

The fleet page shows every device as a heatmap cell (or a group of them), counts them in the cards and
lists the ones a person acts on. What that takes per device is small: its utilization (a byte), its
state (busy, idle or stale, and whether it is unhealthy or throttled: a few bits), its power (watts in
a short) and how old its newest sample is. Everything else a device has (its node, index, model,
labels, flags) changes only when the fleet does, and goes once as the *layout*.

- `read_layout()`: the nodes and devices in the page's order (node name, device index), one query, kept
  while the fleet's layout generation stays.
- `read_values(layout)`: each device's newest sample, narrowed to the few fields the page draws, in
  one query of `telemetry_latest` (one row per device, whatever the history) packed into one binary value
  that numpy reads whole.
- `compute(layout, values, now_us, unhealthy, prices)`: the `Frame` of a moment: the per-device
  arrays (numpy, in layout order), the cards (busy, idle, stale, unhealthy, power, burn rate) and
  per-node figures for the node table. The page's render, the live frames and the exporter all
  take their figures from here: one rule for each.
- `layout_event`, `encode`: the WebSocket payloads (docs/architecture.md, "Live fleet frames"):
  the layout as a JSON text event, a frame's arrays as a binary message, whole ("S", a snapshot)
  or only the devices that changed since another frame ("D", a delta).

Rounding, once, here: utilization to a whole percent, power to a whole watt (numpy's rint: half to
even). The node table's "Util now" is the mean of its reporting devices' whole percents, rounded half
up; its "Power now" the sum of their whole watts; the cards' fleet power the unrounded sum
(docs/figures.md).
"""

import hashlib
import json
import struct
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal
from functools import cached_property

import numpy as np
from django.db import connection

from collector import store
from collector.agent.schema import THROTTLE_MASK
from collector.models import Device, Node
from costs.prices import model_key

# State bits of a device (the low two bits one of BUSY, IDLE, STALE).
BUSY, IDLE, STALE = 0, 1, 2
UNHEALTHY, THROTTLED = 4, 8
NO_UTIL = 255
NO_POWER = 65535
POWER_MAX = 65534  # watts a short holds (a device drawing more shows this)
NO_AGE = 65535
AGE_UNIT_US = 10_000  # a sample's age goes in hundredths of a second ...
AGE_MAX = 65534  # ... up to 655.34 s; older ones are named in the header's "old_ages"
MAGIC = b"YF1"
CENT = Decimal("0.01")


@dataclass
class Layout:
    """The fleet's nodes and devices in the page's order (node name, device index): position i is a device."""

    version: str
    node_ids: list
    node_names: list
    node_labels: list
    node_interval_s: np.ndarray  # float64 per node
    device_ids: np.ndarray  # int64 per position
    device_node: np.ndarray  # int32 per position: its node's position
    device_index: np.ndarray  # int32
    device_source: list
    device_model: np.ndarray  # int32 per position: an index into models
    device_flags: np.ndarray  # uint8: 1 simulated, 2 power estimated
    models: list
    position_of: dict = field(repr=False)  # device id -> position

    @property
    def size(self):
        return len(self.device_ids)

    @cached_property
    def id_order(self):
        """Positions in the order of their device ids (device_ids[id_order] is sorted)."""
        return np.argsort(self.device_ids, kind="stable")

    def label(self, position):
        return Device.label_for(self.device_source[position], int(self.device_index[position]))

    @cached_property
    def data_json(self):
        """`layout_data` as compact JSON text, made once per layout (megabytes at 100,000 devices)."""
        return json.dumps(layout_data(self), separators=(",", ":"))


_kept = {}  # database name -> (layout generation, Layout): this process's newest read


def read_layout():
    """The Layout as the database has it now: the one this process read last while the fleet's layout
    generation (collector.store.layout_generation, one row) is the same, else read again
    (collector.store.layout_rows: one query). The generation is read first, so a layout kept under it is
    never older than it."""
    generation = store.layout_generation()
    key = connection.settings_dict["NAME"]
    kept = _kept.get(key)
    if generation is not None and kept and kept[0] == generation:
        return kept[1]
    layout = layout_of(store.layout_rows())
    _kept[key] = (generation, layout)
    return layout


def layout_of(rows):
    """A Layout from rows of (node id, name, labels, interval_s, device id, index, model, source, simulated,
    power_estimated), nodes without devices carrying None for the device's."""
    node_ids, names, labels, intervals = [], [], [], []
    ids, nodes, indexes, sources, model_of, flags = [], [], [], [], [], []
    models = {}
    for node_id, name, node_labels, interval_s, dev_id, index, model, source, simulated, estimated in rows:
        if not node_ids or node_ids[-1] != node_id:
            node_ids.append(node_id)
            names.append(name)
            labels.append(json.loads(node_labels) if isinstance(node_labels, str) else (node_labels or {}))
            intervals.append(float(interval_s))
        if dev_id is None:
            continue
        ids.append(dev_id)
        nodes.append(len(node_ids) - 1)
        indexes.append(index)
        sources.append(source)
        model_of.append(models.setdefault(model or "", len(models)))
        flags.append((1 if simulated else 0) | (2 if estimated else 0))
    digest = hashlib.sha1(json.dumps([node_ids, names, labels, intervals, ids, indexes, sources, list(models),
                                      model_of, flags], separators=(",", ":")).encode()).hexdigest()[:12]
    return Layout(
        version=digest, node_ids=node_ids, node_names=names, node_labels=labels,
        node_interval_s=np.array(intervals, dtype=np.float64), device_ids=np.array(ids, dtype=np.int64),
        device_node=np.array(nodes, dtype=np.int32), device_index=np.array(indexes, dtype=np.int32),
        device_source=sources, device_model=np.array(model_of, dtype=np.int32),
        device_flags=np.array(flags, dtype=np.uint8), models=list(models),
        position_of={d: i for i, d in enumerate(ids)},
    )


@dataclass
class Values:
    """Each device's newest sample, narrowed to what the page draws (NaN, 0: none)."""

    ts_us: np.ndarray  # int64 microseconds since the epoch; 0 without a sample
    util_pct: np.ndarray  # float64
    power_w: np.ndarray  # float64
    reasons: np.ndarray  # int64 clock event reasons
    unknown: int = 0  # rows of devices the layout does not have (the fleet changed: read the layout again)


def read_values(layout):
    """Values of the layout's devices (collector.store.latest_values: one query, one value)."""
    rows = store.latest_values()
    return values_of_columns(layout, rows["device_id"], rows["ts_us"], rows["util_pct"], rows["power_w"],
                             rows["clock_event_reasons"])


def values_of(layout, rows):
    """Values from rows (any iterable) of (device id, ts in µs, util_pct, power_w, clock_event_reasons); a
    None util or power is no reading (NaN), a None reasons none (0)."""
    rows = list(rows)
    if not rows:
        return values_of_columns(layout, *([],) * 5)
    ids, ts_us, util, power, reasons = zip(*rows)
    return values_of_columns(layout, ids, ts_us, np.array(util, dtype=np.float64), np.array(power, dtype=np.float64),
                             [r or 0 for r in reasons])  # None: NaN in the float arrays


def values_of_columns(layout, ids, ts_us, util, power, reasons):
    """Values from columns of equal length, in any order: device ids, ts in µs, util_pct and power_w (NaN: none),
    clock event reasons; ids the layout has not are counted in `unknown`."""
    n = layout.size
    out = Values(np.zeros(n, np.int64), np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, np.int64))
    ids = np.asarray(ids, dtype=np.int64)
    if not len(ids):
        return out
    order = layout.id_order
    at = np.searchsorted(layout.device_ids[order], ids) if n else np.zeros(len(ids), np.int64)
    known = at < n
    known[known] = layout.device_ids[order[at[known]]] == ids[known]
    out.unknown = int(len(ids) - np.count_nonzero(known))
    where = order[at[known]]
    out.ts_us[where] = np.asarray(ts_us, dtype=np.int64)[known]
    out.util_pct[where] = np.asarray(util, dtype=np.float64)[known]
    out.power_w[where] = np.asarray(power, dtype=np.float64)[known]
    out.reasons[where] = np.asarray(reasons, dtype=np.int64)[known]
    return out


def epoch_us(moment):
    """A datetime as integer microseconds since the epoch (exact)."""
    return (moment - datetime(1970, 1, 1, tzinfo=timezone.utc)) // _US


_US = datetime.resolution  # one microsecond


class Prices:
    """The price of each of a layout's devices from a price book on a day: which entry (an index into
    `entries`, -1 for none) and the entries' hourly and energy prices."""

    def __init__(self, layout, book, day):
        self.entries, index_of = [], {}
        sources, source_code = np.unique(np.array(layout.device_source, dtype=str), return_inverse=True)
        width = max(len(sources), 1)
        kinds, kind_of = np.unique(layout.device_model.astype(np.int64) * width + source_code.reshape(-1),
                                   return_inverse=True)  # one kind per (model, source) the fleet has
        entry_of_kind = np.full(len(kinds), -1, dtype=np.int32)
        for k, kind in enumerate(kinds.tolist()):
            model, source = divmod(kind, width)
            price = book.price(model_key(layout.models[model], str(sources[source])), day)
            if price is not None:
                entry_of_kind[k] = index_of.setdefault(price.entry_id, len(self.entries))
                if entry_of_kind[k] == len(self.entries):
                    self.entries.append(price)
        self.per_device = entry_of_kind[kind_of.reshape(-1)]


@dataclass
class Frame:
    """The fleet at one moment: per-device arrays in layout order, the cards, per-node figures."""

    now_us: int
    ts_us: np.ndarray
    util: np.ndarray  # uint8 whole percent, NO_UTIL without a reading
    state: np.ndarray  # uint8 state bits
    power: np.ndarray  # uint16 whole watts, NO_POWER without a reading
    age: np.ndarray  # uint16 hundredths of a second, NO_AGE without a sample
    cards: dict
    power_w: np.ndarray = field(repr=False, default=None)  # float64, unrounded
    unhealthy: dict = field(default_factory=dict)  # position -> why ("XID 79 at 2026-12-01 10:00:00 UTC")


def compute(layout, values, now_us, unhealthy=(), prices=None):
    """The Frame of `values` at `now_us` (µs since the epoch), with the devices of `unhealthy` (ids) marked so
    and, given `prices` (Prices of this layout), the burn rate. The state rule is Device.state_of's and the
    stale rule Node.is_stale's, on whole arrays."""
    n = layout.size
    has = values.ts_us > 0
    age_us = np.where(has, now_us - values.ts_us, 0)
    limit_us = Node.STALE_INTERVALS * layout.node_interval_s[layout.device_node] * 1e6
    stale = ~has | (age_us > limit_us)
    known = ~np.isnan(values.util_pct)
    busy = ~stale & known & (values.util_pct >= Device.BUSY_UTIL_PCT)
    state = np.where(stale, STALE, np.where(busy, BUSY, IDLE)).astype(np.uint8)
    sick = np.zeros(n, dtype=bool)
    ids = [layout.position_of[d] for d in unhealthy if d in layout.position_of]
    sick[ids] = True
    why = {} if not isinstance(unhealthy, dict) else {
        layout.position_of[d]: f"{e.detail or e.kind} at {e.ts:%Y-%m-%d %H:%M:%S} UTC"
        for d, e in unhealthy.items() if d in layout.position_of}
    state |= np.where(sick, UNHEALTHY, 0).astype(np.uint8)
    state |= np.where(~stale & (values.reasons & THROTTLE_MASK != 0), THROTTLED, 0).astype(np.uint8)
    util = np.where(known, np.rint(np.clip(np.nan_to_num(values.util_pct), 0, 100)), NO_UTIL).astype(np.uint8)
    watts = ~np.isnan(values.power_w)
    power = np.where(watts, np.rint(np.clip(np.nan_to_num(values.power_w), 0, POWER_MAX)), NO_POWER).astype(np.uint16)
    age = np.where(has, np.clip(np.maximum(age_us, 0) // AGE_UNIT_US, 0, AGE_MAX), NO_AGE).astype(np.uint16)
    fresh = ~stale
    drawn = fresh & watts
    cards = {
        "busy": int(np.count_nonzero(busy)), "idle": int(np.count_nonzero(fresh & ~busy)),
        "stale": int(np.count_nonzero(stale)), "devices": n, "unhealthy": int(np.count_nonzero(sick)),
        # In layout order, one after another: the same float on every page that shows it.
        "power_kw": _in_order_sum(values.power_w[drawn]) / 1000,
    }
    if prices is not None:
        cards.update(_burn(prices, fresh, drawn, values.power_w))
    return Frame(now_us, values.ts_us, util, state, power, age, cards, values.power_w, why)


def _in_order_sum(array):
    """The sum of a float array added first to last (numpy's own sum adds pairwise, another float)."""
    return float(np.add.accumulate(array)[-1]) if len(array) else 0.0


def _burn(prices, fresh, drawn, power_w):
    """The fresh devices' burn rate: per price entry, its device-hour price for each of them plus their watts
    (summed in layout order) at its energy price x PUE; to the cent. Whether an example price was used or a
    fresh device had none."""
    priced = fresh & (prices.per_device >= 0)
    count = np.bincount(prices.per_device[priced], minlength=len(prices.entries))
    with_watts = drawn & (prices.per_device >= 0)
    watts = np.bincount(prices.per_device[with_watts], weights=power_w[with_watts], minlength=len(prices.entries))
    burn = Decimal(0)
    for k, price in enumerate(prices.entries):
        if count[k]:
            burn += price.usd_per_hour * int(count[k]) + Decimal(repr(float(watts[k]))) / 1000 * price.usd_per_kwh * price.pue
    used = [prices.entries[k] for k in range(len(prices.entries)) if count[k]]
    return {"burn_usd_per_h": burn.quantize(CENT, ROUND_HALF_UP),
            "example_prices": any(p.is_example for p in used),
            "unpriced": bool(np.count_nonzero(fresh & (prices.per_device < 0)))}


# -- per node ------------------------------------------------------------------------------------


def node_figures(layout, frame):
    """Per node (layout order): devices, reporting devices with a reading, the sum of their whole percents, the sum
    of their whole watts, its newest sample (µs, 0: none) and whether it is stale (Node.is_stale of the newest)."""
    nodes = len(layout.node_ids)
    fresh = (frame.state & 3) != STALE
    reading = fresh & (frame.util != NO_UTIL)
    drawing = fresh & (frame.power != NO_POWER)
    on = layout.device_node
    newest = np.zeros(nodes, dtype=np.int64)
    np.maximum.at(newest, on, frame.ts_us)
    limit_us = Node.STALE_INTERVALS * layout.node_interval_s * 1e6
    return {
        "devices": np.bincount(on, minlength=nodes),
        "reporting": np.bincount(on[reading], minlength=nodes),
        "util_sum": np.bincount(on[reading], weights=frame.util[reading], minlength=nodes).astype(np.int64),
        "power_w": np.bincount(on[drawing], weights=frame.power[drawing], minlength=nodes).astype(np.int64),
        "newest_us": newest,
        "stale": (newest == 0) | (frame.now_us - newest > limit_us),
    }


def util_mean(util_sum, reporting):
    """The mean of whole percents, rounded half up (as the page's script rounds it), or None for none."""
    return None if not reporting else (2 * int(util_sum) + int(reporting)) // (2 * int(reporting))


# -- the payloads --------------------------------------------------------------------------------


def layout_data(layout):
    """The layout as the page's script takes it (the page embeds it; `layout_event` sends it)."""
    return {
        "version": layout.version,
        "nodes": [[name, labels, interval] for name, labels, interval
                  in zip(layout.node_names, layout.node_labels, layout.node_interval_s.tolist())],
        "models": layout.models,
        "node": layout.device_node.tolist(), "index": layout.device_index.tolist(),
        "model": layout.device_model.tolist(), "flags": layout.device_flags.tolist(),
        "cpu": [i for i, s in enumerate(layout.device_source) if s == "host"],
    }


def layout_event(layout):
    """The layout as a JSON text event of topic "fleet", kind "layout"; its version is the text's first value
    (dashboard.broadcast.layout_version reads it there rather than parse megabytes)."""
    return '{"topic":"fleet","kind":"layout","data":' + layout.data_json + "}"



def frame_header(frame, layout, seq):
    """The header of a frame's binary message: seq, the layout's version, the moment (ISO and ms) and the cards."""
    cards = {**frame.cards}
    if "burn_usd_per_h" in cards:
        cards["burn_usd_per_h"] = str(cards["burn_usd_per_h"])
    moment = datetime.fromtimestamp(frame.now_us // 1_000_000, timezone.utc) + _US * (frame.now_us % 1_000_000)
    return {"seq": seq, "layout": layout.version, "ts": moment.isoformat(), "now_ms": frame.now_us // 1000,
            "cards": cards}


def changed(frame, before):
    """Which devices differ between two frames of one layout: a new sample, another state, utilization or power."""
    return ((frame.ts_us != before.ts_us) | (frame.state != before.state) | (frame.util != before.util)
            | (frame.power != before.power))


def encode(frame, header, mask=None, why=False):
    """A binary fleet message: b"YF1", "S" (every device) or "D" (those of `mask`), the header length (u32,
    little-endian), the header (JSON, padded to 4 bytes), for "D" the changed devices' bitmap (bit i of byte
    i // 8, least significant first), then per device shown: utilization u8, state u8, (padded to 2) power
    u16, age u16. `header` gets "n" (devices) and "m" (devices carried), "old_ages": {position: seconds}
    of carried devices whose sample is older than an age holds, and, in "S" or when `why` is true,
    "unhealthy": {position: why} of every unhealthy device."""
    pick = slice(None) if mask is None else mask
    util, state, power, age = frame.util[pick], frame.state[pick], frame.power[pick], frame.age[pick]
    old = np.flatnonzero(age == AGE_MAX)
    positions = old if mask is None else np.flatnonzero(mask)[old]
    ages = np.round((frame.now_us - frame.ts_us[positions]) / 1e6, 1)
    header = {**header, "n": len(frame.util), "m": len(util), "old_ages": dict(zip(positions.tolist(), ages.tolist()))}
    if mask is None or why:
        header["unhealthy"] = {int(p): text for p, text in frame.unhealthy.items()}
    head = json.dumps(header, separators=(",", ":"), default=str).encode()
    head += b" " * (-len(head) % 4)
    parts = [MAGIC, b"S" if mask is None else b"D", struct.pack("<I", len(head)), head]
    if mask is not None:
        parts.append(np.packbits(mask, bitorder="little").tobytes())
    parts += [util.tobytes(), state.tobytes()]
    size = sum(map(len, parts))
    parts.append(b"\0" * (size % 2))
    parts += [power.astype("<u2").tobytes(), age.astype("<u2").tobytes()]
    return b"".join(parts)


def decode(message):
    """(kind, header, {position: (util, state, power, age)}) of a message from `encode` (for tests and bench)."""
    if message[:3] != MAGIC:
        raise ValueError("not a fleet frame")
    kind = message[3:4].decode()
    (size,) = struct.unpack_from("<I", message, 4)
    header = json.loads(message[8:8 + size])
    offset, n, m = 8 + size, header["n"], header["m"]
    if kind == "D":
        bits = np.unpackbits(np.frombuffer(message, np.uint8, (n + 7) // 8, offset), bitorder="little")[:n]
        positions = np.flatnonzero(bits)
        offset += (n + 7) // 8
    else:
        positions = np.arange(n)
    util = np.frombuffer(message, np.uint8, m, offset)
    state = np.frombuffer(message, np.uint8, m, offset + m)
    offset += 2 * m
    offset += offset % 2
    power = np.frombuffer(message, "<u2", m, offset)
    age = np.frombuffer(message, "<u2", m, offset + 2 * m)
    rows = zip(positions.tolist(), util.tolist(), state.tolist(), power.tolist(), age.tolist())
    return kind, header, {p: (u, s, w, a) for p, u, s, w, a in rows}
