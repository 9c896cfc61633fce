"""Which Arrow types a change set's column may have for a table column (design §10).

A change set's column must have the table column's type, or one that widens to it
without losing or reinterpreting any value. These are the only implicit widenings
(docs/guide/tables.md lists the same):

    null (a column of only nulls)       any type
    int8 -> int16 -> int32 -> int64     and uint8/16/32 -> a strictly wider signed int,
                                        uint8 -> uint16 -> uint32 -> uint64
    float16 -> float32 -> float64
    string, large_string, string_view   each other (the same text)
    binary, large_binary, binary_view   each other (the same bytes)
    decimal128(p, s) -> decimal128(p', s')  when s' >= s and p' - s' >= p - s
    date32 -> date64
    timestamp[unit, tz] -> timestamp[finer unit, same tz]  (a value out of the finer
                                        unit's range is refused)
    dictionary<T> -> U                  when T widens to U

Everything else is refused, however well the values would convert: an int64 column
is not a timestamp (which unit? which epoch?), nor a string, nor an int32 (even if
today's values fit, tomorrow's may not); a timestamp without a zone is not one with
a zone. The caller casts explicitly when that is what they mean.
"""

from __future__ import annotations

import pyarrow as pa

_UNITS = ("s", "ms", "us", "ns")


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _is_bytes(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t))


def _integer_widens(source: pa.DataType, target: pa.DataType) -> bool:
    signed_source = pa.types.is_signed_integer(source)
    signed_target = pa.types.is_signed_integer(target)
    if signed_source == signed_target:
        return bool(target.bit_width >= source.bit_width)
    return bool(signed_target and target.bit_width > source.bit_width)


def widens(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a column of type ``source`` goes into a ``target`` column implicitly."""
    if source.equals(target) or pa.types.is_null(source):
        return True
    if pa.types.is_dictionary(source):
        return widens(source.value_type, target)
    if pa.types.is_integer(source) and pa.types.is_integer(target):
        return _integer_widens(source, target)
    if pa.types.is_floating(source) and pa.types.is_floating(target):
        return bool(target.bit_width >= source.bit_width)
    if _is_text(source) and _is_text(target):
        return True
    if _is_bytes(source) and _is_bytes(target):
        return True
    if pa.types.is_decimal128(source) and pa.types.is_decimal128(target):
        integer_digits = source.precision - source.scale
        return bool(
            target.scale >= source.scale and target.precision - target.scale >= integer_digits
        )
    if pa.types.is_date32(source) and pa.types.is_date64(target):
        return True
    if pa.types.is_timestamp(source) and pa.types.is_timestamp(target):
        return bool(
            source.tz == target.tz and _UNITS.index(target.unit) >= _UNITS.index(source.unit)
        )
    return False
