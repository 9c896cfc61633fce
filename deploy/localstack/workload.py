"""The demo's synthetic CDC workload and the reference model it is checked against.

The demo table holds orders: ``order_id`` (the key) and ``day``, one of four values
fixed by the order id (a partition column must be part of the key, so a key never
moves between partitions), plus a customer, an amount and a status. A batch is an
ordered list of operations: with probability ``delete_ratio`` an operation deletes a
live order, otherwise it upserts an order (an insert when the order is absent, an
update when present) drawn by the workload's distribution:

- ``uniform``: any order id in ``0 .. keys - 1``, all alike;
- ``ordered``: an event log. Upserts insert new order ids in increasing order,
  counting up from the greatest order id the model ever held (``keys`` does not
  bound them), except ``LATE_UPDATE_SHARE`` of them, which update an older live order
  (any one, uniformly);
- ``skewed``: ``HOT_UPDATE_SHARE`` of the upserts go to a hot set of
  ``HOT_KEY_SHARE`` of the key space, the rest to any order id. The hot order ids are
  spread over the key space (``j * HOT_STRIDE mod keys``), so every partition, node
  and key range holds some: hot customers, not a hot key range.

One key may appear several times in a batch; the table applies the batch in row
order, and so does the model, so they must agree (design §2).

Pure: no I/O, randomness from the caller's ``random.Random``.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, NamedTuple, get_args

import numpy as np
import pyarrow as pa

from firn.errors import ConfigError

DAYS = ("2024-06-01", "2024-06-02", "2024-06-03", "2024-06-04")
STATUSES = ("new", "paid", "shipped", "delivered", "returned")
CUSTOMERS = tuple(f"c{i:03d}" for i in range(1000))
SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        pa.field("day", pa.string(), nullable=False),
        pa.field("customer", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("status", pa.string()),
    ]
)
PRIMARY_KEY = ("day", "order_id")
PARTITION_BY = ("day",)

Distribution = Literal["uniform", "ordered", "appends", "skewed"]
DISTRIBUTIONS: tuple[str, ...] = get_args(Distribution)
LATE_UPDATE_SHARE = 0.03
"""ordered: the share of upserts that update an older order instead of inserting
(appends: none, an insert-only log)."""
HOT_KEY_SHARE = 0.01
"""skewed: the share of the key space that is hot."""
HOT_UPDATE_SHARE = 0.9
"""skewed: the share of upserts that go to a hot order."""
HOT_STRIDE = 2_147_483_647
"""A prime above any key space the CLI allows, so ``j -> j * HOT_STRIDE mod keys`` is
one-to-one and the hot orders are spread over the whole key space."""

Row = tuple[str, str | None, float | None, str | None]
"""(day, customer, amount, status) of one order."""


class Op(NamedTuple):
    """One change: ``U`` upserts ``row`` for ``order_id``, ``D`` deletes it (a tuple:
    a batch makes thousands)."""

    kind: Literal["U", "D"]
    order_id: int
    row: Row


def day_of(order_id: int) -> str:
    return DAYS[order_id % len(DAYS)]


@dataclass(frozen=True)
class Workload:
    """How batches are drawn: their size, the key space, the share of deletes and
    how upserts pick their order ids."""

    keys: int
    batch: int
    delete_ratio: float
    distribution: Distribution = "uniform"

    def __post_init__(self) -> None:
        if self.keys < 1 or self.batch < 1:
            raise ConfigError("the demo needs at least one key and one row per batch")
        if not 0 <= self.delete_ratio < 1:
            raise ConfigError(f"delete ratio must be in [0, 1), got {self.delete_ratio}")
        if self.distribution not in DISTRIBUTIONS:
            raise ConfigError(
                f"unknown key distribution {self.distribution!r} (use {', '.join(DISTRIBUTIONS)})"
            )

    @property
    def hot_keys(self) -> int:
        """skewed: how many order ids are hot."""
        return max(1, int(self.keys * HOT_KEY_SHARE))

    def hot_key(self, j: int) -> int:
        """skewed: the ``j``-th hot order id (``0 <= j < hot_keys``)."""
        return j * HOT_STRIDE % self.keys

    def next_batch(
        self, model: ReferenceModel, rng: random.Random, rows: int | None = None
    ) -> list[Op]:
        """One batch of ``rows`` operations (default ``batch``) against the model as it
        is now (the caller applies it after the commit lands). A delete when nothing is
        live becomes an upsert.

        Drawn a column at a time with numpy (seeded from ``rng``, so a seed still gives
        one run): the demo producer shares the machine with the stack it measures, and
        drawing op by op cost about 10 ms of its CPU per 2,000-row batch."""
        n = self.batch if rows is None else rows
        draw = np.random.default_rng(rng.getrandbits(64))
        live = len(model)
        deletes = draw.random(n) < self.delete_ratio if live else np.zeros(n, dtype=bool)
        ids = np.empty(n, dtype=np.int64)
        ids[deletes] = model.random_keys(draw, int(deletes.sum()))
        upserts = ~deletes
        ids[upserts] = self._upserted_ids(model, draw, int(upserts.sum()))
        customers = draw.integers(len(CUSTOMERS), size=n).tolist()
        amounts = np.round(draw.uniform(1.0, 500.0, size=n), 2).tolist()
        statuses = draw.integers(len(STATUSES), size=n).tolist()
        ops = []
        for order_id, delete, c, amount, s in zip(
            ids.tolist(), deletes.tolist(), customers, amounts, statuses, strict=True
        ):
            day = day_of(order_id)
            if delete:
                ops.append(Op("D", order_id, (day, None, None, None)))
            else:
                ops.append(Op("U", order_id, (day, CUSTOMERS[c], amount, STATUSES[s])))
        return ops

    def _upserted_ids(self, model: ReferenceModel, draw: np.random.Generator, n: int) -> np.ndarray:
        """The order ids of ``n`` upserts, in batch order, by the distribution."""
        if self.distribution in ("ordered", "appends"):
            late_share = LATE_UPDATE_SHARE if self.distribution == "ordered" else 0.0
            late = draw.random(n) < late_share if len(model) else np.zeros(n, dtype=bool)
            ids = np.empty(n, dtype=np.int64)
            ids[late] = model.random_keys(draw, int(late.sum()))
            fresh = ~late
            # New order ids count up from the greatest ever used, in batch order.
            ids[fresh] = model.high_key + 1 + np.arange(int(fresh.sum()), dtype=np.int64)
            return ids
        ids = draw.integers(self.keys, size=n, dtype=np.int64)
        if self.distribution == "skewed":
            hot = draw.random(n) < HOT_UPDATE_SHARE
            j = draw.integers(self.hot_keys, size=int(hot.sum()), dtype=np.int64)
            ids[hot] = j * HOT_STRIDE % self.keys  # hot_key, for an array of j
        return ids


def to_changes(ops: Iterable[Op]) -> pa.Table:
    """A change set for ``Table.commit``: the table's columns plus ``_op``, in order."""
    ops = list(ops)
    schema = SCHEMA.append(pa.field("_op", pa.string()))
    if not ops:
        return schema.empty_table()
    kinds, order_ids, rows = zip(*ops, strict=True)
    columns = [order_ids, *zip(*rows, strict=True), kinds]
    return pa.table(
        [pa.array(col, f.type) for col, f in zip(columns, schema, strict=True)], schema=schema
    )


