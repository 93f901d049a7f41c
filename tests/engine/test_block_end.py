"""A Capacity Block that ends cleanly, in the sandbox, on its clock. On AWS PCS: `up` plans a
schedule at T-60 and a rule on EC2's T-40 warning; at T-60 the schedule has Run Command wind
the pool down on the login node (a maintenance reservation to the block's end, the running
job signalled once); at T-40 EC2's warning reaches the rule, whose run finds the work done;
the block extended moves the schedule and the rule's script; `down` leaves nothing. The
login node's Slurm is a fake that records what it is asked (block-end.sh itself runs against
a real slurmctld in tests/slurm/test_standin_block_end.py). On EKS: the T-60 schedules taint
the block's nodes, so Kueue admits no job into the block's flavor until the taint goes, and
have Run Command signal the processes on the block's GPUs (gpu-signal.sh itself runs in a
stand-in node in tests/slurm/test_standin_gpu_signal.py)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.engine.harness import Sandbox, kube_client, raw_leftovers, spec_file, until
from tests.engine.test_kueue import _docs, _rendered, _state, _workloads
from tests.engine.test_pcs import pcs_spec
from tests.tools.fake_slurm import calls, login_slurm

BLOCK = "cr-0b10c4e2d0000e0d1"


@pytest.fixture
def slurm(sandbox: Sandbox, tmp_path: Path) -> Iterator[Path]:
    with login_slurm(sandbox, tmp_path / "slurm") as folder:
        yield folder


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _seed(
    sandbox: Sandbox,
    region: str,
    end: float,
    block: str = BLOCK,
    instance_type: str = "p5en.48xlarge",
) -> None:
    sandbox.seed(
        {
            "capacityReservationId": block,
            "instanceType": instance_type,
            "availabilityZone": f"{region}a",
            "totalInstanceCount": 2,
            "availableInstanceCount": 2,
            "state": "active",
            "reservationType": "capacity-block",
            "startDate": _iso(end - 24 * 3600),
            "endDate": _iso(end),
            "endDateType": "limited",
        }
    )


def _wait_calls(folder: Path, wanted: str, count: int = 1) -> list[str]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        said = calls(folder)
        if sum(wanted in line for line in said) >= count:
            return said
        time.sleep(0.2)
    raise AssertionError(f"no {count} x {wanted!r} in {calls(folder)}")


def test_pcs_block_winds_down_at_t60_then_t40_and_down_leaves_nothing(
    sandbox: Sandbox, slurm: Path, tmp_path: Path
) -> None:
    name, region = "e2e-block-pcs", "us-east-2"
    start = sandbox.clock()
    end = float(int(start + 3 * 3600))  # three hours left on the sandbox's clock
    _seed(sandbox, region, end)
    capacity = {"type": "capacity-block", "reservationId": BLOCK}
    spec = pcs_spec(tmp_path, name, region, capacity=capacity)
    made = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    try:
        aws = sandbox.aws(region)
        scheduler, events = aws.client("scheduler"), aws.client("events")
        group = f"fmctl-{name}-blocks"
        schedule = scheduler.get_schedule(GroupName=group, Name="end-train")
        t60 = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(end - 3600))
        assert schedule["ScheduleExpression"] == f"at({t60})"
        assert schedule["Target"]["Arn"] == "arn:aws:scheduler:::aws-sdk:ssm:sendCommand"
        rule = f"fmctl-{name}-{BLOCK.removeprefix('cr-')}"
        target = events.list_targets_by_rule(Rule=rule)["Targets"][0]
        ec2 = aws.client("ec2")
        login = ec2.describe_instances(
            Filters=[
                {"Name": "tag:fmctl.dev/cluster", "Values": [name]},
                {"Name": "tag:fmctl.dev/pool", "Values": ["login"]},
                {"Name": "instance-state-name", "Values": ["running"]},
            ]
        )["Reservations"][0]["Instances"][0]
        # Both name the login node group by PCS's own tag on its instances: a login node PCS
        # replaces is still reached (by instance id it would not be, until the next `up`).
        tags = {t["Key"]: t["Value"] for t in login["Tags"]}
        group_tag = "aws:pcs:compute-node-group-id"
        by_group = [{"Key": f"tag:{group_tag}", "Values": [tags[group_tag]]}]
        assert target["RunCommandParameters"]["RunCommandTargets"] == by_group
        sent = json.loads(schedule["Target"]["Input"])
        assert (sent["Targets"], sent["MaxConcurrency"]) == (by_group, "1"), sent
        again = sandbox.fmctl("plan", "-f", str(spec), "--sandbox")
        assert again.returncode == 0 and "nothing to do" in again.stdout, again.stdout

        # The block extended by an hour: the plan moves the schedule, `up` moves it.
        end += 3600
        _seed(sandbox, region, end)
        moved = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
        changed = {c["resource"] for c in json.loads(moved.stdout)["changes"]}
        assert {"blocks/schedule", "blocks/warning/train"} <= changed, moved.stdout
        applied = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        schedule = scheduler.get_schedule(GroupName=group, Name="end-train")
        t60 = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(end - 3600))
        assert schedule["ScheduleExpression"] == f"at({t60})"
        rule_input = events.list_targets_by_rule(Rule=rule)["Targets"][0]["Input"]
        assert f"train {int(end)} --block {BLOCK}" in json.loads(rule_input)["commands"][0]

        # The login node is replaced (as PCS replaces an instance of a group): the new one,
        # of the same group, is the one the triggers reach.
        ec2.terminate_instances(InstanceIds=[login["InstanceId"]])
        replaced = ec2.run_instances(
            ImageId=login["ImageId"],
            InstanceType=login["InstanceType"],
            MinCount=1,
            MaxCount=1,
            TagSpecifications=[{"ResourceType": "instance", "Tags": login["Tags"]}],
        )["Instances"][0]["InstanceId"]

        # A job runs in the block's partition when T-60 comes.
        (slurm / "squeue.txt").write_text("41\n")
        runs = sandbox.advance(end - 3600 - sandbox.clock() + 5)
        ran = [r for r in runs if group in r.get("schedule", "")]
        assert [r["outcome"] for r in ran] == ["succeeded"], runs
        said = _wait_calls(slurm, "scancel")
        reserve = next(line for line in said if line.startswith("scontrol create reservation"))
        for part in ("ReservationName=fmctl-block-train", "PartitionName=train", "Nodes=ALL"):
            assert part in reserve, reserve
        # (Its Duration counts from the node's clock: the wall clock here, not the sandbox's.)
        assert "Flags=MAINT,IGNORE_JOBS" in reserve and "Duration=" in reserve, reserve
        assert "scancel --signal=USR1 --full 41" in said
        ssm = aws.client("ssm")
        on_new = ssm.list_command_invocations(InstanceId=replaced)["CommandInvocations"]
        assert [i["Status"] for i in on_new] == ["Success"], on_new
        on_old = ssm.list_command_invocations(InstanceId=login["InstanceId"])
        assert all(i["CommandId"] != on_new[0]["CommandId"] for i in on_old["CommandInvocations"])

        # T-40: EC2's warning reaches the rule; its run finds the reservation, signals nobody.
        # (Through the CLI a user rehearses it with.)
        told = sandbox.fmctl("sandbox", "advance", "21m")
        assert told.returncode == 0, told.stdout + told.stderr
        said = f"rule {rule} ({BLOCK}-approaching-expiry): document/AWS-RunShellScript sent"
        assert said in told.stdout.splitlines(), told.stdout
        said = _wait_calls(slurm, "scontrol show reservation fmctl-block-train", 2)
        assert sum(line.startswith("scancel") for line in said) == 1, said
        assert sum(line.startswith("scontrol create") for line in said) == 1, said
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []


def test_gc_finds_a_cluster_whose_only_leftover_is_a_block_rule(sandbox: Sandbox) -> None:
    """A `down` cut short can leave only a block's warning rule (it goes last: nothing
    refers to it): `gc` finds the cluster by the rule's name and tags, and collects it."""
    name, region = "block-left", "ap-south-1"
    events = sandbox.aws(region).client("events")
    before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    rule = f"fmctl-{name}-{BLOCK.removeprefix('cr-')}"
    events.put_rule(
        Name=rule,
        EventPattern=json.dumps({"source": ["aws.ec2"]}),
        Tags=[
            {"Key": "fmctl.dev/cluster", "Value": name},
            {"Key": "fmctl.dev/resource", "Value": "blocks/warning/train"},
            {"Key": "fmctl.dev/created-at", "Value": before},
        ],
    )
    listed = sandbox.fmctl("gc", "--older-than", "5m", "--dry-run", "--region", region, "--sandbox")
    assert f"collect  {name}" in listed.stdout, listed.stdout + listed.stderr
    done = sandbox.fmctl("gc", "--older-than", "5m", "--region", region, "--sandbox", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert events.list_rules(NamePrefix=rule)["Rules"] == []
    assert raw_leftovers(sandbox, name, region) == []


def test_eks_block_nodes_take_no_new_pod_from_t60(sandbox: Sandbox, tmp_path: Path) -> None:
    """On EKS the T-60 schedule taints the block's node group (EKS scales it to zero itself
    at T-40): the nodes carry the taint, so no new pod lands there; the block extended, the
    next `up` takes the taint off and moves the schedule."""
    name, example = "e2e-block-eks", "p6-b300-eks-capacity-block.yaml"
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    # A block of this test's own: the example's is other tests' too, and this one ends soon.
    block = "cr-0b10c4e2d0000e0d2"
    data["compute"]["gpuPools"][0]["capacity"]["reservationId"] = block
    region = data["metadata"]["region"]
    # No verify gate: a node not yet through it is idle to `fmctl cost` whatever runs on it,
    # and below a pod is placed on a node by name (the gate's e2e is test_verify_gate.py).
    health = {"verify": {"kubernetesGate": False}}
    spec = spec_file(tmp_path, name, example=example, compute=data["compute"], health=health)
    end = float(int(sandbox.clock() + 3 * 3600))
    _seed(sandbox, region, end, block, "p6-b300.48xlarge")
    made = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    try:
        aws = sandbox.aws(region)
        schedule = aws.client("scheduler").get_schedule(
            GroupName=f"fmctl-{name}-blocks", Name="end-b300"
        )
        assert schedule["Target"]["Arn"].endswith(":eks:updateNodegroupConfig")
        assert aws.client("events").list_rules(NamePrefix=f"fmctl-{name}-")["Rules"] == []

        # `fmctl cost` says which GPU nodes nothing is placed on: both of the block's, until a
        # pod asking for GPUs lands on one.
        api = kube_client(sandbox, name, region)
        b300 = sorted(
            n["metadata"]["name"]
            for n in api.list("v1", "Node", selector="eks.amazonaws.com/nodegroup=b300")
        )
        cost = sandbox.fmctl("cost", name, "--region", region, "--sandbox", "-o", "json")
        assert cost.returncode == 0, cost.stdout + cost.stderr
        idle = json.loads(cost.stdout)["idle"]
        assert (idle["idleNodes"], idle["gpuNodes"]) == (b300, 2), idle
        api.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "train-0", "namespace": "default"},
                "spec": {
                    "nodeName": b300[0],
                    "containers": [
                        {
                            "name": "main",
                            "image": "public.ecr.aws/docker/library/busybox:1.37",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            }
        )
        deadline = time.monotonic() + 60
        while True:
            pod = api.get("v1", "Pod", "train-0", "default") or {}
            if pod.get("status", {}).get("phase") in ("Pending", "Running"):
                break
            assert time.monotonic() < deadline, pod
            time.sleep(0.5)
        cost = sandbox.fmctl("cost", name, "--region", region, "--sandbox")
        assert cost.returncode == 0, cost.stdout + cost.stderr
        line = next(x for x in cost.stdout.splitlines() if x.startswith("idle now:"))
        assert line.startswith("idle now: 1 of 2 GPU nodes") and line.endswith(f": {b300[1]}")
        api.delete("v1", "Pod", "train-0", "default")

        # What runs on the block's GPUs: two processes that checkpoint on SIGUSR1 (the driver
        # lists the second twice: it uses two GPUs), and one that uses no GPU.
        gpu = _gpu_processes(sandbox, tmp_path)
        try:
            runs = sandbox.advance(end - 3600 - sandbox.clock() + 5)
            ran = {
                r["schedule"].rsplit("/", 1)[-1]: r["outcome"]
                for r in runs
                if f"fmctl-{name}-blocks" in r.get("schedule", "")
            }
            assert ran == {"end-b300": "succeeded", "signal-b300": "succeeded"}, runs
            eks = aws.client("eks")
            asg = eks.describe_nodegroup(clusterName=name, nodegroupName="b300")["nodegroup"][
                "resources"
            ]["autoScalingGroups"][0]["name"]
            (described,) = aws.client("autoscaling").describe_auto_scaling_groups(
                AutoScalingGroupNames=[asg]
            )["AutoScalingGroups"]
            nodes = sorted(i["InstanceId"] for i in described["Instances"])
            assert len(nodes) == 2
            # Run Command reached the block's two nodes, named by their Auto Scaling group's
            # tag, and no other: not the system node group's.
            outputs = _signal_outputs(aws, f"fmctl {name}: capacity block {block} ends")
            assert sorted(outputs) == nodes, outputs
            for out in outputs.values():
                lines = out.splitlines()
                assert sorted(lines[:-1]) == sorted(f"signalled {p.pid} USR1" for p in gpu[:2])
                assert lines[-1] == "done 2", out
            # The sandbox's two nodes are this one host: each GPU process was signalled by both
            # (two signals at once may reach it as one: Linux does not queue a second SIGUSR1
            # while the first is pending); the process on no GPU heard nothing.
            for proc in gpu[:2]:
                until(f"{proc.pid} checkpointing", lambda proc=proc: _heard(tmp_path, proc))
            assert _heard(tmp_path, gpu[2]) == 0
        finally:
            sandbox.node_tools(None)
            for proc in gpu:
                proc.kill()
                proc.wait()
        taint = {"key": "fmctl.dev/capacity-block-ending", "value": block, "effect": "NoSchedule"}

        def tainted() -> list[dict[str, str]]:
            nodes = kube_client(sandbox, name, region).list(
                "v1", "Node", selector="eks.amazonaws.com/nodegroup=b300"
            )
            assert nodes, "the block's node group has no nodes"
            return [t for n in nodes for t in n["spec"].get("taints", []) if t == taint]

        deadline = time.monotonic() + 60
        while len(tainted()) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(tainted()) == 2  # both of the block's nodes
        # The node agents tolerate the taint: the nodes still advertise their GPUs (the
        # device plugin DaemonSet covers them) until EKS drains them at T-40.
        for node in kube_client(sandbox, name, region).list(
            "v1", "Node", selector="eks.amazonaws.com/nodegroup=b300"
        ):
            assert node["status"]["allocatable"].get("nvidia.com/gpu") == "8", node["status"]
        group = eks.describe_nodegroup(clusterName=name, nodegroupName="b300")["nodegroup"]
        assert {"key": taint["key"], "value": block, "effect": "NO_SCHEDULE"} in group["taints"]

        # Kueue admits nothing into the block: its topology scheduling leaves out nodes with
        # a taint the job does not tolerate (Kueue 0.19's scheduling_simulator_default.go),
        # so the NCCL test, which fits the block's quota, waits whole.
        api = kube_client(sandbox, name, region)
        for doc in _docs(_rendered(spec)["kubernetes/nccl-test/job.yaml"]):
            api.apply(doc)

        def nccl() -> dict[str, Any] | None:
            found = [
                w for w in _workloads(api).values() if "nccl-allreduce" in w["metadata"]["name"]
            ]
            return found[0] if found and "QuotaReserved" in _state(found[0]) else None

        held = _state(until("the NCCL test's workload", nccl))
        assert "Admitted" not in held and held["QuotaReserved"]["status"] == "False", held
        assert "doesn't allow to fit any of 2 pod(s)" in held["QuotaReserved"]["message"], held
        assert (
            api.list("v1", "Pod", "training", "batch.kubernetes.io/job-name=nccl-allreduce") == []
        )

        # The block extended by a day: `up` takes the taint off and moves the schedule.
        end += 24 * 3600
        _seed(sandbox, region, end, block, "p6-b300.48xlarge")
        again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        group = eks.describe_nodegroup(clusterName=name, nodegroupName="b300")["nodegroup"]
        assert taint["key"] not in {t["key"] for t in group.get("taints", [])}
        moved = aws.client("scheduler").get_schedule(
            GroupName=f"fmctl-{name}-blocks", Name="end-b300"
        )
        t60 = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(end - 3600))
        assert moved["ScheduleExpression"] == f"at({t60})"
        # ...and the job that waited is admitted into the block.
        wl = until("the NCCL test's admission", lambda: "Admitted" in _state(nccl() or {}))
        assert wl
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []


