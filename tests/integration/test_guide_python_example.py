"""The Python guide's first example (docs/guide/tables.md) runs as written, against the
real catalog and Spark."""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "tables.md"


def test_the_python_guide_example_runs(as_a_user: Path) -> None:
    match = re.search(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert match is not None, "the Python guide lost its example"
    namespace: dict[str, object] = {}
    try:
        exec(compile(match[1], str(GUIDE), "exec"), namespace)
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
