"""deploy/monitoring: the alerting rules pass `promtool check rules` and their unit tests (`promtool test
rules`), every alert is tested both firing and silent, and the rules and the Grafana dashboard name only the
metrics, label values and histogram buckets tq_gc/metrics.py exports.

promtool comes from the Debian package `prometheus` (scripts/test installs it when run as root). Without it
these tests fail: a missing checker must not pass as a green suite."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.utils import floatToGoString

from tq_gc.metrics import PHASE_BUCKETS_SECONDS, PUSH_JOB, SweepMetrics
from tq_gc.report import PHASES
from tq_gc.stores.transferqueue import STORE_SERIES

from .kustomize import ROOT

MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "tq-gc-rules.yaml"
RULE_TESTS = MONITORING / "tq-gc-rules.test.yaml"
DASHBOARD = MONITORING / "tq-gc-dashboard.json"
PROMTOOL_TIMEOUT_S = 60
INSTALL_PROMTOOL = "sudo apt-get install prometheus"
# Labels Prometheus or the scrape adds: any value is fine.
TARGET_LABELS = {"job", "instance", "namespace"}
# What the dashboard's Grafana variables stand for when its queries go through promtool.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$job": ".*"}


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            f"promtool is missing: install it with `{INSTALL_PROMTOOL}` (Debian package prometheus; "
            "scripts/test installs it when run as root)",
            pytrace=False,
        )
    return path


def run_promtool(promtool: str, *args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=PROMTOOL_TIMEOUT_S, check=False
    )


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def alerting_rules() -> Iterator[dict[str, Any]]:
    for group in rule_groups():
        yield from (rule for rule in group["rules"] if "alert" in rule)


def rule_tests() -> dict[str, Any]:
    tests: dict[str, Any] = yaml.safe_load(RULE_TESTS.read_text())
    return tests


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_panels() -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = dashboard()["panels"]
    return [p for p in panels if p["type"] != "row"]


def dashboard_exprs() -> list[str]:
    return [target["expr"] for panel in dashboard_panels() for target in panel["targets"]]


# --------------------------------------------------------------------------------------------------------
# What tq_gc/metrics.py exports: series names and the values of their labels, from a live registry.


def exported() -> tuple[dict[str, str], dict[str, dict[str, set[str]]]]:
    """({series name: its metric family}, {family: {label: values}}). Labelled series that metrics.py does
    not create up front (phases) get their values from the model."""
    suffixes = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    series: dict[str, str] = {}
    labels: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for family in SweepMetrics(store=STORE_SERIES).registry.collect():
        for suffix in suffixes[family.type] + (("_created",) if family.type == "histogram" else ()):
            series[family.name + suffix] = family.name
        for sample in family.samples:
            for label, value in sample.labels.items():
                labels[family.name][label].add(value)
    phase_buckets = {floatToGoString(bound) for bound in (*PHASE_BUCKETS_SECONDS, float("inf"))}
    labels["tqgc_sweep_phase_seconds"]["phase"] |= set(PHASES)
    labels["tqgc_sweep_phase_seconds"]["le"] |= phase_buckets
    return series, labels


SELECTOR = re.compile(r"\b(tqgc_[a-z0-9_]+)\b(\{[^}]*\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def unknown_names_and_values(expr: str) -> list[str]:
    """Every metric `expr` selects that metrics.py does not export, and every label value it matches that
    no exported series carries (`=` and `=~` alternatives; target labels may be anything)."""
    series, labels = exported()
    problems = []
    for name, selector in SELECTOR.findall(expr):
        family = series.get(name)
        if family is None:
            problems.append(name)
            continue
        for label, op, value in MATCHER.findall(selector):
            if label in TARGET_LABELS or op not in ("=", "=~"):
                continue
            wanted = value.split("|") if op == "=~" else [value]
            problems += [f"{name}{{{label}={v!r}}}" for v in wanted if v not in labels[family].get(label, ())]
    return problems


def test_the_selector_check_sees_what_it_should() -> None:
    assert unknown_names_and_values('tqgc_sweeps_total{outcome="completed"}') == []
    assert unknown_names_and_values("tqgc_no_such_metric") == ["tqgc_no_such_metric"]
    assert unknown_names_and_values('tqgc_sweeps_total{outcome=~"completed|done"}') == [
        "tqgc_sweeps_total{outcome='done'}"
    ]
    assert unknown_names_and_values('tqgc_tq_request_seconds_bucket{le="0.3"}') == [
        "tqgc_tq_request_seconds_bucket{le='0.3'}"
    ]
    assert unknown_names_and_values('tqgc_sweep_phase_seconds_count{phase="lease", job="x"}') == []


# --------------------------------------------------------------------------------------------------------
# The rules.


def test_the_rules_pass_promtool_check(promtool: str) -> None:
    result = run_promtool(promtool, "check", "rules", RULES.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rules_pass_their_unit_tests(promtool: str) -> None:
    result = run_promtool(promtool, "test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_unit_tests_fail_when_an_alert_does_not_fire_as_expected(promtool: str, tmp_path: Path) -> None:
    tests = copy.deepcopy(rule_tests())
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            check["exp_alerts"] = []
    tests["rule_files"] = [str(RULES)]
    (tmp_path / "silenced.test.yaml").write_text(yaml.safe_dump(tests))
    result = run_promtool(promtool, "test", "rules", "silenced.test.yaml", cwd=tmp_path)
    assert result.returncode != 0, "promtool passed tests whose firing alerts were all removed"


def test_every_alert_is_tested_firing_and_silent_for_each_sweeper() -> None:
    fired: set[tuple[str, str | None]] = set()
    silent: set[str] = set()
    for case in rule_tests()["tests"]:
        for check in case.get("alert_rule_test", []):
            if not check["exp_alerts"]:
                silent.add(check["alertname"])
            for alert in check["exp_alerts"]:
                fired.add((check["alertname"], alert["exp_labels"].get("sweeper")))
    rules = {(rule["alert"], rule.get("labels", {}).get("sweeper")) for rule in alerting_rules()}
    assert rules - fired == set(), "never tested firing"
    assert {alert for alert, _ in rules} - silent == set(), "never tested staying silent"


def test_each_alert_says_what_it_means() -> None:
    for rule in alerting_rules():
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_the_rules_name_only_exported_metrics_and_values() -> None:
    for rule in alerting_rules():
        assert unknown_names_and_values(rule["expr"]) == [], rule["alert"]


def test_cronjob_rules_select_the_pushgateways_job_and_sidecar_rules_everything_else() -> None:
    groups = {group["name"]: group for group in rule_groups()}
    for rule in groups["tq-gc-cronjob"]["rules"]:
        assert f'job="{PUSH_JOB}"' in rule["expr"], rule["alert"]
        assert rule["labels"]["sweeper"] == "cronjob"
    for rule in groups["tq-gc-sidecar"]["rules"]:
        selectors = re.findall(r"tqgc_\w+\{[^}]*\}", rule["expr"])
        assert selectors and all(f'job!="{PUSH_JOB}"' in s for s in selectors), rule["alert"]
        assert rule["labels"]["sweeper"] == "sidecar"


# --------------------------------------------------------------------------------------------------------
# The dashboard.


def test_the_dashboard_is_a_grafana_dashboard_on_a_chosen_prometheus() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] and isinstance(board["schemaVersion"], int)
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = dashboard_panels()
    assert len({panel["id"] for panel in panels}) == len(panels), "panel ids must be unique"
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}, panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        assert panel["targets"] and all(target["expr"] for target in panel["targets"]), panel["title"]


def test_the_dashboard_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard_panels():
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[x, y]}"
                cells[x, y] = panel["title"]


def test_the_dashboard_names_only_exported_metrics_and_values() -> None:
    for expr in dashboard_exprs():
        assert unknown_names_and_values(expr) == [], expr


def test_the_dashboard_shows_every_exported_metric() -> None:
    series, _ = exported()
    selected = {name for expr in dashboard_exprs() for name, _ in SELECTOR.findall(expr)}
    shown = {series[name] for name in selected if name in series}
    assert set(series.values()) - shown == set(), "a tqgc_* metric no panel shows"


def test_the_dashboard_queries_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    """promtool parses each query as a recording rule, with Grafana's variables filled in."""
    rules = []
    for index, expr in enumerate(dashboard_exprs()):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"a Grafana variable this test does not know: {expr}"
        rules.append({"record": f"dashboard:query_{index}", "expr": expr})
    rule_file = {"groups": [{"name": "dashboard", "rules": rules}]}
    (tmp_path / "dashboard.rules.yaml").write_text(yaml.safe_dump(rule_file))
    result = run_promtool(promtool, "check", "rules", "dashboard.rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
