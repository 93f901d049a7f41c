"""The sandbox's kubelet runs Job pods side by side, outside the API's lock, as a cluster's
nodes do (``fmctl_sandbox.kube_jobs``): a Job is active while its pod's command runs, the API
answers meanwhile, and the Job finishes at a later look. Run on the sandbox's own
Kubernetes state (``KubeServer``), with nodes from its EKS node group (``Eks.sync_nodes``,
as test_sandbox_asg_replace.py makes them)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from fmctl_sandbox.kube import KubeServer
from tests.engine.test_sandbox_asg_replace import ENDPOINT, eks_world

JOBS = "/apis/batch/v1/namespaces/default/jobs"
#: Each pod marks that it started and waits (up to 10 s) until the other has too: run one
#: after another, the first would give up and fail.
WORK = """#!/bin/sh
touch "$SHARED/$JOB"
tries=0
while [ "$(ls "$SHARED" | wc -l)" -lt 2 ]; do
  tries=$((tries + 1))
  if [ "$tries" -gt 100 ]; then echo "ran alone on $NODE"; exit 1; fi
  sleep 0.1
done
echo "ran beside the other on $NODE"
"""


def _call(kube: KubeServer, method: str, path: str, body: Any = None) -> dict[str, Any]:
    status, _, payload = kube.handle(
        ENDPOINT,
        method,
        path,
        "",
        {"content-type": "application/json"},
        b"" if body is None else json.dumps(body).encode(),
        lambda cluster: None,
    )
    answer: dict[str, Any] = json.loads(payload)
    assert status in (200, 201), answer
    return answer


def _job(name: str, shared: Path) -> dict[str, Any]:
    env = [
        {"name": "SHARED", "value": str(shared)},
        {"name": "JOB", "value": name},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "work", "command": ["work"], "env": env}],
                }
            }
        },
    }


def _finished(kube: KubeServer) -> dict[str, str]:
    return {
        j["metadata"]["name"]: c["type"]
        for j in _call(kube, "GET", JOBS)["items"]
        for c in (j.get("status") or {}).get("conditions") or []
    }


def test_job_pods_run_side_by_side_and_finish_at_a_later_look(tmp_path: Path) -> None:
    eks, _ = eks_world()
    kube = eks.kube
    tools, shared = tmp_path / "tools", tmp_path / "shared"
    tools.mkdir()
    shared.mkdir()
    (tools / "work").write_text(WORK)
    (tools / "work").chmod(0o755)
    kube.node_tools = str(tools)

    for name in ("first", "second"):
        _call(kube, "POST", JOBS, _job(name, shared))
    # Both pods were started; neither Job is done while their commands wait for each other.
    jobs = _call(kube, "GET", JOBS)["items"]
    assert [(j.get("status") or {}).get("active") for j in jobs] == [1, 1]
    assert _finished(kube) == {}
    deadline = time.monotonic() + 30
    while len(_finished(kube)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _finished(kube) == {"first": "Complete", "second": "Complete"}
    pods = _call(kube, "GET", "/api/v1/namespaces/default/pods")["items"]
    assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
    for pod in pods:
        log = kube.handle(
            ENDPOINT,
            "GET",
            f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/log",
            "",
            {},
            b"",
            lambda cluster: None,
        )[2].decode()
        assert log == f"ran beside the other on {pod['spec']['nodeName']}\n"
