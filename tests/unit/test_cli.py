from __future__ import annotations

import json
import re

import pyarrow as pa
import pytest

from firn.cli import SERVICES, build_parser, main
from firn.commands.output import columns
from firn.commands.tables import parse_properties, parse_schema, parse_type
from firn.errors import ConfigError
from firn.model.states import TaskState
from firn.readable import size


def test_every_command_accepts_json() -> None:
    parser = build_parser()
    for argv in (["up", "--json"], ["down", "--json"], ["service", "planner", "--json"]):
        assert parser.parse_args(argv).json is True
    assert parser.parse_args(["dashboard", "--json"]).json is True


def test_the_dashboard_port_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    assert build_parser().parse_args(["dashboard", "--port", "0"]).port == 0
    with pytest.raises(SystemExit) as exited:
        main(["dashboard", "--port", "65536"])
    assert exited.value.code == 2
    assert "--port" in capsys.readouterr().err


def test_service_names_include_the_executor_dispatcher_alias() -> None:
    assert set(SERVICES.values()) == {"metrics", "planner", "dispatcher", "committer", "publisher"}
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


def test_every_table_command_accepts_json() -> None:
    parser = build_parser()
    for argv in (
        ["table", "create", "t", "--schema", "id:int64", "--primary-key", "id"],
        ["table", "list"],
        ["table", "show", "t"],
        ["status"],
        ["status", "t"],
        ["tasks"],
        ["tasks", "t", "--state", "pending", "--limit", "3"],
        ["compact", "t", "--partition", "p=1", "--kind", "full", "--wait", "--timeout", "5"],
        ["compact", "t", "--here", "--engine", "local"],
        ["expire"],
        ["expire", "t", "--dry-run"],
        ["verify", "t"],
        ["verify", "t", "--snapshot", "3", "--deep"],
        ["schema", "t"],
        ["alter", "t", "--add", "x:int64=1", "--rename", "a:b", "--dry-run"],
    ):
        assert parser.parse_args([*argv, "--json"]).json is True
        assert parser.parse_args(argv).json is False


