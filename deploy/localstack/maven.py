"""Fetch jars from Maven Central with Maven, bootstrapping Maven itself if needed.

Java 17 is the only prerequisite of the local stack: when ``mvn`` is not on the PATH
we download the official Maven distribution (itself published on Maven Central),
check its SHA-512, and unpack it into the project-owned cache.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tarfile
import urllib.request
from pathlib import Path

from firn.errors import StackError

from .processes import run

log = logging.getLogger(__name__)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
MAVEN_VERSION = "3.9.9"


def maven_executable(cache: Path) -> str:
    """``mvn`` from the PATH, else a Maven unpacked into ``cache``."""
    found = shutil.which("mvn")
    if found:
        return found
    home = cache / f"apache-maven-{MAVEN_VERSION}"
    mvn = home / "bin" / "mvn"
    if mvn.exists():
        return str(mvn)
    name = f"apache-maven-{MAVEN_VERSION}-bin.tar.gz"
    url = f"{MAVEN_CENTRAL}/org/apache/maven/apache-maven/{MAVEN_VERSION}/{name}"
    archive = cache / name
    log.info("downloading Maven %s from Maven Central", MAVEN_VERSION)
    download(url, archive)
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    archive.unlink()
    return str(mvn)


def download(url: str, target: Path) -> None:
    """Download ``url`` to ``target`` and verify it against the published SHA-512."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(target.suffix + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
            shutil.copyfileobj(response, out)
        with urllib.request.urlopen(url + ".sha512", timeout=60) as response:
            expected = response.read().decode().split()[0].strip().lower()
    except OSError as exc:
        raise StackError(f"cannot download {url}: {exc}", retryable=True) from exc
    actual = hashlib.sha512(partial.read_bytes()).hexdigest()
    if actual != expected:
        partial.unlink()
        raise StackError(f"checksum mismatch for {url}: got {actual}, expected {expected}")
    partial.rename(target)


def copy_dependencies(
    pom: Path, output: Path, cache: Path, what: str = "resolving the Kafka broker jars with Maven"
) -> None:
    """Resolve the runtime closure of ``pom`` and copy every jar into ``output``."""
    mvn = maven_executable(cache)
    run(
        [
            mvn,
            "--batch-mode",
            "--quiet",
            "--file",
            str(pom),
            f"-Dmaven.repo.local={cache / 'm2'}",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={output}",
            "-DincludeScope=runtime",
        ],
        what=what,
    )
