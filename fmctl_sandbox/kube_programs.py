"""Programs the sandbox runs for its clusters' Deployments, as a kubelet runs their pods.

A Deployment of fmctl's (``app.kubernetes.io/part-of: fmctl`` on it and its pods) whose pod
has one container, of a Python image (``.../python:TAG``), whose command starts with
``python3`` runs as a process of the sandbox's own Python for as long as the Deployment is
there: so an in-cluster controller (fmctl's verify controller) acts on the sandbox's API as
it would from its pod. Other Deployments' pods, a user's Python server among them, are only
reported ready (``kube_controllers``): the sandbox runs no one else's code.

What the process gets, as the kubelet gives a pod: the container's env and its ConfigMap
volumes (``items`` and ``subPath`` honoured) in a folder of its own, paths under their
mount points pointed there, and a service account token the sandbox's API takes for that
cluster (``KubeServer.handle``). What a pod would not be told, the sandbox adds at the end
of its command: ``--server`` and ``--account`` (its API lives under a path, which
KUBERNETES_SERVICE_HOST cannot say; the token and ``ca.crt`` are in a folder of the
process's own), and, to a program that takes ``--interval=SECONDS``, that interval on the
sandbox's clock (scaled as AWS's waits are, at least half a second; a DaemonSet's, one
process a node, at least ``NODE_MIN_INTERVAL``).

AWS credentials, as EKS Pod Identity gives them: when the pod's service account has a pod
identity association, the process gets ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` and
``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`` (what EKS's webhook injects:
aws/amazon-eks-pod-identity-webhook,
pkg/handler/testdata/containercredentials/rawPodWithoutVolumes.pod.yaml at 0d3fed4); the URI
is the sandbox's own (``/eks-pod-identity/ENDPOINT/v1/credentials``), where a GET carrying
the token file's contents as ``Authorization`` gets session credentials of the association's
role (``issue``), if the role trusts EKS Pod Identity with the session tags it adds. Calls
signed with them are judged as that role (``server.Emulator``, ``iam_eval``). The SDK
settings a pod would not need, ``AWS_ENDPOINT_URL`` (the sandbox) and ``AWS_CA_BUNDLE`` (its
certificate), are added too.

A DaemonSet of fmctl's of the same shape (fmctl's node health agent) runs as one process
for each node its pod would be placed on (``kube_controllers.admits``), keyed
``NAME@NODE``, with what a pod on that node gets besides: ``fieldRef: spec.nodeName`` in its
env, the nodes' tools on its PATH as a Job's containers get them (``node_env``: a test's,
``KubeServer.node_tools``, else the sandbox's stand-ins, ``node_tools``), and its ``hostPath``
volumes as a folder of that node's own (``host``), which outlives the process as a node's
disk outlives a pod: the sandbox writes a node's kernel lines to its ``/dev/kmsg`` there
(``kernel_line``, for ``fmctl sandbox fault``), and lays out its EFA devices' /sys and its
GPUs' procfs, which the fault takes devices away from.

A process is started again when it has exited or its Deployment or ConfigMaps changed (at
the next write to the cluster's API), and stopped when its Deployment (DaemonSet, or node)
or cluster goes or the sandbox stops.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fmctl_sandbox import node_gpus, node_tools
from fmctl_sandbox.kube_controllers import admits
from fmctl_sandbox.kube_jobs import mount_config_maps, remap
from fmctl_sandbox.kube_model import Cluster, Hardware
from fmctl_sandbox.kube_policies import Caller
from fmctl_sandbox.sigv4 import Credentials

#: The shortest interval a program is given (each pass holds the sandbox's API a moment).
MIN_INTERVAL = 0.5
#: A DaemonSet's program, one process a node, is given at least this: the sandbox scales the
#: interval but not a pass's own run (fmctl's agent: health-detect.sh, some 30 ms), so that a
#: few clusters of eight nodes at 0.5 s would take a core of the machine.
NODE_MIN_INTERVAL = 2.0
#: A process that exited is started again no sooner than this.
RESTART_AFTER = 1.0

#: How long the credentials the sandbox hands a program last (it asks again before).
SESSION_S = 3600.0
#: Where the token file goes under a program's folder (the webhook's mount path's tail).
IDENTITY_TOKEN = "pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token"

Key = tuple[str, str, str]


@dataclass(frozen=True)
class Association:
    """A pod identity association a program's service account has."""

    account: str
    region: str
    cluster: str
    namespace: str
    service_account: str
    role_arn: str

    def session_tags(self) -> dict[str, str]:
        """The session tags EKS Pod Identity adds when it assumes the role (the EKS User
        Guide's list), which a trust policy may require."""
        return {
            "eks-cluster-arn": f"arn:aws:eks:{self.region}:{self.account}:cluster/{self.cluster}",
            "eks-cluster-name": self.cluster,
            "kubernetes-namespace": self.namespace,
            "kubernetes-service-account": self.service_account,
        }


