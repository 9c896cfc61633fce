"""The filter forms of ``Table.scan``: the string parser, binding to a schema, and
the pruning analysis (partitions, whole-key routing, min/max key ranges)."""

from __future__ import annotations

import datetime as dt
import pickle
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from firn.engine.pruning import (
    KEY_NODE,
    KEY_RANGE,
    PARTITION,
    KeyRouter,
    partition_guarantee,
    partitions_passing,
    routed_keys,
)
from firn.errors import ConfigError
from firn.model.files import FileEntry
from firn.model.filter_text import as_filter, parse_filter
from firn.model.filters import And, Compare, In, IsNull, Not, Or, columns, to_expression
from firn.model.keyhash import hash_keys
from firn.model.schema import TableSchema
from firn.model.tree import Node

SCHEMA = pa.schema(
    [
        pa.field("region", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("day", pa.date32()),
        pa.field("at", pa.timestamp("us", "UTC")),
        pa.field("amount", pa.float64()),
        pa.field("ok", pa.bool_()),
        pa.field("price", pa.decimal128(12, 2)),
        pa.field("blob", pa.binary()),
    ]
)
TABLE = TableSchema.build("orders", SCHEMA, ["region", "id"], ["region"])


def test_precedence_is_not_then_and_then_or() -> None:
    assert parse_filter("a = 1 or b = 2 and not c = 3") == Or(
        (Compare("a", "=", 1), And((Compare("b", "=", 2), Not(Compare("c", "=", 3)))))
    )
    assert parse_filter("(a = 1 OR b = 2) AND c IN (1, 2)") == And(
        (Or((Compare("a", "=", 1), Compare("b", "=", 2))), In("c", (1, 2)))
    )


def test_every_predicate_and_literal_form() -> None:
    parsed = parse_filter(
        "region NOT IN ('eu', 'us') and id <> -3 and day >= DATE '2024-01-02' "
        "and at < TIMESTAMP '2024-01-01T10:00:00Z' and amount == 1.5e3 and ok = TRUE "
        "and blob = X'00ff' and \"odd name\" is not null and `other` IS NULL and x != 'it''s'"
    )
    assert parsed == And(
        (
            Not(In("region", ("eu", "us"))),
            Compare("id", "!=", -3),
            Compare("day", ">=", dt.date(2024, 1, 2)),
            Compare("at", "<", dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC)),
            Compare("amount", "=", 1500.0),
            Compare("ok", "=", True),
            Compare("blob", "=", b"\x00\xff"),
            IsNull("odd name", negated=True),
            IsNull("other"),
            Compare("x", "!=", "it's"),
        )
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the filter is empty"),
        ("id =", "expected a value"),
        ("id = 1 id", "expected AND, OR or the end, found 'id' at position 7"),
        ("(id = 1", "expected ')'"),
        ("id ~ 1", "unexpected '~ 1' at position 3"),
        ("id = NULL", "IS NULL"),
        ("id in ()", "expected a value"),
        ("and id = 1", "expected a column name"),
        ("id not = 1", "IN after NOT"),
        ("day = DATE '2024-13-01'", "DATE '2024-13-01'"),
        ("id", "a comparison"),
    ],
)
def test_bad_syntax_says_what_and_where(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        as_filter(text, SCHEMA)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nope = 1", "unknown column 'nope'"),
        ("id = 'x'", "cannot be compared with 'x'"),
        ("id = 1.5", "cannot be compared with 1.5"),
        ("region = 1", "cannot be compared with 1"),
        ("amount = true", "cannot be compared with True"),
        ("day = 'soon'", "is not a value of it"),
        ("at = '2024-01-01'", "expected a zone offset"),
        ("id = 99999999999999999999", "is not a value of it"),
    ],
)
def test_binding_checks_columns_and_literal_types(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        as_filter(text, SCHEMA)


def test_binding_converts_literals_to_their_columns_types() -> None:
    bound = as_filter(
        "day = '2024-01-02' and price = 1.25 and at >= DATE '2024-01-01' and amount > 2", SCHEMA
    )
    assert bound == And(
        (
            Compare("day", "=", dt.date(2024, 1, 2)),
            Compare("price", "=", Decimal("1.25")),
            Compare("at", ">=", dt.datetime(2024, 1, 1, tzinfo=dt.UTC)),
            Compare("amount", ">", 2.0),
        )
    )
    assert bound is not None
    assert columns(bound) == {"day", "price", "at", "amount"}
    # A bound filter is plain data: it pickles, and its text parses back to it.
    assert pickle.loads(pickle.dumps(bound)) == bound
    assert as_filter(str(bound), SCHEMA) == bound


def test_other_forms() -> None:
    expression = (pc.field("id") > 3) & pc.field("amount").is_null()
    opaque = as_filter(expression, SCHEMA)
    assert opaque is not None
    assert columns(opaque) == {"id", "amount"}
    assert to_expression(opaque, SCHEMA).equals(expression)
    assert pickle.loads(pickle.dumps(opaque)).expression.equals(expression)
    assert as_filter(In("id", (1, 2)), SCHEMA) == In("id", (1, 2))
    assert as_filter(None, SCHEMA) is None
    with pytest.raises(ConfigError, match="does not fit the table"):
        as_filter(pc.field("nope") == 1, SCHEMA)
    with pytest.raises(ConfigError, match="filter must be"):
        as_filter(3, SCHEMA)


rows = st.fixed_dictionaries(
    {
        "region": st.sampled_from(["eu", "us"]),
        "id": st.integers(-5, 5),
        "amount": st.none() | st.floats(-3, 3),
    }
)
SMALL = pa.schema([SCHEMA.field("region"), SCHEMA.field("id"), SCHEMA.field("amount")])
texts = st.sampled_from(
    [
        "id > 0 and not (amount < 1)",
        "region = 'eu' or id in (1, 2, 3)",
        "amount is null or not id != 2",
        "not (region = 'us' and amount >= 0)",
    ]
)


@given(batch=st.lists(rows, max_size=20), text=texts)
def test_the_arrow_expression_filters_with_sql_null_semantics(
    batch: list[dict[str, object]], text: str
) -> None:
    table = pa.Table.from_pylist(batch, schema=SMALL)
    f = as_filter(text, SMALL)
    assert f is not None
    got = table.filter(to_expression(f, SMALL)).to_pylist()

    def holds(row: dict[str, object], node: object) -> bool | None:
        if isinstance(node, Compare):
            value = row[node.column]
            if value is None:
                return None
            ops = {"=": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__"}
            return bool(getattr(value, ops.get(node.op, "__ge__"))(node.value))
        if isinstance(node, In):
            return None if row[node.column] is None else row[node.column] in node.values
        if isinstance(node, IsNull):
            return (row[node.column] is None) != node.negated
        if isinstance(node, Not):
            inner = holds(row, node.part)
            return None if inner is None else not inner
        assert isinstance(node, And | Or)
        results = [holds(row, p) for p in node.parts]
        if isinstance(node, And):
            return False if False in results else (None if None in results else True)
        return True if True in results else (None if None in results else False)

    assert got == [r for r in table.to_pylist() if holds(r, f) is True]


# -- pruning -----------------------------------------------------------------------


def keys_of(text: str) -> list[tuple[object, ...]] | None:
    return routed_keys(as_filter(text, SCHEMA), TABLE)


def test_routing_needs_every_key_column_pinned() -> None:
    assert keys_of("region = 'eu' and id = 3") == [("eu", 3)]
    assert keys_of("region in ('eu', 'us') and id in (1, 2) and amount > 3") == [
        ("eu", 1),
        ("eu", 2),
        ("us", 1),
        ("us", 2),
    ]
    assert keys_of("(region = 'eu' and id = 1) or (region = 'us' and id = 2)") == [
        ("eu", 1),
        ("us", 2),
    ]
    assert keys_of("region = 'eu' and id in (1, 2) and id in (2, 3)") == [("eu", 2)]
    assert keys_of("region = 'eu' and id = 1 and id = 2") == []
    assert keys_of("id = 3") is None
    assert keys_of("region = 'eu' and id = 3 or amount > 1") is None
    assert keys_of("region = 'eu' and id > 3") is None
    assert keys_of("not (region = 'eu' and id = 3)") is None
    assert routed_keys(None, TABLE) is None


def entry(part: str, node: Node, low: int | None, high: int | None) -> FileEntry:
    span = (None, None) if low is None else ([part[7:], low], [part[7:], high])
    return FileEntry(1, part, "base", "B", node, 1, "f", 10, 5, span[0], span[1], 1)


def test_a_file_is_kept_only_when_a_key_of_its_partition_hashes_into_its_node() -> None:
    router = KeyRouter.build(TABLE, [("eu", 3)])
    h = hash_keys([pa.array(["eu"]), pa.array([3], pa.int64())])
    here = Node(8, int(h[0] & np.uint64(7)))
    other = Node(8, (here.i + 1) % 8)
    assert router.why_not(entry("region=eu", here, 0, 10), TABLE.key_schema) is None
    assert router.why_not(entry("region=eu", here, None, None), TABLE.key_schema) is None
    # A shallower file covers the key's deep node.
    assert router.why_not(entry("region=eu", here.ancestor_at(2), 3, 3), TABLE.key_schema) is None
    assert router.why_not(entry("region=us", here, 0, 10), TABLE.key_schema) == PARTITION
    assert router.why_not(entry("region=eu", other, 0, 10), TABLE.key_schema) == KEY_NODE
    assert router.why_not(entry("region=eu", here, 4, 10), TABLE.key_schema) == KEY_RANGE


def test_partitions_are_pruned_by_arrows_own_simplification() -> None:
    parts = ["region=eu", "region=us", "region=a%2Fb"]

    def passing(text: str) -> set[str]:
        f = as_filter(text, SCHEMA)
        assert f is not None
        return partitions_passing(TABLE, parts, to_expression(f, SCHEMA))

    assert passing("region = 'eu'") == {"region=eu"}
    assert passing("not region = 'eu'") == {"region=us", "region=a%2Fb"}
    assert passing("region = 'a/b' or id = 1") == set(parts)
    assert passing("region in ('us', 'a/b') and amount is null") == {"region=us", "region=a%2Fb"}
    assert passing("region is null") == set()
    assert passing("amount > 1") == set(parts)
    # A path that does not read back to typed values guarantees nothing: kept.
    assert partition_guarantee(TABLE, "region=eu/extra") is None
    assert partitions_passing(TABLE, ["bogus"], pc.field("region") == "eu") == {"bogus"}


def test_reading_a_split_imports_no_pydantic_postgres_or_kafka(tmp_path: Path) -> None:
    """What a Spark executor with only pyarrow and numpy loads to read a split."""
    shared = Path(__file__).resolve().parents[2] / "shared"
    script = textwrap.dedent(
        f"""
        import sys, types, importlib.abc
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in ("pydantic", "pydantic_settings", "psycopg",
                                          "confluent_kafka", "faust", "pyspark"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        # Load the package without running firn/__init__.py (the API imports psycopg).
        package = types.ModuleType("firn")
        package.__path__ = [{str(shared / "firn")!r}]
        sys.modules["firn"] = package
        import firn.engine.splits
        import firn.model.filter_text
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
