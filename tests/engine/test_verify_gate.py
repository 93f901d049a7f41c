"""The EKS verify gate end to end in the sandbox (health.verify.kubernetesGate): `up` makes
GPU node groups whose nodes join with the taint fmctl.dev/unverified; fmctl's verify
controller (the very script `up` ships in its ConfigMap) runs the gate's Job on each node,
lifts the taint from the nodes that pass and keeps out of service the one that fails; `fmctl
health` shows both.

What is real: the rendered objects `up` applies, the controller's calls to the cluster's
API (as a process of its own, with a bearer token and the cluster's CA, as in a pod), the
Jobs' scheduling by the sandbox (every GPU and EFA device of the node; the startup taint
tolerated), verify-node.sh as the Job's containers run it, the patches and annotations.
What is fake: the node's tools (nvidia-smi, dcgmi, fi_info, fi_pingpong), which print the
recorded outputs of tests/data (a GPU fallen off the bus on the broken node). The sandbox does
not check the controller's RBAC (its API authorizes by access entry, not by role);
tests/render/test_verify_gate.py checks what the role allows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.engine.harness import Sandbox, kube_client, owned, region_of, until
from tests.tools import verify_gate as gate
from tests.tools.verify_gate import TAINT

CONTROLLER = ROOT / "templates/kubernetes/health-verify/verify_controller.py"


@pytest.fixture
def tools(sandbox: Sandbox, tmp_path: Path) -> Iterator[Path]:
    """The sandbox's nodes run with the gate's tools (tests/tools/verify_gate.py)."""
    sandbox.node_tools(gate.install(tmp_path))
    yield tmp_path
    sandbox.node_tools(None)


def _settle(sandbox: Sandbox, name: str, region: str, done: Any, seconds: float = 120) -> Any:
    """Wait for the controller (the sandbox runs it) to reach ``done(verdicts)``."""
    deadline = time.monotonic() + seconds
    while True:
        verdicts = gate.verdicts(sandbox, name, region)
        if done(verdicts):
            return verdicts
        assert time.monotonic() < deadline, (verdicts, gate.controller_log(sandbox, name, region))
        time.sleep(0.2)


def test_new_nodes_take_work_once_they_pass(sandbox: Sandbox, tools: Path, tmp_path: Path) -> None:
    name = "e2e-verify-eks"
    data = yaml.safe_load((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    data["metadata"]["name"] = name
    data["compute"]["gpuPools"][0]["count"] = 3
    data.setdefault("health", {}).setdefault("verify", {})["kubernetesGate"] = True
    # The gate alone: fmctl's node agent (on by default; its e2e is test_health_agent.py)
    # would also find the broken nodes' GPU gone and take verified ones out meanwhile.
    data["health"]["kubernetesAgent"] = False
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    region = region_of(spec)
    # First every node has a GPU fallen off the bus (a bad driver or image, say): nothing
    # can pass the gate.
    (tools / "broken").write_text("every\n")
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        # The controller `up` deployed runs (the sandbox runs its Deployment's program,
        # the very script in its ConfigMap), starts a Job per node, and records each failure.
        api = kube_client(sandbox, name, region)
        try:
            config = api.get("v1", "ConfigMap", "fmctl-verify-controller", "fmctl-system")
        finally:
            api.close()
        assert config is not None
        assert config["data"]["verify_controller.py"] == CONTROLLER.read_text()
        verdicts = _settle(
            sandbox,
            name,
            region,
            lambda v: len(v) == 3 and all(x.startswith("failed") for x in v.values()),
        )
        nodes = gate.nodes(sandbox, name, region)
        assert all(gate.tainted(n) for n in nodes.values())
        # Each verdict is what its Job's pod said failed.
        assert all(": FAIL gpus: 7 of 8" in v for v in verdicts.values()), verdicts

        # None is replaced: no node of the pool has passed, so the fault is likelier the
        # image's or the gate's than the nodes'; each says why it is held.
        def notes() -> dict[str, str]:
            found = {n: gate.repair_note(x) for n, x in gate.nodes(sandbox, name, region).items()}
            return found if all(found.values()) else {}

        held = until("every failed node's repair note", notes, seconds=60)
        assert all(
            h.startswith("held ") and "no node of pool gpu has passed the gate" in h
            for h in held.values()
        ), held
        health = sandbox.fmctl("health", name, "-f", str(spec), "--sandbox", "-o", "json")
        assert health.stdout, health.stderr
        report = json.loads(health.stdout)
        states = {n["name"]: n["state"] for n in report["nodes"]}
        assert states == dict.fromkeys(nodes, "failed"), health.stdout
        assert all(n["fault"]["class"] == "VERIFY_FAILED" for n in report["nodes"])
        said = {(e["node"], e["what"].split(":")[0]) for e in report["events"]}
        assert {(n, "failed the verify gate") for n in nodes} <= said
        # `up --wait-healthy` names the nodes that failed their gate.
        waited = sandbox.fmctl(
            "up", "-f", str(spec), "--sandbox", "--yes", "--wait-healthy",
            "--healthy-timeout", "3", timeout=300,
        )  # fmt: skip
        assert waited.returncode == 1, waited.stdout + waited.stderr
        assert all(f"{n} failed" in waited.stderr for n in nodes), waited.stderr

        # The nodes' tools now answer (one node with a GPU fallen off the bus); a person
        # clears the verdicts, and the controller tries each node again.
        good, also_good, broken = sorted(nodes)
        (tools / "broken").write_text(broken + "\n")
        (tools / "pingpong").write_text("")  # the loopbacks of the first tries, forgotten
        sandbox.node_tools(tools / "tools")
        for node in nodes:
            gate.clear(sandbox, name, region, node)
        # Two pass; the broken node fails and, its peers having passed, is replaced: the
        # controller terminates its instance in its node group's Auto Scaling group (as its
        # role, through EKS Pod Identity; the sandbox judges the call against the role's
        # policy and the group's tags), the group launches another, and the new node joins
        # tainted and is verified in turn.
        verdicts = _settle(
            sandbox,
            name,
            region,
            lambda v: (
                broken not in v and len(v) == 3 and all(x.startswith("passed") for x in v.values())
            ),
        )
        (replacement,) = set(verdicts) - {good, also_good}
        nodes = gate.nodes(sandbox, name, region)
        for ok in (good, also_good, replacement):
            assert not gate.tainted(nodes[ok])
            assert verdicts[ok].startswith("passed ")
            # The node's other taint (GPU work only) is untouched.
            assert [t["key"] for t in nodes[ok]["spec"]["taints"]] == ["nvidia.com/gpu"]
            assert gate.repair_note(nodes[ok]) == ""  # held no more
        # The EFA loopback ran on every device of the nodes (16 on p5en), one at a time.
        loops = (tools / "pingpong").read_text().splitlines()
        assert sum(1 for line in loops if line.startswith(good + " ")) == 16
        # No Job is left: a pass's is deleted at once, a failure's once it is on the node.
        api = kube_client(sandbox, name, region)
        try:
            left = [j["metadata"]["name"] for j in api.list("batch/v1", "Job", "fmctl-system")]
        finally:
            api.close()
        said = gate.controller_log(sandbox, name, region)
        assert left == []
        # The controller's log, as `kubectl logs deploy/fmctl-verify` shows it.
        assert f"{good}: passed, {TAINT} lifted" in said, said
        assert f"{broken}: failed, kept out of service: FAIL gpus: 7 of 8" in said, said
        assert f"{broken}: replacing: instance i-" in said, said
        assert f"{replacement}: passed, {TAINT} lifted" in said, said
        # The replacement's last check was a 2-node NCCL all-reduce with an idle verified
        # peer, at or above the pool's floor (280 GB/s on p5en: 70% of EFA's line rate).
        assert f"{replacement}: pairing with " in said, said
        assert "nccl-pair 352.27 GB/s with " in verdicts[replacement], verdicts[replacement]
        peer = verdicts[replacement].split(" with ", 1)[1].split(" ", 1)[0]
        assert peer in (good, also_good), verdicts[replacement]
        # The replacement, verified, no longer counts in the pool's repair budget, as the
        # controller's ConfigMap of counts (kept across its restarts) says.

        def counts() -> dict[str, Any]:
            api = kube_client(sandbox, name, region)
            try:
                kept = api.get("v1", "ConfigMap", "fmctl-verify-repairs", "fmctl-system")
            finally:
                api.close()
            state = json.loads(kept["data"]["state"]) if kept else {}
            return state if state.get("pending") == {"gpu": []} else {}

        assert until("the replacement freed the budget", counts)["failedInARow"] == {"gpu": 0}
        assert "AccessDenied" not in said, said

        health = sandbox.fmctl("health", name, "-f", str(spec), "--sandbox", "-o", "json")
        report = json.loads(health.stdout)
        states = {n["name"]: n["state"] for n in report["nodes"]}
        assert states == dict.fromkeys((good, also_good, replacement), "healthy"), states
        # Its replacement verified, the pool's repair budget is free again.
        assert report["pools"] == [{"name": "gpu", "nodes": 3, "inRepair": 0, "budget": 1}]
        said = {(e["node"], e["what"].split(":")[0]) for e in report["events"]}
        assert (good, "passed the verify gate") in said

        # The loop closed: a GPU falls off the bus on a verified node; the node monitoring
        # agent reports it, node auto repair replaces the node, and the replacement joins
        # tainted and takes work only once the controller has verified it.
        said = sandbox.fmctl("sandbox", "fault", name, good, "--xid", "79", "--region", region)
        assert said.returncode == 0, said.stdout + said.stderr
        verdicts = _settle(
            sandbox,
            name,
            region,
            lambda v: (
                good not in v
                and len(v) == 3
                and all(x.startswith(("passed", "failed")) for x in v.values())
            ),
        )
        (new,) = set(verdicts) - {also_good, replacement}
        assert verdicts[new].startswith("passed "), verdicts
        assert not gate.tainted(gate.nodes(sandbox, name, region)[new])
        # `up --wait-healthy`: every node is in service and healthy.
        waited = sandbox.fmctl(
            "up", "-f", str(spec), "--sandbox", "--yes", "--wait-healthy",
            "--healthy-timeout", "60", timeout=300,
        )  # fmt: skip
        assert waited.returncode == 0, waited.stdout + waited.stderr
        endpoint = (
            sandbox.aws(region).client("eks").describe_cluster(name=name)["cluster"]["endpoint"]
        )
        assert [p for p in _programs() if f"--server={endpoint} " in p], _programs()

        # The controller acts as its role, no more: with the role's policy gone, AWS (the
        # sandbox, judging the call as the role) refuses the termination, and the node that
        # failed is held, saying so. (Every new node now has a GPU off the bus; one joins as
        # node auto repair replaces a node with an Xid 79.)
        iam = sandbox.aws(region).client("iam")
        (role,) = [
            r["RoleName"]
            for r in iam.list_roles()["Roles"]
            if r["RoleName"].startswith(f"fmctl-{name}-")
            and r["RoleName"].endswith("-verify-repair")
        ]
        for policy in iam.list_role_policies(RoleName=role)["PolicyNames"]:
            iam.delete_role_policy(RoleName=role, PolicyName=policy)
        (tools / "broken").write_text("every\n")
        said = sandbox.fmctl("sandbox", "fault", name, also_good, "--xid", "79", "--region", region)
        assert said.returncode == 0, said.stdout + said.stderr

        def refused() -> list[str]:
            notes = [gate.repair_note(x) for x in gate.nodes(sandbox, name, region).values()]
            return [x for x in notes if "AccessDenied" in x]

        (note,) = until("a refused replacement", refused, seconds=120)
        assert note.startswith("held ") and (
            "replacing it failed: AccessDenied: User: arn:aws:sts::" in note
            and f":assumed-role/{role}/" in note
            and "autoscaling:TerminateInstanceInAutoScalingGroup" in note
        ), note
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert owned(sandbox, name, region) == []
    # The controller stopped with its cluster: no process of it is left on the machine.
    assert not [p for p in _programs() if f"--server={endpoint} " in p], _programs()


def _programs() -> list[str]:
    """The command lines of the programs the sandbox runs for clusters."""
    out = []
    for proc in Path("/proc").iterdir():
        try:
            line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "fmctl-program-" in line:
            out.append(line)
    return out


def _autoscaling_story(sandbox: Sandbox, name: str, region: str) -> str:
    """What the autoscaler weighs and said, for a failure's message: each node's taints and
    Ready condition, each pod's node and phase, the autoscaler's status and events."""
    api = kube_client(sandbox, name, region)
    try:
        lines = []
        for node in api.list("v1", "Node"):
            ready = [
                c["status"] for c in node.get("status", {}).get("conditions", [])
                if c["type"] == "Ready"
            ]  # fmt: skip
            taints = [t["key"] for t in node["spec"].get("taints") or []]
            lines.append(f"node {node['metadata']['name']} ready={ready} taints={taints}")
        for pod in api.list("v1", "Pod"):
            meta, spec = pod["metadata"], pod["spec"]
            owner = [o["kind"] for o in meta.get("ownerReferences") or []]
            phase = (pod.get("status") or {}).get("phase")
            lines.append(
                f"pod {meta['namespace']}/{meta['name']} {owner} on {spec.get('nodeName')}: {phase}"
            )
        status = api.get("v1", "ConfigMap", "cluster-autoscaler-status", "kube-system") or {}
        lines.append(json.dumps(status.get("data"), indent=1))
        lines.append(gate.controller_log(sandbox, name, region))
        return "\n".join(lines)
    finally:
        api.close()


def test_the_autoscaler_counts_nodes_being_verified_as_coming(
    sandbox: Sandbox, tools: Path, tmp_path: Path
) -> None:
    """An autoscaled pool with the gate: a job that fits no node (the pool idled to zero)
    brings as many nodes as it needs and no more, though they join tainted and its pods stay
    pending while they are verified; it runs once they have passed. (How the autoscaler
    reads the taint, --startup-taint, is test_autoscaler's
    test_a_node_with_a_startup_taint_is_capacity_about_to_come.)"""
    from tests.engine.test_kueue import _docs, _rendered

    name = "e2e-verify-scale"
    data = yaml.safe_load((ROOT / "examples/p5en-eks-fsx-s3.yaml").read_text())
    data["metadata"]["name"] = name
    data["compute"]["gpuPools"][0]["count"] = 2
    data["storage"] = {}  # no FSx: not what this test is about
    data["cost"] = {"idle": {"after": "10m", "action": "scale-down"}}
    data["kubernetes"]["queueing"] = "none"
    data["health"] = {"verify": {"kubernetesGate": True, "efaLoopback": False}}
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    region = region_of(spec)
    torchrun = tools / "tools" / "torchrun"
    torchrun.write_text("#!/bin/sh\nexit 0\n")
    torchrun.chmod(0o755)
    eks = sandbox.aws(region).client("eks")

    def desired() -> int:
        group = eks.describe_nodegroup(clusterName=name, nodegroupName="gpu")["nodegroup"]
        return int(group["scalingConfig"]["desiredSize"])

    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        # up's NCCL test runs once the nodes pass; then they idle and go.
        try:
            until("the nodes to go", lambda: desired() == 0, 180)
        except AssertionError:
            pytest.fail("the nodes did not go: " + _autoscaling_story(sandbox, name, region))
        api = kube_client(sandbox, name, region)
        try:
            job = next(
                d for d in _docs(_rendered(spec)["kubernetes/nccl-test/job.yaml"])
                if d["kind"] == "Job"
            )  # fmt: skip
            job["metadata"]["name"] = "nccl-again"
            job["spec"]["suspend"] = False
            api.apply(job)
            most = 0

            def ran() -> bool:
                nonlocal most
                most = max(most, desired())
                found = api.get("batch/v1", "Job", "nccl-again", "training") or {}
                states = (found.get("status") or {}).get("conditions") or []
                return any(c["type"] == "Complete" and c["status"] == "True" for c in states)

            until("the job to run on nodes brought and verified for it", ran, 180)
        finally:
            api.close()
        assert most == 2, f"the autoscaler asked for {most} nodes for a 2-node job"
        verdicts = gate.verdicts(sandbox, name, region)
        assert len(verdicts) == 2 and all(v.startswith("passed ") for v in verdicts.values())
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert owned(sandbox, name, region) == []
