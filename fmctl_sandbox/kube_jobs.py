"""Jobs in the sandbox's Kubernetes API: the Job controller, the scheduler's device
accounting and a kubelet, enough for `fmctl check` to be run end to end.

- A Job that is not suspended gets its pods (``completions`` of them; Indexed Jobs label and
  number them), created Pending.
- A pending pod is bound to a node that admits it (selector, affinity, taints) and still has
  the GPUs and EFA devices it asks for: what other live pods hold is taken off the node's
  allocatable, as the scheduler does. A pod that fits nowhere stays Pending; a Job past its
  ``activeDeadlineSeconds`` fails with ``DeadlineExceeded``.
- Once all of a Job's pods are bound, the kubelet runs each: every container's command, with
  its env (``fieldRef: spec.nodeName`` included, ``$(VAR)`` expanded), its ConfigMap volumes
  written to a scratch folder and paths under their mount points pointed there. Pods run
  side by side, as on nodes of their own, outside the API's lock (KUBELETS at once on this
  machine): a pod is Running until its commands end, and the next look at Jobs or pods
  (``step``) takes its outcome; the Job finishes when the last of its pods has. The sandbox's
  nodes have no GPUs, so the command's tools (nvidia-smi, dcgmi, fi_info, torchrun) are the
  sandbox's stand-ins, which answer from the node's folder (``node_tools``; the env a program
  of the node gets, ``kube_programs.Programs.node_env``), or what the folder given to the
  sandbox as the nodes' tools holds (``KubeServer.node_tools``: a test's double of the
  emulator sets it to fakes that print recorded outputs). Each container's output is its
  log (the API wants the container named when a pod has several, as the real one does); the
  pod is Succeeded when every container exited 0.
"""

from __future__ import annotations

import calendar
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fmctl_sandbox.kube_controllers import admits
from fmctl_sandbox.kube_dra import claims_allow
from fmctl_sandbox.kube_model import EFA, GPU, Cluster

Put = Callable[[str, str, dict[str, Any]], None]
#: A node's name -> what a pod's command on it gets in its env for the node's tools.
NodeEnv = Callable[[str], dict[str, str]]
#: How long a pod's command may run in the sandbox.
RUN_TIMEOUT = 60.0
#: Pods whose commands run at once (each its own node's kubelet on a real cluster; this
#: machine has two cores, and a 1,024-node check would otherwise fork as many at once).
KUBELETS = 16
_KUBELET = ThreadPoolExecutor(KUBELETS, thread_name_prefix="sandbox-kubelet")


@dataclass(frozen=True)
class Command:
    """One container's command as its kubelet starts it: args, env, and its scratch folder
    (its ConfigMap mounts, written while the API's lock was held)."""

    container: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    scratch: str


@dataclass(frozen=True)
class PodRun:
    """A pod's commands under way in the kubelet's pool: (container -> log, all exited 0)."""

    pod_uid: str
    future: Future[tuple[dict[str, str], bool]]


def _asks(pod: dict[str, Any]) -> dict[str, int]:
    asked: dict[str, int] = {}
    for container in pod["spec"].get("containers", []):
        requests = (container.get("resources") or {}).get("requests") or {}
        for resource in (GPU, EFA):
            asked[resource] = asked.get(resource, 0) + int(requests.get(resource, 0))
    return asked


