"""Fixtures shared by every test: unique names, so tests never see each other's data."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def unique() -> str:
    """A short name fragment no other test uses: for schemas, topics and groups."""
    return uuid.uuid4().hex[:10]
