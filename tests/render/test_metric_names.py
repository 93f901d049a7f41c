"""Every metric a dashboard or alert rule uses is one an fmctl exporter exports: DCGM fields
from the counters list the DCGM exporter is given, fmctl_efa_* from efa-metrics.sh, node_*
and slurm_* from the lists taken from node_exporter's and the Slurm exporter's sources
(tests/data/exporter-metrics), `up` from Prometheus. The rules pass promtool; the rendered
configs load them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

DASHBOARDS = sorted((ROOT / "templates/dashboards").rglob("*.json"))
RULES = ROOT / "templates/monitoring/alert-rules.yml"
METRIC = re.compile(
    r"\b(DCGM_FI_[A-Z0-9_]+|fmctl_[a-z0-9_]+|node_[A-Za-z0-9_]+|kube_[a-z0-9_]+|slurm_[a-z0-9_]+)\b"
)
LISTS = ROOT / "tests/data/exporter-metrics"


def _dcgm_fields() -> set[str]:
    lines = (ROOT / "slurm/lib/dcgm-counters.csv").read_text().splitlines()
    return {line.split(",")[0].strip() for line in lines if line and not line.startswith("#")}


def _efa_metrics() -> set[str]:
    text = (ROOT / "slurm/lib/efa-metrics.sh").read_text()
    return set(re.findall(r"# TYPE (fmctl_efa_[a-z_]+)", text))


def _health_metrics() -> set[str]:
    text = (ROOT / "slurm/lib/health-agent.sh").read_text()
    return set(re.findall(r"# TYPE (fmctl_(?:node|repairs)_[a-z_]+)", text))


def _listed(name: str) -> set[str]:
    """A list of tests/data/exporter-metrics: one metric name per line, # comments."""
    lines = (LISTS / name).read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def _expressions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for board in DASHBOARDS:
        for panel in json.loads(board.read_text())["panels"]:
            for target in panel.get("targets", []):
                found.setdefault(str(board.relative_to(ROOT)), []).append(target["expr"])
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        found.setdefault(RULES.name, []).extend(rule["expr"] for rule in group["rules"])
    return found


def test_every_metric_used_is_exported() -> None:
    exported = (
        _dcgm_fields()
        | _efa_metrics()
        | _health_metrics()
        | _listed("node-exporter.txt")
        | _listed("slurm-exporter.txt")
        | _listed("kube-state-metrics.txt")
    )
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_NVLINK_TX_BYTES"} <= exported
    assert {"fmctl_efa_hw_stat", "fmctl_efa_devices", "fmctl_efa_devices_expected"} <= exported
    assert {"fmctl_node_health_state", "fmctl_node_faults_total", "fmctl_repairs_total"} <= exported
    unknown = {
        (source, name)
        for source, exprs in _expressions().items()
        for expr in exprs
        for name in METRIC.findall(expr)
        if name not in exported
    }
    assert unknown == set(), "metrics no fmctl exporter exports"


def test_the_check_catches_a_made_up_metric() -> None:
    assert METRIC.findall("rate(DCGM_FI_DEV_MADE_UP[1m])") == ["DCGM_FI_DEV_MADE_UP"]
    assert "DCGM_FI_DEV_MADE_UP" not in _dcgm_fields()
    # A name close to a real one (the exporter says slurm_partition_job_state_total).
    assert METRIC.findall("sum(slurm_partition_jobs_pending)") == ["slurm_partition_jobs_pending"]
    assert "slurm_partition_jobs_pending" not in _listed("slurm-exporter.txt")


def test_dashboards_are_well_formed() -> None:
    """Unique uids and panel ids, panels inside Grafana's 24-column grid, not overlapping,
    and every expression reading at least one exported metric (or `up`)."""
    uids = set()
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        assert board["uid"] not in uids, path
        uids.add(board["uid"])
        ids = [panel["id"] for panel in board["panels"]]
        assert len(ids) == len(set(ids)), path
        cells: set[tuple[int, int]] = set()
        for panel in board["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24, (path.name, panel["title"])
            mine = {
                (x, y)
                for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])
            }
            assert not mine & cells, (path.name, panel["title"], "overlaps")
            cells |= mine
            for target in panel["targets"]:
                assert METRIC.findall(target["expr"]) or "up" in target["expr"], target


def _promtool() -> str:
    """Debian's promtool; in CI its absence fails, elsewhere it skips."""
    tool = shutil.which("promtool")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool missing: `make tools` installs Debian's prometheus")
        pytest.skip("promtool not installed (`make tools` installs Debian's prometheus)")
    return tool


def _rule(alert: str) -> dict[str, Any]:
    """The alert rule named ``alert``."""
    rule: dict[str, Any] = next(
        r
        for g in yaml.safe_load(RULES.read_text())["groups"]
        for r in g["rules"]
        if r["alert"] == alert
    )
    return rule