@dataclass(frozen=True)
class Session:
    """Credentials the sandbox handed a program, of its association's role."""

    access_key: str
    secret_key: str
    token: str
    expires: float
    association: Association


#: (endpoint, namespace, service account) -> its association, if it has one.
Resolver = Callable[[str, str, str], Association | None]


@dataclass
class Program:
    """One running program: its process, its folder, what it was started from."""

    process: subprocess.Popen[bytes]
    folder: Path
    fingerprint: str
    token: str
    started: float
    #: Its pod identity association and the token its credentials are fetched with.
    association: Association | None = None
    identity_token: str = ""
    #: Who its token says it is: its pod's service account, on its node.
    caller: Caller = field(default_factory=Caller)


@dataclass
class Programs:
    """The programs of every cluster, by (endpoint, namespace, Deployment)."""

    #: The sandbox's own address and certificate, and its clock (``Shims.scale``).
    base_url: str = ""
    ca_path: str = ""
    scale: float = 0.0
    running: dict[Key, Program] = field(default_factory=dict)
    #: Finds a service account's pod identity association (``Shims.pod_identity``).
    identity: Resolver | None = None
    #: The credentials handed out, by access key.
    sessions: dict[str, Session] = field(default_factory=dict)
    #: The nodes' tools (``KubeServer.node_tools``), on a DaemonSet program's PATH.
    node_tools: str | None = None
    #: Each node's host paths: (endpoint, node) -> its folder.
    hosts: dict[tuple[str, str], Path] = field(default_factory=dict)

    def host(self, endpoint: str, node: str) -> Path:
        """The folder standing for ``node``'s file system (made on first use)."""
        key = (endpoint, node)
        if key not in self.hosts:
            self.hosts[key] = Path(tempfile.mkdtemp(prefix="fmctl-node-"))
        return self.hosts[key]

    def sysfs(self, endpoint: str, node: str, efa: int) -> None:
        """The node's /sys as the EFA driver lays it out (made once, the first time a
        program of the node starts): ``efa`` devices under class/infiniband, each with its
        PCI ids (vendor 0x1d0f, Amazon; device 0xefa1, one of the efa driver's,
        drivers/infiniband/hw/efa/efa_main.c) and port 1's error counters at 0 (the
        kernel's sysfs-class-infiniband ABI)."""
        root = self.host(endpoint, node) / node_tools.EFA_DEVICES
        if root.exists():
            return
        root.mkdir(parents=True)
        for index in range(efa):
            device = root / f"rdmap{index}s0"
            (device / "device").mkdir(parents=True)
            (device / "device/vendor").write_text("0x1d0f\n")
            (device / "device/device").write_text("0xefa1\n")
            counters = device / "ports/1/hw_counters"
            counters.mkdir(parents=True)
            for name in ("rx_drops", "rdma_read_wr_err", "rdma_write_wr_err"):
                (counters / name).write_text("0\n")

    def node_env(self, endpoint: str, node: str, hardware: Hardware | None) -> dict[str, str]:
        """What a program or pod on ``node`` needs in its env for the nodes' tools: the
        tools first on PATH (a test's, else the sandbox's stand-ins, ``node_tools``), and,
        for the stand-ins, the node's folder (laid out: its /sys and GPUs) and its network
        bandwidth (a real tool needs neither: it reads the node)."""
        self.sysfs(endpoint, node, hardware.efa if hardware else 0)
        node_gpus.lay_out(self.host(endpoint, node), hardware.gpus if hardware else 0)
        return {
            "PATH": f"{self.node_tools or node_tools.tools()}:/usr/bin:/bin",
            node_tools.HOST_ENV: str(self.host(endpoint, node)),
            node_tools.NETWORK_ENV: f"{hardware.network_gbps if hardware else 0:g}",
            node_tools.SCALE_ENV: f"{self.scale:g}",
            node_tools.GPU_ENV: ",".join(map(str, hardware.gpu_model if hardware else ("", 0))),
        }

    def efa_down(self, endpoint: str, node: str, count: int) -> int:
        """Take ``count`` EFA devices away from the node's /sys (as a device the driver lost
        disappears from it); how many went."""
        root = self.host(endpoint, node) / node_tools.EFA_DEVICES
        gone = sorted(root.glob("rdmap*"))[-count:] if root.exists() and count > 0 else []
        for device in gone:
            shutil.rmtree(device)
        return len(gone)

    def gpus_off(self, endpoint: str, node: str, count: int) -> int:
        """Take ``count`` GPUs away from the node (``node_gpus.fall_off``); how many went."""
        return node_gpus.fall_off(self.host(endpoint, node), count)

    def kernel_line(self, endpoint: str, node: str, text: str) -> None:
        """Add a record to the node's kernel log, as /dev/kmsg gives it (the kernel's
        dev-kmsg ABI: ``PRIO,SEQ,USEC,FLAGS;TEXT``, sequence numbers counting up)."""
        kmsg = self.host(endpoint, node) / "dev/kmsg"
        kmsg.parent.mkdir(parents=True, exist_ok=True)
        seq = len(kmsg.read_text().splitlines()) if kmsg.exists() else 0
        with kmsg.open("a") as out:
            out.write(f"3,{seq + 1},{int(time.monotonic() * 1e6)},-;{text}\n")

    def issue(self, endpoint: str, authorization: str, now: float) -> Session | None:
        """New credentials for the program of the cluster at ``endpoint`` whose pod
        identity token is ``authorization`` (None: no such program, or it has no
        association). The caller checks that the role may be assumed."""
        token = authorization.strip()
        # Called from the server's threads while the cluster's API may start or stop
        # programs: each table is copied whole (one step) before it is read.
        program = next(
            (
                p
                for key, p in list(self.running.items())
                if key[0] == endpoint
                and p.identity_token
                and secrets.compare_digest(p.identity_token, token)
            ),
            None,
        )
        if program is None or program.association is None:
            return None
        pair = Credentials.generate("ASIA")
        access = pair.access_key
        session = Session(
            access,
            pair.secret_key,
            secrets.token_urlsafe(96),
            now + SESSION_S,
            program.association,
        )
        for key in [k for k, v in list(self.sessions.items()) if v.expires < now]:
            self.sessions.pop(key, None)
        self.sessions[access] = session
        return session

    def caller(self, endpoint: str, authorization: str) -> Caller | None:
        """Who a program of the cluster at ``endpoint`` with this token is (None: not a
        program's token)."""
        token = authorization.removeprefix("Bearer ").strip()
        if not token:
            return None
        return next(
            (
                p.caller
                for key, p in list(self.running.items())
                if key[0] == endpoint and secrets.compare_digest(p.token, token)
            ),
            None,
        )

    def sync(self, endpoint: str, c: Cluster) -> None:
        """Run what the cluster's Deployments say, and nothing else."""
        if not self.base_url:
            return
        wanted = {
            (endpoint, ns, name): obj
            for (plural, ns, name), obj in c.objects.items()
            if plural == "deployments" and _runnable(obj) is not None
        }
        nodes = [(k[2], n) for k, n in sorted(c.objects.items()) if k[0] == "nodes"]
        for (plural, ns, name), ds in sorted(c.objects.items()):
            if plural != "daemonsets" or _runnable(ds) is None:
                continue
            pod = (ds["spec"].get("template") or {}).get("spec") or {}
            for node_name, node_obj in nodes:
                if admits(pod, node_obj):
                    wanted[(endpoint, ns, f"{name}@{node_name}")] = ds
        for key in [k for k in self.running if k[0] == endpoint]:
            program = self.running[key]
            obj = wanted.get(key)
            exited = program.process.poll() is not None
            if (
                obj is None
                or program.fingerprint != _fingerprint(c, obj)
                or (exited and time.monotonic() - program.started > RESTART_AFTER)
            ):
                self.stop(key)
        for key, obj in wanted.items():
            if key not in self.running:
                self.running[key] = self._start(key, c, obj)
        # A node that left takes its disk with it: a later node given its name (a new
        # generation's numbering) starts with a /sys, GPUs and kernel log of its own.
        present = {name for name, _ in nodes}
        for host in [h for h in self.hosts if h[0] == endpoint and h[1] not in present]:
            shutil.rmtree(self.hosts.pop(host), ignore_errors=True)

    def log(self, endpoint: str, namespace: str, deployment: str) -> str:
        """What the Deployment's program has printed so far ("" if it runs none)."""
        program = self.running.get((endpoint, namespace, deployment))
        if program is None:
            return ""
        try:
            return (program.folder / "log").read_text(errors="replace")
        except OSError:
            return ""

    def stop_cluster(self, endpoint: str) -> None:
        """Stop the programs of a cluster that is gone (its nodes' folders go too)."""
        for key in [k for k in self.running if k[0] == endpoint]:
            self.stop(key)
        for host in [h for h in self.hosts if h[0] == endpoint]:
            shutil.rmtree(self.hosts.pop(host), ignore_errors=True)

    def stop_all(self) -> None:
        """Stop every program (the sandbox is stopping)."""
        for key in list(self.running):
            self.stop(key)
        for host in list(self.hosts):
            shutil.rmtree(self.hosts.pop(host), ignore_errors=True)

    def stop(self, key: Key) -> None:
        """Stop one program and remove its folder (its token with it); its credentials end."""
        program = self.running.pop(key)
        if program.association is not None:
            for access in [
                k for k, v in list(self.sessions.items()) if v.association == program.association
            ]:
                self.sessions.pop(access, None)
        if program.process.poll() is None:
            program.process.terminate()
            try:
                program.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                program.process.kill()
                program.process.wait()
        shutil.rmtree(program.folder, ignore_errors=True)

    def _start(self, key: Key, c: Cluster, obj: dict[str, Any]) -> Program:
        endpoint, namespace, name = key
        node = name.partition("@")[2]  # a DaemonSet's program: the node it runs on
        pod = obj["spec"]["template"]
        container = _runnable(obj)
        assert container is not None
        # A folder only this user reads (mkdtemp: 0700): the token is in it.
        folder = Path(tempfile.mkdtemp(prefix="fmctl-program-"))
        pod_in_ns = {"metadata": {"namespace": namespace}, "spec": pod.get("spec") or {}}
        mounts = mount_config_maps(c, pod_in_ns, container, folder)
        mounts |= _empty_dirs(pod.get("spec") or {}, container, folder)
        node_env = self.node_env(endpoint, node, c.hardware.get(node)) if node else {}
        if node:
            mounts |= self._host_paths(endpoint, node, pod.get("spec") or {}, container)
        account = folder / "serviceaccount"
        account.mkdir(mode=0o700)
        token = secrets.token_urlsafe(32)
        (account / "token").write_text(token)
        (account / "token").chmod(0o600)
        shutil.copyfile(self.ca_path, account / "ca.crt")
        env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"} | node_env
        for item in container.get("env") or []:
            if "value" in item:
                # A path under a mount point points at its folder, as arguments do.
                env[item["name"]] = remap(str(item["value"]), mounts)
            field_path = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if node and field_path == "spec.nodeName":
                env[item["name"]] = node
        account_name = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        association = self.identity(endpoint, namespace, account_name) if self.identity else None
        identity_token = ""
        if association is not None:
            identity_token = secrets.token_urlsafe(32)
            where = folder / IDENTITY_TOKEN
            where.parent.mkdir(parents=True, mode=0o700)
            where.write_text(identity_token)
            where.chmod(0o600)
            env |= {
                "AWS_CONTAINER_CREDENTIALS_FULL_URI": (
                    f"{self.base_url}/eks-pod-identity/{endpoint}/v1/credentials"
                ),
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(where),
                "AWS_ENDPOINT_URL": self.base_url,
                "AWS_CA_BUNDLE": str(account / "ca.crt"),
            }
        command = [
            remap(arg, mounts)
            for arg in [*(container.get("command") or []), *(container.get("args") or [])]
        ]
        command[0] = sys.executable
        command += [f"--server={self.base_url}/k8s/{endpoint}", f"--account={account}"]
        interval = next(
            (float(a.split("=", 1)[1]) for a in reversed(command) if a.startswith("--interval=")),
            None,
        )
        if interval is not None:
            least = NODE_MIN_INTERVAL if node else MIN_INTERVAL
            command.append(f"--interval={max(least, interval * self.scale)}")
        log = (folder / "log").open("wb")
        process = subprocess.Popen(
            command,
            env=env,
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return Program(
            process,
            folder,
            _fingerprint(c, obj),
            token,
            time.monotonic(),
            association,
            identity_token,
            Caller.service_account(namespace, account_name, node),
        )

    def _host_paths(
        self, endpoint: str, node: str, pod: dict[str, Any], container: dict[str, Any]
    ) -> dict[str, Path]:
        """The container's hostPath volumes, in the node's folder: mount path -> path (a
        file for a device or file, made empty if missing; else a folder)."""
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            source = (volumes.get(mount["name"]) or {}).get("hostPath")
            if source is None:
                continue
            where = self.host(endpoint, node) / str(source["path"]).lstrip("/")
            if source.get("type") in ("CharDevice", "File", "FileOrCreate"):
                where.parent.mkdir(parents=True, exist_ok=True)
                where.touch()
            else:
                where.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"].rstrip("/")] = where
        return mounts


def _empty_dirs(pod: dict[str, Any], container: dict[str, Any], folder: Path) -> dict[str, Path]:
    """The container's emptyDir volumes: mount path -> a folder of the program's own (the
    pod's scratch space, gone with it), so that two programs never share one."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mounts: dict[str, Path] = {}
    for mount in container.get("volumeMounts") or []:
        if "emptyDir" not in (volumes.get(mount["name"]) or {}):
            continue
        where = folder / "volumes" / str(mount["name"])
        where.mkdir(parents=True, exist_ok=True)
        mounts[str(mount["mountPath"]).rstrip("/")] = where
    return mounts


def _runnable(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The Deployment's (or DaemonSet's) container the sandbox runs: its one container of a
    Python image started with python3 (another beside it, such as the health agent's DCGM
    container, has nothing to run on here: the sandbox's nodes have no GPUs)."""
    spec = obj.get("spec") or {}
    if int(spec.get("replicas", 1) or 0) < 1:
        return None
    template = spec.get("template") or {}
    for meta in (obj.get("metadata") or {}, template.get("metadata") or {}):
        if (meta.get("labels") or {}).get("app.kubernetes.io/part-of") != "fmctl":
            return None
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    python = [
        c
        for c in containers
        if "/python:" in str(c.get("image", ""))
        and (c.get("command") or [""])[0] in ("python3", "python")
    ]
    return dict(python[0]) if len(python) == 1 else None


def _fingerprint(c: Cluster, obj: dict[str, Any]) -> str:
    """What the process was started from: the pod template and its ConfigMaps' data."""
    namespace = obj["metadata"].get("namespace", "")
    pod = (obj.get("spec") or {}).get("template") or {}
    maps = sorted(
        (v.get("configMap") or {}).get("name", "")
        for v in (pod.get("spec") or {}).get("volumes") or []
        if v.get("configMap")
    )
    data = [(c.objects.get(("configmaps", namespace, m)) or {}).get("data") for m in maps]
    text = json.dumps([pod, data], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()
