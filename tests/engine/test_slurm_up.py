"""`fmctl up --scheduler slurm` with a stand-in `pcluster` (ParallelCluster's real JSON and
status sequence) on top of infrastructure in the emulator."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.engine.harness import Sandbox, owned, raw_leftovers, region_of, spec_file

FAKE = Path(__file__).resolve().parents[1] / "tools/fake_pcluster.py"


def _env(tmp_path: Path, scenario: str = "ok") -> dict[str, str]:
    return {
        "FMCTL_PCLUSTER": f"{sys.executable} {FAKE}",
        "FAKE_PCLUSTER_STATE": str(tmp_path / "pcluster-state.json"),
        "FAKE_PCLUSTER_SCENARIO": scenario,
        "FAKE_PCLUSTER_STEPS": "2",
    }


def _calls(tmp_path: Path) -> list[list[Any]]:
    calls: list[list[Any]] = json.loads((tmp_path / "pcluster-state.json").read_text())["calls"]
    return calls


def test_slurm_cluster_on_fmctl_infrastructure(sandbox: Sandbox, tmp_path: Path) -> None:
    name = "e2e-pc"
    spec = spec_file(tmp_path, name, example="p5-slurm-capacity-block.yaml")
    region = region_of(spec)
    env = _env(tmp_path)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", **env)
    assert up.returncode == 0, up.stdout + up.stderr
    # sshCidr but no key pair: SSH cannot log in, SSM can.
    assert f"log in: aws ssm start-session --target i-0123456789abcdef0 --region {region}" in (
        up.stdout
    )
    assert "grafana: aws ssm start-session --target i-0123456789abcdef0" in up.stdout
    assert "AWS-StartPortForwardingSession" in up.stdout
    # The pool's Capacity Block winds down on the head node ParallelCluster reports, an hour
    # before the block's end (T-60), and on EC2's warning (T-40).
    aws = sandbox.aws(region)
    schedule = aws.client("scheduler").get_schedule(
        GroupName=f"fmctl-{name}-blocks", Name="end-train"
    )
    head = [{"Key": "InstanceIds", "Values": ["i-0123456789abcdef0"]}]
    assert json.loads(schedule["Target"]["Input"])["Targets"] == head
    rule = f"fmctl-{name}-0123456789abcdef0"
    (target,) = aws.client("events").list_targets_by_rule(Rule=rule)["Targets"]
    assert target["RunCommandParameters"]["RunCommandTargets"] == head
    commands = [(c[0], c[2]) for c in _calls(tmp_path) if c[0] == "create-cluster"]
    # The early check, the final check with the file system's id, then the create.
    assert commands == [("create-cluster", "true")] * 2 + [("create-cluster", "false")]
    config = yaml.safe_load((sandbox.home / "clusters" / name / "cluster-config.yaml").read_text())
    items = {logical: aws_id for _, logical, aws_id in owned(sandbox, name, region)}
    assert config["HeadNode"]["Networking"]["SubnetId"] == items["subnet/public"]
    queue = config["Scheduling"]["SlurmQueues"][0]
    assert queue["Networking"]["SubnetIds"] == [items["subnet/private"]]
    assert queue["Networking"]["AdditionalSecurityGroups"] == [items["sg/efa"]]
    # fmctl's file system, by id: its life is fmctl's, not the cluster's.
    assert config["SharedStorage"][0]["FsxLustreSettings"] == {"FileSystemId": items["fsx"]}
    script = queue["CustomActions"]["OnNodeStart"]["Sequence"][0]["Script"]
    assert script.startswith(f"s3://{items['bucket']}/{name}/slurm/")
    assert (
        "<fmctl:"
        not in (sandbox.home / "clusters" / name / "cluster-config.yaml")
        .read_text()
        .split("\n", 3)[3]
    )
    again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", **env)
    assert again.returncode == 0 and "0 created" in again.stdout
    status = sandbox.fmctl("status", name, "--region", region, "--sandbox", **env)
    assert status.returncode == 0, status.stderr
    assert (
        f"ParallelCluster {name}: CREATE_COMPLETE, head node i-0123456789abcdef0" in status.stdout
    )
    assert "grafana: aws ssm start-session --target i-0123456789abcdef0" in status.stdout
    assert "head node exporters" not in status.stdout  # the head node published nothing yet
    seen = json.loads(
        sandbox.fmctl("status", name, "--region", region, "--sandbox", "-o", "json", **env).stdout
    )
    assert seen["slurm"]["status"] == "CREATE_COMPLETE" and seen["kubernetes"] is None
    assert seen["slurm"]["headNode"]["instanceId"] == "i-0123456789abcdef0"
    assert any("start-session --target i-0123456789abcdef0" in a for a in seen["access"])
    # What the head node's on-node-configured.sh publishes (tests/slurm/test_standin_node.py
    # shows it writes this key): status says which exporter is missing and why.
    sandbox.aws(region).client("s3").put_object(
        Bucket=items["bucket"],
        Key=f"{name}-check/exporters/head.txt",
        Body=b"grafana missing: download failed: https://dl.grafana.com/oss/release/x\n"
        b"prometheus ok\nslurm ok\n",
    )
    status = sandbox.fmctl("status", name, "--region", region, "--sandbox", **env)
    assert "head node exporters: grafana missing: download failed: https://dl.grafana.com" in (
        status.stdout
    )
    assert "prometheus ok, slurm ok" in status.stdout
    assert [c[0] for c in _calls(tmp_path)].count("create-cluster") == 3  # no new create

    ec2 = sandbox.aws(region).client("ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]

    def launch(cluster: str) -> str:
        instance: str = ec2.run_instances(
            ImageId=image,
            MinCount=1,
            MaxCount=1,
            InstanceType="p5.48xlarge",
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [
                        {"Key": "parallelcluster:cluster-name", "Value": cluster},
                        {"Key": "parallelcluster:node-type", "Value": "Compute"},
                    ],
                }
            ],
        )["Instances"][0]["InstanceId"]
        return instance

    # With no compute instance running, nothing is published (and nothing overwritten).
    bare = sandbox.fmctl("topology", name, "--region", region, "--sandbox", **env)
    assert bare.returncode == 0, bare.stdout + bare.stderr
    assert "nothing published" in bare.stdout and "head node installs" not in bare.stdout
    leftover, foreign = launch(name), launch(f"{name}x")
    # Where the running compute nodes sit, published for the head node's topology.conf.
    topo = sandbox.fmctl("topology", name, "--region", region, "--sandbox", "-o", "json", **env)
    assert topo.returncode == 0, topo.stdout + topo.stderr
    published = json.loads(topo.stdout)
    (placed,) = published["instances"]  # ours only: not the other cluster's instance
    assert placed["instanceId"] == leftover and placed["ip"].startswith("10.")
    assert len(placed["networkNodes"]) == 3
    # The pool's tree beside it: p5 has 3 network layers (the catalog's, from EC2's docs).
    (tree,) = published["pools"]
    assert tree["layers"] == 3 and tree["instances"] == 1 and tree["nodesPerLayer"] == [1, 1, 1]
    s3 = sandbox.aws(region).client("s3")
    body = s3.get_object(Bucket=items["bucket"], Key=f"{name}/slurm/topology.json")["Body"].read()
    assert json.loads(body)["instances"] == published["instances"]
    assert published["publishedTo"] == f"s3://{items['bucket']}/{name}/slurm/topology.json"
    # And where the applied spec's Capacity Block sits (DescribeCapacityReservationTopology).
    (reserved,) = published["reservations"]
    assert reserved["reservationId"] == "cr-0123456789abcdef0" and reserved["state"] == "active"
    assert len(reserved["networkNodes"]) == 3
    assert "topology: reservation train: cr-0123456789abcdef0 (active) under 3" in bare.stdout
    # The instance goes: the topology published from it stays as it was.
    ec2.stop_instances(InstanceIds=[leftover])
    again = sandbox.fmctl("topology", name, "--region", region, "--sandbox", "-o", "json", **env)
    assert json.loads(again.stdout)["publishedTo"] is None
    kept = s3.get_object(Bucket=items["bucket"], Key=f"{name}/slurm/topology.json")["Body"]
    assert json.loads(kept.read())["instances"] == published["instances"]
    ec2.start_instances(InstanceIds=[leftover])
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes", **env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "leftover compute instances" in down.stdout
    state = {
        i["InstanceId"]: i["State"]["Name"]
        for r in ec2.describe_instances(InstanceIds=[leftover, foreign])["Reservations"]
        for i in r["Instances"]
    }
    assert state == {leftover: "terminated", foreign: "running"}
    assert "delete-cluster" in [c[0] for c in _calls(tmp_path)]
    assert raw_leftovers(sandbox, name, region) == []
    ec2.terminate_instances(InstanceIds=[foreign])


def test_bootstrap_failure_is_reported_with_its_logs(sandbox: Sandbox, tmp_path: Path) -> None:
    name = "e2e-pc-fail"
    spec = spec_file(tmp_path, name, example="p5-slurm-capacity-block.yaml")
    region = region_of(spec)
    env = _env(tmp_path, "bootstrap-failure")
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", **env)
    assert up.returncode == 1
    assert "HeadNodeBootstrapFailure" in up.stderr
    assert f"/aws/parallelcluster/{name}-" in up.stderr and "Traceback" not in up.stderr
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes", **env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []


def test_validator_errors_stop_before_the_cluster(sandbox: Sandbox, tmp_path: Path) -> None:
    name = "e2e-pc-invalid"
    spec = spec_file(tmp_path, name, example="p5-slurm-capacity-block.yaml")
    env = _env(tmp_path, "invalid-config")
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", **env)
    assert up.returncode == 1
    assert "ParallelCluster's validators refused the config" in up.stderr
    assert "EfaValidator" in up.stderr
    assert [c[0] for c in _calls(tmp_path)].count("create-cluster") == 1  # the dry run only
    # The early check stops `up` before the file system (slow and billed) is asked for.
    kinds = {kind for kind, _, _ in owned(sandbox, name, region_of(spec))}
    assert "subnet" in kinds and "fsx" not in kinds
    sandbox.fmctl("down", name, "--region", region_of(spec), "--sandbox", "--yes", **env)


def test_broken_spec_is_reported_before_parallelcluster_is_asked(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    name = "e2e-pc-broken"
    spec = spec_file(tmp_path, name, example="p5-slurm-capacity-block.yaml")
    data = yaml.safe_load(spec.read_text())
    data["compute"]["gpuPools"][0]["instanceType"] = "g6e.xlarge"  # no EFA on it
    data["storage"]["fsxLustre"]["capacityGiB"] = 5000  # PERSISTENT_2 steps are 2400 GiB
    spec.write_text(yaml.safe_dump(data))
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", **_env(tmp_path))
    assert up.returncode == 1
    assert "efa" in up.stderr.lower() and "capacityGiB" in up.stderr
    assert not (tmp_path / "pcluster-state.json").exists()  # pcluster never ran


def test_slurm_without_pcluster_stops_before_any_call(tmp_path: Path) -> None:
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FMCTL_"))}
    env.update(
        FMCTL_HOME=str(tmp_path),
        PATH="/usr/bin:/bin",
        AWS_ENDPOINT_URL="https://127.0.0.1:9",
        AWS_EC2_METADATA_DISABLED="true",
    )
    spec = Path(__file__).resolve().parents[2] / "examples/p5-slurm-capacity-block.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "provisioner", "up", "-f", str(spec), "--yes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "fmctl setup parallelcluster" in result.stderr and "Traceback" not in result.stderr


def test_changed_spec_updates_the_cluster_or_says_why_not(sandbox: Sandbox, tmp_path: Path) -> None:
    name = "e2e-pc-update"
    spec = spec_file(tmp_path, name, example="p5-slurm-capacity-block.yaml")
    region = region_of(spec)
    env = _env(tmp_path)
    assert sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", **env).returncode == 0
    data = yaml.safe_load(spec.read_text())
    data["slurm"]["scaledownIdletime"] = 5
    spec.write_text(yaml.safe_dump(data))

    refused = sandbox.fmctl(
        "up",
        "-f",
        str(spec),
        "--sandbox",
        "--yes",
        **{**env, "FAKE_PCLUSTER_SCENARIO": "update-needs-stop"},
    )
    assert refused.returncode == 1
    assert "ScaledownIdletime" in refused.stderr and "update-compute-fleet" in refused.stderr
    assert "Traceback" not in refused.stderr

    updated = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", **env)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert "updating  Scheduling.SlurmSettings.ScaledownIdletime" in updated.stdout
    assert "0 created" in updated.stdout
    real_updates = [c for c in _calls(tmp_path) if c[0] == "update-cluster" and c[2] == "false"]
    assert len(real_updates) == 1
    state = json.loads((tmp_path / "pcluster-state.json").read_text())
    assert state["clusters"][name]["status"] == "UPDATE_COMPLETE"
    assert "ScaledownIdletime: 5" in state["clusters"][name]["config"]
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes", **env)
    assert down.returncode == 0 and raw_leftovers(sandbox, name, region) == []


def test_amp_remote_write_gets_a_policy_of_its_own(sandbox: Sandbox, tmp_path: Path) -> None:
    """The head node may remote-write to the spec's workspace only: fmctl makes the policy
    (ParallelCluster takes ARNs), keeps it current, and deletes it with the cluster."""
    name = "e2e-pc-amp"
    region = "us-east-1"
    first = f"arn:aws:aps:{region}:123456789012:workspace/ws-11111111-aaaa-bbbb-cccc-000000000001"
    second = first.replace("000000000001", "000000000002")
    data = yaml.safe_load(
        spec_file(tmp_path, name, example="p5-slurm-capacity-block.yaml").read_text()
    )
    data["observability"]["ampWorkspaceArn"] = first
    spec = tmp_path / "amp.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    env = _env(tmp_path)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", **env)
    assert up.returncode == 0, up.stdout + up.stderr
    iam = sandbox.aws(region).client("iam")
    arn = f"arn:aws:iam::123456789012:policy/parallelcluster/fmctl-{name}-{region}-amp-write"

    def document() -> Any:
        policy = iam.get_policy(PolicyArn=arn)["Policy"]
        version = iam.get_policy_version(PolicyArn=arn, VersionId=policy["DefaultVersionId"])
        return version["PolicyVersion"]["Document"]

    assert document()["Statement"] == [
        {"Sid": "RemoteWrite", "Effect": "Allow", "Action": ["aps:RemoteWrite"], "Resource": first}
    ]
    tags = {t["Key"]: t["Value"] for t in iam.list_policy_tags(PolicyArn=arn)["Tags"]}
    assert tags["fmctl.dev/cluster"] == name
    config = yaml.safe_load((sandbox.home / "clusters" / name / "cluster-config.yaml").read_text())
    policies = [p["Policy"] for p in config["HeadNode"]["Iam"]["AdditionalIamPolicies"]]
    assert arn in policies and not any("AmazonPrometheus" in p for p in policies)

    # Another workspace: the same policy, its new default version names it.
    data["observability"]["ampWorkspaceArn"] = second
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", **env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert document()["Statement"][0]["Resource"] == second
    assert len(iam.list_policy_versions(PolicyArn=arn)["Versions"]) == 2

    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes", **env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []


def test_a_queue_resize_is_planned_with_parallelclusters_policy(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A pool's count on Slurm: `plan` shows the setting ParallelCluster would change and
    whether its update policy allows it now (update-cluster --dryrun, nothing written), and
    the cluster's own place in the plan; `up` applies it through ParallelCluster."""
    name = "e2e-pc-resize"
    pools = [{"name": "train", "instanceType": "p5.48xlarge", "count": 2}]
    spec = spec_file(
        tmp_path, name, example="p5-slurm-capacity-block.yaml", compute={"gpuPools": pools}
    )
    region = region_of(spec)
    env = _env(tmp_path)
    assert sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", **env).returncode == 0
    offline = sandbox.fmctl("plan", "-f", str(spec), "--offline", "-o", "json")
    data = json.loads(offline.stdout)
    assert "parallelcluster" in data["critical_path"]  # the longest step, planned too
    pools[0]["count"] = 4
    changed = yaml.safe_load(spec.read_text())
    changed["compute"]["gpuPools"] = pools
    spec.write_text(yaml.safe_dump(changed, sort_keys=False))

    before = len(_calls(tmp_path))
    planned = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json", **env)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert [c[0] for c in _calls(tmp_path)[before:] if c[2] == "false"] == ["describe-cluster"]
    changes = {c["resource"]: c for c in json.loads(planned.stdout)["changes"]}
    cluster = changes["parallelcluster"]
    assert cluster["action"] == "update"
    resized = {f["path"]: f for f in cluster["fields"]}
    key = "Scheduling.SlurmQueues[train].ComputeResources[p5-48xlarge].MaxCount"
    assert (resized[key]["from"], resized[key]["to"], resized[key]["how"]) == ("2", "4", "update")
    assert "update policy allows it" in resized[key]["reason"]

    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", **env)
    assert up.returncode == 0, up.stdout + up.stderr
    state = json.loads((tmp_path / "pcluster-state.json").read_text())
    queue = yaml.safe_load(state["clusters"][name]["config"])["Scheduling"]["SlurmQueues"][0]
    assert queue["ComputeResources"][0]["MaxCount"] == 4
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes", **env)
    assert down.returncode == 0 and raw_leftovers(sandbox, name, region) == []
