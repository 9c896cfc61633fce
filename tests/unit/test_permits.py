"""The dispatcher's batch (issue 15): highest priority first, one table per Spark job,
within the task count and the memory budget; a task over the budget runs alone;
small tasks stay a batch the dispatcher runs in its own processes, and such a batch
may take several tables' tasks (issue 37)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from firn.model.permits import Candidate, choose_batch, task_memory

MiB = 1 << 20
SPILL = 1024 * MiB


def test_the_estimate_is_decoded_input_capped_at_the_spill_budget() -> None:
    assert task_memory(10 * MiB, SPILL) == 40 * MiB + 64 * MiB
    assert task_memory(10_000 * MiB, SPILL) == SPILL + 64 * MiB


def test_the_first_candidate_sets_the_table_and_the_budget_is_kept() -> None:
    queue = [
        Candidate(1, table_id=7, input_bytes=100 * MiB, score=9.0),  # 464 MiB
        Candidate(2, table_id=8, input_bytes=1 * MiB, score=8.0),  # other table
        Candidate(3, table_id=7, input_bytes=100 * MiB, score=5.0),  # 464 MiB
        Candidate(4, table_id=7, input_bytes=1 * MiB, score=4.0),  # 68 MiB
    ]
    batch = choose_batch(queue, max_tasks=8, memory_budget=1000 * MiB, spill_budget=SPILL)
    assert [c.task_id for c in batch] == [1, 3, 4]
    tight = choose_batch(queue, max_tasks=8, memory_budget=600 * MiB, spill_budget=SPILL)
    assert [c.task_id for c in tight] == [1, 4]
    assert [c.task_id for c in choose_batch(queue, 2, 10**12, SPILL)] == [1, 3]


def test_a_task_over_the_budget_runs_alone() -> None:
    queue = [Candidate(1, 7, 10_000 * MiB, 9.0), Candidate(2, 7, MiB, 1.0)]
    assert [c.task_id for c in choose_batch(queue, 8, 512 * MiB, SPILL)] == [1]
    assert choose_batch([], 8, 512 * MiB, SPILL) == []


def test_small_tasks_stay_a_batch_the_dispatcher_runs_itself() -> None:
    queue = [Candidate(n, 7, 3 * MiB, 9.0 - n) for n in range(1, 6)]
    queue.insert(2, Candidate(9, 7, 1 * MiB, 5.0))
    local = choose_batch(queue, 8, 10**12, SPILL, local_bytes=8 * MiB)
    assert [c.task_id for c in local] == [1, 2, 9]  # 7 MiB; a third 3 MiB task would pass 8
    assert len(choose_batch(queue, 8, 10**12, SPILL)) == 6  # no local lane: all of them
    # A first task too large to run here makes a Spark job, which others may join.
    big = [Candidate(1, 7, 20 * MiB, 9.0), *queue[1:]]
    assert len(choose_batch(big, 8, 10**12, SPILL, local_bytes=8 * MiB)) == 6


def test_a_local_batch_takes_other_tables_small_tasks() -> None:
    queue = [
        Candidate(1, 7, 1 * MiB, 9.0),
        Candidate(2, 8, 2 * MiB, 8.0),
        Candidate(3, 9, 6 * MiB, 7.0),  # would pass 8 MiB in all
        Candidate(4, 9, 1 * MiB, 6.0),
    ]
    local = choose_batch(queue, 8, 10**12, SPILL, local_bytes=8 * MiB)
    assert [(c.task_id, c.table_id) for c in local] == [(1, 7), (2, 8), (4, 9)]
    # A Spark job (no local lane, or a first task too large for it) runs one table.
    assert [c.task_id for c in choose_batch(queue, 8, 10**12, SPILL)] == [1]
    big = [Candidate(5, 7, 20 * MiB, 10.0), *queue]
    assert [c.task_id for c in choose_batch(big, 8, 10**12, SPILL, 8 * MiB)] == [5, 1]


candidates = st.lists(
    st.builds(
        Candidate,
        task_id=st.integers(1, 10**6),
        table_id=st.integers(1, 3),
        input_bytes=st.integers(0, 4096 * MiB),
        score=st.floats(0, 100),
    ),
    max_size=40,
    unique_by=lambda c: c.task_id,
)


@settings(deadline=None)  # pure and fast, but these machines are shared
@given(
    candidates,
    st.integers(1, 16),
    st.integers(1, 8192 * MiB),
    st.sampled_from([0, 8 * MiB, 1024 * MiB]),
)
def test_a_batch_is_a_prefix_choice_within_its_limits_of_one_table_unless_local(
    queue: list[Candidate], most: int, budget: int, local_bytes: int
) -> None:
    batch = choose_batch(queue, most, budget, SPILL, local_bytes)
    if not queue:
        assert batch == []
        return
    assert batch[0] == queue[0]
    assert len(batch) <= most
    local = bool(local_bytes) and queue[0].input_bytes <= local_bytes
    if not local:
        assert {c.table_id for c in batch} == {queue[0].table_id}
    positions = [queue.index(c) for c in batch]
    assert positions == sorted(positions)
    reserved = sum(task_memory(c.input_bytes, SPILL) for c in batch)
    assert reserved <= budget or len(batch) == 1
    if local_bytes and queue[0].input_bytes <= local_bytes:
        assert sum(c.input_bytes for c in batch) <= local_bytes
