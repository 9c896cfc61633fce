"""Firn's Kafka events: frozen, versioned models and their JSON Schemas (publishing
them is the Kafka edge's: ``firn.kafka.publisher``).

One module per event family: ``commits`` (producers -> metrics), ``plans`` (metrics
-> planner -> executor-dispatcher), ``tasks`` (executor-dispatcher -> committer),
``compactions`` (committer -> metrics), ``dead_letters`` (any service -> firn.dlq).
"""

from firn.events.commits import CommitEvent, PartitionChange
from firn.events.compactions import CompactionEvent
from firn.events.dead_letters import DeadLetterEvent
from firn.events.envelope import Event
from firn.events.plans import PlanRequestEvent, PlanTaskEvent
from firn.events.tasks import TaskResultEvent

__all__ = [
    "CommitEvent",
    "CompactionEvent",
    "DeadLetterEvent",
    "Event",
    "PartitionChange",
    "PlanRequestEvent",
    "PlanTaskEvent",
    "TaskResultEvent",
]