def test_task_states_and_limits_are_parsed() -> None:
    args = build_parser().parse_args(["tasks", "--state", "eXeCuting", "--limit", "7"])
    assert (args.state, args.limit) == (TaskState.EXECUTING, 7)
    assert build_parser().parse_args(["tasks"]).limit == 50


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tasks", "--state", "Sleeping"], "unknown task state 'Sleeping'"),
        (["tasks", "--limit", "0"], "must be from 1 to 100,000"),
        (["tasks", "--limit", "99999999999999999999"], "must be from 1 to 100,000"),
        (["tasks", "--limit", "1e3"], "not an integer: '1e3'"),
        (["compact", "t", "--kind", "huge"], "invalid choice: 'huge'"),
        (["compact", "t", "--here", "--wait"], "not allowed with argument"),
        (["compact", "t", "--wait", "--timeout", "-1"], "must be greater than 0"),
        (["compact", "t", "--wait", "--timeout", "inf"], "at most 604,800"),
        (["compact", "t", "--wait", "--timeout", "nan"], "must be greater than 0"),
        (["compact", "t", "--wait", "--timeout", "1e300"], "at most 604,800"),
        (["table", "create", "t", "--schema", "id:int64"], "one of the arguments"),
        (["table", "create", "t", "--primary-key", "id"], "--schema"),
        (["table", "drop", "t"], "invalid choice: 'drop'"),
        (["up", "--demo", "--delete-ratio", "1"], "must be at least 0 and below 1"),
        (["up", "--demo", "--delete-ratio", "nan"], "must be at least 0 and below 1"),
        (["up", "--demo", "--rate", "0"], "must be greater than 0"),
        (["up", "--demo", "--rate", "inf"], "at most 1,000"),
        (["up", "--demo", "--keys", "0"], "must be from 1 to 1,000,000,000"),
        (["up", "--demo", "--keys", str(10**30)], "must be from 1 to 1,000,000,000"),
        (["up", "--demo", "--batch", "1000001"], "must be from 1 to 100,000"),
        (["up", "--demo", "--duration", "1e12"], "at most 2,592,000"),
        (["up", "--demo", "--idle-seconds", "-1"], "must be from 0"),
        (["up", "--demo", "--idle-seconds", "inf"], "at most 3,600"),
        (["up", "--demo", "--seed", "-1"], "must be from 0"),
    ],
)
def test_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compact", "t", "--engine", "local"], "--engine applies only with --here"),
        (["compact", "t", "--timeout", "5"], "--timeout applies only with --wait"),
        (
            ["table", "create", "t", "--schema", "id:nope", "--primary-key", "id"],
            "unknown column type 'nope'",
        ),
        (
            ["table", "create", "t", "--schema", "id", "--primary-key", "id"],
            "bad column 'id' in --schema: use NAME:TYPE",
        ),
        (
            ["table", "create", "t", "--schema", "id:int64", "--primary-key", "id,"],
            "--primary-key takes comma-separated column names",
        ),
        (
            ["table", "create", "t", "--schema", "id:int64", "--append-only", "--property", "x"],
            "--property takes KEY=VALUE, got 'x'",
        ),
        (
            ["table", "create", "t\n", "--schema", "id:int64", "--primary-key", "id"],
            "table name 't\\n' must start with a letter",
        ),
        (
            ["table", "create", "t", "--schema", "at:timestamp[us, Mars/Olympus]", "--append-only"],
            "unknown time zone 'Mars/Olympus'",
        ),
        *(
            (
                ["table", "create", "t", "--schema", "id:int64", "--append-only", "--property", p],
                message,
            )
            for p, message in (
                ("snapshot.retention=1000000000000", "snapshot.retention: must be from 0s to"),
                ("target-file-size=4", "target-file-size: must be from 1KiB to 16GiB, got 4B"),
                ("base.buckets=65536", "base.buckets: must be from 1 to 1024"),
                ("base.buckets=128", "within a factor of 16"),
                ("task.max-attempts=99999999999999999999", "task.max-attempts: must be from"),
                ("major.delete-ratio=nan", "major.delete-ratio: Input should be a finite"),
            )
        ),
    ],
)
def test_bad_input_fails_before_touching_the_catalog(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No database anywhere: these must fail on the input alone.
    monkeypatch.delenv("FIRN_DATABASE_URL", raising=False)
    monkeypatch.setenv("FIRN_HOME", "/nonexistent/firn-home")
    assert main([*argv, "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert list(document) == ["error"]
    assert message in document["error"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("firn: error: ")
    assert message in captured.err


def test_schemas_are_parsed_with_non_null_keys() -> None:
    schema = parse_schema(
        "region:string, id:int64,amount:double,at:timestamp[us, UTC],"
        "price:decimal128(10, 2),day:date32,ok:bool,raw:binary",
        ["region", "id"],
    )
    assert schema == pa.schema(
        [
            pa.field("region", pa.string(), nullable=False),
            pa.field("id", pa.int64(), nullable=False),
            pa.field("amount", pa.float64()),
            pa.field("at", pa.timestamp("us", tz="UTC")),
            pa.field("price", pa.decimal128(10, 2)),
            pa.field("day", pa.date32()),
            pa.field("ok", pa.bool_()),
            pa.field("raw", pa.binary()),
        ]
    )
    assert parse_type("timestamp[ms]") == pa.timestamp("ms")
    assert parse_type("DECIMAL(5,0)") == pa.decimal128(5, 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id:int64,id:string", "names ['id'] more than once"),
        ("", "no columns"),
        ("id:decimal128(99, 2)", "bad decimal type"),
        ("id:int64,v:", "bad column 'v:'"),
    ],
)
def test_bad_schemas(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_schema(text, ["id"])


def test_properties_keep_their_text_for_the_property_model() -> None:
    assert parse_properties(["change.buckets=8", " target-file-size = 64MiB "]) == {
        "change.buckets": "8",
        "target-file-size": "64MiB",
    }
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_properties(["change.buckets="])


def test_text_layout_helpers() -> None:
    assert columns(("A", "LONGER"), [(1, None), ("wide cell", "")]).splitlines() == [
        "A          LONGER",
        "1          -",
        "wide cell  -",
    ]
    assert [size(n) for n in (0, 1023, 1024, 1536, 5 << 20, 3 << 30)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "5.0 MiB",
        "3.0 GiB",
    ]
