"""The local Kafka runner's pure parts."""

from __future__ import annotations

import base64
import zipfile
from pathlib import Path

import pytest

from firn.errors import StackError
from firn_localstack import kafka
from firn_localstack.kafka import KAFKA_VERSION, broken_jars, broker_jars, cluster_id


def test_cluster_ids_are_16_bytes_and_never_look_like_an_option() -> None:
    ids = [cluster_id() for _ in range(2000)]  # about 31 would start with '-' by chance
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)


def _jar(libs: Path, *classes: str) -> None:
    libs.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(libs / f"kafka_2.13-{KAFKA_VERSION}.jar", "w") as jar:
        for name in classes:
            jar.writestr(name, b"\xca\xfe\xba\xbe")


def test_jars_without_the_broker_classes_are_broken(tmp_path: Path) -> None:
    libs = tmp_path / "libs"
    assert "missing" in (broken_jars(libs) or "")
    _jar(libs, "kafka/Kafka.class")
    assert "kafka/tools/StorageTool.class" in (broken_jars(libs) or "")
    (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").write_bytes(b"truncated")
    assert "not a readable jar" in (broken_jars(libs) or "")
    _jar(libs, "kafka/Kafka.class", "kafka/tools/StorageTool.class")
    assert broken_jars(libs) is None


def test_a_cache_marked_complete_but_broken_is_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fresh-clone failure: `.complete` was written although libs/ held no broker
    (Maven had put the jars elsewhere); every later start trusted it and failed."""
    monkeypatch.chdir(tmp_path)
    cache = Path(".firn/cache")  # relative, as the default FIRN_HOME was
    libs = cache / f"kafka-{KAFKA_VERSION}" / "libs"
    libs.mkdir(parents=True)
    (libs.parent / ".complete").touch()
    fetched: list[Path] = []

    def fake_copy(pom: Path, output: Path, where: Path) -> None:
        assert output.is_absolute()
        assert where.is_absolute()
        fetched.append(output)

    monkeypatch.setattr(kafka.maven, "copy_dependencies", fake_copy)
    with pytest.raises(StackError, match="unusable"):
        broker_jars(cache)  # the refetch put nothing usable there: not marked complete
    assert fetched == [libs.resolve()]
    assert not (libs.parent / ".complete").exists()
