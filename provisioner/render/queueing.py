"""Kueue and NVIDIA's DRA driver on EKS, as render decides them: the topology each GPU pool
is placed by, its flavor and quotas, where a job's pods must land, and the values both
upstream charts are installed with. Typed here; templates lay them out.

Sources:
- Kueue 0.19 Topology Aware Scheduling (``site/content/en/docs/concepts/
  topology_aware_scheduling.md``): a ``Topology`` lists node labels from the outermost level
  in, ``kubernetes.io/hostname`` last (a CRD rule; taints on nodes are only respected when it
  is the lowest level); a ``ResourceFlavor`` names its nodes by labels and the ``Topology``
  (``topologyName`` requires a node label, another CRD rule), with the tolerations TAS must
  know of; a job's pod template asks for placement with
  ``kueue.x-k8s.io/podset-required-topology`` or ``-preferred-topology`` and the job enters
  a queue by the ``kueue.x-k8s.io/queue-name`` label.
- Ranks: Kueue's topology ungater (``pkg/controller/tas/topology_ungater.go``) gives the pods
  of an Indexed Job their domains in rank order (``kubernetes.io/job-completion-index``), so
  consecutive ranks share the tightest domain; fmctl's jobs take their node rank from that
  index, as Slurm's ranks follow its topology.
- EKS labels each node with its place in the network, ``topology.k8s.aws/network-node-
  layer-1..N`` (the EKS User Guide, "Place distributed AI/ML workloads with network topology
  labels"; N is the type's depth, ``catalog`` networkLayers). Plain EKS labels no UltraServer
  (HyperPod's ``topology.k8s.aws/ultraserver-id`` is HyperPod's), so fmctl labels each
  UltraServer node with its capacityBlockId from DescribeInstanceTopology
  (``ULTRASERVER_LABEL``).
- A ClusterQueue must cover every resource a job's pods request (else "resource ...
  unavailable in ClusterQueue"), all flavors of a resource group the same resources (a CRD
  rule): the GPU pools' GPUs, EFA devices, CPU, memory and hugepages, from the catalog.
- GB200: Kueue 0.19 counts a pod's ResourceClaimTemplate devices against quota by
  DeviceClass, and leaves a job inadmissible when the class is not mapped in its
  configuration (``pkg/dra/claims.go``: "DeviceClass ... is not mapped in DRA
  configuration"): the ComputeDomain channel's class is mapped to ``CHANNEL_RESOURCE``.
- The DRA driver's values: the EKS User Guide's ("Install NVIDIA DRA driver": GPUs left to
  the device plugin, ``resources.gpus.enabled: false``; the controller off the control-plane
  affinity EKS has no nodes for; the kubelet plugin on the GPU nodes with the GPU taint
  tolerated), with fmctl's pool label where the guide uses GPU Feature Discovery's, which
  fmctl does not install; ``resourceApiVersion`` set for the cluster's version (``helm
  template`` knows none of the cluster's APIs): ``resource.k8s.io/v1`` from 1.34,
  ``v1beta2`` on 1.33 (Kubernetes' DRA API versions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provisioner.catalog.charts import GB200_DRA_KUBERNETES, KUEUE, minor

LAYER_LABEL = "topology.k8s.aws/network-node-layer-{}"
HOSTNAME = "kubernetes.io/hostname"
#: fmctl's label for an UltraServer node's NVLink domain: the capacityBlockId EC2 gives
#: every instance of one UltraServer (DescribeInstanceTopology).
ULTRASERVER_LABEL = "fmctl.dev/ultraserver"
#: The ComputeDomain channel's DeviceClass (the DRA driver's chart,
#: ``deviceclass-compute-domain-default-channel.yaml``) and what Kueue counts it as.
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
CHANNEL_RESOURCE = "compute-domain.nvidia.com/channel"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The queue fmctl's jobs enter: a LocalQueue of this name in the namespace they run in,
#: pointing at the one ClusterQueue.
QUEUE = "training"
#: UltraServer instances per NVLink domain (u-p6e-gb200x72: 18; the EKS User Guide).
ULTRASERVER_NODES = 18


@dataclass(frozen=True)
class Topology:
    """A Kueue Topology: node labels from the outermost level in."""

    name: str
    levels: tuple[str, ...]


@dataclass(frozen=True)
class Quota:
    """One resource's nominal quota in a flavor."""

    resource: str
    amount: str


