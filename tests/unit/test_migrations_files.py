from __future__ import annotations

from pathlib import Path

import pytest

from firn.errors import MigrationError
from firn.postgres.migrate import MIGRATIONS, load_migrations


def test_packaged_migrations_are_numbered_from_one_without_gaps() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert all(m.sql.strip() for m in MIGRATIONS)


def test_a_gap_in_versions_is_refused(tmp_path: Path) -> None:
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "0003_c.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="without gaps"):
        load_migrations(tmp_path)


def test_a_badly_named_sql_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "2-b.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match=r"NNNN_name\.sql"):
        load_migrations(tmp_path)


def test_checksum_follows_the_text(tmp_path: Path) -> None:
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    first = load_migrations(tmp_path)[0].checksum
    (tmp_path / "0001_a.sql").write_text("SELECT 2;")
    assert load_migrations(tmp_path)[0].checksum != first
