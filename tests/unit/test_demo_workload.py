"""The demo's workload (``firn_localstack.workload``): how each key distribution
draws its batches, and that a table fed those batches reads back equal to the
reference model (the demo's model check), on a fake catalog."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from firn.api.table import Table
from firn.errors import ConfigError
from firn.model.properties import TableProperties
from firn.model.schema import TableSchema
from firn_localstack.workload import (
    DAYS,
    DISTRIBUTIONS,
    HOT_UPDATE_SHARE,
    LATE_UPDATE_SHARE,
    PARTITION_BY,
    PRIMARY_KEY,
    SCHEMA,
    ModelCheck,
    Op,
    ReferenceModel,
    Workload,
    day_of,
    to_changes,
)
from tests.unit.test_table_on_a_fake_catalog import FakeCatalog


def _filled(keys: range) -> ReferenceModel:
    model = ReferenceModel()
    model.apply(Op("U", k, (day_of(k), "c", 1.0, "new")) for k in keys)
    return model


def _upserts(ops: list[Op]) -> list[int]:
    return [op.order_id for op in ops if op.kind == "U"]


# -- workload ---------------------------------------------------------------------


def test_batches_respect_the_delete_ratio_and_the_key_space() -> None:
    workload = Workload(keys=500, batch=1000, delete_ratio=0.3)
    model = _filled(range(0, 500, 2))
    rng = random.Random(7)
    ops = [op for _ in range(20) for op in workload.next_batch(model, rng)]
    kinds = Counter(op.kind for op in ops)
    assert kinds["D"] / len(ops) == pytest.approx(0.3, abs=0.02)
    assert all(0 <= op.order_id < 500 for op in ops)
    assert all(op.row[0] == day_of(op.order_id) for op in ops)
    # Deletes hit live orders (the model was not advanced, so the even ones).
    assert all(op.order_id % 2 == 0 for op in ops if op.kind == "D")
    assert all(op.row[1:] == (None, None, None) for op in ops if op.kind == "D")
    # Upserts are spread over the whole key space, present and absent alike.
    upserted = {op.order_id for op in ops if op.kind == "U"}
    assert len(upserted) > 450


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_a_batch_may_be_larger_or_smaller_than_the_workloads(distribution: str) -> None:
    workload = Workload(keys=10_000, batch=100, delete_ratio=0.1, distribution=distribution)  # type: ignore[arg-type]
    model = _filled(range(0, 10_000, 3))
    rng = random.Random(3)
    assert len(workload.next_batch(model, rng)) == 100
    assert len(workload.next_batch(model, rng, 450)) == 450
    assert len(workload.next_batch(model, rng, 1)) == 1


def test_a_delete_with_nothing_live_becomes_an_upsert() -> None:
    ops = Workload(keys=10, batch=50, delete_ratio=0.9).next_batch(
        ReferenceModel(), random.Random(1)
    )
    assert {op.kind for op in ops} == {"U"}


@pytest.mark.parametrize(
    ("keys", "batch", "ratio"), [(0, 10, 0.1), (10, 0, 0.1), (10, 10, 1.0), (10, 10, -0.1)]
)
def test_bad_workloads_are_config_errors(keys: int, batch: int, ratio: float) -> None:
    with pytest.raises(ConfigError):
        Workload(keys, batch, ratio)


def test_the_model_applies_a_batch_in_order() -> None:
    model = _filled(range(3))
    model.apply(
        [
            Op("U", 5, (day_of(5), "a", 2.0, "new")),  # insert
            Op("D", 5, (day_of(5), None, None, None)),  # insert-then-delete: gone
            Op("D", 1, (day_of(1), None, None, None)),
            Op("U", 1, (day_of(1), "b", 3.0, "paid")),  # delete-then-insert: kept
            Op("U", 2, (day_of(2), "c", 4.0, "shipped")),  # update
            Op("D", 9, (day_of(9), None, None, None)),  # absent: harmless
        ]
    )
    assert model.rows == {
        0: (day_of(0), "c", 1.0, "new"),
        1: (day_of(1), "b", 3.0, "paid"),
        2: (day_of(2), "c", 4.0, "shipped"),
    }
    assert model.applied == Counter({"insert": 5, "update": 1, "delete": 2, "delete-absent": 1})
    assert {model.random_key(random.Random(s)) for s in range(50)} == {0, 1, 2}


def test_change_sets_carry_every_column_and_the_operations_in_order() -> None:
    ops = [Op("U", 4, (DAYS[0], "c1", 9.5, "new")), Op("D", 4, (DAYS[0], None, None, None))]
    changes = to_changes(ops)
    assert changes.schema == SCHEMA.append(pa.field("_op", pa.string()))
    assert changes.to_pylist() == [
        {
            "order_id": 4,
            "day": DAYS[0],
            "customer": "c1",
            "amount": 9.5,
            "status": "new",
            "_op": "U",
        },
        {
            "order_id": 4,
            "day": DAYS[0],
            "customer": None,
            "amount": None,
            "status": None,
            "_op": "D",
        },
    ]


def test_the_model_check_names_what_differs() -> None:
    model = _filled(range(4))
    rows = [
        {"order_id": k, "day": day_of(k), "customer": "c", "amount": 1.0, "status": "new"}
        for k in range(4)
    ]
    assert model.compare(pa.Table.from_pylist(rows, SCHEMA)).matches
    rows[1]["amount"] = 2.0  # different
    del rows[2]  # missing
    rows.append({**rows[0]})  # duplicated
    rows.append({"order_id": 7, "day": day_of(7), "customer": "c", "amount": 1.0, "status": "x"})
    check = model.compare(pa.Table.from_pylist(rows, SCHEMA))
    assert check == ModelCheck(
        expected_rows=4, actual_rows=5, missing=1, unexpected=2, different=1, examples=(0, 1, 2, 7)
    )
    assert not check.matches
    assert ReferenceModel.from_table(pa.Table.from_pylist(rows[:2], SCHEMA)).rows == {
        0: (day_of(0), "c", 1.0, "new"),
        1: (day_of(1), "c", 2.0, "new"),
    }


# -- distributions ----------------------------------------------------------------


def test_ordered_inserts_new_keys_in_order_with_a_few_late_updates() -> None:
    workload = Workload(keys=10, batch=2000, delete_ratio=0.0, distribution="ordered")
    model, rng = ReferenceModel(), random.Random(3)
    first = workload.next_batch(model, rng)
    assert [op.order_id for op in first] == list(range(2000))  # nothing live to update yet
    model.apply(first)
    late = total = 0
    for _ in range(10):
        high, live = model.high_key, set(model.rows)
        ops = workload.next_batch(model, rng)
        new = [k for k in _upserts(ops) if k > high]
        # New order ids count up from the greatest one so far, past ``keys``.
        assert new == list(range(high + 1, high + 1 + len(new)))
        assert all(k in live for k in _upserts(ops) if k <= high)  # late: older, live
        late += len(ops) - len(new)
        total += len(ops)
        model.apply(ops)
    assert late / total == pytest.approx(LATE_UPDATE_SHARE, abs=0.006)
    assert model.applied["update"] == late


def test_appends_inserts_only_new_keys_in_order() -> None:
    workload = Workload(keys=10, batch=500, delete_ratio=0.0, distribution="appends")
    model, rng = ReferenceModel(), random.Random(4)
    for _ in range(5):
        high = model.high_key
        ops = workload.next_batch(model, rng)
        assert [op.order_id for op in ops] == list(range(high + 1, high + 1 + len(ops)))
        model.apply(ops)
    assert model.applied["update"] == 0


def test_ordered_deletes_live_orders_and_continues_after_a_kept_table() -> None:
    workload = Workload(keys=10, batch=400, delete_ratio=0.2, distribution="ordered")
    model = _filled(range(100))
    model.apply([Op("D", 99, (day_of(99), None, None, None))])
    ops = workload.next_batch(model, random.Random(5))
    deleted = [op.order_id for op in ops if op.kind == "D"]
    assert len(deleted) / len(ops) == pytest.approx(0.2, abs=0.06)
    assert set(deleted) <= set(range(99))
    assert min(k for k in _upserts(ops) if k >= 99) == 100  # 99 was held once: not reused


def test_skewed_sends_most_upserts_to_a_spread_out_hot_set() -> None:
    workload = Workload(keys=40_000, batch=5000, delete_ratio=0.1, distribution="skewed")
    hot = {workload.hot_key(j) for j in range(workload.hot_keys)}
    assert len(hot) == workload.hot_keys == 400  # one-to-one: 1 % of the keys
    assert {day_of(k) for k in hot} == set(DAYS)
    # Spread over the key space, not a hot range: every tenth of it holds some.
    assert {k * 10 // 40_000 for k in hot} == set(range(10))
    model, rng = ReferenceModel(), random.Random(9)
    upserts: list[int] = []
    for _ in range(4):
        ops = workload.next_batch(model, rng)
        model.apply(ops)
        upserts += _upserts(ops)
    share = sum(k in hot for k in upserts) / len(upserts)
    # The cold draws hit a hot key 1 % of the time too.
    assert share == pytest.approx(HOT_UPDATE_SHARE + 0.1 * 0.01, abs=0.01)
    assert len(set(upserts) - hot) > 1000  # the cold tenth is spread too


def test_uniform_is_the_default_and_unknown_distributions_are_refused() -> None:
    assert Workload(keys=10, batch=1, delete_ratio=0.0).distribution == "uniform"
    with pytest.raises(ConfigError, match="unknown key distribution"):
        Workload(10, 1, 0.0, "zipf")  # type: ignore[arg-type]


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_a_table_fed_each_distribution_reads_equal_to_the_model(
    tmp_path: Path, distribution: str
) -> None:
    definition = TableSchema.build("demo.orders", SCHEMA, list(PRIMARY_KEY), list(PARTITION_BY))
    props = TableProperties.parse({"change.buckets": 2})
    table = Table(FakeCatalog(), 1, definition, props, str(tmp_path / "orders"))
    workload = Workload(keys=300, batch=200, delete_ratio=0.15, distribution=distribution)  # type: ignore[arg-type]
    model, rng = ReferenceModel(), random.Random(21)
    for _ in range(8):
        ops = workload.next_batch(model, rng)
        table.commit(to_changes(ops))
        model.apply(ops)
    check = model.compare(table.read())
    assert check.matches, check
    assert check.actual_rows == len(model) > 0
    # appends only inserts (deletes aside): every other distribution updates too.
    assert (model.applied["update"] > 0) == (distribution != "appends")
    assert model.applied["delete"] > 0
