"""Firn's Kafka events: frozen, versioned models, their JSON Schemas, publishing."""

from firn.events.commits import CommitEvent, PartitionChange
from firn.events.envelope import Event

__all__ = ["CommitEvent", "Event", "PartitionChange"]
