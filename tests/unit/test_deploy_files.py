"""The deployment files a user runs as they are: docker-compose.yml, the Prometheus
configuration and alert rules, and the Grafana provisioning and dashboard.

Parsed and checked against the code they describe: every Firn service's command is
a real ``firn`` command, every scrape target is the port the service serves, and
every PromQL expression names only metrics Firn exports. ``docker compose config``
validates the compose file as Docker reads it when the ``docker`` CLI is here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from firn.catalog.observed import CatalogReading, PartitionFigures
from firn.cli import SERVICES, build_parser
from firn.kafka.acls import ROLES, password_variable, principal
from firn.observability import instruments
from firn.observability.catalog_collector import CatalogCollector
from firn.settings import FirnSettings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
FIRN_SERVICES = sorted(set(SERVICES.values()))
WAREHOUSE_MOUNT = "${FIRN_WAREHOUSE_DIR:-./.firn/compose-warehouse}:/warehouse"


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(ROOT / "docker-compose.yml")
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = compose["services"]
    return services


def interpolated(value: str) -> str:
    """``${VAR:-default}`` as compose reads it with VAR unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


# --- docker-compose.yml ---------------------------------------------------------


def test_compose_runs_the_stack_with_prometheus_grafana_and_an_optional_demo(
    services: dict[str, dict[str, Any]],
) -> None:
    assert set(services) == {
        "kafka",
        "postgres",
        *FIRN_SERVICES,
        "certs",
        "migrate",
        "kafka-acls",
        "demo",
        "prometheus",
        "grafana",
    }
    assert services["demo"]["profiles"] == ["demo"]
    # Prometheus and Grafana come with `--profile monitoring`: a plain `up` needs no
    # image beyond the two that deploy/images/build.sh can make.
    assert services["prometheus"]["profiles"] == services["grafana"]["profiles"] == ["monitoring"]
    always = [name for name in services if name not in ("demo", "prometheus", "grafana")]
    assert all("profiles" not in services[name] for name in always)


def test_each_service_logs_in_as_its_own_role_made_by_the_migrate_job(
    services: dict[str, dict[str, Any]],
) -> None:
    made = services["migrate"]["environment"]
    assert services["migrate"]["command"] == ["migrate", "--service-logins"]
    for name in FIRN_SERVICES:
        url = services[name]["environment"]["FIRN_DATABASE_URL"]
        user, _, rest = url.removeprefix("postgresql://").partition(":")
        assert user == f"firn_{name}_login", url
        password = f"FIRN_{name.upper()}_DATABASE_PASSWORD"
        assert rest.startswith("${" + password + ":-"), url
        assert made[password].startswith("${" + password + ":-"), "the same variable"
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
        assert services[name]["environment"]["FIRN_KAFKA_BOOTSTRAP"] == "kafka:9092"


