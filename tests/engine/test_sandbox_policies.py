"""Admission policies in the sandbox's Kubernetes API (``fmctl_sandbox.kube_policies``),
with the policy fmctl renders for its health agent (the p5en example's, as committed in the
goldens): the agent's token names its node, and it may report on that node only. Requests
go through ``KubeServer.handle`` as a program's would, its service account's identity the
one ``kube_programs`` gives the agent's process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fmctl_sandbox.kube_policies import Caller
from tests.conftest import ROOT
from tests.engine.test_sandbox_asg_replace import ENDPOINT, eks_world

AGENT = ROOT / "tests/golden/p5en-eks-fsx-s3/kubernetes/kubernetes/health-verify/agent.yaml"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def _policy_objects() -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(AGENT.read_text()) if d]
    found = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert [d["kind"] for d in found] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    return found


class World:
    """A sandbox cluster of two nodes with the agent's policy, and callers by token."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, binding_actions: list[str]) -> None:
        eks, _ = eks_world()
        self.kube = eks.kube
        self.nodes = sorted(n["metadata"]["name"] for n in self.kube.nodes(ENDPOINT, "gpu"))
        agent = "system:serviceaccount:fmctl-system:fmctl-health-agent"
        self.callers = {
            "agent-on-0": Caller.service_account(
                "fmctl-system", "fmctl-health-agent", self.nodes[0]
            ),
            "agent-no-node": Caller(agent),
            "controller": Caller.service_account("fmctl-system", "fmctl-verify-controller"),
        }
        monkeypatch.setattr(
            self.kube.programs, "caller", lambda endpoint, auth: self.callers.get(auth)
        )
        policy, binding = _policy_objects()
        binding["spec"]["validationActions"] = binding_actions
        for plural, obj in (
            ("validatingadmissionpolicies", policy),
            ("validatingadmissionpolicybindings", binding),
        ):
            code, body = self.ask("", "POST", f"{ADMISSION}/{plural}", obj)
            assert code == 201, body

    def ask(
        self, token: str, method: str, path: str, body: Any, ctype: str = ""
    ) -> tuple[int, Any]:
        headers = {"authorization": token, "content-type": ctype or "application/json"}
        code, _, raw = self.kube.handle(
            ENDPOINT, method, path, "", headers, json.dumps(body).encode(), lambda name: None
        )
        return code, json.loads(raw)

    def report(self, token: str, node: str) -> tuple[int, Any]:
        """The agent's report: a condition on the node's status (node_agent.py's patch)."""
        condition = {"type": "FmctlHealthy", "status": "False", "reason": "Xid79"}
        return self.ask(
            token,
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            {"status": {"conditions": [condition]}},
            "application/strategic-merge-patch+json",
        )


def test_the_agent_reports_on_its_own_node_only(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(monkeypatch, ["Deny"])
    own, other = world.nodes
    code, body = world.report("agent-on-0", own)
    assert code == 200, body
    assert any(c["type"] == "FmctlHealthy" for c in body["status"]["conditions"])
    code, body = world.report("agent-on-0", other)
    assert (code, body["reason"]) == (422, "Invalid"), body
    assert body["message"] == (
        f'nodes "{other}" is forbidden: ValidatingAdmissionPolicy '
        "'fmctl-health-agent-own-node' with binding 'fmctl-health-agent-own-node' denied "
        f"request: the health agent on node {own} may change only its own node, not {other}"
    )
    stored = world.kube.clusters[ENDPOINT].objects[("nodes", "", other)]
    assert not any(c["type"] == "FmctlHealthy" for c in stored["status"].get("conditions", []))
    # A token that names no node (not a pod's): refused whatever it patches.
    code, body = world.report("agent-no-node", own)
    assert code == 422 and "names no node" in body["message"], body
    # The policy is the agent's: another account is not held by it.
    assert world.report("controller", other)[0] == 200


def test_a_binding_that_only_warns_refuses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(monkeypatch, ["Warn", "Audit"])
    assert world.report("agent-on-0", world.nodes[1])[0] == 200


def test_a_daemonset_programs_token_names_its_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The identity is the one the sandbox gives a DaemonSet's process: each program's token
    (in its folder, as a pod's is mounted) is its pod's service account on its node, so the
    agent's policy lets it report on that node and refuses it the other."""
    world = World(monkeypatch, ["Deny"])
    monkeypatch.undo()  # callers by the programs' real tokens from here
    kube = world.kube
    ca = tmp_path / "ca.crt"
    ca.write_text("not used: the program makes no call\n")
    kube.programs.base_url, kube.programs.ca_path = "https://127.0.0.1:9", str(ca)
    labels = {"app.kubernetes.io/part-of": "fmctl", "app.kubernetes.io/name": "fmctl-health-agent"}
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "fmctl-health-agent-gpu",
            "namespace": "fmctl-system",
            "labels": labels,
        },
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": "fmctl-health-agent",
                    "containers": [
                        {
                            "name": "agent",
                            "image": "public.ecr.aws/docker/library/python:3.12-slim",
                            # Alive while the test asks (an exited program is restarted
                            # with a new token after a while).
                            "command": ["python3", "-c", "import time; time.sleep(120)"],
                            "volumeMounts": [{"name": "scratch", "mountPath": "/run/x"}],
                        },
                        # Not run (no GPUs here), as the agent's DCGM container.
                        {
                            "name": "dcgm",
                            "image": "nvcr.io/nvidia/cloud-native/dcgm:4.5.3-1-ubuntu22.04",
                            "command": ["bash", "-c", "exit 1"],
                        },
                    ],
                    "volumes": [{"name": "scratch", "emptyDir": {}}],
                },
            },
        },
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fmctl-system"}}
    assert world.ask("", "POST", "/api/v1/namespaces", namespace)[0] == 201
    try:
        code, body = world.ask(
            "", "POST", "/apis/apps/v1/namespaces/fmctl-system/daemonsets", daemonset
        )
        assert code == 201, body
        tokens = {
            key[2].partition("@")[2]: (p.folder / "serviceaccount/token").read_text()
            for key, p in kube.programs.running.items()
        }
        assert sorted(tokens) == world.nodes
        # Each program's emptyDir is a folder of its own.
        scratch = {str(p.folder / "volumes/scratch") for p in kube.programs.running.values()}
        assert len(scratch) == 2 and all(Path(f).is_dir() for f in scratch)
        own, other = world.nodes
        assert world.report(f"Bearer {tokens[own]}", own)[0] == 200
        code, body = world.report(f"Bearer {tokens[own]}", other)
        assert code == 422 and f"on node {own} may change only its own node" in body["message"]
        assert world.report(f"Bearer {tokens[other]}", other)[0] == 200
    finally:
        kube.programs.stop_all()
