"""Which Spark column types cross the bridge, and their Arrow equivalents.

Records inside barrierflow are dicts of Arrow-representable Python values, and the hand-off is
Parquet, so a Spark type crosses when Parquet stores it *and* pyarrow reads it back as the same
logical type: numbers, booleans, strings, binary, dates, timestamps (with and without time zone),
decimals, arrays and structs of those. Intervals are stored as bare integers, maps would come back
as structs (a record is a dict), variants and user-defined types have no Arrow counterpart: these
are refused up front with an error naming the column (`SchemaError`), never converted silently.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

__all__ = ["SchemaError", "check_spark_schema", "to_arrow_schema"]


class SchemaError(TypeError):
    """A DataFrame column has a type the bridge cannot carry (the message names the column)."""


_HINTS = {
    "MapType": "records are dicts, so a map would come back as a struct; convert it with "
               "to_json(col) or map_entries(col)",
    "CalendarIntervalType": "Parquet cannot store it; cast it to a string or split it into numbers",
    "DayTimeIntervalType": "Parquet stores it as a bare integer; convert it to seconds (a number)",
    "YearMonthIntervalType": "Parquet stores it as a bare integer; convert it to months (a number)",
    "VariantType": "Arrow has no variant type; convert it with to_json(col)",
}


def _arrow_type(data_type: T.DataType, column: str) -> pa.DataType:
    simple: dict[type, pa.DataType] = {
        T.BooleanType: pa.bool_(), T.ByteType: pa.int8(), T.ShortType: pa.int16(),
        T.IntegerType: pa.int32(), T.LongType: pa.int64(), T.FloatType: pa.float32(),
        T.DoubleType: pa.float64(), T.StringType: pa.string(), T.BinaryType: pa.binary(),
        T.DateType: pa.date32(), T.TimestampType: pa.timestamp("us", tz="UTC"),
        T.TimestampNTZType: pa.timestamp("us"), T.NullType: pa.null(),
    }
    for spark_type, arrow_type in simple.items():
        if type(data_type) is spark_type:
            return arrow_type
    if isinstance(data_type, T.DecimalType):
        return pa.decimal128(data_type.precision, data_type.scale)
    if isinstance(data_type, T.ArrayType):
        return pa.list_(_arrow_type(data_type.elementType, f"{column}[]"))
    if isinstance(data_type, T.StructType):
        return pa.struct([pa.field(f.name, _arrow_type(f.dataType, f"{column}.{f.name}"), f.nullable)
                          for f in data_type.fields])
    kind = type(data_type).__name__
    if isinstance(data_type, T.StringType | T.CharType | T.VarcharType):  # collated / char(n)
        return pa.string()
    hint = _HINTS.get(kind, "it has no Arrow equivalent; cast it to a supported type first")
    raise SchemaError(f"column {column!r} has type {data_type.simpleString()} which the Spark bridge "
                      f"cannot carry: {hint}")


def check_spark_schema(schema: T.StructType) -> None:
    """Raise `SchemaError` naming the first column (dotted for nested fields) of an unsupported type."""
    to_arrow_schema(schema)


def to_arrow_schema(schema: Any) -> pa.Schema:
    """The Arrow schema records of a Spark `StructType` have inside barrierflow.

    Args:
        schema: a Spark `StructType` (`df.schema`) or already a `pyarrow.Schema`.

    Raises:
        SchemaError: a column type cannot cross the bridge (names the column).
        TypeError: `schema` is neither.
    """
    if isinstance(schema, pa.Schema):
        return schema
    if not isinstance(schema, T.StructType):
        raise TypeError(f"expected a Spark StructType or a pyarrow.Schema, got {type(schema).__name__}")
    return pa.schema([pa.field(f.name, _arrow_type(f.dataType, f.name), f.nullable) for f in schema.fields])
