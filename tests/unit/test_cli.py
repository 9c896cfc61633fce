from __future__ import annotations

import json

import pytest

from firn.cli import SERVICES, build_parser, main


def test_every_command_accepts_json() -> None:
    parser = build_parser()
    for argv in (["up", "--json"], ["down", "--json"], ["service", "planner", "--json"]):
        assert parser.parse_args(argv).json is True


def test_service_names_include_the_executor_dispatcher_alias() -> None:
    assert set(SERVICES.values()) == {"metrics", "planner", "dispatcher", "committer"}
    assert SERVICES["executor-dispatcher"] == "dispatcher"


def test_unknown_service_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["service", "nope"])
    assert exited.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_bad_settings_are_reported_as_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FIRN_DATABASE_SCHEMA", "Not A Schema")
    assert main(["down", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert "database_schema" in error
