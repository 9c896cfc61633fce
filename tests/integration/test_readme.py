"""The README's first-ten-minutes example runs as written, against the real catalog,
and prints what the README says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_example_runs_and_prints_what_it_says(as_a_user: Path) -> None:
    match = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert match is not None, "the README lost its example"
    promised = re.search(r"print\(.*\)  # (.*)", match[1])
    assert promised is not None, "the example says what it prints"
    namespace: dict[str, object] = {}
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(match[1], str(README), "exec"), namespace)
    finally:
        if "catalog" in namespace:
            namespace["catalog"].close()  # type: ignore[attr-defined]
    assert printed.getvalue().strip() == promised[1]