def _gpu_processes(sandbox: Sandbox, tmp_path: Path) -> list[subprocess.Popen[bytes]]:
    """Three processes that note each SIGUSR1 they hear in ``tmp_path/heard/PID``; the
    sandbox's nodes get an nvidia-smi that lists the first two as on their GPUs (the
    second twice, as on two GPUs), one pid a line as its CSV without header prints them."""
    heard = tmp_path / "heard"
    heard.mkdir()
    # Each says when its trap listens: a USR1 that came earlier would end it.
    trap = f"trap 'echo USR1 >> {heard}/$$' USR1; touch {heard}/$$.on; while :; do sleep 0.1; done"
    procs = [subprocess.Popen(["bash", "-c", trap]) for _ in range(3)]
    for proc in procs:
        until(f"{proc.pid} listening", (heard / f"{proc.pid}.on").exists)
    apps = tmp_path / "gpu-apps"
    apps.write_text(f"{procs[0].pid}\n{procs[1].pid}\n{procs[1].pid}\n")
    tools = tmp_path / "node-tools"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text(
        f'#!/bin/bash\n[ "$1" = --query-compute-apps=pid ] || exit 2\nexec cat "{apps}"\n'
    )
    smi.chmod(0o755)
    sandbox.node_tools(tools)
    return procs


