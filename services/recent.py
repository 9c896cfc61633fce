"""What a service process did lately, remembered up to a bound.

The planner and the committer each announce work on Kafka; a later event for the same
work (a redelivery, a covered request, a plan's second task result) need not announce
it again from the same process. After a restart the memory is empty and everything is
announced once more, which is what covers a crash between the catalog write and the
announcement.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Any, Generic, NamedTuple, TypeVar

K = TypeVar("K", bound=Hashable)


class Recent(Generic[K]):
    """The last ``bound`` keys added, oldest forgotten first."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._keys: OrderedDict[K, None] = OrderedDict()

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, keys: Iterable[K]) -> None:
        for key in keys:
            self._keys[key] = None
        while len(self._keys) > self.bound:
            self._keys.popitem(last=False)


class TaskKey(NamedTuple):
    """A task attempt as a plan-task or task-result event names it: a service that
    remembers what it did to a task knows an event that names it with every field
    alike; one that differs in any field is checked against the catalog as any other."""

    task_id: int
    attempt: int
    plan_id: int
    table_id: int
    table: str
    partition_key: str

    @classmethod
    def of(cls, event: Any) -> TaskKey:
        """The key of a plan-task or task-result event."""
        return cls(
            event.task_id,
            event.attempt,
            event.plan_id,
            event.table_id,
            event.table,
            event.partition_key,
        )