@dataclass(frozen=True)
class Flavor:
    """The ResourceFlavor of one GPU pool and its quotas (in the queue's covered order)."""

    name: str
    pool: str
    topology: str
    quotas: tuple[Quota, ...]
    efa: bool
    #: Its pool's nodes come and go with the Cluster Autoscaler: a job is admitted once a
    #: ProvisioningRequest has its nodes (Kueue's provisioning admission check).
    autoscaled: bool = False


@dataclass(frozen=True)
class Placement:
    """Where a job's pods must (or should) land: Kueue's pod-template annotation."""

    mode: str
    level: str

    @property
    def annotation(self) -> str:
        """The annotation's key."""
        return f"kueue.x-k8s.io/podset-{self.mode}-topology"


@dataclass(frozen=True)
class Queueing:
    """Kueue on this cluster: topologies, flavors, the queues, and the placement mode."""

    topologies: tuple[Topology, ...]
    flavors: tuple[Flavor, ...]
    covered: tuple[str, ...]
    mode: str
    #: The ComputeDomain channel is counted (an UltraServer pool with DRA).
    channels: bool
    cluster_queue: str = QUEUE
    local_queue: str = QUEUE
    namespace: str = "training"

    @property
    def provisioned_flavors(self) -> tuple[str, ...]:
        """The flavors whose jobs wait for a ProvisioningRequest (autoscaled pools)."""
        return tuple(f.name for f in self.flavors if f.autoscaled)

    def flavor(self, pool: str) -> Flavor:
        """The flavor of pool ``pool``."""
        return next(f for f in self.flavors if f.pool == pool)

    def topology(self, pool: str) -> Topology:
        """The topology pool ``pool`` is placed by."""
        name = self.flavor(pool).topology
        return next(t for t in self.topologies if t.name == name)

    def placement(self, pool: str, nodes: int, ultra_server: bool) -> Placement:
        """The annotation of a job of ``nodes`` nodes on ``pool``, rendered without seeing the
        cluster: preferred at the tightest network level (Kueue widens it when it must);
        required at the UltraServer when the job fits in one, else at the outermost network
        level, the only one every node of a pool is known to share (``fmctl check`` knows
        the nodes and requires the tightest level that holds them: ``tightest_level``)."""
        levels = self.topology(pool).levels
        network = [lv for lv in levels if lv != HOSTNAME]
        if nodes <= 1:
            return Placement(self.mode, HOSTNAME)
        if not network:
            return Placement("preferred", HOSTNAME)
        if self.mode == "preferred":
            return Placement("preferred", network[-1])
        if ultra_server and ULTRASERVER_LABEL in network and nodes <= ULTRASERVER_NODES:
            return Placement("required", ULTRASERVER_LABEL)
        return Placement("required", network[0])


def tightest_level(levels: tuple[str, ...], nodes: list[dict[str, str]]) -> str | None:
    """The innermost level all of ``nodes`` (their labels) share, None when they share none
    (a node without a level's label shares nothing there)."""
    best = None
    for level in levels:
        if level == HOSTNAME and len(nodes) > 1:
            break
        values = {labels.get(level) for labels in nodes}
        if len(values) != 1 or None in values:
            break
        best = level
    return best


def pool_levels(network_layers: int, ultra_server: bool) -> tuple[str, ...]:
    """A pool's topology levels: EKS's network layers, fmctl's UltraServer label, then the
    host."""
    levels = [LAYER_LABEL.format(i) for i in range(1, network_layers + 1)]
    if ultra_server:
        levels.append(ULTRASERVER_LABEL)
    return (*levels, HOSTNAME)


