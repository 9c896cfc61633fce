"""SASL over TLS for the local Kafka broker, with an authorizer and no open door.

The broker's client listener speaks ``SASL_SSL`` with a certificate from the stack's
own CA (``tls.py``), so a client verifies the broker the way ``sslmode=verify-full``
verifies Postgres. Two mechanisms are on it:

- ``SCRAM-SHA-512`` for every Firn principal (services, producers, the operator): their
  credentials live in the cluster's metadata and are set by ``firn kafka-acls``;
- ``PLAIN`` for the broker's own admin only, whose password is in the broker's JAAS
  configuration. KRaft cannot check SCRAM on the controller listener (the credentials
  are in the metadata the controller serves), so the admin is the one principal that
  can exist before the cluster does: it bootstraps the SCRAM users and the ACLs.

The controller listener takes the admin's PLAIN login too, so nobody reaches the
controller anonymously. ``StandardAuthorizer`` with no ACL means no access:
``super.users`` holds the admin alone.
"""

from __future__ import annotations

import json
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from firn.kafka.acls import ROLES, prepare, principal
from firn.settings import FirnSettings

from .private_files import write_private
from .tls import ServerCertificate, server_certificate

ADMIN = "admin"
SCRAM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class BrokerSecurity:
    """What a secured broker needs: its admin's password and its TLS files."""

    admin_password: str
    ca: Path
    keystore: Path
    """The broker's key and certificate in one PEM file (Kafka's ``PEM`` keystore)."""

    @classmethod
    def create(cls, folder: Path) -> BrokerSecurity:
        """A new admin password, and the broker's certificate from the CA in ``folder``
        (made there if missing: the local stack shares one CA between its servers)."""
        made = server_certificate(folder, "kafka")
        keystore = write_keystore(made, folder / "kafka-keystore.pem")
        return cls(admin_password=secrets.token_urlsafe(18), ca=made.ca, keystore=keystore)

    def broker_settings(self, port: int, controller_port: int) -> dict[str, str]:
        """``server.properties`` lines over a plain node's: the listeners, TLS, the
        SASL mechanisms with the admin's logins, and the authorizer."""
        plain = _jaas("plain.PlainLoginModule", ADMIN, self.admin_password, self.admin_password)
        return {
            "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
            "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": f"{SCRAM},PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def client_config(
        self, username: str, mechanism: str = SCRAM
    ) -> dict[str, str | int | float | bool]:
        """``FIRN_KAFKA_CONFIG`` of a client logging in as ``username`` (its password
        goes in ``FIRN_KAFKA_SASL_PASSWORD``)."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": username,
            "ssl.ca.location": str(self.ca),
        }

    def admin_config(self) -> dict[str, Any]:
        """librdkafka properties of the admin, password included."""
        return {**self.client_config(ADMIN, "PLAIN"), "sasl.password": self.admin_password}


def write_keystore(made: ServerCertificate, path: Path) -> Path:
    """The server's key and certificate in one PEM file, Kafka's ``PEM`` keystore,
    readable by its owner only."""
    return write_private(path, made.key.read_bytes() + made.certificate.read_bytes())


def _jaas(module: str, username: str, password: str, admin_password: str) -> str:
    return (
        f"org.apache.kafka.common.security.{module} required "
        f'username="{username}" password="{password}" user_{ADMIN}="{admin_password}";'
    )


def kafka_logins(
    bootstrap: str, security: BrokerSecurity, folder: Path
) -> dict[str, dict[str, str]]:
    """As the broker's admin: Firn's topics, a SCRAM user with a new password for every
    Firn role, and their ACLs (``firn.kafka.acls.prepare``, what ``firn kafka-acls
    --users`` does). Returns each role's FIRN_KAFKA_ variables and writes them to
    ``<folder>/<role>.env`` (readable by its owner only) for a shell to source."""
    admin = FirnSettings(
        kafka_bootstrap=bootstrap,
        kafka_config=security.client_config(ADMIN, "PLAIN"),
        kafka_sasl_password=SecretStr(security.admin_password),
    )
    passwords = {role: secrets.token_urlsafe(18) for role in ROLES}
    prepare(admin, passwords)
    logins = {}
    for role, password in passwords.items():
        logins[role] = {
            "FIRN_KAFKA_BOOTSTRAP": bootstrap,
            "FIRN_KAFKA_CONFIG": json.dumps(security.client_config(principal(role))),
            "FIRN_KAFKA_SASL_PASSWORD": password,
        }
        lines = "".join(f"{k}={shlex.quote(v)}\n" for k, v in logins[role].items())
        write_private(folder / f"{role}.env", lines)
    return logins
