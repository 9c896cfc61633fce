"""The task and plan state machines of design §9, as data: the states, the moves between
them, and who may make each move.

A machine is an Enum of states and one immutable table, ``old -> new -> actors``.
Every state change goes through ``accept`` (raises on a move the table does not allow,
or one the actor may not make) or ``try_accept`` (returns whether it is allowed), so
no caller hand-checks states; the Postgres adapter (``firn.catalog.transitions``)
writes an accepted move as a compare-and-set on the old state, which is what makes
concurrent and redelivered handlers safe.

Task: ``Init -> Pending -> Executing -> Prepared -> Committed``; ``Executing ->
Failed``; ``Failed -> Pending`` (retry, new attempt); ``Init | Pending | Failed ->
Replaced`` (a newer plan took over, or the plan failed); ``Executing -> Pending``
(lease expired); ``Prepared -> Failed`` (the plan failed).

Plan: ``Planned -> Executing -> Committing -> Committed``, and ``Failed`` or
``Replaced`` from the states where that can happen.

Actors are roles, not processes: the planner, dispatcher and committer services each
play one (the dispatcher service also runs the sweep), and ``firn.compact`` plays
planner, dispatcher and committer in one process. Failing a plan
(``firn.catalog.plans.fail_plan``) replaces its waiting tasks and fails its prepared
ones; the dispatcher (a task out of attempts) and the committer (a failed commit
check) both do it, so both may make every move of that cascade.
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


class PlanOutcome(StrEnum):
    """What one try to commit a plan did."""

    COMMITTED = "committed"
    ALREADY = "already"
    """Committed before: a repeated try, after a crash between commit and event."""
    WAITING = "waiting"
    """Not every task is Prepared yet."""
    STALE = "stale"
    """Replaced or failed earlier, or no such plan."""
    FAILED = "failed"
    """A commit check failed (or a task failed the plan): the plan is Failed."""


class Actor(StrEnum):
    """Who moves tasks and plans."""

    PLANNER = "planner"
    """Stores a plan, releases its tasks once they are announced, and replaces the
    open plan of the partition that a new one supersedes."""
    DISPATCHER = "dispatcher"
    """Claims tasks, records each attempt's result (a retry, or failing the plan when a
    task is out of attempts)."""
    SWEEPER = "sweeper"
    """The dispatcher's periodic sweep: takes back tasks whose lease ran out, and
    releases tasks a planner left in Init when it died."""
    COMMITTER = "committer"
    """Commits a plan whose tasks are all Prepared, or fails it when a check fails."""


class InvalidTransitionError(FirnError):
    """A state change the machine does not allow, or not to this actor: a bug, or a
    stale or duplicated event."""


S = TypeVar("S", TaskState, PlanState)


@dataclass(frozen=True)
class StateMachine(Generic[S]):
    """States, where each may go and who may move it there, and where every
    instance starts."""

    name: str
    initial: S
    moves: Mapping[S, Mapping[S, frozenset[Actor]]]
    """For each state, the states it may go to, each with the actors that may move it."""

    @property
    def transitions(self) -> Mapping[S, frozenset[S]]:
        return MappingProxyType({old: frozenset(news) for old, news in self.moves.items()})

    @property
    def terminal(self) -> frozenset[S]:
        return frozenset(s for s, targets in self.moves.items() if not targets)

    def actors(self, old: S, new: S) -> frozenset[Actor]:
        """Who may move an instance from ``old`` to ``new`` (nobody: not a move)."""
        return self.moves[old].get(new, frozenset())

    def try_accept(self, old: S, new: S, *, by: Actor) -> bool:
        return by in self.actors(old, new)

    def accept(self, old: S, new: S, *, by: Actor) -> None:
        allowed = self.actors(old, new)
        if not allowed:
            raise InvalidTransitionError(f"{self.name} cannot go from {old} to {new}")
        if by not in allowed:
            raise InvalidTransitionError(
                f"the {by} may not move a {self.name} from {old} to {new} "
                f"(only: {', '.join(sorted(allowed))})"
            )


def _frozen(
    moves: Mapping[S, Mapping[S, frozenset[Actor]]],
) -> Mapping[S, Mapping[S, frozenset[Actor]]]:
    return MappingProxyType({old: MappingProxyType(dict(news)) for old, news in moves.items()})


A = Actor
PLAN_FAILERS = frozenset({A.DISPATCHER, A.COMMITTER})
"""Who fails a plan, and so makes every move of the cascade that follows."""
REPLACERS = PLAN_FAILERS | {A.PLANNER}
"""Who replaces a waiting task: a new plan for its partition, or its plan failing."""

T = TaskState
TASK = StateMachine[TaskState](
    "task",
    T.INIT,
    _frozen(
        {
            T.INIT: {T.PENDING: frozenset({A.PLANNER, A.SWEEPER}), T.REPLACED: REPLACERS},
            T.PENDING: {T.EXECUTING: frozenset({A.DISPATCHER}), T.REPLACED: REPLACERS},
            T.EXECUTING: {
                T.PREPARED: frozenset({A.DISPATCHER}),
                T.FAILED: frozenset({A.DISPATCHER}),
                T.PENDING: frozenset({A.SWEEPER}),
            },
            T.PREPARED: {T.COMMITTED: frozenset({A.COMMITTER}), T.FAILED: PLAN_FAILERS},
            T.FAILED: {T.PENDING: frozenset({A.DISPATCHER}), T.REPLACED: REPLACERS},
            T.COMMITTED: {},
            T.REPLACED: {},
        }
    ),
)

P = PlanState
PLAN = StateMachine[PlanState](
    "plan",
    P.PLANNED,
    _frozen(
        {
            P.PLANNED: {
                P.EXECUTING: frozenset({A.DISPATCHER}),
                P.FAILED: PLAN_FAILERS,
                P.REPLACED: frozenset({A.PLANNER}),
            },
            P.EXECUTING: {
                P.COMMITTING: frozenset({A.COMMITTER}),
                P.FAILED: PLAN_FAILERS,
                P.REPLACED: frozenset({A.PLANNER}),
            },
            P.COMMITTING: {P.COMMITTED: frozenset({A.COMMITTER}), P.FAILED: PLAN_FAILERS},
            P.COMMITTED: {},
            P.FAILED: {},
            P.REPLACED: {},
        }
    ),
)
