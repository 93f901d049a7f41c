"""What the sandbox's Kubernetes API is made of: its objects per cluster, what each node
really has, and its errors (shared by the server, server-side apply and the controllers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fmctl_sandbox.crd_schema import Crd

GPU, EFA = "nvidia.com/gpu", "vpc.amazonaws.com/efa"
#: Kinds whose status the controllers below keep; reading others needs no reconcile.
RECONCILED = {"nodes", "daemonsets", "deployments", "statefulsets", "persistentvolumeclaims"}
#: Images whose DaemonSet makes nodes advertise a device (the device plugins).
PLUGINS = {"k8s-device-plugin": GPU, "aws-efa-k8s-device-plugin": EFA}

Answer = tuple[int, dict[str, str], bytes]
Path = tuple[str, ...]


class ApiError(Exception):
    """A Kubernetes ``Status`` failure."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


@dataclass
class Hardware:
    """What a node has, whatever it advertises: GPUs and attached EFA interfaces."""

    gpus: int
    efa: int
    #: The NVLink clique its GPUs are in (UltraServers; "" elsewhere).
    clique: str = ""
    #: Its network bandwidth in Gbit/s (0: not known), for the all-reduce's stand-in.
    network_gbps: float = 0.0
    #: Its GPUs' model and memory in MiB ("", 0: not known), for nvidia-smi's stand-in.
    gpu_model: tuple[str, int] = ("", 0)


@dataclass
class Cluster:
    """One cluster's objects, keyed by (plural, namespace, name)."""

    #: The EKS cluster's name (its tokens sign it).
    name: str = ""
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    hardware: dict[str, Hardware] = field(default_factory=dict)
    #: What each pod's container printed: (namespace, pod) -> text.
    #: (namespace, pod) -> container -> what it printed
    logs: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    #: The cluster's Kubernetes version (EKS's), which decides what some groups serve.
    version: str = "1.33"
    #: The kinds CustomResourceDefinitions added, by plural.
    crds: dict[str, Crd] = field(default_factory=dict)
    #: Kueue's pod templates as they started -> whether the ProvisioningRequest API was
    #: served then (``kube_kueue_checks.controller_runs``).
    kueue_starts: dict[str, bool] = field(default_factory=dict)
    #: The kubelet's pod runs under way or not yet collected: (namespace, pod) -> its run
    #: (``kube_jobs.PodRun``; a pod's commands run outside the API's lock).
    runs: dict[tuple[str, str], Any] = field(default_factory=dict)
    #: Each node group's taints as its nodes last took them (``KubeServer.sync``).
    group_taints: dict[str, list[dict[str, str]]] = field(default_factory=dict)
