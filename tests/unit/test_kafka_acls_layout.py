"""The Kafka ACL layout: least privilege for the event flow, and every hop allowed."""

from __future__ import annotations

from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

from firn.kafka import Topics
from firn.kafka.acls import ROLES, bindings, layout, principal
from firn.settings import FirnSettings

SETTINGS = FirnSettings(topic_prefix="t.")
TOPICS = Topics.from_settings(SETTINGS)
ACCESS = {access.role: access for access in layout(SETTINGS)}


def test_every_role_has_one_principal() -> None:
    assert set(ACCESS) == set(ROLES)
    assert {a.principal for a in ACCESS.values()} == {f"firn-{role}" for role in ROLES}


def test_a_producer_may_write_commits_and_nothing_else() -> None:
    made = bindings(ACCESS["producer"])
    assert [(b.restype, b.name, b.operation) for b in made] == [
        (ResourceType.TOPIC, TOPICS.commits, AclOperation.WRITE)
    ]
    assert made[0].principal == f"User:{principal('producer')}"
    assert made[0].resource_pattern_type == ResourcePatternType.LITERAL


def test_the_operator_may_only_ask_for_plans() -> None:
    assert ACCESS["operator"].writes == (TOPICS.plan_requests,)
    assert ACCESS["operator"].reads == ()
    assert ACCESS["operator"].group is None


def test_each_hop_of_the_flow_is_written_by_one_role_and_read_by_the_next() -> None:
    hops = {
        TOPICS.commits: ("producer", "metrics"),
        TOPICS.plan_requests: ("metrics", "planner"),
        TOPICS.plan_tasks: ("planner", "dispatcher"),
        TOPICS.task_results: ("dispatcher", "committer"),
        TOPICS.compactions: ("committer", "metrics"),
    }
    for topic, (writer, reader) in hops.items():
        assert topic in ACCESS[writer].writes, (topic, writer)
        assert topic in ACCESS[reader].reads, (topic, reader)
    assert TOPICS.compactions in ACCESS["publisher"].reads


def test_services_read_in_their_own_group_and_no_one_reads_the_dead_letters() -> None:
    for role in ("metrics", "planner", "dispatcher", "committer", "publisher"):
        assert ACCESS[role].group == f"t.{role}"
        assert TOPICS.dlq in ACCESS[role].writes
        assert TOPICS.dlq not in ACCESS[role].reads
        assert ACCESS[role].describes_prefix == "t."
    creators = [role for role, access in ACCESS.items() if access.creates_prefix]
    assert creators == ["metrics"]
    assert ACCESS["metrics"].creates_prefix == "t.metrics-"


def test_no_binding_is_a_wildcard_or_a_deny() -> None:
    for access in ACCESS.values():
        for binding in bindings(access):
            assert binding.name not in ("*", "")
            assert binding.host == "*"
            assert binding.operation not in (AclOperation.ALL, AclOperation.ALTER)
