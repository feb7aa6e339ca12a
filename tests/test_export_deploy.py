"""What we ship for Prometheus and Grafana: valid to promtool, alerts that fire when they should, queries of served names."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml
from export_fixtures import prometheus_tool

from collector.export.metrics import served_names

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus" / "stallwatch-rules.yml"
CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "stallwatch-dashboard.json"

KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL (or Grafana label_values) expression selects."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    label_values = re.match(r"\s*label_values\(\s*([A-Za-z_:][\w:]*)", expr)
    if label_values:
        return {label_values.group(1)}
    expr = GROUPING.sub("", expr)
    names = re.findall(r"(?<![\w:$])([A-Za-z_:][\w:]*)\b(?!\s*\()", expr)
    return {n for n in names if n not in KEYWORDS}


def test_metric_names_finds_the_selected_series_only():
    expr = 'sum by (le) (rate(a_bucket{x="y(z)"}[5m])) / on (job_id) group_left () max(b_total) > 0.2 and c'
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}
    assert metric_names('label_values(stallwatch_batches_total{job_id=~"$job"}, host)') == {"stallwatch_batches_total"}


def rule_exprs() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_the_rules_are_the_three_the_issue_names_with_the_starved_threshold_and_duration():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = {rule["alert"]: rule for group in groups for rule in group["rules"]}
    assert set(rules) == {"DataLoaderStarved", "DataLoaderRankStraggler", "StallwatchRecordsDropped"}
    assert rules["DataLoaderStarved"]["expr"].strip() == "stallwatch_data_stall_ratio > 0.2"
    assert rules["DataLoaderStarved"]["for"] == "5m"


def test_every_dashboard_and_rule_expression_names_only_served_metrics():
    served = served_names() | {"process_cpu_seconds_total"}
    exprs = [*rule_exprs().values(), *dashboard_exprs()]
    assert len(exprs) >= 15
    for expr in exprs:
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= served, f"{expr!r} names {sorted(names - served)}, which the exporter does not serve"


def test_the_dashboard_is_a_well_formed_grafana_dashboard():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["title"] and isinstance(board["schemaVersion"], int)
    assert "id" not in board or board["id"] is None  # importable into any Grafana
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids, cells = set(), set()
    for panel in board["panels"]:
        assert panel["id"] not in ids and panel["title"], panel
        ids.add(panel["id"])
        assert panel["type"] in {"timeseries", "stat", "heatmap", "table", "state-timeline"}
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(set(refs)) == len(refs)
        for target in panel["targets"]:
            used = set(re.findall(r"\$(\w+)", target["expr"])) - {"__rate_interval"}
            assert used <= set(variables), f"{target['expr']!r} uses undefined {used - set(variables)}"
    titles = " ".join(p["title"].lower() for p in board["panels"])
    for wanted in (
        "max stall fraction across ranks",
        "waiting share",
        "heatmap",
        "queue depth",
        "worker production",
        "gpu",
    ):
        assert wanted in titles


def test_promtool_accepts_the_shipped_rules_and_config():
    promtool = prometheus_tool("promtool")
    for args in (["check", "rules", str(RULES)], ["check", "config", str(CONFIG)]):
        out = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    return {"series": name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "values": values}


def alert(at: str, name: str, *expected: dict[str, dict[str, str]]) -> dict[str, object]:
    return {"eval_time": at, "alertname": name, "exp_alerts": list(expected)}


STARVED = {"run": "starved", "job_id": "j", "rank": "0", "host": "a"}
JOB = {"run": "r", "job_id": "j"}
RULE_TESTS = {
    "evaluation_interval": "1m",
    "tests": [
        {
            "interval": "1m",
            "input_series": [
                series("stallwatch_data_stall_ratio", "0.35x10", **STARVED),
                series("stallwatch_data_stall_ratio", "0.15x10", run="fine", job_id="j", rank="1", host="a"),
                *(
                    series("stallwatch_data_wait_seconds_total", "0+6x15", **JOB, rank=r, host=h)
                    for r, h in ("0a", "1a", "2b")
                ),
                series("stallwatch_data_wait_seconds_total", "0+30x15", **JOB, rank="3", host="b"),
                series("stallwatch_dropped_records_total", "0 0 0 0 0 120x12", **JOB, rank="0", host="a"),
            ],
            "alert_rule_test": [
                alert("4m", "DataLoaderStarved"),
                alert(
                    "6m",
                    "DataLoaderStarved",
                    {
                        "exp_labels": {"severity": "warning", **STARVED},
                        "exp_annotations": {
                            "summary": "starved (rank 0) on a is stalled on data",
                            "description": "The training loop of run starved, job j, rank 0 on a spent 35% of the last "
                            "minute waiting for its DataLoader (input-bound from 20%). `stallwatch report --live` on "
                            "that host names the cause and the settings to change.",
                        },
                    },
                ),
                alert("4m", "DataLoaderRankStraggler"),
                alert(
                    "11m",
                    "DataLoaderRankStraggler",
                    {
                        "exp_labels": {"severity": "warning", **JOB, "rank": "3", "host": "b"},
                        "exp_annotations": {
                            "summary": "Rank 3 of job j on b waits for data far more than the job's median rank",
                            "description": "Rank 3 of job j waits for its DataLoader 50% of the time, more than twice "
                            "the job's median rank and 10 points above it; every synchronised step of the job waits "
                            "for it.",
                        },
                    },
                ),
                alert("3m", "StallwatchRecordsDropped"),
                alert(
                    "6m",
                    "StallwatchRecordsDropped",
                    {
                        "exp_labels": {"severity": "info", **JOB, "rank": "0", "host": "a"},
                        "exp_annotations": {
                            "summary": "stallwatch dropped 120 batch records of r on a in 10 minutes",
                            "description": "The collector's writer process fell behind (a slow or full disk, or an "
                            "overloaded host) and dropped the oldest records; training is unaffected, but the "
                            "recording of run r has gaps.",
                        },
                    },
                ),
                alert("17m", "StallwatchRecordsDropped"),
            ],
        }
    ],
}


def test_the_alerts_fire_on_a_starved_rank_a_straggler_and_dropped_records_and_not_otherwise(tmp_path):
    """promtool's rule unit tests: 35% stall fires after 5 minutes, 15% never; a rank waiting 50% where the
    others wait 10% is the straggler; dropped records fire while the counter grows, and stop."""
    promtool = prometheus_tool("promtool")
    tests = tmp_path / "rules_test.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(RULES)], **RULE_TESTS}, sort_keys=False))
    out = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