@dataclass(frozen=True)
class ModelCheck:
    """How the table's merged view compares with the model."""

    expected_rows: int
    actual_rows: int
    missing: int
    """Orders the model has and the table lacks."""
    unexpected: int
    """Orders the table has and the model lacks (or has twice)."""
    different: int
    """Orders in both with other values."""
    examples: tuple[int, ...] = ()
    """A few order ids that differ, for the error message."""

    @property
    def matches(self) -> bool:
        return not (self.missing or self.unexpected or self.different)


class ReferenceModel:
    """The merged view the table must show: order id -> row, operations applied in
    order. Keeps a dense list of live keys so a random one is drawn in O(1)."""

    def __init__(self) -> None:
        self.rows: dict[int, Row] = {}
        self._keys: list[int] = []
        self._slot: dict[int, int] = {}
        self.applied: Counter[str] = Counter()
        """Operations applied so far: insert, update, delete, delete-absent."""
        self.high_key = -1
        """The greatest order id ever held (deleted or not); -1 before the first."""

    def __len__(self) -> int:
        return len(self.rows)

    @classmethod
    def from_table(cls, table: pa.Table) -> ReferenceModel:
        """A model holding what ``table`` (a merged view) holds."""
        model = cls()
        for r in table.select(SCHEMA.names).to_pylist():
            model._put(r["order_id"], (r["day"], r["customer"], r["amount"], r["status"]))
        return model

    def apply(self, ops: Iterable[Op]) -> None:
        for op in ops:
            if op.kind == "U":
                self.applied["update" if op.order_id in self.rows else "insert"] += 1
                self._put(op.order_id, op.row)
            elif op.order_id in self.rows:
                self.applied["delete"] += 1
                self._drop(op.order_id)
            else:
                self.applied["delete-absent"] += 1

    def random_key(self, rng: random.Random) -> int | None:
        return rng.choice(self._keys) if self._keys else None

    def random_keys(self, draw: np.random.Generator, n: int) -> list[int]:
        """``n`` live keys drawn with replacement (none when nothing is live)."""
        if not self._keys:
            return []
        return [self._keys[i] for i in draw.integers(len(self._keys), size=n).tolist()]

    def _put(self, key: int, row: Row) -> None:
        if key not in self.rows:
            self._slot[key] = len(self._keys)
            self._keys.append(key)
        self.rows[key] = row
        self.high_key = max(self.high_key, key)

    def _drop(self, key: int) -> None:
        del self.rows[key]
        slot = self._slot.pop(key)
        last = self._keys.pop()
        if last != key:
            self._keys[slot] = last
            self._slot[last] = slot

    def compare(self, actual: pa.Table) -> ModelCheck:
        """Compare a merged view (``Table.read()``) with the model, row by row."""
        seen: dict[int, Row] = {}
        unexpected = 0
        odd: list[int] = []
        for r in actual.select(SCHEMA.names).to_pylist():
            key = r["order_id"]
            if key in seen or key not in self.rows:
                unexpected += 1
                odd.append(key)
            seen[key] = (r["day"], r["customer"], r["amount"], r["status"])
        missing = [k for k in self.rows if k not in seen]
        different = [k for k, row in seen.items() if k in self.rows and self.rows[k] != row]
        return ModelCheck(
            expected_rows=len(self.rows),
            actual_rows=actual.num_rows,
            missing=len(missing),
            unexpected=unexpected,
            different=len(different),
            examples=tuple(sorted([*missing, *odd, *different])[:5]),
        )
