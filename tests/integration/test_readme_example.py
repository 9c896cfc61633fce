"""The README's Python example runs as written, against the real catalog and Spark."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from firn.settings import FirnSettings

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_python_example_runs(
    settings: FirnSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    section = README.read_text().split("## Tables from Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "the README lost its Python example"
    monkeypatch.setenv("FIRN_DATABASE_URL", settings.database_dsn())
    monkeypatch.setenv("FIRN_DATABASE_SCHEMA", settings.database_schema)
    monkeypatch.setenv("FIRN_KAFKA_BOOTSTRAP", settings.kafka_servers())
    monkeypatch.setenv("FIRN_TOPIC_PREFIX", settings.topic_prefix)
    monkeypatch.setenv("FIRN_WAREHOUSE", str(tmp_path))
    namespace: dict[str, object] = {}
    try:
        exec(compile(match[1], str(README), "exec"), namespace)
        orders = namespace["orders"]
        rows = orders.read().to_pylist()  # type: ignore[attr-defined]
        # The example's last step added a column with a default: the old row reads it.
        assert rows == [{"region": "eu", "id": 2, "amount": 4.0, "currency": "EUR"}]
        files = orders.files().to_pylist()  # type: ignore[attr-defined]
        # After the full compaction every file is a base file at the new level, 16.
        assert files
        assert all((f["store"], f["node"][:4]) == ("base", "(16,") for f in files)
    finally:
        # A failed example must not leave its connection to be collected (and
        # reported) in whatever test runs next.
        if "catalog" in namespace:
            namespace["catalog"].close()  # type: ignore[attr-defined]
