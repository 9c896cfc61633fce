"""Schema changes as a pure model (``firn.model.evolution``): what each operation
makes, what is refused with nothing changed, field ids that never change or come
back, and files of one version read as another (``firn.model.projection``)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from firn.errors import ConfigError
from firn.model.changes import validate_changes, validate_rows
from firn.model.evolution import SchemaChange, former_names, new_columns
from firn.model.projection import file_view
from firn.model.schema import FIELD_ID, TableSchema, field_id

SCHEMA = pa.schema(
    [
        pa.field("region", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int32()),
        pa.field("price", pa.decimal128(10, 2)),
        pa.field("day", pa.date32()),
        pa.field("note", pa.string(), nullable=False),
    ]
)


def table() -> TableSchema:
    return TableSchema.build("orders", SCHEMA, ["region", "id"], ["region"])


def ids(t: TableSchema) -> dict[str, int]:
    return {f.name: t.field_id(f.name) for f in t.schema}


def test_a_new_table_numbers_its_columns_whatever_ids_it_was_given() -> None:
    foreign = pa.schema([f.with_metadata({FIELD_ID: b"99"}) for f in SCHEMA])
    t = TableSchema.build("orders", foreign, ["region", "id"], ["region"])
    assert list(ids(t).values()) == [1, 2, 3, 4, 5, 6]
    assert t.last_column_id == 6
    assert t.schema_id == 0


def test_a_table_made_before_field_ids_gets_them_in_column_order() -> None:
    legacy = TableSchema("orders", SCHEMA, ("region", "id"), ("region",))
    assert list(ids(legacy).values()) == [1, 2, 3, 4, 5, 6]


def test_one_block_is_one_version_and_ids_follow_columns_not_names() -> None:
    before = table()
    change = (
        SchemaChange(before)
        .add_column("discount", pa.decimal128(12, 2), default=Decimal("0.50"), doc="off")
        .rename_column("qty", "quantity")
        .update_column("quantity", field_type=pa.int64())
        .delete_column("note")
        .add_column("note", pa.string())
        .move_first("discount")
        .move_after("note", "region")
    )
    after = change.apply()
    assert after.schema_id == 1
    assert after.schema.names == ["discount", "region", "note", "id", "quantity", "price", "day"]
    assert ids(after) == {
        "discount": 7,
        "region": 1,
        "note": 8,  # a new column: the old note (6) is never reused
        "id": 2,
        "quantity": 3,
        "price": 4,
        "day": 5,
    }
    assert after.schema.field("quantity").type == pa.int64()
    assert after.default("discount") == "0.50"
    assert after.schema.field("discount").metadata[b"doc"] == b"off"
    assert after.last_column_id == 8
    assert after.version_schema(0).equals(before.schema)
    assert change.operations[:2] == ["add discount decimal128(12, 2)", "rename qty -> quantity"]


def test_a_block_that_changes_nothing_is_no_version() -> None:
    before = table()
    change = SchemaChange(before).rename_column("qty", "qty").update_column("qty", pa.int32())
    assert change.apply() is before


def test_renaming_a_key_column_renames_the_key() -> None:
    after = SchemaChange(table()).rename_column("id", "order_id").apply()
    assert after.primary_key == ("region", "order_id")
    assert after.at_version(0).primary_key == ("region", "id")


@pytest.mark.parametrize(
    ("operation", "message"),
    [
        (lambda c: c.delete_column("id"), "primary key column"),
        (lambda c: c.delete_column("region"), "partition column"),
        (lambda c: c.update_column("id", pa.int32()), "primary key column"),
        (lambda c: c.update_column("region", pa.large_string()), "partition column"),
        (lambda c: c.rename_column("region", "area"), "partition column"),
        (lambda c: c.update_column("qty", pa.int16()), "only lossless widenings"),
        (lambda c: c.update_column("note", pa.int64()), "only lossless widenings"),
        (lambda c: c.update_column("price", pa.decimal128(10, 3)), "only lossless widenings"),
        (lambda c: c.update_column("price", pa.float64()), "only lossless widenings"),
        (lambda c: c.update_column("day", pa.timestamp("s")), "only lossless widenings"),
        (lambda c: c.update_column("qty", required=True), "required"),
        (lambda c: c.add_column("extra", pa.int64(), required=True), "without a default"),
        (lambda c: c.add_column("qty", pa.int64()), "already has a column"),
        (lambda c: c.add_column("_op", pa.int64()), "reserved"),
        (lambda c: c.add_column("_firn_x", pa.int64()), "reserved"),
        (lambda c: c.add_column("bad\nname", pa.int64()), "control character"),
        (lambda c: c.add_column("tags", pa.list_(pa.string())), "unsupported type"),
        (lambda c: c.add_column("n", pa.int64(), default="seven"), "not a value of its type"),
        (lambda c: c.add_column("n", pa.int8(), default=1000), "not a value of its type"),
        (lambda c: c.rename_column("qty", "note"), "already has a column"),
        (lambda c: c.rename_column("nowhere", "x"), "has no column"),
        (lambda c: c.move_after("qty", "qty"), "relative to itself"),
        (lambda c: c.update_column("id", required=False), "primary key column"),
    ],
)
def test_what_cannot_change_is_refused(operation: Any, message: str) -> None:
    before = table()
    change = SchemaChange(before)
    with pytest.raises(ConfigError, match=message):
        operation(change)
    assert change.apply() is before  # nothing was half applied


def test_the_only_column_of_an_unkeyed_table_stays() -> None:
    t = TableSchema.build("log", pa.schema([pa.field("line", pa.string())]), [])
    with pytest.raises(ConfigError, match="only column"):
        SchemaChange(t).delete_column("line")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (pa.int8(), pa.int64()),
        (pa.uint16(), pa.int32()),
        (pa.float32(), pa.float64()),
        (pa.decimal128(10, 2), pa.decimal128(14, 2)),
        (pa.decimal128(10, 2), pa.decimal128(12, 4)),
        (pa.string(), pa.large_string()),
        (pa.binary(), pa.large_binary()),
        (pa.date32(), pa.date64()),
    ],
)
def test_lossless_widenings_are_taken_and_read_back(old: pa.DataType, new: pa.DataType) -> None:
    t = TableSchema.build(
        "t", pa.schema([pa.field("id", pa.int64(), False), pa.field("v", old)]), ["id"]
    )
    after = SchemaChange(t).update_column("v", field_type=new).apply()
    values = {
        "int8": [-5],
        "uint16": [65535],
        "float": [1.5],
        "decimal128(10, 2)": [Decimal("12.34")],
        "string": ["x"],
        "binary": [b"\x00"],
        "date32[day]": [dt.date(2024, 2, 29)],
    }
    raw = next(v for k, v in values.items() if str(old).startswith(k))
    rows = pa.table({"id": pa.array([1], pa.int64()), "v": pa.array(raw, old)}, schema=t.schema)
    read = file_view(t.schema, after.schema).adapt(rows)
    assert read.schema.field("v").type == new
    assert read.column("v").to_pylist() == raw


def test_a_default_follows_its_column_when_widened() -> None:
    t = TableSchema.build("t", pa.schema([pa.field("id", pa.int64(), False)]), ["id"])
    added = SchemaChange(t).add_column("d", pa.date32(), default=dt.date(2020, 1, 2)).apply()
    widened = SchemaChange(added).update_column("d", pa.date64()).apply()
    old_rows = pa.table({"id": pa.array([7], pa.int64())}, schema=t.schema)
    read = file_view(t.schema, widened.schema).adapt(old_rows)
    assert read.column("d").to_pylist() == [dt.date(2020, 1, 2)]


def test_a_file_of_an_older_version_reads_by_field_id() -> None:
    v0 = table()
    v1 = (
        SchemaChange(v0)
        .rename_column("qty", "quantity")
        .delete_column("note")
        .add_column("note", pa.string(), default="new")
        .add_column("flag", pa.bool_())
        .apply()
    )
    old = pa.table(
        {
            "region": ["eu"],
            "id": pa.array([1], pa.int64()),
            "qty": pa.array([3], pa.int32()),
            "price": pa.array([Decimal("1.00")], pa.decimal128(10, 2)),
            "day": pa.array([dt.date(2024, 1, 1)], pa.date32()),
            "note": ["the old note is gone"],
        },
        schema=v0.schema,
    )
    view = file_view(v0.schema, v1.schema)
    assert view.stored.names == ["region", "id", "qty", "price", "day"]
    read = view.adapt(old.select(view.stored.names))
    assert read.to_pylist() == [
        {
            "region": "eu",
            "id": 1,
            "quantity": 3,
            "price": Decimal("1.00"),
            "day": dt.date(2024, 1, 1),
            "note": "new",
            "flag": None,
        }
    ]
    assert [field_id(f) for f in read.schema] == [field_id(f) for f in v1.schema]


def test_change_sets_follow_the_versions() -> None:
    v0 = table()
    v1 = (
        SchemaChange(v0)
        .add_column("extra", pa.int64(), default=5)
        .delete_column("price")
        .rename_column("qty", "quantity")
        .apply()
    )
    old_producer = pa.table(
        {
            "region": ["eu"],
            "id": pa.array([1], pa.int64()),
            "quantity": pa.array([2], pa.int32()),
            "day": pa.array([None], pa.date32()),
            "note": ["n"],
            "_op": ["U"],
        }
    )
    validated = validate_changes(v1, old_producer)
    assert validated.column("extra").to_pylist() == [5]
    with pytest.raises(ConfigError, match="dropped from table 'orders' in schema version 1"):
        validate_changes(v1, old_producer.append_column("price", pa.array([None], pa.int64())))
    ignored = validate_changes(
        v1, old_producer.append_column("price", pa.array([1], pa.int64())), ignore_dropped=True
    )
    assert "price" not in ignored.column_names
    with pytest.raises(ConfigError, match="renamed to 'quantity' in schema version 1"):
        validate_changes(
            v1,
            old_producer.rename_columns(
                [*old_producer.column_names[:2], "qty", "day", "note", "_op"]
            ),
        )
    with pytest.raises(ConfigError, match="merge_schema=True"):
        validate_changes(v1, old_producer.append_column("brand_new", pa.array([1])))
    # A column the table was created with may not be left out.
    with pytest.raises(ConfigError, match="missing \\['note'\\]"):
        validate_rows(v1, old_producer.drop_columns(["note", "_op"]))


def test_former_and_new_names() -> None:
    v1 = SchemaChange(table()).delete_column("note").rename_column("qty", "quantity").apply()
    former = former_names(v1)
    assert (former["note"].renamed_to, former["note"].schema_id) == (None, 1)
    assert former["qty"].renamed_to == "quantity"
    incoming = pa.schema(
        [
            pa.field("note", pa.string()),
            pa.field("shiny", pa.dictionary(pa.int8(), pa.string())),
            pa.field("_op", pa.string()),
        ]
    )
    assert new_columns(v1, incoming, extra=("_op",)) == [pa.field("shiny", pa.string())]
    with pytest.raises(ConfigError, match="only nulls"):
        new_columns(v1, pa.schema([pa.field("empty", pa.null())]))


def test_the_json_form_carries_every_version() -> None:
    v1 = SchemaChange(table()).add_column("extra", pa.int64(), default=5).apply()
    back = TableSchema.from_dict(v1.to_dict())
    assert back == v1
    assert TableSchema.from_dict(v1.to_dict(versions=())).earlier == ()


def test_a_task_spec_carries_the_definition_its_inputs_need() -> None:
    from firn.model.tasks import InputFile, TaskSpec

    v1 = SchemaChange(table()).add_column("extra", pa.int64(), default=5).apply()
    v2 = SchemaChange(v1).delete_column("note").apply()
    old = InputFile(1, "b.parquet", "B", 4, 0, 1, 10, 5, None, None, schema_id=0)
    spec = TaskSpec(
        plan_id=1,
        task_id=2,
        table_id=3,
        location="/tmp/t",
        partition_key="",
        kind="major",
        node_m=4,
        node_i=0,
        lower=None,
        upper=None,
        base_files=(old,),
        change_files=(),
        from_merged_seq=0,
        to_seq=1,
        target_file_size=1 << 20,
        output_prefix="base/p1-t2",
        table=v2.to_dict(versions={0}),
    )
    back = TaskSpec.from_json(spec.to_json())
    assert back.schema_id == 2
    definition = TableSchema.from_dict(back.table or {})
    assert definition.versions().keys() == {0, 2}  # version 1 wrote none of its inputs
    assert definition.version_schema(0).equals(v0_schema := table().schema)
    assert v0_schema.names[-1] == "note"
    assert back.base_files[0].schema_id == 0
