"""``url_as``: the catalog's address with another role's login, in URL form, for
``firn grant`` and the services' own roles."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from firn.errors import ConfigError
from firn.postgres.urls import url_as


@pytest.mark.parametrize(
    "admin",
    [
        "postgresql://firn:admin-secret@db.example:5433/catalog?sslmode=verify-full",
        "host=db.example port=5433 dbname=catalog user=firn password=admin-secret "
        "sslmode=verify-full",
    ],
)
def test_the_address_and_parameters_stay_and_the_login_is_replaced(admin: str) -> None:
    url = url_as(admin, "orders_writer", "p@ss/w:rd")
    assert url.startswith("postgresql://")
    assert "admin-secret" not in url
    assert conninfo_to_dict(url) == {
        "user": "orders_writer",
        "password": "p@ss/w:rd",
        "host": "db.example",
        "port": "5433",
        "dbname": "catalog",
        "sslmode": "verify-full",
    }


def test_several_hosts_keep_their_ports_and_libpq_failover() -> None:
    admin = "host=a,b port=5432,5433 dbname=cat user=firn target_session_attrs=read-write"
    parsed = conninfo_to_dict(url_as(admin, "writer", None))
    assert parsed == {
        "user": "writer",
        "host": "a,b",
        "port": "5432,5433",
        "dbname": "cat",
        "target_session_attrs": "read-write",
    }


def test_a_socket_directory_stays_a_host_parameter() -> None:
    parsed = conninfo_to_dict(url_as("host=/run/postgresql dbname=firn user=firn", "r", "x"))
    assert parsed == {"user": "r", "password": "x", "host": "/run/postgresql", "dbname": "firn"}


def test_an_unreadable_url_is_a_config_error_that_does_not_echo_it() -> None:
    with pytest.raises(ConfigError) as caught:
        url_as("host='unterminated password=admin-secret", "r", None)
    assert "admin-secret" not in str(caught.value)