def _kafka_login(environment: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A container's librdkafka pass-through and the variable its password comes from."""
    config = json.loads(environment["FIRN_KAFKA_CONFIG"])
    password = environment["FIRN_KAFKA_SASL_PASSWORD"]
    variable = re.fullmatch(r"\$\{(\w+):-[^}]+\}", password)
    assert variable is not None, password
    return config, variable.group(1)


def test_each_firn_container_logs_in_to_kafka_as_its_own_principal_over_tls(
    services: dict[str, dict[str, Any]],
) -> None:
    job = services["kafka-acls"]
    assert job["command"] == ["kafka-acls", "--users"]
    admin, admin_password = _kafka_login(job["environment"])
    assert admin["sasl.username"] == "admin"
    assert admin_password == "FIRN_KAFKA_ADMIN_PASSWORD"
    logins = {**{name: name for name in FIRN_SERVICES}, "demo": "producer"}
    for name, role in logins.items():
        config, variable = _kafka_login(services[name]["environment"])
        assert config["security.protocol"] == "SASL_SSL", name
        assert config["sasl.mechanism"] == "SCRAM-SHA-512", name
        assert config["sasl.username"] == principal(role), name
        assert config["ssl.ca.location"] == "/certs/ca.pem", name
        assert variable == password_variable(role), name
        assert variable in job["environment"], f"the job sets {role}'s password"
    assert all(password_variable(role) in job["environment"] for role in ROLES)
    for name in FIRN_SERVICES:
        assert services[name]["depends_on"]["kafka-acls"] == {
            "condition": "service_completed_successfully"
        }


def test_the_broker_takes_sasl_over_tls_only_and_authorizes(
    services: dict[str, dict[str, Any]],
) -> None:
    env = services["kafka"]["environment"]
    listeners = env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    protocols = dict(listener.split(":") for listener in listeners)
    assert protocols == {"CONTROLLER": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL", "HOST": "SASL_SSL"}
    assert env["KAFKA_AUTHORIZER_CLASS_NAME"].endswith("StandardAuthorizer")
    assert env["KAFKA_SUPER_USERS"] == "User:admin"
    assert "ALLOW_EVERYONE_IF_NO_ACL_FOUND" not in " ".join(env)


def test_postgres_takes_tls_logins_only_and_every_client_verifies_it(
    services: dict[str, dict[str, Any]],
) -> None:
    command = services["postgres"]["command"]
    assert "ssl=on" in command
    assert "hba_file=/etc/firn/pg_hba.conf" in command
    hba = (ROOT / "deploy" / "compose" / "pg_hba.conf").read_text().splitlines()
    rules = [line.split() for line in hba if line.strip() and not line.startswith("#")]
    assert [rule[0] for rule in rules] == ["local", "hostssl"], "no plain host rule"
    for name in [*FIRN_SERVICES, "migrate", "demo"]:
        url = services[name]["environment"]["FIRN_DATABASE_URL"]
        assert url.endswith("?sslmode=verify-full&sslrootcert=/certs/ca.pem"), name


def test_third_party_images_are_official_and_pinned(services: dict[str, dict[str, Any]]) -> None:
    repositories = {
        "kafka": "apache/kafka",
        "postgres": "postgres",
        "prometheus": "prom/prometheus",
        "grafana": "grafana/grafana",
    }
    for name, repository in repositories.items():
        # Official by default; FIRN_KAFKA_IMAGE / FIRN_POSTGRES_IMAGE pick the local ones.
        image, _, tag = interpolated(services[name]["image"]).partition(":")
        assert image == repository, name
        assert tag not in ("", "latest"), f"{name} is not pinned: {services[name]['image']}"
    for name in [*FIRN_SERVICES, "certs", "migrate", "kafka-acls", "demo"]:
        assert services[name]["image"] == "firn:dev"
        assert services[name]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (ROOT / "deploy" / "Dockerfile").is_file()


def test_every_firn_command_is_a_real_firn_command(services: dict[str, dict[str, Any]]) -> None:
    parser = build_parser()
    for name in [*FIRN_SERVICES, "migrate", "kafka-acls", "demo"]:
        argv = [interpolated(arg) for arg in services[name]["command"]]
        args = parser.parse_args(argv)  # exits 2 on anything argparse refuses
        if name == "demo":
            assert args.command == "demo"
            assert args.rate == 2.0
        elif name == "migrate":
            assert args.command == "migrate"
            assert args.service_logins
        elif name == "kafka-acls":
            assert args.command == "kafka-acls"
            assert args.users
        else:
            assert (args.command, SERVICES[args.name]) == ("service", name)


def test_each_service_exposes_its_prometheus_port(services: dict[str, dict[str, Any]]) -> None:
    defaults = FirnSettings()
    for name in FIRN_SERVICES:
        assert services[name]["expose"] == [str(defaults.prometheus_port(name))], name
        env = services[name]["environment"]
        assert f"FIRN_{name.upper()}_PROMETHEUS_PORT" not in env  # the default is scraped


def test_the_warehouse_is_one_host_directory_for_every_firn_container(
    services: dict[str, dict[str, Any]],
) -> None:
    for name in [*FIRN_SERVICES, "demo"]:
        assert services[name]["environment"]["FIRN_WAREHOUSE"] == "/warehouse"
        assert services[name]["volumes"] == [WAREHOUSE_MOUNT, "certs:/certs:ro"], name
    source = interpolated(WAREHOUSE_MOUNT).split(":")[0]
    assert source.startswith("./"), "a bind mount the host reads, not a named volume"


def test_the_demo_starts_after_the_services_and_reaches_the_same_stack(
    services: dict[str, dict[str, Any]],
) -> None:
    demo = services["demo"]
    assert set(demo["depends_on"]) == set(FIRN_SERVICES)  # which wait for the jobs
    env, planner = demo["environment"], services["planner"]["environment"]
    assert env["FIRN_KAFKA_BOOTSTRAP"] == planner["FIRN_KAFKA_BOOTSTRAP"]
    # The same database; the demo as the catalog's admin, since it creates its table.
    assert env["FIRN_DATABASE_URL"].split("@")[1] == planner["FIRN_DATABASE_URL"].split("@")[1]
    assert env["FIRN_DATABASE_URL"] == services["migrate"]["environment"]["FIRN_DATABASE_URL"]
    assert demo["restart"] == "no"  # its summary is the end of it


def bind_mounts(service: dict[str, Any]) -> dict[str, str]:
    """Target -> source of the service's bind mounts of repository files."""
    mounts = {}
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            mounts[target] = source
    return mounts


def test_prometheus_and_grafana_mount_the_repository_files(
    services: dict[str, dict[str, Any]],
) -> None:
    for name in ("prometheus", "grafana"):
        for target, source in bind_mounts(services[name]).items():
            assert (ROOT / source).exists(), f"{name} mounts missing {source} at {target}"
    prometheus = bind_mounts(services["prometheus"])
    config_flag = "--config.file=/etc/prometheus/prometheus.yml"
    assert config_flag in services["prometheus"]["command"]
    assert prometheus["/etc/prometheus/prometheus.yml"] == "./deploy/prometheus/prometheus.yml"
    rule_files = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")["rule_files"]
    assert rule_files == ["/etc/prometheus/alerts.yml"]
    assert prometheus["/etc/prometheus/alerts.yml"] == "./deploy/prometheus/alerts.yml"

    grafana = bind_mounts(services["grafana"])
    assert grafana["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    provider = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "firn.yml")
    dashboards_dir = provider["providers"][0]["options"]["path"]
    assert grafana[dashboards_dir] == "./deploy/grafana/dashboards"
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dashboards_dir}/firn.json"


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI on this machine")
def test_docker_compose_config_accepts_the_file() -> None:
    plugin = subprocess.run(
        ["docker", "compose", "version"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if plugin.returncode != 0:
        reason = (plugin.stderr.strip().splitlines() or ["?"])[0]
        pytest.skip(f"the docker CLI has no compose plugin ({reason})")
    checked = subprocess.run(
        ["docker", "compose", "--profile", "demo", "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


# --- PromQL names only metrics Firn exports -----------------------------------------


def sample_names(name: str, kind: str) -> set[str]:
    """The series names a metric family of this type shows on /metrics."""
    suffixes = {
        "counter": ["_total", "_created"],
        "gauge": [""],
        "histogram": ["_bucket", "_count", "_sum", "_created"],
    }
    return {name + suffix for suffix in suffixes[kind]}


def exported_metrics() -> set[str]:
    """Every series name a Firn service can serve, plus Prometheus's own ``up``."""
    names = {"up"}
    for instrument in vars(instruments).values():
        if isinstance(instrument, MetricWrapperBase):
            for family in instrument.describe():
                names |= sample_names(family.name, family.type)
    reading = CatalogReading(
        partitions=[PartitionFigures("t", "region=eu", 3, 300, 1.5, 4, 12.0)],
        tasks={("t", "Pending"): 1},
        stalled_nodes={"t": 0},
    )
    collector = CatalogCollector(lambda: reading, refresh_seconds=0)
    for family in collector.collect():
        names |= {sample.name for sample in family.samples}
    return names


PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
PROMQL_WORDS |= {"and", "or", "unless", "bool", "offset"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (rough but strict enough here):
    what is left after label matchers, strings, grouping clauses, Grafana variables,
    function calls and keywords are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)
    text = re.sub(r"\$\w+", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    words = re.findall(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", text)
    return {word for word in words if word not in PROMQL_WORDS}


def test_the_name_extraction_finds_metrics_and_skips_the_rest() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (table, le) (rate(firn_x_bucket{table=~"$table"}'
        '[5m]))) > 600 or absent(up{job="firn-metrics"}) and on (table) firn_y * 1e3'
    )
    assert metric_names(expr) == {"firn_x_bucket", "up", "firn_y"}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DEPLOY / "grafana" / "dashboards" / "firn.json").read_text())
    return data


def panels(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in data["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def test_every_dashboard_query_names_only_exported_metrics() -> None:
    known = exported_metrics()
    data = dashboard()
    queries = [target["expr"] for panel in panels(data) for target in panel["targets"]]
    for expr in queries:
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= known, f"{expr!r} names {sorted(names - known)}, which Firn never serves"


def test_the_table_variable_lists_a_label_firn_serves() -> None:
    (variable,) = dashboard()["templating"]["list"]
    query = variable["query"]["query"]
    assert variable["definition"] == query
    found = re.fullmatch(r"label_values\((\w+), (\w+)\)", query)  # Grafana's, not PromQL
    assert found, query
    metric, label = found.groups()
    assert metric in exported_metrics()
    assert label == variable["name"] == "table"
    assert label in catalog_labels(metric)


def catalog_labels(metric: str) -> set[str]:
    reading = CatalogReading(partitions=[PartitionFigures("t", "p", 1, 1, 1.0, 1, 1.0)])
    for family in CatalogCollector(lambda: reading, refresh_seconds=0).collect():
        for sample in family.samples:
            if sample.name == metric:
                return set(sample.labels)
    return set()


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    shown = set().union(
        *(metric_names(t["expr"]) for panel in panels(dashboard()) for t in panel["targets"])
    )
    assert shown >= {
        "up",
        "firn_catalog_up",
        "firn_partition_unmerged_bytes",
        "firn_partition_unmerged_files",
        "firn_partition_read_amplification",
        "firn_commit_to_compacted_seconds_bucket",
        "firn_committed_bytes_total",
        "firn_rewritten_bytes_total",
        "firn_tasks",
        "firn_task_duration_seconds_bucket",
        "firn_plans_committed_total",
        "firn_plans_failed_total",
        "firn_dead_letters_total",
        "firn_kafka_consumer_lag",
        "firn_postgres_errors_total",
        "firn_postgres_reconnects_total",
    }


def test_the_dashboard_is_provisioned_against_the_provisioned_datasource() -> None:
    sources = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml")
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    data = dashboard()
    ids = [panel["id"] for panel in data["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels(data):
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        assert all(target["datasource"]["uid"] == source["uid"] for target in panel["targets"])


# --- prometheus.yml and alerts.yml ------------------------------------------------


def test_prometheus_scrapes_each_service_on_the_port_it_serves(
    services: dict[str, dict[str, Any]],
) -> None:
    config = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for name in FIRN_SERVICES:
        (lookup,) = jobs[f"firn-{name}"]["dns_sd_configs"]
        assert lookup["names"] == [name]  # the compose service's DNS name
        assert lookup["type"] == "A"
        assert [str(lookup["port"])] == services[name]["expose"]


def alert_rules() -> list[dict[str, Any]]:
    config = load_yaml(DEPLOY / "prometheus" / "alerts.yml")
    return [rule for group in config["groups"] for rule in group["rules"]]


def test_every_alert_rule_is_complete_and_names_only_exported_metrics() -> None:
    known = exported_metrics()
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"], rule["alert"]
        assert rule["annotations"]["description"], rule["alert"]
        if "for" in rule:
            assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        used = metric_names(rule["expr"])
        assert used, rule["alert"]
        assert used <= known, f"{rule['alert']} names {sorted(used - known)}"


def test_the_alerts_the_issue_asks_for_exist() -> None:
    by_name = {rule["alert"]: rule for rule in alert_rules()}
    expected = {
        "FirnBacklogGrowing": "firn_partition_unmerged_bytes",
        "FirnCompactionLatencyHigh": "firn_commit_to_compacted_seconds_bucket",
        "FirnDeadLetters": "firn_dead_letters_total",
        "FirnServiceDown": "up",
        "FirnServiceMissing": "up",
        "FirnCatalogUnreachable": "firn_catalog_up",
        "FirnPublicationLagging": "firn_publication_lag_seconds_bucket",
        "FirnPublicationFailing": "firn_publication_errors_total",
    }
    for alert, metric in expected.items():
        assert metric in metric_names(by_name[alert]["expr"]), alert
    jobs = set(re.findall(r'job="([^"]+)"', by_name["FirnServiceMissing"]["expr"]))
    assert jobs == {f"firn-{name}" for name in FIRN_SERVICES}
