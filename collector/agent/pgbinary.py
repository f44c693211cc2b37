"""PostgreSQL's binary array format, for sending many values as one parameter.

psycopg's list dumper encodes an array element by element in Python; these
build the same bytes with `array.array` (one C call for all the values) and
one slice assignment per byte of the element size. The writer sends the
newest row and the oldest ts of each device of a batch this way: one array of
rows of a composite type (`binary_records`), or one array per column
(`binary_array`). Register `BinaryArrayDumper` for `BinaryArray` on the cursor
and cast the parameter: `%b::int4[]`, `%b::telemetry_mark[]`.

Layout (PostgreSQL's array_send): a header of five big-endian int4 (dimensions,
has-nulls flag, element oid, length, lower bound), then each element as its
byte length (int4, -1 for NULL) and its bytes; a composite element is its
field count, then each field's oid, length and bytes.
"""

import array
import struct
import sys
from datetime import datetime, timedelta, timezone

from psycopg.adapt import Dumper
from psycopg.pq import Format


class BinaryArray(bytes):
    """A one-dimensional array in PostgreSQL's binary format; the SQL cast names its type."""


class BinaryArrayDumper(Dumper):
    format = Format.BINARY  # oid 0: the server takes the type from the `%b::type[]` cast

    def dump(self, obj):
        return obj


# Element oid and array-module code of the types the `_MARK` arrays carry.
ELEMENTS = {"int4": (23, "i"), "int8": (20, "q"), "float4": (700, "f"), "float8": (701, "d"),
            "timestamptz": (1184, "q")}
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
_US = timedelta(microseconds=1)
_HEADER = struct.Struct(">5i")  # dimensions, has-nulls flag, element oid, length, lower bound
_SWAP = sys.byteorder == "little"  # the wire is big-endian


def pack(values, pg_type):
    """`values` as big-endian bytes of the element type (no NULLs), or None when one is None or does not fit."""
    code = ELEMENTS[pg_type][1]
    try:
        if pg_type == "timestamptz":
            micros = {ts: (ts - _PG_EPOCH) // _US for ts in set(values)}
            values = list(map(micros.__getitem__, values))
        packed = array.array(code, values)
    except (TypeError, OverflowError):  # None among them (NULL), or out of range
        return None
    if _SWAP:
        packed.byteswap()
    return packed.tobytes()


def _interleave(body, offset, stride, raw, size):
    """Copy each `size`-byte value of `raw` into `body` at `offset`, `offset + stride`, ...:
    one slice assignment per byte of the element, not one call per value."""
    for k in range(size):
        body[offset + k::stride] = raw[k::size]


def binary_records(columns, pg_types, record_oid):
    """The rows whose columns are `columns` as a binary array of the row type `record_oid`.

    Every row must have the same layout: a column is all values or all NULL
    (a source that lacks a field lacks it on every device). Return None when
    one mixes them, or a value does not fit: the caller sends column arrays.
    """
    n = len(columns[0])
    template = [struct.pack(">i", len(columns))]  # one row: field count, then each field's oid, length, value
    fields = []  # (offset of the value in the row, packed values, size)
    offset = 8  # past the row's length word and its field count
    for values, pg_type in zip(columns, pg_types):
        oid = ELEMENTS[pg_type][0]
        raw = pack(values, pg_type)
        if raw is None:
            if any(v is not None for v in values):
                return None
            template.append(struct.pack(">ii", oid, -1))
            offset += 8
            continue
        size = len(raw) // n
        template.append(struct.pack(">ii", oid, size) + bytes(size))
        fields.append((offset + 8, raw, size))
        offset += 8 + size
    row = struct.pack(">i", offset - 4) + b"".join(template)
    body = bytearray(row * n)
    for start, raw, size in fields:
        _interleave(body, start, offset, raw, size)
    return BinaryArray(_HEADER.pack(1, 0, record_oid, n, 1) + body)


def binary_array(values, pg_type):
    """Encode `values` as a binary `pg_type[]` (psycopg's list dumper goes element by element).

    The values go into an `array.array` in one C call; each byte of them is
    then copied into its place among the length words with one slice
    assignment per byte of the element size.

    Return the list itself, for psycopg to dump, when there is a NULL or a
    value the element type cannot hold: the `::type[]` cast then converts or
    refuses it as before.
    """
    if not values:
        return values
    raw = pack(values, pg_type)
    if raw is None:
        return values
    n = len(values)
    size = len(raw) // n
    body = bytearray((struct.pack(">i", size) + bytes(size)) * n)
    _interleave(body, 4, 4 + size, raw, size)
    return BinaryArray(_HEADER.pack(1, 0, ELEMENTS[pg_type][0], n, 1) + body)
