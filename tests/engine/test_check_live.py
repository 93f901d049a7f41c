"""`fmctl check NAME` end to end against the sandbox, on both schedulers.

The sandbox has no GPUs, no Slurm and no container runtime. What is real: fmctl's selection
of nodes, the Kubernetes objects and the SSM command it sends, the scheduling of its pods by
device accounting (a node whose GPUs a user's pod holds cannot take the check's pod), the
real node-check.sh and cluster-check.sh, the transport of their output (pod logs; Run
Command's output in S3), the judging, and the clean-up. What is fake: the tools on the
nodes (nvidia-smi, dcgmi, fi_info, torchrun, sinfo, srun, sbatch), which print the recorded
outputs of tests/data/check; the sandbox runs a pod's or a command's program with them first
on PATH (fmctl_sandbox/kube_jobs.py, ssm_agent.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.resources.storage import bucket_name
from tests.check import fakes
from tests.conftest import ROOT
from tests.engine.harness import Sandbox, head_node_instance, kube_client, owned, region_of
from tests.tools.standin import recorded

DATA = ROOT / "tests/data/check"
ACCOUNT = "123456789012"

#: The nodes' tools (tests/check/fakes.py), with what a Kubernetes node's pods run besides.
TOOLS = {
    **fakes.SLURM,
    "nv-hostengine": "#!/bin/sh\nexit 0\n",
    # torchrun: rank 0 prints the header the real script prints (from the job's size) and
    # the recorded rows; the other ranks print nothing.
    "torchrun": """#!/bin/bash
