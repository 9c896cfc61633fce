"""The JSON Schemas of Firn's events: generated from the models, kept in
``firn/schemas/`` as the contract for producers in other languages, and used to
validate events at the edges.

Regenerate after changing an event model (a unit test fails until you do)::

    python -m firn.events.schemas
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

import fastjsonschema
import jsonschema

from firn.errors import ConfigError
from firn.events.commits import CommitEvent
from firn.events.compactions import CompactionEvent
from firn.events.dead_letters import DeadLetterEvent
from firn.events.envelope import Event
from firn.events.plans import PlanRequestEvent, PlanTaskEvent
from firn.events.tasks import TaskResultEvent

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"

EVENT_MODELS: dict[str, type[Event]] = {
    model.model_fields["event_type"].default: model
    for model in (
        CommitEvent,
        PlanRequestEvent,
        PlanTaskEvent,
        TaskResultEvent,
        CompactionEvent,
        DeadLetterEvent,
    )
}
"""Every event type, by its ``event_type``."""


def schema_file(event_type: str, version: int = 1) -> Path:
    return SCHEMA_DIR / f"{event_type}.v{version}.schema.json"


def generated_schema(model: type[Event]) -> dict[str, Any]:
    schema = model.model_json_schema(mode="serialization")
    event_type = model.model_fields["event_type"].default
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://firn.dev/schemas/{event_type}.v1.schema.json",
        **schema,
    }


@cache
def _schema(event_type: str) -> dict[str, Any]:
    # Through importlib.resources, not the path: Firn may run from a zip (the one
    # firn.engine.shipping adds to a Spark session, which the data source's driver-side
    # workers import too).
    text = resources.files("firn").joinpath("schemas", schema_file(event_type).name).read_text()
    return cast(dict[str, Any], json.loads(text))


@cache
def _validator(event_type: str) -> jsonschema.protocols.Validator:
    schema = _schema(event_type)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@cache
def _accepts(event_type: str) -> Any:
    """The schema compiled to Python code: about 20 times faster than walking it, which
    every event on the hot paths pays for (0.4 ms a 4-partition commit event walked,
    at the producer and again at the metrics service). Its formats are the walking
    validator's own checks, so both accept the same events (a unit test holds them to
    it); the walking validator still names what is wrong with an event refused."""
    checker = _validator(event_type).format_checker
    assert checker is not None
    formats = {name: _conforms_to(checker, name) for name in checker.checkers}
    return fastjsonschema.compile(_schema(event_type), formats=formats)


def _conforms_to(checker: jsonschema.FormatChecker, name: str) -> Any:
    return lambda value: checker.conforms(value, name)


def validate(event: dict[str, Any]) -> None:
    """``ConfigError`` naming the first violation unless ``event`` matches its schema."""
    event_type = event.get("event_type")
    if event_type not in EVENT_MODELS:
        raise ConfigError(f"unknown event_type {event_type!r}")
    try:
        _accepts(event_type)(event)
        return
    except fastjsonschema.JsonSchemaException as refused:
        first = refused
    error = jsonschema.exceptions.best_match(_validator(event_type).iter_errors(event))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise ConfigError(f"{event_type} event invalid at {where}: {error.message}")
    # The two validators disagree: refuse, as the stricter one does.
    raise ConfigError(f"{event_type} event invalid: {first}")


def write_schemas() -> list[Path]:
    written = []
    for model in EVENT_MODELS.values():
        path = schema_file(model.model_fields["event_type"].default)
        path.write_text(json.dumps(generated_schema(model), indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_schemas():
        print(path)
