"""``firn compact TABLE``: ask the running services for a compaction, optionally wait
for it, or run it here.

Without ``--here`` the command does what metrics does when a trigger fires: one
``plan-request`` event per partition on the plan-requests topic, keyed
``table/partition`` like every event of a partition, so the planner, executors and
committer do the work. Partitions with nothing to compact (the planner's own draft
is empty) are reported and not requested, so ``--wait`` never waits for work that
will not happen.

``--wait`` then polls the catalog. A partition is done when its ``max_merged_seq``
reaches the requested seq (major), or when a plan of the requested kind made since
the request committed up to it (full, minor, which do not move ``max_merged_seq``
past it; for auto, a tiered plan of either kind). The newest plan since the request
having Failed ends the wait with an error. Requests are idempotent for the planner
(an open plan that covers one is kept), so while no plan is open the request is
repeated now and then: a request skipped because the partition was busy with other
work is not lost.

``--here`` runs ``firn.compact`` in this process: no services needed.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from typing import Any, cast

from confluent_kafka import KafkaError, Message

from firn.api.catalog import connect, postgres_catalog_of
from firn.api.compact import Engine, compact, existing_partitions
from firn.api.table import Table
from firn.catalog.listing import PlanProgress, plan_progress, settled_plan_ids
from firn.commands.output import Output, WaitingLine, seconds_up_to
from firn.engine.planning import draft_now
from firn.errors import ConfigError, ServiceError
from firn.events.plans import PlanRequestEvent
from firn.events.schemas import validate
from firn.kafka import Topics, ensure_topics, producer
from firn.model.states import PlanOutcome, PlanState
from firn.model.tasks import Kind
from firn.readable import partition_name, size
from firn.settings import FirnSettings

DEFAULT_TIMEOUT = 600.0
MAX_TIMEOUT = 7 * 86400.0
POLL_SECONDS = 1.0
"""How often --wait reads the catalog and, at most, prints progress."""
REQUEST_AGAIN_SECONDS = 10.0
PUBLISH_TIMEOUT = 30.0
_OPEN = {s.value for s in (PlanState.PLANNED, PlanState.EXECUTING, PlanState.COMMITTING)}


def add_commands(
    commands: argparse._SubParsersAction[Any], common: argparse.ArgumentParser
) -> None:
    command = commands.add_parser(
        "compact", parents=[common], help="request a compaction from the services, or run it here"
    )
    command.add_argument("table")
    command.add_argument(
        "--partition",
        action="append",
        metavar="KEY",
        help="a partition key, e.g. region=eu or region=eu/day=2024-01-31; repeatable, "
        "or several separated by commas (default: all)",
    )
    command.add_argument(
        "--kind",
        choices=("major", "full", "minor", "auto"),
        default="major",
        help="auto: only what the tiered policy finds due, unit by unit (as the services do)",
    )
    mode = command.add_mutually_exclusive_group()
    mode.add_argument("--wait", action="store_true", help="wait until the services are done")
    mode.add_argument(
        "--here", action="store_true", help="plan, run and commit in this process (no services)"
    )
    command.add_argument(
        "--engine",
        choices=("spark", "local"),
        help="with --here: run on Spark (default) or locally",
    )
    command.add_argument(
        "--timeout",
        type=seconds_up_to(MAX_TIMEOUT),
        metavar="SECONDS",
        help=f"with --wait: give up after this long (default {DEFAULT_TIMEOUT:.0f})",
    )
    command.set_defaults(run=run_compact)


def run_compact(args: argparse.Namespace, settings: FirnSettings) -> Output:
    if args.engine is not None and not args.here:
        raise ConfigError("--engine applies only with --here (the services run their own)")
    if args.timeout is not None and not args.wait:
        raise ConfigError("--timeout applies only with --wait")
    named = partition_options(args.partition)
    with connect(settings=settings) as catalog:
        table = catalog.table(args.table)
        if args.here:
            return _here(table, named, args.kind, args.engine or "spark")
        return _request(settings, table, named, args.kind, args.wait, args.timeout)


def partition_options(values: list[str] | None) -> list[str] | None:
    """The partition keys of repeated ``--partition`` options, each possibly a comma
    list (a key percent-escapes a comma in a value, so a comma only separates keys);
    None when none was given: every partition."""
    if values is None:
        return None
    keys = [k.strip() for v in values for k in v.split(",")]
    if not all(keys):
        raise ConfigError(f"--partition takes partition keys such as region=eu, got {values}")
    return keys


def _here(table: Table, partitions: list[str] | None, kind: str, engine: str) -> Output:
    summary = compact(table, partitions, kind, engine=cast(Engine, engine))
    lines = [f"{kind} compaction of {table.name} in {summary['seconds']}s"]
    for p in summary["plans"]:
        lines.append(
            f"  {partition_name(p['partition'])}: plan {p['plan_id']} {p['outcome']}"
            f"{'' if p['snapshot'] is None else ' as snapshot ' + str(p['snapshot'])}: "
            f"{p['tasks']} task(s), {p['input_files']} files ({size(p['input_bytes'])}) in, "
            f"{p['added_files']} files ({size(p['added_bytes'])}, {p['added_rows']} rows) out"
            f"{'; ' + p['reason'] if p['reason'] else ''}"
        )
    lines += [
        f"  {partition_name(s['partition'])}: skipped, {s['reason']}" for s in summary["skipped"]
    ]
    if not summary["plans"] and not summary["skipped"]:
        lines.append("  nothing to compact")
    lines += [f"  error: {e}" for e in summary["errors"]]
    failed = [p for p in summary["plans"] if p["outcome"] != PlanOutcome.COMMITTED]
    error = None
    if failed:
        error = "; ".join(
            f"plan {p['plan_id']} ({partition_name(p['partition'])}) {p['outcome']}"
            f"{': ' + p['reason'] if p['reason'] else ''}"
            for p in failed
        )
    return Output({"mode": "here", **summary}, "\n".join(lines), error)


def request_compaction(
    settings: FirnSettings, table: Table, partition: str | None, kind: str
) -> Output:
    """What ``firn compact TABLE`` without ``--wait`` does: one plan-request event per
    partition with something to compact (the web dashboard's action calls this)."""
    named = None if partition is None else [partition]
    return _request(settings, table, named, kind, False, None)


def _request(
    settings: FirnSettings,
    table: Table,
    named: list[str] | None,
    kind: str,
    wait: bool,
    timeout: float | None,
) -> Output:
    started = time.monotonic()
    partitions = {p["partition"]: p for p in table.status()["partitions"]}
    keys = (
        sorted(partitions)
        if named is None
        else existing_partitions(table.definition, named, partitions)
    )
    conn = postgres_catalog_of(table).conn
    baseline = settled_plan_ids(conn, table.table_id)
    requests, skipped = [], []
    for key in keys:
        # auto is a minor request the planner answers unit by unit (scope "due").
        auto = kind == "auto"
        draft = draft_now(
            conn, table, key, Kind.MINOR if auto else Kind(kind), scope="due" if auto else "all"
        )
        if draft is None:
            skipped.append({"partition": key, "reason": "nothing to compact"})
            continue
        requests.append(
            PlanRequestEvent(
                table=table.name,
                table_id=table.table_id,
                partition_key=key,
                kind=cast(Any, "minor" if auto else kind),  # one of --kind's choices
                max_seq=draft.to_seq,
                score=partitions[key]["score"],
                reasons=[f"requested with firn compact --kind {kind}"],
                scope="due" if auto else "all",
            )
        )
    publisher = _Publisher(settings)
    publisher.publish(requests)
    data: dict[str, Any] = {
        "mode": "wait" if wait else "request",
        "table": table.name,
        "kind": kind,
        "topic": publisher.topic,
        "requested": [
            {"partition": r.partition_key, "max_seq": r.max_seq, "score": r.score} for r in requests
        ],
        "skipped": skipped,
    }
    lines = [f"requested {kind} compaction of {table.name} on {publisher.topic}:"]
    lines += [
        f"  {partition_name(r.partition_key)}: up to seq {r.max_seq} (score {r.score:g})"
        for r in requests
    ]
    lines += [f"  {partition_name(s['partition'])}: {s['reason']}" for s in skipped]
    if not wait:
        lines.append(
            "the running services plan, run and commit it (`firn status` follows it); "
            "without services use --here"
        )
        return Output(data, "\n".join(lines))
    deadline = started + (DEFAULT_TIMEOUT if timeout is None else timeout)
    progress, error = _wait(table, kind, requests, baseline, deadline, publisher)
    data["partitions"] = [asdict(p) for p in progress]
    data["seconds"] = round(time.monotonic() - started, 3)
    lines += [_progress_text(p) for p in progress]
    if error is None:
        lines.append(f"done in {data['seconds']}s")
    return Output(data, "\n".join(lines), error)


def _wait(
    table: Table,
    kind: str,
    requests: list[PlanRequestEvent],
    baseline: dict[str, int],
    deadline: float,
    publisher: _Publisher,
) -> tuple[list[PlanProgress], str | None]:
    targets = {r.partition_key: r.max_seq for r in requests}
    expected = kind if table.definition.keyed else "bin-pack"
    requested_at = time.monotonic()
    with WaitingLine(sys.stderr) as waiting:
        while True:
            progress = plan_progress(
                postgres_catalog_of(table).conn, table.table_id, list(targets), baseline
            )
            states = list(progress.values())
            pending = [p for p in states if not _done(p, kind, expected, targets[p.partition])]
            if not pending:
                return states, None
            failed = [p for p in pending if p.state == PlanState.FAILED]
            if failed:
                return states, "; ".join(
                    f"plan {p.plan_id} for {partition_name(p.partition)} failed: {p.error}"
                    for p in failed
                )
            if time.monotonic() >= deadline:
                waiting_for = ", ".join(partition_name(p.partition) for p in pending)
                return states, f"timed out waiting for {waiting_for}"
            waiting.update("; ".join(_progress_text(p) for p in pending))
            idle = [p for p in pending if p.state not in _OPEN]
            if idle and time.monotonic() - requested_at >= REQUEST_AGAIN_SECONDS:
                again = {p.partition for p in idle}
                publisher.publish([r for r in requests if r.partition_key in again])
                requested_at = time.monotonic()
            time.sleep(POLL_SECONDS)


def _done(p: PlanProgress, kind: str, expected: str, target: int) -> bool:
    if kind == "major" and p.max_merged_seq >= target:
        return True
    # A tiered plan is a major when it folds a unit, else a minor: either answers.
    kinds = {"major", "minor"} if kind == "auto" else {expected}
    return any(k in kinds and to_seq >= target for k, to_seq in p.committed)


def _progress_text(p: PlanProgress) -> str:
    where = f"{partition_name(p.partition)} (max_merged_seq {p.max_merged_seq})"
    if p.plan_id is None:
        return f"{where}: not planned yet"
    tasks = ", ".join(f"{state} {n}" for state, n in sorted(p.tasks.items()))
    return f"{where}: plan {p.plan_id} {p.kind} {p.state} ({tasks or 'no tasks'})"


class _Publisher:
    """Plan requests onto the plan-requests topic, acknowledged or an error."""

    def __init__(self, settings: FirnSettings) -> None:
        self.settings = settings.with_local_stack()
        self.topic = Topics.from_settings(self.settings).plan_requests
        self._ready = False

    def publish(self, requests: list[PlanRequestEvent]) -> None:
        if not requests:
            return
        try:
            self.settings.kafka_servers()
        except ConfigError as exc:
            raise ConfigError(f"{exc}; or compact in this process with --here") from exc
        if not self._ready:
            # The services create their topics at start; a request made before they
            # ever ran must not vanish into a topic that does not exist.
            ensure_topics(self.settings, (self.topic,))
            self._ready = True
        client = producer(self.settings, **{"client.id": "firn-cli"})
        problems: list[str] = []

        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                problems.append(str(error))

        for request in requests:
            validate(request.model_dump(mode="json"))
            key = f"{request.table}/{request.partition_key}".encode()
            client.produce(self.topic, key=key, value=request.to_json(), on_delivery=delivered)
        left = client.flush(PUBLISH_TIMEOUT)
        if left or problems:
            raise ServiceError(
                f"Kafka did not acknowledge {left + len(problems)} of {len(requests)} plan "
                f"request(s) on {self.topic}: {'; '.join(problems) or 'timed out'}"
            )
