"""The documentation holds to the code: the reference pages are what
``docs/generate.py`` writes now, the README stays a short front door whose every
command runs somewhere, and no page points at a design outside the repository. (The
site itself is built with warnings as errors by ``make docs``, part of ``make test``.)"""

from __future__ import annotations

import re
import runpy
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_the_reference_pages_are_generated_from_the_code_as_it_is() -> None:
    generate = runpy.run_path(str(ROOT / "docs" / "generate.py"))
    for name, text in generate["pages"]().items():
        page = ROOT / "docs" / "reference" / name
        assert page.read_text() == text, f"{page} is stale: run .venv/bin/python docs/generate.py"


def test_the_readme_is_a_short_front_door() -> None:
    assert len(README.read_text().splitlines()) < 200


def test_every_page_the_readme_links_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if not link.startswith("http")]
    assert local, "the README links the documentation"
    assert [link for link in local if not (ROOT / link).exists()] == []


def test_every_command_of_the_readme_runs_in_ci() -> None:
    """The README's shell commands are the two CI runs first thing on a fresh clone
    (``.ci/run``); its Python example runs in ``tests/integration/test_readme.py``."""
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    commands = [line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines()]
    commands = [c for c in commands if c]
    assert commands == ["make demo", "make test"]
    for command in commands:
        assert re.search(rf"^{re.escape(command)}\b", ci, re.M), command


def test_no_page_cites_a_design_outside_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.json", "*.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    citing = [
        name
        for name in tracked
        if re.search(r"\bSPEC \d|SPEC\.md|shared/seeds", (ROOT / name).read_text(errors="replace"))
        and name != "tests/unit/test_docs.py"
    ]
    assert citing == []
