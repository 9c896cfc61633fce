"""The task and plan state machines: complete, well-formed, exactly design §9, and
every move with the actors that may make it."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import pytest

from firn.model.states import (
    PLAN,
    TASK,
    Actor,
    InvalidTransitionError,
    PlanState,
    StateMachine,
    TaskState,
)

MACHINES = [(TASK, TaskState), (PLAN, PlanState)]


def reachable(machine: StateMachine[Any], start: Any) -> set[Any]:
    seen, todo = {start}, deque([start])
    while todo:
        for nxt in machine.transitions[todo.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize(("machine", "states"), MACHINES)
def test_every_state_is_covered_and_reachable(machine: StateMachine[Any], states: Any) -> None:
    assert set(machine.transitions) == set(states)
    assert reachable(machine, machine.initial) == set(states)
    for state in states:  # nothing gets stuck outside a terminal state
        assert reachable(machine, state) & machine.terminal


def test_task_moves_are_those_of_spec_9() -> None:
    t = TaskState
    allowed = {(old, new) for old, news in TASK.transitions.items() for new in news}
    assert allowed == {
        (t.INIT, t.PENDING),
        (t.PENDING, t.EXECUTING),
        (t.EXECUTING, t.PREPARED),
        (t.PREPARED, t.COMMITTED),
        (t.EXECUTING, t.FAILED),
        (t.FAILED, t.PENDING),
        (t.INIT, t.REPLACED),
        (t.PENDING, t.REPLACED),
        (t.FAILED, t.REPLACED),
        (t.EXECUTING, t.PENDING),
        (t.PREPARED, t.FAILED),
    }
    assert TASK.terminal == {t.COMMITTED, t.REPLACED}


def test_refused_moves_raise_and_try_accept_says_no() -> None:
    assert TASK.try_accept(TaskState.PENDING, TaskState.EXECUTING, by=Actor.DISPATCHER)
    assert not TASK.try_accept(TaskState.COMMITTED, TaskState.PENDING, by=Actor.DISPATCHER)
    with pytest.raises(InvalidTransitionError, match="task cannot go from Executing to Replaced"):
        TASK.accept(TaskState.EXECUTING, TaskState.REPLACED, by=Actor.PLANNER)
    with pytest.raises(InvalidTransitionError):
        PLAN.accept(PlanState.COMMITTED, PlanState.FAILED, by=Actor.COMMITTER)


@pytest.mark.parametrize(("machine", "states"), MACHINES)
def test_every_move_has_an_actor(machine: StateMachine[Any], states: Any) -> None:
    for old, news in machine.moves.items():
        for new, actors in news.items():
            assert actors, f"nobody may move a {machine.name} from {old} to {new}"
            assert actors <= set(Actor)


@pytest.mark.parametrize(("machine", "states"), MACHINES)
def test_a_move_by_the_wrong_actor_is_refused(machine: StateMachine[Any], states: Any) -> None:
    for old, news in machine.moves.items():
        for new, actors in news.items():
            for actor in actors:
                machine.accept(old, new, by=actor)
            for actor in set(Actor) - actors:
                assert not machine.try_accept(old, new, by=actor)
                with pytest.raises(InvalidTransitionError, match=f"the {actor} may not move"):
                    machine.accept(old, new, by=actor)


def test_who_moves_a_task() -> None:
    t, a = TaskState, Actor
    assert TASK.actors(t.PENDING, t.EXECUTING) == {a.DISPATCHER}  # only a claim
    assert TASK.actors(t.EXECUTING, t.PENDING) == {a.SWEEPER}  # only an expired lease
    assert TASK.actors(t.FAILED, t.PENDING) == {a.DISPATCHER}  # a retry
    assert TASK.actors(t.PREPARED, t.COMMITTED) == {a.COMMITTER}
    assert TASK.actors(t.INIT, t.PENDING) == {a.PLANNER, a.SWEEPER}
    with pytest.raises(InvalidTransitionError, match="the planner may not move a task"):
        TASK.accept(t.EXECUTING, t.PENDING, by=a.PLANNER)
    planner_moves = {
        (o, n) for o, news in TASK.moves.items() for n, who in news.items() if a.PLANNER in who
    }
    assert planner_moves == {
        (t.INIT, t.PENDING),
        (t.INIT, t.REPLACED),
        (t.PENDING, t.REPLACED),
        (t.FAILED, t.REPLACED),
    }


def test_every_actor_moves_something_and_is_named_by_a_caller() -> None:
    named = {
        actor
        for machine, _ in MACHINES
        for news in machine.moves.values()
        for who in news.values()
        for actor in who
    }
    assert named == set(Actor)
    root = Path(__file__).resolve().parents[2]
    sources = [
        path.read_text()
        for folder in (root / "shared" / "firn", root / "services")
        for path in folder.rglob("*.py")
        if path.name != "states.py"
    ]
    for actor in Actor:
        assert any(f"Actor.{actor.name}" in text for text in sources), f"no caller moves as {actor}"


def test_state_values_are_the_names_stored_in_postgres() -> None:
    assert [s.value for s in TaskState] == [
        "Init",
        "Pending",
        "Executing",
        "Prepared",
        "Committed",
        "Failed",
        "Replaced",
    ]
