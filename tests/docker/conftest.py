"""The tests on a real Docker engine share the images ``deploy/images/build.sh``
makes from Debian's mirror and Maven Central (Docker Hub may be out of reach): built
once per session (seconds when docker's cache has them), and named in the
environment for testcontainers and compose unless it already names others."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from firn_localstack import KAFKA_VERSION

ROOT = Path(__file__).resolve().parents[2]

LOCAL_IMAGES = {
    "FIRN_POSTGRES_IMAGE": "firn/postgres:15",
    "FIRN_KAFKA_IMAGE": f"firn/kafka:{KAFKA_VERSION}",
    "FIRN_BASE_IMAGE": "firn/debian:bookworm",
    "FIRN_PIP_CERT": "/etc/ssl/certs/ca-certificates.crt",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.docker)


@pytest.fixture(scope="session", autouse=True)
def images() -> Iterator[dict[str, str]]:
    """The image variables in effect: those already set, else the local images."""
    env = {**os.environ, "FIRN_PYTHON": sys.executable}
    for args, timeout in (
        (["docker", "info"], 30),
        ([str(ROOT / "deploy" / "images" / "build.sh")], 1200),
    ):
        done = subprocess.run(
            args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    chosen = {name: os.environ.get(name) or image for name, image in LOCAL_IMAGES.items()}
    with pytest.MonkeyPatch.context() as patch:
        for name, image in chosen.items():
            patch.setenv(name, image)
        yield chosen
