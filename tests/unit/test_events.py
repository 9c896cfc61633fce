"""Event models, their generated JSON Schemas, and the golden wire format."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from firn.errors import ConfigError
from firn.events.commits import CommitEvent
from firn.events.plans import PlanRequestEvent
from firn.events.schemas import EVENT_MODELS, generated_schema, schema_file, validate
from firn.events.wire import UnhandledEventError, as_event, decode

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((GOLDEN / name).read_text())
    return loaded


@pytest.mark.parametrize("event_type", sorted(EVENT_MODELS))
def test_schema_files_are_generated_from_the_models(event_type: str) -> None:
    on_disk = json.loads(schema_file(event_type).read_text())
    assert on_disk == generated_schema(EVENT_MODELS[event_type]), (
        "event model changed: run `python -m firn.events.schemas` and commit the schema"
    )


def test_golden_commit_event_matches_schema_and_model() -> None:
    event = golden("commit.v1.json")
    validate(event)
    model = CommitEvent.model_validate(event)
    assert model.seq == 42
    assert json.loads(model.to_json()) == json.loads(
        CommitEvent.model_validate_json(model.to_json()).to_json()
    )
    validate(json.loads(model.to_json()))


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda e: e.pop("seq"), "(root)"),
        (lambda e: e.update(schema_version=2), "schema_version"),
        (lambda e: e.update(seq=0), "seq"),
        (lambda e: e.update(event_id="not-a-uuid"), "event_id"),
        (lambda e: e.update(surprise=1), "(root)"),
        (lambda e: e["partitions"][0].update(insert_rows=-1), "partitions/0/insert_rows"),
        (lambda e: e.update(partitions=[]), "partitions"),
    ],
)
def test_invalid_commit_events_are_refused(change: Any, where: str) -> None:
    event = copy.deepcopy(golden("commit.v1.json"))
    change(event)
    with pytest.raises(ConfigError, match=re.escape(f"invalid at {where}:")):
        validate(event)


def test_unknown_event_types_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown event_type"):
        validate({"event_type": "nope"})


ADDED_LATER = {"plan-request": {"scope"}}


@pytest.mark.parametrize("event_type", sorted(EVENT_MODELS))
def test_every_event_type_has_a_golden_fixture_that_validates_and_round_trips(
    event_type: str,
) -> None:
    event = golden(f"{event_type}.v1.json")
    validate(event)
    model = EVENT_MODELS[event_type].model_validate(event)
    assert json.loads(model.to_json()) == event
    # Every field on the wire is required (dropping any one is refused), but those
    # added to a version later, which readers default.
    for field in event.keys() - ADDED_LATER.get(event_type, set()):
        partial = {k: v for k, v in event.items() if k != field}
        with pytest.raises(ConfigError):
            validate(partial)


def test_a_plan_request_without_scope_is_valid_and_means_due() -> None:
    # Requests written before ``scope`` existed must still be read the same way.
    event = golden("plan-request.v1.json")
    del event["scope"]
    validate(event)
    assert PlanRequestEvent.model_validate(event).scope == "due"


def test_an_event_comes_off_the_wire_as_its_model_or_is_refused() -> None:
    event = golden("commit.v1.json")
    read = as_event(decode(json.dumps(event).encode()))
    assert isinstance(read, CommitEvent)
    assert read.seq == 42
    request = as_event(golden("plan-request.v1.json"))
    assert isinstance(request, PlanRequestEvent)
    broken = {**event, "seq": 0}
    with pytest.raises(ConfigError, match="invalid at seq:"):
        as_event(broken)
    with pytest.raises(ConfigError, match="unknown event_type 'ping'"):
        as_event({"event_type": "ping"})
    with pytest.raises(UnhandledEventError, match="not JSON"):
        decode(b"{")