def topology_name(levels: tuple[str, ...]) -> str:
    """A name that says the levels: fmctl-network-3, fmctl-network-3-ultraserver, fmctl-hosts."""
    layers = sum(lv.startswith("topology.k8s.aws/network-node-layer-") for lv in levels)
    name = f"fmctl-network-{layers}" if layers else "fmctl-hosts"
    return name + ("-ultraserver" if ULTRASERVER_LABEL in levels else "")


def dra_api_version(kubernetes: str) -> str:
    """The resource.k8s.io version the cluster serves DRA with."""
    return "resource.k8s.io/v1" if minor(kubernetes) >= (1, 34) else "resource.k8s.io/v1beta2"


def uses_dra(kubernetes: str, ultra_server_pools: int) -> bool:
    """Whether fmctl installs NVIDIA's DRA driver: an UltraServer pool on a version where EKS
    runs P6e-GB200 with DRA."""
    return ultra_server_pools > 0 and minor(kubernetes) >= minor(GB200_DRA_KUBERNETES)


def kueue_values(queueing: Queueing) -> dict[str, Any]:
    """The Kueue chart's values: the published chart's image, the controller on the system
    nodes, and its configuration (the chart's own, with waitForPodsReady and, on GB200, the
    ComputeDomain channel's DeviceClass mapped)."""
    repository, tag = KUEUE.image.rsplit(":", 1)
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 10,
                "LocalQueue.kueue.x-k8s.io": 5,
                "ClusterQueue.kueue.x-k8s.io": 5,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 300, "burst": 500},
        # A gang whose pods do not all run within the timeout (an image that will not pull,
        # a node that died after admission) gives its quota back and is queued again.
        "waitForPodsReady": {"timeout": "10m", "blockAdmission": False},
        "integrations": {
            "frameworks": [
                "batch/job",
                "kubeflow.org/mpijob",
                "ray.io/rayjob",
                "ray.io/raycluster",
                "jobset.x-k8s.io/jobset",
                "trainer.kubeflow.org/trainjob",
                "leaderworkerset.x-k8s.io/leaderworkerset",
            ]
        },
    }
    if queueing.channels:
        config["resources"] = {
            "deviceClassMappings": [{"name": CHANNEL_RESOURCE, "deviceClassNames": [CHANNEL_CLASS]}]
        }
    import yaml

    manager: dict[str, Any] = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"}
    }
    if queueing.provisioned_flavors:
        # Kueue sets its provisioning admission check up only if the ProvisioningRequest API
        # is served as it starts (cmd/kueue/main.go): a new annotation rolls its pods once
        # the API is there (applied with the chart, first), on a cluster that had Kueue
        # before.
        manager["podAnnotations"] = {"fmctl.dev/provisioning-requests": "served"}
    return {
        "controllerManager": {
            "manager": manager,
            "nodeSelector": {"fmctl.dev/role": "system"},
        },
        "managerConfig": {
            "controllerManagerConfigYaml": yaml.safe_dump(config, sort_keys=False),
        },
    }


def dra_values(kubernetes: str, pools: tuple[str, ...]) -> dict[str, Any]:
    """The DRA driver chart's values (see the module's sources)."""
    return {
        "resourceApiVersion": dra_api_version(kubernetes),
        "resources": {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}},
        "controller": {
            "nodeSelector": {"fmctl.dev/role": "system"},
            "affinity": None,
            "tolerations": [],
        },
        "kubeletPlugin": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "fmctl.dev/pool",
                                        "operator": "In",
                                        "values": list(pools),
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            # The GPU taint, fmctl's on a Capacity Block's nodes in their last hour, and the
            # verify gate's on a node not yet verified: the kubelet plugin is a node agent,
            # not work (templates/kubernetes/_macros.j2).
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "fmctl.dev/capacity-block-ending",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                },
                {"key": "fmctl.dev/unverified", "operator": "Exists", "effect": "NoSchedule"},
            ],
        },
    }


def dump_values(values: dict[str, Any]) -> str:
    """A chart's values as YAML, multi-line strings (Kueue's configuration) as literal
    blocks, keys in the order given."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _text)
    return yaml.dump(values, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
