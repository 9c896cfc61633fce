"""read() against the reference model, on the real catalog, after every commit."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import firn
from tests.changesets import (
    KEY_KINDS,
    KeyKind,
    ReferenceModel,
    as_change_set,
    as_view,
    operations,
    table_schema,
)

_names = itertools.count()


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[KeyKind, int, bool, list[list[dict[str, object]]]]:
    kind = draw(st.sampled_from(KEY_KINDS))
    buckets = draw(st.sampled_from([1, 2, 4, 8]))
    partitioned = draw(st.booleans())
    commits = draw(st.lists(operations(kind), min_size=1, max_size=6))
    return kind, buckets, partitioned, commits


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_read_equals_the_model_after_every_commit(
    shared_catalog: firn.Catalog, scenario: tuple[KeyKind, int, bool, list[list[dict[str, object]]]]
) -> None:
    kind, buckets, partitioned, commits = scenario
    schema = table_schema(kind)
    table = shared_catalog.create_table(
        f"model_{next(_names)}",
        schema,
        ["part", "k"],
        ["part"] if partitioned else [],
        {"change.buckets": buckets},
    )
    model = ReferenceModel()
    snapshots = []
    for number, ops in enumerate(commits, start=1):
        assert table.commit(as_change_set(ops, schema)) == number
        model.apply(ops)
        snapshots.append((table.current_snapshot(), model.view()))
        assert as_view(table.read()) == model.view()
    # Every earlier snapshot still reads as it was.
    for snapshot, view in snapshots:
        assert as_view(table.read(snapshot=snapshot)) == view
