"""The task and plan state machines of SPEC 9, as data.

A machine is an Enum of states and one immutable transition table. Every state
change goes through ``accept`` (raises on a move the table does not allow) or
``try_accept`` (returns whether it is allowed), so no caller hand-checks states;
the Postgres adapter writes an accepted move as a compare-and-set on the old state,
which is what makes concurrent and redelivered handlers safe.

Task: ``Init -> Pending -> Executing -> Prepared -> Committed``; ``Executing ->
Failed``; ``Failed -> Pending`` (retry, new attempt); ``Init | Pending | Failed ->
Replaced`` (a newer plan took over); ``Executing -> Pending`` (lease expired);
``Prepared -> Failed`` (the plan's commit validation failed).

Plan: ``Planned -> Executing -> Committing -> Committed``, and ``Failed`` or
``Replaced`` from the states where that can happen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Generic, TypeVar

from firn.errors import FirnError


class TaskState(StrEnum):
    INIT = "Init"
    PENDING = "Pending"
    EXECUTING = "Executing"
    PREPARED = "Prepared"
    COMMITTED = "Committed"
    FAILED = "Failed"
    REPLACED = "Replaced"


class PlanState(StrEnum):
    PLANNED = "Planned"
    EXECUTING = "Executing"
    COMMITTING = "Committing"
    COMMITTED = "Committed"
    FAILED = "Failed"
    REPLACED = "Replaced"


class InvalidTransitionError(FirnError):
    """A state change the machine does not allow; a stale or duplicated event."""


S = TypeVar("S", TaskState, PlanState)


@dataclass(frozen=True)
class StateMachine(Generic[S]):
    """States, where each may go, and where every instance starts."""

    name: str
    initial: S
    transitions: Mapping[S, frozenset[S]]

    @property
    def terminal(self) -> frozenset[S]:
        return frozenset(s for s, targets in self.transitions.items() if not targets)

    def try_accept(self, old: S, new: S) -> bool:
        return new in self.transitions[old]

    def accept(self, old: S, new: S) -> None:
        if not self.try_accept(old, new):
            raise InvalidTransitionError(f"{self.name} cannot go from {old} to {new}")


T = TaskState
TASK = StateMachine[TaskState](
    "task",
    T.INIT,
    MappingProxyType(
        {
            T.INIT: frozenset({T.PENDING, T.REPLACED}),
            T.PENDING: frozenset({T.EXECUTING, T.REPLACED}),
            T.EXECUTING: frozenset({T.PREPARED, T.FAILED, T.PENDING}),
            T.PREPARED: frozenset({T.COMMITTED, T.FAILED}),
            T.FAILED: frozenset({T.PENDING, T.REPLACED}),
            T.COMMITTED: frozenset(),
            T.REPLACED: frozenset(),
        }
    ),
)

P = PlanState
PLAN = StateMachine[PlanState](
    "plan",
    P.PLANNED,
    MappingProxyType(
        {
            P.PLANNED: frozenset({P.EXECUTING, P.FAILED, P.REPLACED}),
            P.EXECUTING: frozenset({P.COMMITTING, P.FAILED, P.REPLACED}),
            P.COMMITTING: frozenset({P.COMMITTED, P.FAILED}),
            P.COMMITTED: frozenset(),
            P.FAILED: frozenset(),
            P.REPLACED: frozenset(),
        }
    ),
)
