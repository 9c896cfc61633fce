"""The certificates of docker-compose.yml's stack, made once by its ``certs`` job into
the ``certs`` volume (``python -m firn_localstack.compose_certs /certs``): the stack's
CA, and certificates for Postgres and Kafka valid for their service names, so every
client verifies in full (``sslmode=verify-full``, librdkafka's host name check).

The servers run as other users than the job: the Postgres key goes to uid 999 (the
``postgres`` user of the official image and of firn/postgres) and the Kafka keystore to
uid 1000 (``appuser`` of apache/kafka; firn/kafka runs as root), each readable by its
owner only, as both servers insist.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .kafka_security import write_keystore
from .tls import server_certificate

POSTGRES_UID = 999
KAFKA_UID = 1000


def make(folder: Path) -> None:
    postgres = server_certificate(folder, "postgres", ("postgres", "localhost"))
    kafka = server_certificate(folder, "kafka", ("kafka", "localhost"))
    keystore = write_keystore(kafka, folder / "kafka-keystore.pem")
    for path, uid in ((postgres.key, POSTGRES_UID), (keystore, KAFKA_UID)):
        os.chown(path, uid, uid)
        os.chmod(path, 0o600)
    for path in (postgres.ca, postgres.certificate, kafka.certificate):
        os.chmod(path, 0o644)


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "/certs")
    make(target)
    print(f"certificates in {target}: {', '.join(sorted(p.name for p in target.iterdir()))}")
