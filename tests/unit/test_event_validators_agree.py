"""The compiled event validator (the hot paths' fast one) and the walking one (which
names what is wrong) accept exactly the same events: every golden event, mutated at
random, gets the same verdict from both."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import fastjsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from firn.errors import ConfigError
from firn.events.schemas import EVENT_MODELS, _accepts, _validator, validate

GOLDEN = Path(__file__).parent / "golden"

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.uuids().map(str),
    st.uuids().map(lambda u: str(u).upper()),
    st.uuids().map(lambda u: str(u).replace("-", "")),
    st.datetimes().map(lambda d: d.isoformat() + "Z"),
    st.datetimes().map(lambda d: d.isoformat()),
    st.sampled_from(["U", "D", "major", "minor", "", "Committed", "2026-13-01T00:00:00Z"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place inside ``value`` a mutation can reach."""
    found = [at]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*at, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*at, index))
    return found


@st.composite
def mutated_events(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A golden event of some type, mutated (its ``event_type`` too: the type's
    validators judge it all the same)."""
    event_type = draw(st.sampled_from(sorted(EVENT_MODELS)))
    event = copy.deepcopy(json.loads((GOLDEN / f"{event_type}.v1.json").read_text()))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(_paths(event)[1:]))
        parent: Any = event
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        how = draw(st.sampled_from(["replace", "delete", "add"]))
        if how == "replace":
            parent[last] = draw(VALUES)
        elif how == "delete" and isinstance(parent, dict):
            del parent[last]
        elif how == "delete":
            parent.pop(last)
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=6))] = draw(VALUES)
        else:
            parent.append(draw(VALUES))
    return event_type, event


def _walk_accepts(event_type: str, event: dict[str, Any]) -> bool:
    return _validator(event_type).is_valid(event)


def _fast_accepts(event_type: str, event: dict[str, Any]) -> bool:
    try:
        _accepts(event_type)(event)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


@settings(max_examples=600, deadline=None)
@given(mutated_events())
def test_both_validators_give_every_event_the_same_verdict(
    mutated: tuple[str, dict[str, Any]],
) -> None:
    event_type, event = mutated
    assert _fast_accepts(event_type, event) == _walk_accepts(event_type, event), event


@pytest.mark.parametrize("event_type", sorted(EVENT_MODELS))
def test_a_refused_event_names_where_it_is_wrong(event_type: str) -> None:
    event = json.loads((GOLDEN / f"{event_type}.v1.json").read_text())
    event["event_id"] = "not-a-uuid"
    with pytest.raises(ConfigError, match="invalid at event_id:"):
        validate(event)
