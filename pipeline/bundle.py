"""Many small tables from one Spark query: a bundle collected once, split apart as Arrow.

A report is seven small tables and a record count. Asked for one by one, each is a Spark job of
its own (two with a global sort: Spark samples the rows first), and through Spark Connect a round
trip each; on 10,000 records the scheduling and the round trips are most of the time, not the
work. :func:`bundle` puts every table in one query: each becomes a branch of a union, its rows
one column named after it, tagged with the table's number and the row's place; the query
runs as one job whose branches share the scans and the shuffles they have in common (Spark
reuses an exchange that appears twice in one plan). :func:`unbundle` takes the collected Arrow
table back apart, each table with its own columns and types, in its own order.

An ordered table keeps its order when its sort puts the rows in one partition (the transforms
sort within ``coalesce(1)``: no sampling job): the row's place is numbered after the sort.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

__all__ = ["PLACE", "TABLE", "bundle", "collect", "unbundle"]

#: The column that holds each row's table number (its place in the mapping given to bundle).
TABLE = "_bundle_table"
#: The column that numbers each table's rows in its order.
PLACE = "_bundle_place"


def bundle(frames: Mapping[str, DataFrame]) -> DataFrame:
    """One DataFrame holding every frame's rows (no job runs here).

    Args:
        frames: the tables by name (each name a valid column name, none starting with
            ``_bundle_``).

    Returns:
        Rows of ``_bundle_table`` (int), ``_bundle_place`` (long) and one column per table,
        named after it, set only in that table's rows: an array of one struct (the row).
    """
    branches = [
        frame.select(
            F.lit(number).alias(TABLE),
            F.monotonically_increasing_id().alias(PLACE),
            # a one-element array, not the bare struct: in the other tables' rows the column
            # is null, and Arrow gives a null struct null fields, which a non-null field's
            # type refuses (PySpark's toArrow fails); a null array has no elements at all
            F.array(F.struct("*")).alias(name),
        )
        for number, (name, frame) in enumerate(frames.items())
    ]
    if not branches:
        raise ValueError("bundle needs at least one table")
    joined = branches[0]
    for branch in branches[1:]:
        joined = joined.unionByName(branch, allowMissingColumns=True)
    return joined


def collect(frame: DataFrame) -> Any:
    """``frame.toArrow()``, without the schema round trip on Spark Connect.

    A Spark Connect ``toArrow`` asks the server for the frame's schema first (the server
    analyses the whole plan once more for it: a bundle's plan is big), then runs the query,
    whose answer carries the same schema: that one is used here, for the same cast.

    Returns:
        The rows as a ``pyarrow.Table``, typed as ``toArrow`` types them.
    """
    to_table = getattr(frame, "_to_table", None)  # Spark Connect's; a classic frame has none
    if to_table is None:
        return frame.toArrow()
    from pyspark.sql.pandas.types import to_arrow_schema

    table, schema = to_table()
    if schema is None:  # pragma: no cover - the server always sends it
        return frame.toArrow()
    return table.cast(
        to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC")
    )


def unbundle(collected: Any, names: list[str]) -> dict[str, Any]:
    """Each table of a collected bundle, as a ``pyarrow.Table``.

    Args:
        collected: the bundle's rows as a ``pyarrow.Table`` (``collect(bundle(frames))``).
        names: the tables' names, in the order given to :func:`bundle`.

    Returns:
        Each table by name: its own columns and types, its rows in its order (empty tables
        keep their columns).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    ordered = collected.sort_by([(TABLE, "ascending"), (PLACE, "ascending")])
    tables = {}
    for number, name in enumerate(names):
        rows = ordered.filter(pc.equal(ordered[TABLE], number))
        column = rows[name].combine_chunks().flatten()  # each row's one struct
        if not isinstance(column, pa.StructArray):
            raise TypeError(f"table {name!r} is not a struct column in the bundle")
        fields = [column.type.field(i) for i in range(column.type.num_fields)]
        arrays = column.flatten()
        tables[name] = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    return tables
