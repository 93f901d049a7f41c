"""`fmctl connect` and `fmctl logs` against the sandbox.

connect (with --print: the sandbox has no Session Manager to open a session to): an EKS node
by its Node's providerID, Grafana through kubectl port-forward, a Slurm head node by the tags
ParallelCluster puts on it (SSM, or SSH with a key pair and sshCidr). logs: fmctl's events
and the cluster's CloudWatch groups, time-ordered; a failed create's head-node streams;
export to a folder."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from tests.conftest import ROOT
from tests.engine.harness import Sandbox, head_node_instance, kube_client, region_of, spec_file


def test_connect_to_eks_nodes_and_grafana(sandbox: Sandbox, tmp_path: Path) -> None:
    """(Made and torn down with `-o json`: see test_json_output's checks of its lines.)"""
    from tests.engine.test_json_output import check_json_down, check_json_up

    name = "e2e-connect"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    check_json_up(sandbox, spec, name)
    try:
        api = kube_client(sandbox, name, region)
        try:
            node = api.list("v1", "Node", selector="fmctl.dev/pool=gpu")[0]
        finally:
            api.close()
        instance = node["spec"]["providerID"].rsplit("/", 1)[-1]
        assert instance.startswith("i-") and len(instance) == 19
        done = sandbox.fmctl(
            "connect", name, node["metadata"]["name"], "--print", "--sandbox", "--region", region
        )
        assert done.returncode == 0, done.stderr
        # The sandbox's endpoint and CA: asked of AWS, the session would name an instance
        # AWS never heard of.
        assert done.stdout.strip() == (
            f"aws ssm start-session --target {instance} --region {region} --endpoint-url "
            f"{sandbox.endpoint} --ca-bundle {sandbox.info['ca']}"
        )
        grafana = sandbox.fmctl("connect", name, "--port-forward", "3000", "--print", "--sandbox")
        assert grafana.returncode == 0, grafana.stderr  # the region from up's record
        assert "-n monitoring port-forward svc/grafana 3000:3000" in grafana.stdout
        assert f"--context fmctl-{name}-{region}" in grafana.stdout
        head = sandbox.fmctl("connect", name, "--head", "--print", "--sandbox")
        assert head.returncode == 1 and "has no head node" in head.stderr
        nowhere = sandbox.fmctl("connect", name, "ip-10-9-9-9.ec2.internal", "--print", "--sandbox")
        assert nowhere.returncode == 1 and node["metadata"]["name"] in nowhere.stderr

        # logs: fmctl's events of the run, with the control plane's, in time order.
        logs = sandbox.aws(region).client("logs")
        group = f"/aws/eks/{name}/cluster"
        logs.create_log_stream(logGroupName=group, logStreamName="kube-apiserver-audit-1")
        logs.put_log_events(
            logGroupName=group,
            logStreamName="kube-apiserver-audit-1",
            logEvents=[{"timestamp": int(time.time() * 1000), "message": "audit: get nodes"}],
        )
        shown = sandbox.fmctl("logs", name, "--since", "1h", "--sandbox", "-o", "json")
        assert shown.returncode == 0, shown.stderr
        lines = [json.loads(line) for line in shown.stdout.splitlines()]
        assert any(line["source"] == "fmctl" and line["text"].startswith("eks ") for line in lines)
        (audit,) = [line for line in lines if line["source"].startswith(group)]
        assert audit["text"] == "audit: get nodes" and "kube-apiserver-audit-1" in audit["source"]
        assert [line["time"] for line in lines] == sorted(line["time"] for line in lines)
        only = sandbox.fmctl("logs", name, "--source", "cluster", "--stream", "audit", "--sandbox")
        assert "audit: get nodes" in only.stdout and "fmctl" not in only.stdout.split()
    finally:
        check_json_down(sandbox, name, region)


def test_connect_and_logs_of_a_slurm_cluster(sandbox: Sandbox, tmp_path: Path) -> None:
    name = "e2e-slurm-connect"
    region = "us-east-1"
    instance = head_node_instance(sandbox, region, name, "10.66.0.0/16")
    ssm = sandbox.fmctl("connect", name, "--print", "--sandbox", "--region", region)
    assert ssm.stdout.strip() == (
        f"aws ssm start-session --target {instance} --region {region} --endpoint-url "
        f"{sandbox.endpoint} --ca-bundle {sandbox.info['ca']}"
    )
    forward = sandbox.fmctl(
        "connect", name, "--port-forward", "3001", "--print", "--sandbox", "--region", region
    )
    assert "--document-name AWS-StartPortForwardingSession" in forward.stdout
    assert '{"portNumber":["3000"],"localPortNumber":["3001"]}' in forward.stdout
    login = sandbox.fmctl("connect", name, "--login", "--print", "--sandbox", "--region", region)
    assert login.returncode == 1 and "has no login nodes" in login.stderr

    # A create that failed on the head node: the streams that say why.
    logs = sandbox.aws(region).client("logs")
    group = f"/aws/parallelcluster/{name}-202612010000"
    logs.create_log_group(logGroupName=group)
    now = int(time.time() * 1000)
    for stream, message in (
        (f"ip-10-66-0-5.{instance}.cfn-init", "Command chef failed: exit 1"),
        (f"ip-10-66-0-5.{instance}.slurmctld", "slurmctld started"),
    ):
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
        logs.put_log_events(
            logGroupName=group,
            logStreamName=stream,
            logEvents=[{"timestamp": now, "message": message}],
        )
    try:
        failure = sandbox.fmctl("logs", name, "--failure", "--sandbox", "--region", region)
        assert failure.returncode == 0, failure.stderr
        assert "Command chef failed: exit 1" in failure.stdout
        assert "slurmctld started" not in failure.stdout
        out = tmp_path / "exported"
        exported = sandbox.fmctl(
            "logs", name, "--export", str(out), "--sandbox", "--region", region
        )
        assert exported.returncode == 0, exported.stderr
        files = {p.name: p.read_text() for p in out.iterdir()}
        assert len(files) == 2 and any("slurmctld started" in t for t in files.values())
    finally:
        logs.delete_log_group(logGroupName=group)
        sandbox.aws(region).client("ec2").terminate_instances(InstanceIds=[instance])


def test_ssh_to_the_head_node_with_a_key(sandbox: Sandbox, tmp_path: Path) -> None:
    """With a key pair and sshCidr in the spec `up` applied, `connect` uses SSH as the
    image's user (the cookbook's cluster_user: ubuntu on Ubuntu)."""
    name = "e2e-ssh-connect"
    region = "us-east-1"
    instance = head_node_instance(sandbox, region, name, "10.66.0.0/16")
    data = yaml.safe_load((ROOT / "examples" / "p5-slurm-capacity-block.yaml").read_text())
    data["metadata"].update(name=name, region=region)
    data["compute"]["headNode"]["keyName"] = "ops"
    data.setdefault("slurm", {})["os"] = "ubuntu2404"
    folder = sandbox.home / "clusters" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.yaml").write_text(yaml.safe_dump(data))  # as `up` records it
    try:
        done = sandbox.fmctl("connect", name, "--print", "--sandbox")
        assert done.returncode == 0, done.stderr
        address = (
            sandbox.aws(region)
            .client("ec2")
            .describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
        )
        ip = address.get("PublicIpAddress") or address["PrivateIpAddress"]
        assert done.stdout.strip() == f"ssh -i '~/.ssh/ops.pem' ubuntu@{ip}"
    finally:
        sandbox.aws(region).client("ec2").terminate_instances(InstanceIds=[instance])
        (folder / "spec.yaml").unlink()