def _live(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase", "Running") not in ("Succeeded", "Failed")


def _free(c: Cluster, node: dict[str, Any]) -> dict[str, int]:
    """The node's allocatable GPUs and EFA devices less what live pods on it hold."""
    allocatable = node["status"].get("allocatable", {})
    free = {r: int(allocatable.get(r, 0)) for r in (GPU, EFA)}
    for (plural, _, _), pod in c.objects.items():
        on_node = plural == "pods" and pod["spec"].get("nodeName") == node["metadata"]["name"]
        if on_node and _live(pod):
            for resource, count in _asks(pod).items():
                free[resource] -= count
    return free


def _pods_of(c: Cluster, namespace: str, job: str) -> list[dict[str, Any]]:
    return [
        pod
        for (plural, ns, _), pod in sorted(c.objects.items())
        if plural == "pods"
        and ns == namespace
        and pod["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == job
    ]


def step(c: Cluster, put: Put, node_env: NodeEnv) -> None:
    """Move every Job on as far as it can go now."""
    jobs = [(key, job) for key, job in sorted(c.objects.items()) if key[0] == "jobs"]
    for (_, namespace, name), job in jobs:
        spec, status = job["spec"], job.setdefault("status", {})
        if spec.get("suspend") or status.get("conditions"):
            continue
        if not _pods_of(c, namespace, name):
            _create_pods(job, namespace, put)
        pods = _pods_of(c, namespace, name)
        for pod in pods:
            if not pod["spec"].get("nodeName"):
                _bind(c, pod)
        if not all(pod["spec"].get("nodeName") for pod in pods):
            status["active"] = len(pods)
            if _past_deadline(job):
                status["conditions"] = [_condition("Failed", "DeadlineExceeded")]
                status["failed"] = len(pods)
            continue
        for pod in pods:
            if _live(pod):
                _run(c, pod, node_env)
        if any(_live(pod) for pod in pods):
            status["active"] = sum(_live(pod) for pod in pods)
            continue
        succeeded = sum(p["status"]["phase"] == "Succeeded" for p in pods)
        status.update(active=0, succeeded=succeeded, failed=len(pods) - succeeded)
        done = succeeded == len(pods)
        status["conditions"] = [
            _condition("Complete", "") if done else _condition("Failed", "BackoffLimitExceeded")
        ]


def _create_pods(job: dict[str, Any], namespace: str, put: Put) -> None:
    name, spec = job["metadata"]["name"], job["spec"]
    template = spec.get("template") or {}
    indexed = spec.get("completionMode") == "Indexed"
    for index in range(int(spec.get("completions", 1))):
        labels = {
            **(template.get("metadata") or {}).get("labels", {}),
            "batch.kubernetes.io/job-name": name,
        }
        if indexed:
            labels["batch.kubernetes.io/job-completion-index"] = str(index)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{index}-{uuid.uuid4().hex[:5]}"
                if indexed
                else f"{name}-{uuid.uuid4().hex[:5]}",
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [
                    {"apiVersion": "batch/v1", "kind": "Job", "name": name, "controller": True}
                ],
            },
            "spec": dict(template.get("spec") or {}),
            "status": {"phase": "Pending"},
        }
        put("pods", namespace, pod)


def _bind(c: Cluster, pod: dict[str, Any]) -> None:
    if pod["spec"].get("schedulingGates"):
        return  # the scheduler leaves a gated pod alone (Kueue's topology gate, until lifted)
    asked = _asks(pod)
    for (plural, _, _), node in sorted(c.objects.items()):
        if plural != "nodes" or node["spec"].get("unschedulable"):
            continue
        if not admits(pod["spec"], node):
            continue
        if not claims_allow(c, pod, node["metadata"]["name"]):
            continue
        free = _free(c, node)
        if all(free[r] >= n for r, n in asked.items()):
            pod["spec"]["nodeName"] = node["metadata"]["name"]
            pod["status"] = {"phase": "Running"}
            return


def _past_deadline(job: dict[str, Any]) -> bool:
    limit = job["spec"].get("activeDeadlineSeconds")
    created = job["metadata"].get("creationTimestamp")
    if limit is None or not created:
        return False
    started = calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ"))
    return time.time() - started > float(limit)


def _condition(kind: str, reason: str) -> dict[str, str]:
    return {"type": kind, "status": "True", "reason": reason}


