"""The task and plan state machines: complete, well-formed, and exactly SPEC 9."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from firn.model.states import (
    PLAN,
    TASK,
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
    assert TASK.try_accept(TaskState.PENDING, TaskState.EXECUTING)
    assert not TASK.try_accept(TaskState.COMMITTED, TaskState.PENDING)
    with pytest.raises(InvalidTransitionError, match="task cannot go from Executing to Replaced"):
        TASK.accept(TaskState.EXECUTING, TaskState.REPLACED)
    with pytest.raises(InvalidTransitionError):
        PLAN.accept(PlanState.COMMITTED, PlanState.FAILED)


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
