"""Who may do what on Kafka: one principal per Firn role, and the ACLs it needs.

The layout is least privilege for the event flow (docs/operations/configuration.md
prints it as a table, generated from here):

- a producer (every process that commits to a table) may only write ``commits``;
- each service reads its input topics in its own consumer group and writes its
  output topics and the dead letters; it may describe every Firn topic, since a
  service checks at start that they all exist;
- the metrics service may also create its Faust app's internal topics (Faust declares
  them itself);
- the operator (``firn compact``) may only write ``plan-requests``.

An administrator creates every topic (``prepare``, run by ``firn kafka-acls``, does it), so no other
principal needs to create one. Read and write imply describe in Kafka's authorizer.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

# Where the types are defined: confluent_kafka.admin re-exports them without __all__.
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from firn.errors import ServiceError
from firn.kafka.clients import admin_client
from firn.kafka.topics import Topics, ensure_topics
from firn.settings import FirnSettings

log = logging.getLogger(__name__)

ROLES = ("producer", "metrics", "planner", "dispatcher", "committer", "publisher", "operator")
"""Every Kafka principal Firn knows, as ``firn-<role>``."""

SCRAM_ITERATIONS = 8192


def principal(role: str) -> str:
    """The SASL user name of ``role`` (``firn-planner``)."""
    return f"firn-{role}"


def password_variable(role: str) -> str:
    """Where ``firn kafka-acls --users`` finds the role's password."""
    return f"FIRN_KAFKA_{role.upper()}_PASSWORD"


@dataclass(frozen=True)
class Access:
    """What one principal may do."""

    role: str
    group: str | None
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    describes_prefix: str | None = None
    creates_prefix: str | None = None

    @property
    def principal(self) -> str:
        return principal(self.role)


def faust_topics(settings: FirnSettings) -> tuple[str, str]:
    """The metrics app's internal topics as Faust names them: its table's changelog
    and its leader-election topic."""
    app = f"{settings.topic_prefix}metrics"
    return f"{app}-partitions-changelog", f"{app}-__assignor-__leader"


def layout(settings: FirnSettings) -> tuple[Access, ...]:
    """Every principal's access under ``settings``' topic prefix."""
    t = Topics.from_settings(settings)
    prefix = settings.topic_prefix
    internal = faust_topics(settings)
    return (
        Access("producer", None, (), (t.commits,)),
        Access(
            "metrics",
            f"{prefix}metrics",
            (t.commits, t.compactions, t.metrics_updates, *internal),
            (t.metrics_updates, t.plan_requests, t.dlq, *internal),
            describes_prefix=prefix,
            creates_prefix=f"{prefix}metrics-",
        ),
        Access("planner", f"{prefix}planner", (t.plan_requests,), (t.plan_tasks, t.dlq), prefix),
        Access(
            "dispatcher",
            f"{prefix}dispatcher",
            (t.plan_tasks,),
            # Its lease sweep announces again the tasks whose executor vanished.
            (t.task_results, t.plan_tasks, t.dlq),
            prefix,
        ),
        Access(
            "committer", f"{prefix}committer", (t.task_results,), (t.compactions, t.dlq), prefix
        ),
        Access("publisher", f"{prefix}publisher", (t.compactions,), (t.dlq,), prefix),
        Access("operator", None, (), (t.plan_requests,)),
    )


def bindings(access: Access) -> list[AclBinding]:
    """The ALLOW bindings that give ``access``, and nothing more."""
    user = f"User:{access.principal}"

    def allow(
        kind: ResourceType, name: str, op: AclOperation, pattern: ResourcePatternType
    ) -> AclBinding:
        return AclBinding(kind, name, pattern, user, "*", op, AclPermissionType.ALLOW)

    literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    made = [allow(ResourceType.TOPIC, t, AclOperation.READ, literal) for t in access.reads]
    made += [allow(ResourceType.TOPIC, t, AclOperation.WRITE, literal) for t in access.writes]
    if access.group is not None:
        made.append(allow(ResourceType.GROUP, access.group, AclOperation.READ, literal))
    if access.describes_prefix is not None:
        made.append(
            allow(ResourceType.TOPIC, access.describes_prefix, AclOperation.DESCRIBE, prefixed)
        )
    if access.creates_prefix is not None:
        made.append(allow(ResourceType.TOPIC, access.creates_prefix, AclOperation.CREATE, prefixed))
    return made


def apply_acls(admin: AdminClient, accesses: tuple[Access, ...], timeout: float = 30.0) -> int:
    """Create every binding of ``accesses`` (creating one that exists changes nothing);
    the number of bindings."""
    wanted = [binding for access in accesses for binding in bindings(access)]
    try:
        for future in admin.create_acls(wanted, request_timeout=timeout).values():
            future.result(timeout=timeout)
    except KafkaException as exc:
        raise ServiceError(f"cannot create the Kafka ACLs: {exc}") from exc
    return len(wanted)


def set_passwords(
    admin: AdminClient, passwords: Mapping[str, str], timeout: float = 30.0
) -> list[str]:
    """Create or update the SCRAM-SHA-512 credential of each role in ``passwords``; the
    user names. The password crosses the wire salted and hashed, as Kafka's admin
    API sends it."""
    if not passwords:
        return []
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(
            principal(role),
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
            password.encode(),
            secrets.token_bytes(32),
        )
        for role, password in passwords.items()
    ]
    try:
        futures = admin.alter_user_scram_credentials(upserts, request_timeout=timeout)
        for future in futures.values():
            future.result(timeout=timeout)
    except KafkaException as exc:
        raise ServiceError(f"cannot set the Kafka users' credentials: {exc}") from exc
    return [principal(role) for role in passwords]


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` did."""

    accesses: tuple[Access, ...]
    users: list[str]
    acls: int


def prepare(settings: FirnSettings, passwords: Mapping[str, str]) -> Prepared:
    """As the cluster's admin (``settings`` log in as a super user): create every Firn
    topic, so no other principal needs to, the SCRAM users of ``passwords`` (role to
    password) and every principal's ACLs. Running it again changes nothing but the
    passwords given."""
    ensure_topics(settings, Topics.from_settings(settings).all())
    changelog, _leader = faust_topics(settings)
    # Compacted, as Faust would make it: it holds the metrics table's latest values.
    ensure_topics(settings, (changelog,), config={"cleanup.policy": "compact"})
    admin = admin_client(settings)
    users = set_passwords(admin, passwords)
    accesses = layout(settings)
    return Prepared(accesses, users, apply_acls(admin, accesses))
