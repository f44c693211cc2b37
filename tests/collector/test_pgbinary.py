"""PostgreSQL's binary array format (collector.agent.pgbinary): the bytes by hand, and what the server reads back."""

import struct
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from collector.agent.pgbinary import BinaryArray, BinaryArrayDumper, binary_array, binary_records
from collector.agent.writer import _MARK_TYPES

T0 = datetime(2025, 3, 1, 11, 58, tzinfo=timezone.utc)


def test_an_int4_array_is_the_header_then_each_length_and_big_endian_value():
    encoded = binary_array([1, -2], "int4")
    # dimensions 1, no NULLs, element oid 23 (int4), 2 elements from index 1; then (length 4, value) twice
    assert bytes(encoded) == struct.pack(">5i", 1, 0, 23, 2, 1) + struct.pack(">ii", 4, 1) + struct.pack(">ii", 4, -2)


def test_a_timestamp_is_microseconds_since_2000():
    encoded = binary_array([datetime(2000, 1, 1, 0, 0, 1, 5, tzinfo=timezone.utc)], "timestamptz")
    assert bytes(encoded)[-12:] == struct.pack(">iq", 8, 1_000_005)


def test_an_empty_list_or_a_null_is_left_for_psycopg_to_dump():
    assert binary_array([], "int4") == [] and not isinstance(binary_array([], "int4"), BinaryArray)
    assert binary_array([1, None], "float8") == [1, None]


def test_a_record_array_sends_a_null_column_as_nulls_in_every_row():
    encoded = binary_records([[7, 8], [None, None]], ("int4", "float8"), record_oid=4242)

    def row(value):  # 2 fields: (oid 23, length 4, the int4), then (oid 701, length -1: NULL)
        body = struct.pack(">i", 2) + struct.pack(">iii", 23, 4, value) + struct.pack(">ii", 701, -1)
        return struct.pack(">i", len(body)) + body

    assert bytes(encoded) == struct.pack(">5i", 1, 0, 4242, 2, 1) + row(7) + row(8)


@pytest.mark.parametrize("pg_type, values", [
    ("int4", [0, -1, 2**31 - 1, 81920]),
    ("float4", [0.0, -1.5, 299.25, 1e-3]),
    ("float8", [1e12 + 0.125, -2.5, 0.0]),
    ("timestamptz", [T0, T0 + timedelta(microseconds=1), datetime(1999, 12, 31, 23, 59, tzinfo=timezone.utc)]),
    ("int4", [1, None, 3]),  # a NULL: handed to psycopg as a list, the cast still gives the array
    ("int4", [2**40]),  # out of range for int4: the server refuses it, as for any other int4
])
def test_binary_arrays_of_the_mark_statement_read_back_as_the_values_sent(pg_conn, pg_type, values):
    cur = psycopg.Cursor(pg_conn)
    cur.adapters.register_dumper(BinaryArray, BinaryArrayDumper)
    encoded = binary_array(values, pg_type)
    assert isinstance(encoded, BinaryArray) == (None not in values and values != [2**40])
    if values == [2**40]:
        with pytest.raises(psycopg.errors.NumericValueOutOfRange), pg_conn.transaction():
            cur.execute(f"SELECT %b::{pg_type}[]", [encoded])
        return
    cur.execute(f"SELECT %b::{pg_type}[]", [encoded])
    got = cur.fetchone()[0]
    if pg_type == "float4":
        assert got == pytest.approx(values, rel=1e-7)
    else:
        assert got == values


def test_a_binary_array_of_mark_rows_reads_back_as_the_rows_sent(pg_conn):
    # The newer GPUs' fields: module and memory power, module energy, tensor activity, occupancy, NVLink tx and
    # rx, clock event reasons (int8), power limit.
    newer = (1900.5, None, 2e10 + 0.25, 62.5, None, 2097152.0, 1048576.0, 2**40 + 36, 1800.0)
    sent = [(7, T0, 50.0, None, 299.5, 1e9 + 0.5, 1024, None, 61.0, 1980, None, *newer, T0 - timedelta(seconds=9)),
            (9, T0 + timedelta(microseconds=3), 0.0, None, 80.25, 2.0, 0, None, -4.0, 0, None, *newer, T0)]
    cur = psycopg.Cursor(pg_conn)
    cur.adapters.register_dumper(BinaryArray, BinaryArrayDumper)
    oid = cur.execute("SELECT 'telemetry_mark'::regtype::oid").fetchone()[0]

    cur.execute("SELECT * FROM unnest(%b::telemetry_mark[])", [binary_records(list(map(list, zip(*sent))), _MARK_TYPES, oid)])

    assert cur.fetchall() == sent
    mixed = [list(c) for c in zip(*sent)]
    mixed[3] = [1.0, None]
    assert binary_records(mixed, _MARK_TYPES, oid) is None
