"""Fixtures shared by every test: unique names, so tests never see each other's data;
hypothesis without its per-example deadline; the Prometheus sensors on demand."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import settings

from firn.observability.sensors import PrometheusSensors
from firn.sensors import install

# No timing in tests: hypothesis's 200 ms deadline per example failed a unit test
# on a loaded 2-core machine (the first example pays for imports and warm-up).
# A deep run looks for rare failures: FIRN_HYPOTHESIS=deep gives every property test
# twenty times its examples (one that sets max_examples itself keeps its own).
settings.register_profile("firn", deadline=None)
settings.register_profile("firn-deep", deadline=None, max_examples=2000)
settings.load_profile("firn-deep" if os.environ.get("FIRN_HYPOTHESIS") == "deep" else "firn")


@pytest.fixture
def unique() -> str:
    """A short name fragment no other test uses: for schemas, topics and groups."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def prometheus_sensors() -> Iterator[None]:
    """The edge clients report to Prometheus, as in a service (``serve_metrics``),
    for the test's length."""
    previous = install(PrometheusSensors())
    yield
    install(previous)