def _run(c: Cluster, pod: dict[str, Any], node_env: NodeEnv) -> None:
    """The kubelet: start the pod's containers in its pool, or take the outcome of a run
    that ended (each container's output its log; the pod succeeds when all exited 0). Called
    with the API's lock held; the commands run without it."""
    key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
    node = pod["spec"]["nodeName"]
    containers = pod["spec"]["containers"]
    run: PodRun | None = c.runs.get(key)
    uid = str(pod["metadata"].get("uid", ""))
    if run is not None and run.pod_uid == uid:
        if not run.future.done():
            return
        del c.runs[key]
        c.logs[key], ok = run.future.result()
        pod["status"] = {"phase": "Succeeded" if ok else "Failed"}
        return
    # A run of a pod since deleted (its Job went) and not collected: its outcome is nobody's.
    for gone in [k for k in c.runs if ("pods", *k) not in c.objects]:
        del c.runs[gone]
    commands = [_command(c, pod, container, node_env(node)) for container in containers]
    c.runs[key] = PodRun(uid, _KUBELET.submit(_run_commands, commands))


def _command(
    c: Cluster, pod: dict[str, Any], container: dict[str, Any], node_env: dict[str, str]
) -> Command:
    """One container's command with its env, its ConfigMap mounts written to a scratch
    folder of its own (removed when it has run)."""
    node = pod["spec"]["nodeName"]
    env = dict(node_env)
    index = (pod["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-completion-index")
    if index is not None:
        env["JOB_COMPLETION_INDEX"] = index
    for item in container.get("env") or []:
        field_path = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        env[item["name"]] = node if field_path == "spec.nodeName" else str(item.get("value", ""))
    scratch = tempfile.mkdtemp(prefix="fmctl-kubelet-")
    mounts = mount_config_maps(c, pod, container, Path(scratch))
    args = tuple(
        remap(_expand(arg, env), mounts)
        for arg in [*(container.get("command") or []), *(container.get("args") or [])]
    )
    return Command(container["name"], args, tuple(env.items()), scratch)


def _run_commands(commands: list[Command]) -> tuple[dict[str, str], bool]:
    """A pod's containers one after another (in the kubelet's pool): their logs, and
    whether every one exited 0."""
    logs: dict[str, str] = {}
    ok = True
    for command in commands:
        try:
            done = subprocess.run(
                list(command.args),
                env=dict(command.env),
                cwd=command.scratch,
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT,
                check=False,
            )
            logs[command.container] = done.stdout + done.stderr
            ok = ok and done.returncode == 0
        except (OSError, subprocess.TimeoutExpired) as err:
            logs[command.container], ok = f"sandbox kubelet: {err}\n", False
        finally:
            shutil.rmtree(command.scratch, ignore_errors=True)
    return logs, ok


def mount_config_maps(
    c: Cluster, pod: dict[str, Any], container: dict[str, Any], scratch: Path
) -> dict[str, Path]:
    """The container's ConfigMap volumes as folders in ``scratch``: mount path -> folder
    (or, for a ``subPath`` mount, the file). A volume's ``items`` choose its keys and the
    paths they take, as the kubelet lays them out; without them every key is a file."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    mounts: dict[str, Path] = {}
    for index, mount in enumerate(container.get("volumeMounts") or []):
        volume = volumes.get(mount["name"], {})
        source = volume.get("configMap")
        if source is None:
            continue
        folder = scratch / f"{mount['name']}-{index}"
        folder.mkdir()
        config = c.objects.get(("configmaps", pod["metadata"]["namespace"], source["name"]))
        data = (config or {}).get("data") or {}
        items = source.get("items")
        paths = {i["key"]: i["path"] for i in items} if items else {k: k for k in data}
        for key, path in paths.items():
            if key in data:
                (folder / path).parent.mkdir(parents=True, exist_ok=True)
                (folder / path).write_text(data[key])
        sub = mount.get("subPath")
        mounts[mount["mountPath"].rstrip("/")] = folder / sub if sub else folder
    return mounts


def _expand(arg: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` references in a command."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def remap(arg: str, mounts: dict[str, Path]) -> str:
    """``arg`` with a path under a mount point pointed at the mount's folder (the value of
    a ``--flag=PATH`` argument too)."""
    flag, equals, value = arg.partition("=")
    if equals and flag.startswith("-"):
        return f"{flag}={remap(value, mounts)}"
    for mount_path, folder in mounts.items():
        if arg == mount_path or arg.startswith(mount_path + "/"):
            return str(folder) + arg[len(mount_path) :]
    return arg
