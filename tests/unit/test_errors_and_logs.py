from __future__ import annotations

import logging

import pytest

from firn.errors import (
    ConfigError,
    CorruptFileError,
    FirnError,
    ServiceError,
    StackError,
    StorageError,
)
from firn.logs import with_context


def test_retryability_is_carried_on_the_error() -> None:
    assert ServiceError("db away").retryable is True
    assert ConfigError("bad").retryable is False
    assert StackError("x", retryable=True).retryable is True
    assert isinstance(StackError("x"), FirnError)
    assert StorageError("timeout").retryable is True
    corrupt = CorruptFileError("/t/I-1.parquet", "size", "is 5 bytes, the catalog says 9")
    assert isinstance(corrupt, StorageError)
    assert corrupt.retryable is False
    assert str(corrupt) == "table file /t/I-1.parquet: is 5 bytes, the catalog says 9"


def test_context_adapter_prefixes_ids(caplog: pytest.LogCaptureFixture) -> None:
    logger = with_context(logging.getLogger("firn.test"), table="orders", plan=7)
    with caplog.at_level(logging.INFO, logger="firn.test"):
        logger.info("planned %d tasks", 3)
    assert caplog.messages == ["[table=orders plan=7] planned 3 tasks"]
