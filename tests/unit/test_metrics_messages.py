"""The metrics service's updates topic carries one table's updates per message
(issue 37: a commit of four partitions was four messages through Kafka and Faust):
grouped per table, split past ``MESSAGE_UPDATES``, and read back in order, per
partition; a message written before the grouping (one update) still reads."""

from __future__ import annotations

import json

import pytest

from firn.events.wire import UnhandledEventError
from services.metrics.handlers import (
    MESSAGE_UPDATES,
    grouped_by,
    parse_updates,
    partition_of,
    update_messages,
)


def commit(table_id: int, partition: str, seq: int) -> dict[str, object]:
    return {
        "kind": "commit",
        "table": f"t{table_id}",
        "table_id": table_id,
        "partition_key": partition,
        "increment": {"seq": seq},
    }


def test_one_message_per_table_in_order() -> None:
    found = [
        commit(1, "p=a", 1),
        commit(2, "p=a", 1),
        commit(1, "p=b", 1),
        commit(1, "p=a", 2),
    ]
    messages = update_messages(found)
    assert [
        (key, table, [u["increment"]["seq"] for u in updates]) for key, table, updates in messages
    ] == [
        ("1", "t1", [1, 1, 2]),
        ("2", "t2", [1]),
    ]
    read = parse_updates(json.dumps(messages[0][2]).encode())
    assert {
        key: [u["increment"]["seq"] for u in batch]
        for key, batch in grouped_by(read, partition_of).items()
    } == {
        "1/p=a": [1, 2],
        "1/p=b": [1],
    }


def test_a_large_table_is_split_into_bounded_messages() -> None:
    found = [commit(7, f"p={i}", 1) for i in range(2 * MESSAGE_UPDATES + 1)]
    messages = update_messages(found)
    assert [len(updates) for _, _, updates in messages] == [MESSAGE_UPDATES, MESSAGE_UPDATES, 1]
    assert {(key, table) for key, table, _ in messages} == {("7", "t7")}
    assert [u for _, _, updates in messages for u in updates] == found


def test_a_single_update_from_before_the_grouping_still_reads() -> None:
    update = commit(3, "p=a", 4)
    assert parse_updates(json.dumps(update).encode()) == [update]


@pytest.mark.parametrize(
    "value",
    [b"", b"not json", b"[]", b"3", b"[3]", json.dumps([{"kind": "commit"}]).encode()],
)
def test_what_is_not_a_list_of_updates_is_refused(value: bytes) -> None:
    with pytest.raises(UnhandledEventError):
        parse_updates(value)
