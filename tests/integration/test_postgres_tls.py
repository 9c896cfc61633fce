"""The local stack's Postgres speaks TLS that Firn verifies in full: its URL carries
``sslmode=verify-full`` and the stack's own CA, a client that trusts another CA is
refused, and a login needs its password. Whichever backend the other suites use,
this one starts the local runner's server, since that is what it is about."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from pydantic import SecretStr

import firn
from firn.errors import ServiceError
from firn.settings import FirnSettings
from firn_localstack import PostgresServer
from firn_localstack.tls import server_certificate

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    # Inside the repo's .firn: the Postgres system user must reach the data folder.
    home = REPO / ".firn" / f"test-tls-{uuid.uuid4().hex[:8]}"
    server = PostgresServer(home / "postgres" / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_the_stack_url_verifies_the_server_and_the_session_is_encrypted(
    server: PostgresServer, base_settings: FirnSettings, tmp_path: Path
) -> None:
    assert "sslmode=verify-full" in server.url
    settings = base_settings.model_copy(
        update={"database_url": SecretStr(server.url), "database_schema": "tls_check"}
    )
    with firn.connect(warehouse=str(tmp_path), settings=settings) as catalog:
        ssl, version = catalog.conn.execute(
            "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ).fetchone() or (False, None)
        assert ssl, "the catalog connection is encrypted"
        assert version is not None
        assert version.startswith("TLS")


def test_a_client_trusting_another_ca_or_without_the_password_is_refused(
    server: PostgresServer, base_settings: FirnSettings, tmp_path: Path
) -> None:
    password = server.password_file.read_text().strip()
    other_ca = server_certificate(tmp_path / "other-ca", "postgres").ca
    elsewhere = server.url.replace(
        quote(str(server.tls_dir / "ca.pem"), safe=""), quote(str(other_ca), safe="")
    )
    assert elsewhere != server.url
    settings = base_settings.model_copy(update={"database_url": SecretStr(elsewhere)})
    with pytest.raises(ServiceError, match="SSL error") as refused:
        firn.connect(warehouse=str(tmp_path), settings=settings)
    assert password not in str(refused.value)

    no_password = server.url.replace(":" + quote(password, safe=""), "")
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(no_password, connect_timeout=5).close()
