"""The head node's monitoring as rendered for Slurm: Prometheus's config through promtool (a
real Prometheus checker, Debian's), Grafana's provisioning, and the files the artifact node
uploads beside the scripts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from provisioner.catalog import load_catalog
from provisioner.ops.validate import load_and_validate
from provisioner.render.context import build_context
from provisioner.render.slurm import render_slurm
from tests.conftest import EXAMPLES


def _files(example: Path) -> dict[str, str]:
    validation = load_and_validate(str(example), "slurm")
    assert validation.resolved is not None
    return render_slurm(build_context(validation.resolved, load_catalog()))


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool missing: `make tools` installs Debian's prometheus")
        pytest.skip("promtool not installed (`make tools` installs Debian's prometheus)")
    return tool


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_prometheus_config_passes_promtool(example: Path, tmp_path: Path) -> None:
    tool = _promtool()
    files = _files(example)
    path = tmp_path / "prometheus.yml"
    rules = tmp_path / "alert-rules.yml"
    rules.write_text(files["slurm/monitoring/alert-rules.yml"])
    # Where the head node keeps the rules, here: promtool loads them with the config.
    text = files["slurm/monitoring/prometheus.yml"]
    assert "/opt/fmctl/slurm/monitoring/alert-rules.yml" in text
    path.write_text(text.replace("/opt/fmctl/slurm/monitoring/alert-rules.yml", str(rules)))
    done = subprocess.run([tool, "check", "config", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    count = sum(len(g["rules"]) for g in yaml.safe_load(rules.read_text())["groups"])
    assert count >= 7 and f"SUCCESS: {count} rules found" in done.stdout + done.stderr
    config = yaml.safe_load(path.read_text())
    # A workspace in the spec: remote write to it, signed for its region (promtool checked).
    workspace = (yaml.safe_load(example.read_text()).get("observability") or {}).get(
        "ampWorkspaceArn"
    )
    writes = config.get("remote_write", [])
    if workspace:
        region, ws = workspace.split(":")[3], workspace.rsplit("/", 1)[1]
        assert writes[0]["sigv4"] == {"region": region}
        assert writes[0]["url"] == (
            f"https://aps-workspaces.{region}.amazonaws.com/workspaces/{ws}/api/v1/remote_write"
        )
        # fmctl's own policy (RemoteWrite on this workspace), not the account-wide managed one.
        assert (
            '- Policy: "<fmctl:ampWritePolicyArn>"' in files["parallelcluster/cluster-config.yaml"]
        )
        assert "AmazonPrometheusRemoteWrite" not in files["parallelcluster/cluster-config.yaml"]
    else:
        assert writes == []
        assert "ampWritePolicyArn" not in files["parallelcluster/cluster-config.yaml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["slurm"]["static_configs"][0]["targets"] == ["127.0.0.1:9341"]
    for name, port in (("node", 9100), ("dcgm", 9400)):
        sd = jobs[name]["ec2_sd_configs"][0]
        assert sd["port"] == port
        # Found by the cluster's tag: nodes Slurm starts later appear by themselves.
        cluster = {f["name"]: f["values"] for f in sd["filters"]}
        assert cluster["tag:parallelcluster:cluster-name"] == [
            config["global"]["external_labels"]["cluster"]
        ]


def test_promtool_refuses_a_broken_config(tmp_path: Path) -> None:
    tool = _promtool()
    text = _files(EXAMPLES[0])["slurm/monitoring/prometheus.yml"].replace("port: 9100", "port: x")
    text = text.replace("  - /opt/fmctl/slurm/monitoring/alert-rules.yml\n", "")
    path = tmp_path / "prometheus.yml"
    path.write_text(text)
    done = subprocess.run([tool, "check", "config", str(path)], capture_output=True, text=True)
    assert done.returncode != 0


def test_grafana_provisioning_and_dashboards() -> None:
    files = _files(EXAMPLES[0])
    sources = yaml.safe_load(files["slurm/monitoring/grafana-datasources.yaml"])
    assert sources["datasources"][0]["url"] == "http://127.0.0.1:9090"
    boards = yaml.safe_load(files["slurm/monitoring/grafana-dashboards.yaml"])
    folder = boards["providers"][0]["options"]["path"]
    assert folder == "/opt/fmctl/slurm/monitoring/dashboards"
    dashboards = [k for k in files if k.startswith("slurm/monitoring/dashboards/")]
    assert dashboards and all(json.loads(files[k])["panels"] for k in dashboards)
    names = {k.rsplit("/", 1)[1] for k in dashboards}
    assert {"fmctl-overview.json", "fmctl-storage.json", "fmctl-slurm.json"} <= names
    assert "fmctl-kubernetes.json" not in names


def test_the_artifact_upload_carries_the_monitoring_files() -> None:
    validation = load_and_validate(str(EXAMPLES[0]), "slurm")
    assert validation.resolved is not None
    from pathlib import Path

    from provisioner.blueprint import Where, build

    where = Where(Path("/nonexistent"), Path("/nonexistent/kubeconfig"))
    extra = dict(build(validation.resolved, load_catalog(), where)["artifacts"].params.extra)
    assert "monitoring/prometheus.yml" in extra and "monitoring/grafana-datasources.yaml" in extra