def test_alert_rules_pass_promtool(tmp_path: Path) -> None:
    tool = _promtool()
    done = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(RULES.read_text().replace("> 0\n", "> \n", 1))
    assert subprocess.run([tool, "check", "rules", str(broken)], capture_output=True).returncode
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert {"GpuXidError", "GpuFellOffTheBus", "EfaDeviceMissing", "NodeDown"} <= alerts
    assert "NodeNotReady" in alerts


def test_health_alerts_fire_on_the_agents_states(tmp_path: Path) -> None:
    """promtool's rule unit test: a node the health agent drained raises NodeInRepair, one
    whose fault it held raises NodeRepairHeld, a healthy one neither (series as the agent
    writes them, slurm/lib/health-agent.sh)."""
    tool = _promtool()

    def series(instance: str, current: str) -> list[dict[str, str]]:
        return [
            {
                "series": f'fmctl_node_health_state{{state="{s}",instance="{instance}"}}',
                "values": ("1" if s == current else "0") + "x5",
            }
            for s in ("healthy", "draining", "held")
        ]

    rules = {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}

    def fired(name: str, instance: str) -> dict[str, object]:
        rule = rules[name]
        return {
            "exp_labels": rule["labels"]
            | {"instance": instance, "state": "draining" if name == "NodeInRepair" else "held"},
            "exp_annotations": {
                key: text.replace("{{ $labels.instance }}", instance)
                for key, text in rule["annotations"].items()
            },
        }

    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": series("a:9109", "draining")
                + series("b:9109", "held")
                + series("c:9109", "healthy"),
                "alert_rule_test": [
                    {
                        "eval_time": "2m",
                        "alertname": "NodeInRepair",
                        "exp_alerts": [fired("NodeInRepair", "a:9109")],
                    },
                    {
                        "eval_time": "2m",
                        "alertname": "NodeRepairHeld",
                        "exp_alerts": [fired("NodeRepairHeld", "b:9109")],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "health-test.yml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([tool, "test", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_eks_health_alert_fires_on_a_failing_condition(tmp_path: Path) -> None:
    """promtool's rule unit test: kube-state-metrics' node condition series (condition,
    status true/false/unknown, as it exports them): AcceleratedHardwareReady false on one
    node raises NodeHardwareUnhealthy for it, as FmctlHealthy false (fmctl's agent) does;
    Ready false (the kubelet's, not the agent's) and a healthy node do not."""
    tool = _promtool()

    def series(node: str, condition: str, healthy: bool) -> list[dict[str, str]]:
        return [
            {
                "series": f'kube_node_status_condition{{node="{node}",condition="{condition}",'
                f'status="{status}"}}',
                "values": ("1" if (status == "true") == healthy else "0") + "x5",
            }
            for status in ("true", "false")
        ]

    rule = _rule("NodeHardwareUnhealthy")
    labels = {"node": "ip-1", "condition": "AcceleratedHardwareReady", "status": "false"}
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": series("ip-1", "AcceleratedHardwareReady", False)
                + series("ip-2", "AcceleratedHardwareReady", True)
                + series("ip-3", "Ready", False)
                + series("ip-4", "FmctlHealthy", False),
                "alert_rule_test": [
                    {
                        "eval_time": "2m",
                        "alertname": "NodeHardwareUnhealthy",
                        "exp_alerts": [
                            {
                                "exp_labels": rule["labels"]
                                | labels
                                | {"node": node, "condition": condition},
                                "exp_annotations": {
                                    key: text.replace("{{ $labels.node }}", node).replace(
                                        "{{ $labels.condition }}", condition
                                    )
                                    for key, text in rule["annotations"].items()
                                },
                            }
                            # fmctl's agent's condition too (health.kubernetesAgent).
                            for node, condition in (
                                ("ip-1", "AcceleratedHardwareReady"),
                                ("ip-4", "FmctlHealthy"),
                            )
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "eks-health-test.yml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([tool, "test", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_node_the_verify_gate_holds_for_an_hour_raises_node_not_verified(
    tmp_path: Path,
) -> None:
    """promtool's rule unit test: kube-state-metrics' node taint series (node, key, value,
    effect: docs/metrics/cluster/node-metrics.md). A node tainted fmctl.dev/unverified for
    70 minutes raises NodeNotVerified; one whose taint was lifted after 20 (its series gone,
    as kube-state-metrics drops a taint no longer there), and the GPU taint every GPU node
    carries, do not."""
    tool = _promtool()

    def taint(node: str, key: str, values: str) -> dict[str, str]:
        return {
            "series": f'kube_node_spec_taint{{node="{node}",key="{key}",value="true",'
            'effect="NoSchedule"}',
            "values": values,
        }

    rule = _rule("NodeNotVerified")
    labels = {"node": "ip-1", "key": "fmctl.dev/unverified", "value": "true"}
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    taint("ip-1", "fmctl.dev/unverified", "1x70"),
                    taint("ip-2", "fmctl.dev/unverified", "1x20 _x50"),
                    taint("ip-2", "nvidia.com/gpu", "1x70"),
                ],
                "alert_rule_test": [
                    {"eval_time": "50m", "alertname": "NodeNotVerified", "exp_alerts": []},
                    {
                        "eval_time": "65m",
                        "alertname": "NodeNotVerified",
                        "exp_alerts": [
                            {
                                "exp_labels": rule["labels"] | labels | {"effect": "NoSchedule"},
                                "exp_annotations": {
                                    key: text.replace("{{ $labels.node }}", "ip-1")
                                    for key, text in rule["annotations"].items()
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "verify-test.yml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([tool, "test", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_idle_gpu_node_raises_gpu_node_idle_on_each_scheduler(tmp_path: Path) -> None:
    """promtool's rule unit test of GpuNodeIdle, with series as the exporters write them
    (DCGM's GR_ENGINE_ACTIVE per GPU, a ratio; the health agent's fmctl_node_alloc_cpus;
    kube-state-metrics' node info, GPU requests and pod phases), each node labelled `node`
    as fmctl's Prometheus configs label it. Idle for 30 minutes with nothing placed: fires;
    a job or a running GPU pod, one busy GPU, or idle for less: does not."""
    tool = _promtool()

    def gpus(node: str, *values: str) -> list[dict[str, str]]:
        return [
            {"series": f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{node="{node}",gpu="{i}"}}', "values": v}
            for i, v in enumerate(values)
        ]

    def series(text: str, values: str) -> dict[str, str]:
        return {"series": text, "values": values}

    idle, busy = "0.01x40", "0.9x40"
    slurm = [
        *gpus("a", idle, idle),  # idle, no job: fires
        series('fmctl_node_alloc_cpus{node="a"}', "0x40"),
        *gpus("b", idle, idle),  # idle GPUs, but a job holds CPUs
        series('fmctl_node_alloc_cpus{node="b"}', "8x40"),
        *gpus("c", idle, busy),  # one GPU works
        series('fmctl_node_alloc_cpus{node="c"}', "0x40"),
        *gpus("d", "0.9x15 0.01x25", "0.01x40"),  # idle for 20 minutes only
        series('fmctl_node_alloc_cpus{node="d"}', "0x40"),
        *gpus("e", idle),  # no agent reading: not called idle on a guess
    ]
    kube = [
        *gpus("k1", idle, idle),  # no pod: fires
        series('kube_node_info{node="k1"}', "1x40"),
        *gpus("k2", idle, idle),  # a running pod asks for its GPUs
        series('kube_node_info{node="k2"}', "1x40"),
        series(
            'kube_pod_container_resource_requests{namespace="t",pod="p",node="k2",'
            'resource="nvidia_com_gpu",unit="integer"}',
            "8x40",
        ),
        series('kube_pod_status_phase{namespace="t",pod="p",phase="Running"}', "1x40"),
        *gpus("k3", idle, idle),  # its pod finished: fires
        series('kube_node_info{node="k3"}', "1x40"),
        series(
            'kube_pod_container_resource_requests{namespace="t",pod="q",node="k3",'
            'resource="nvidia_com_gpu",unit="integer"}',
            "8x40",
        ),
        series('kube_pod_status_phase{namespace="t",pod="q",phase="Running"}', "0x40"),
        series('kube_pod_status_phase{namespace="t",pod="q",phase="Succeeded"}', "1x40"),
    ]
    rules = [
        r
        for g in yaml.safe_load(RULES.read_text())["groups"]
        for r in g["rules"]
        if r.get("alert") == "GpuNodeIdle"
    ]
    by_scheduler = {r["labels"]["scheduler"]: r for r in rules}
    assert set(by_scheduler) == {"slurm", "kubernetes"}

    def fired(node: str, scheduler: str) -> dict[str, object]:
        rule = by_scheduler[scheduler]
        return {
            "exp_labels": rule["labels"] | {"node": node},
            "exp_annotations": {
                key: text.replace("{{ $labels.node }}", node)
                for key, text in rule["annotations"].items()
            },
        }

    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": slurm + kube,
                "alert_rule_test": [
                    {"eval_time": "25m", "alertname": "GpuNodeIdle", "exp_alerts": []},
                    {
                        "eval_time": "35m",
                        "alertname": "GpuNodeIdle",
                        "exp_alerts": [
                            fired("a", "slurm"),
                            fired("k1", "kubernetes"),
                            fired("k3", "kubernetes"),
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "idle-test.yml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([tool, "test", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