def _heard(tmp_path: Path, proc: subprocess.Popen[bytes]) -> int:
    """How many signals ``proc`` heard."""
    path = tmp_path / "heard" / str(proc.pid)
    return len(path.read_text().splitlines()) if path.exists() else 0


def _signal_outputs(aws: Any, comment: str) -> dict[str, str]:
    """Each instance's output of the Run Command whose comment is ``comment``, once every
    invocation has succeeded."""
    ssm = aws.client("ssm")

    def done() -> dict[str, str] | None:
        found = [
            i
            for i in ssm.list_command_invocations()["CommandInvocations"]
            if i.get("Comment") == comment
        ]
        if not found or any(i["Status"] in ("Pending", "InProgress") for i in found):
            return None
        out = {}
        for i in found:
            got = ssm.get_command_invocation(CommandId=i["CommandId"], InstanceId=i["InstanceId"])
            assert got["Status"] == "Success", got
            out[i["InstanceId"]] = got["StandardOutputContent"]
        return out

    return until("the block's Run Command", done)


def test_run_command_on_eks_nodes_is_judged_on_their_own_tags() -> None:
    """The sandbox's EKS nodes are not moto's instances: SendCommand names them by a tag
    they carry (``ssm_agent.targeted`` with ``others``), and IAM reads their tags for the
    ``ssm:resourceTag`` condition: a role scoped to another cluster's instances is refused,
    and a node group's tag reaches that group's nodes only."""
    from fmctl_sandbox import iam_eval
    from fmctl_sandbox.ssm_agent import targeted

    nodes = {
        "i-0000000000000000a": {
            "aws:autoscaling:groupName": "eks-b300-1",
            "fmctl.dev/cluster": "c",
        },
        "i-0000000000000000b": {
            "aws:autoscaling:groupName": "eks-b300-1",
            "fmctl.dev/cluster": "c",
        },
        "i-0000000000000000c": {
            "aws:autoscaling:groupName": "eks-system-2",
            "fmctl.dev/cluster": "c",
        },
        "i-0000000000000000d": {
            "aws:autoscaling:groupName": "eks-b300-9",
            "fmctl.dev/cluster": "d",
        },
    }
    params = {
        "DocumentName": "AWS-RunShellScript",
        "Targets": [{"Key": "tag:aws:autoscaling:groupName", "Values": ["eks-b300-1"]}],
    }

    class NoMotoInstances:
        def describe_instances(self, filters: dict[str, Any]) -> list[Any]:
            return []

    assert targeted(NoMotoInstances(), params, nodes) == [
        "i-0000000000000000a",
        "i-0000000000000000b",
    ]

    def role(cluster: str) -> list[dict[str, Any]]:
        return [
            {
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": ["ssm:SendCommand"],
                        "Resource": ["arn:aws:ssm:us-east-1::document/AWS-RunShellScript"],
                    },
                    {
                        "Effect": "Allow",
                        "Action": ["ssm:SendCommand"],
                        "Resource": ["arn:aws:ec2:us-east-1:*:instance/*"],
                        "Condition": {
                            "StringEquals": {"ssm:resourceTag/fmctl.dev/cluster": cluster}
                        },
                    },
                ]
            }
        ]

    call = ("ssm", "sendCommand", "us-east-1", "123456789012", params)
    assert iam_eval.refused(role("c"), "r", *call, nodes) is None
    refused = iam_eval.refused(role("d"), "r", *call, nodes)
    assert refused is not None and "instance/i-0000000000000000a" in refused