[ "${JOB_COMPLETION_INDEX:-0}" = 0 ] || exit 0
for arg; do case "$arg" in --nnodes=*) n="${arg#--nnodes=}" ;; esac; done
hosts="$NODE_NAME"; for ((i = 1; i < n; i++)); do hosts="$hosts,peer-$i"; done
echo "# nccl-allreduce ranks=$((n * 8)) nodes=$hosts"
grep -v '^# nccl-allreduce' "$DATA/nccl-k8s-p5en-2nodes-healthy.txt"
""",
}


@pytest.fixture
def tools(sandbox: Sandbox, tmp_path: Path) -> Iterator[Path]:
    """A tools folder the sandbox's nodes and instances run with (wrappers that carry the
    fakes' settings, since the sandbox gives a program PATH and the pod's own env only)."""
    real, folder = fakes.install(tmp_path / "fakes", TOOLS), tmp_path / "tools"
    folder.mkdir()
    (tmp_path / "broken").write_text("\n")
    (tmp_path / "sinfo.txt").write_text("")
    (tmp_path / "nccl.txt").write_text(recorded.nccl_p5_2nodes())
    for name in TOOLS:
        wrapper = folder / name
        wrapper.write_text(
            f'#!/bin/bash\nexport FAKE="{tmp_path}" DATA="{DATA}"'
            f' SMI="$(cat {tmp_path}/smi)" FI_INFO="$(cat {tmp_path}/fi_info)"\n'
            f'exec "{real / name}" "$@"\n'
        )
        wrapper.chmod(0o755)
    sandbox.node_tools(folder)
    yield tmp_path
    sandbox.node_tools(None)


def test_check_on_eks_uses_idle_nodes_only(sandbox: Sandbox, tools: Path, tmp_path: Path) -> None:
    name = "e2e-check-eks"
    data = yaml.safe_load((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    data["metadata"]["name"] = name
    data["compute"]["gpuPools"][0]["count"] = 5
    # fmctl's node agent and verify gate off: they would take the broken node out of service
    # and have it replaced (their own e2e are test_health_agent.py and test_verify_gate.py);
    # this test is about the nodes check picks.
    data["health"] = {"kubernetesAgent": False, "verify": {"kubernetesGate": False}}
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    region = region_of(spec)
    (tools / "smi").write_text("nvidia-smi-p5en.csv")
    (tools / "fi_info").write_text("fi_info-p5en-healthy.txt")
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    api = kube_client(sandbox, name, region, "kubectl")
    try:
        gpu = sorted(
            n["metadata"]["name"] for n in api.list("v1", "Node", selector="fmctl.dev/pool=gpu")
        )
        assert len(gpu) == 5
        idle, busy, cordoned, broken, other = gpu
        # A user's training pod holds all of `busy`'s GPUs; `cordoned` is cordoned.
        api.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "llama-0", "namespace": "default"},
                "spec": {
                    "nodeName": busy,
                    "containers": [
                        {
                            "name": "train",
                            "image": "x",
                            "resources": {
                                "requests": {"nvidia.com/gpu": "8"},
                                "limits": {"nvidia.com/gpu": "8"},
                            },
                        }
                    ],
                },
            }
        )
        api.apply(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": cordoned},
                "spec": {"unschedulable": True},
            }
        )
        (tools / "broken").write_text(broken + "\n")

        # What an interrupted check left is removed; a namespace of another cluster is not.
        for stale, owner in (("fmctl-check-0ld", name), ("fmctl-check-f0e", "someone-else")):
            labels = {"app.kubernetes.io/name": "fmctl-check", "fmctl.dev/cluster": owner}
            api.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": stale, "labels": labels},
                }
            )

        # Nodes whose check prints nothing (here: a bash that runs nothing) are not a pass.
        silent = tmp_path / "silent"
        silent.mkdir()
        (silent / "bash").write_text("#!/bin/sh\nexit 0\n")
        (silent / "bash").chmod(0o755)
        sandbox.node_tools(silent)
        blind = sandbox.fmctl(
            "check", name, "-f", str(spec), "--sandbox", "--timeout", "120", "-o", "json"
        )
        assert blind.returncode == 1 and "error: no node was checked" in blind.stderr
        reasons = {s["node"]: s["why"] for s in json.loads(blind.stdout)["skipped"]}
        assert reasons[idle].startswith("its check printed no results"), reasons
        sandbox.node_tools(tools / "tools")

        done = sandbox.fmctl(
            "check", name, "-f", str(spec), "--sandbox", "--timeout", "120", "-o", "json"
        )
        assert done.returncode == 1, done.stdout + done.stderr  # the broken node fails
        report = json.loads(done.stdout)
        verdicts = {v["subject"]: v for v in report["verdicts"]}
        assert set(verdicts) == {idle, other, broken, "nccl all-reduce (gpu)"}
        assert verdicts[idle]["ok"] and verdicts[other]["ok"]
        assert verdicts["nccl all-reduce (gpu)"]["ok"]
        failed = [f for f in verdicts[broken]["findings"] if f["ok"] is False]
        assert [f["check"] for f in failed] == ["gpus"]
        nccl = verdicts["nccl all-reduce (gpu)"]["findings"][0]
        # Across the two idle nodes that passed: not the busy one, not the broken one.
        assert nccl["detail"].startswith("2 nodes, 16 ranks")
        skipped = {s["node"]: s["why"] for s in report["skipped"]}
        assert skipped == {
            busy: "busy: default/llama-0 holds its GPUs (--include-busy waits for it)",
            cordoned: "cordoned",
        }

        # Nothing of the check is left; the user's pod is untouched.
        namespaces = [n["metadata"]["name"] for n in api.list("v1", "Namespace")]
        assert [n for n in namespaces if n.startswith("fmctl-check")] == ["fmctl-check-f0e"]
        assert api.get("v1", "Pod", "llama-0", "default") is not None

        # Text: the failed node named with how to drain it, the skipped ones said.
        text = sandbox.fmctl("check", name, "-f", str(spec), "--sandbox", "--timeout", "120")
        assert text.returncode == 1
        assert f"hint: drain and replace it: kubectl cordon {broken}" in text.stderr
        assert f"{busy}" in text.stdout and "skipped" in text.stdout
    finally:
        api.close()
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert owned(sandbox, name, region) == []


def _bucket(sandbox: Sandbox, region: str, name: str) -> str:
    """The artifact bucket `up` makes (named and tagged as fmctl does)."""
    s3 = sandbox.aws(region).client("s3")
    bucket = bucket_name(name, ACCOUNT, region)
    where = {} if region == "us-east-1" else {"LocationConstraint": region}
    s3.create_bucket(Bucket=bucket, **({"CreateBucketConfiguration": where} if where else {}))
    s3.put_bucket_tagging(
        Bucket=bucket, Tagging={"TagSet": [{"Key": "fmctl.dev/cluster", "Value": name}]}
    )
    return bucket


def test_check_on_slurm_runs_on_the_head_node_through_ssm(
    sandbox: Sandbox, tools: Path, tmp_path: Path
) -> None:
    name = "e2e-check-slurm"
    data: dict[str, Any] = yaml.safe_load(
        (ROOT / "examples/p5-slurm-capacity-block.yaml").read_text()
    )
    data["metadata"]["name"] = name
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    region = region_of(spec)
    (tools / "smi").write_text("nvidia-smi-healthy.csv")
    (tools / "fi_info").write_text("fi_info-p5-healthy.txt")
    (tools / "sinfo.txt").write_text(
        "train-st-p5-48xlarge-1 idle\ntrain-st-p5-48xlarge-2 alloc\n"
        "train-st-p5-48xlarge-3 idle\ntrain-st-p5-48xlarge-4 idle\n"
    )
    (tools / "broken").write_text("train-st-p5-48xlarge-3\n")

    # Before the cluster exists: a located error, not a traceback.
    missing = sandbox.fmctl("check", name, "-f", str(spec), "--sandbox", "--timeout", "120")
    assert missing.returncode == 1
    assert f"{name} has no running head node in {region}" in missing.stderr
    assert "Traceback" not in missing.stderr

    bucket = _bucket(sandbox, region, name)
    instance = head_node_instance(sandbox, region, name, "10.77.0.0/16")
    keep = tmp_path / "kept"
    started = time.monotonic()
    done = sandbox.fmctl(
        "check", name, "-f", str(spec), "--sandbox", "-o", "json", "--keep", str(keep)
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert time.monotonic() - started < 120
    report = json.loads(done.stdout)
    verdicts = {v["subject"]: v["ok"] for v in report["verdicts"]}
    assert verdicts == {
        "train-st-p5-48xlarge-1": True,
        "train-st-p5-48xlarge-3": False,
        "train-st-p5-48xlarge-4": True,
        "nccl all-reduce (train)": True,
    }
    assert report["skipped"] == [
        {
            "node": "train-st-p5-48xlarge-2",
            "pool": "train",
            "why": "busy: a job holds it (--include-busy waits for it)",
        }
    ]
    assert report["pools"]["train"] == {"reported": 3, "nodes": 16}
    # The results stay where asked; the command's output does not stay in the bucket.
    assert (keep / "nodes/train-st-p5-48xlarge-1/dcgmi-diag.json").is_file()
    s3 = sandbox.aws(region).client("s3")
    assert s3.list_objects_v2(Bucket=bucket, Prefix=f"{name}-check/").get("KeyCount", 0) == 0
    # Two commands: the node checks, then NCCL across the nodes that passed.
    sent = [r for r in sandbox.requests() if r["action"] == "SendCommand"][-2:]
    assert [r["status"] for r in sent] == [200, 200]
    ec2 = sandbox.aws(region).client("ec2")
    ec2.terminate_instances(InstanceIds=[instance])


def test_check_on_pcs_runs_on_the_login_node_through_ssm(
    sandbox: Sandbox, tools: Path, tmp_path: Path
) -> None:
    """On AWS PCS there is no head node: the check goes to a login node PCS launched (found
    by PCS's and fmctl's tags), which submits to the controller AWS runs."""
    from tests.engine.test_pcs import pcs_spec

    name, region = "e2e-check-pcs", "us-east-1"
    spec = pcs_spec(tmp_path, name, region, count=3, instanceType="p5.48xlarge")
    (tools / "smi").write_text("nvidia-smi-healthy.csv")
    (tools / "fi_info").write_text("fi_info-p5-healthy.txt")
    (tools / "sinfo.txt").write_text("train-1 idle\ntrain-2 idle\ntrain-3 alloc\n")
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        done = sandbox.fmctl("check", name, "-f", str(spec), "--sandbox", "-o", "json")
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(done.stdout)
        verdicts = {v["subject"]: v["ok"] for v in report["verdicts"]}
        assert verdicts == {"train-1": True, "train-2": True, "nccl all-reduce (train)": True}
        ec2 = sandbox.aws(region).client("ec2")
        (login,) = [
            i["InstanceId"]
            for r in ec2.describe_instances(
                Filters=[
                    {"Name": "tag:fmctl.dev/cluster", "Values": [name]},
                    {"Name": "tag:fmctl.dev/pool", "Values": ["login"]},
                ]
            )["Reservations"]
            for i in r["Instances"]
        ]
        sent = [r for r in sandbox.requests() if r["action"] == "SendCommand"][-2:]
        assert [r["status"] for r in sent] == [200, 200]
        ssm = sandbox.aws(region).client("ssm")
        commands = ssm.list_commands()["Commands"][:2]
        assert all(c["InstanceIds"] == [login] for c in commands), commands
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
