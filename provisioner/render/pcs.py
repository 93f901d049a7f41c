"""The pcs/ folder of a Slurm cluster on AWS PCS (slurm.provider: pcs): each PCS request as
data, exactly as `up` sends it, and the launch templates with the nodes' bootstrap (and the
GPU node groups' lifecycle actions: fmctl's verify gate before slurmd).

- ``pcs/cluster.json``: CreateCluster; ``pcs/compute-node-groups/NAME.json``:
  CreateComputeNodeGroup (``login`` and one per pool); ``pcs/queues/NAME.json``: CreateQueue
  (one per pool, on its node group); ``pcs/launch-templates/NAME.json``: ec2
  CreateLaunchTemplate (every EFA interface, IMDSv2, the reservation, the bootstrap).
- Ids `up` learns are placeholders (``PLACEHOLDERS.md``). Field names are botocore's ``pcs``
  request shapes (tests check every key against them).
- PCS reads neither Prolog nor Epilog from the AMI: the cluster's slurmCustomSettings name
  fmctl's scripts where the bootstrap puts them (``/opt/fmctl/slurm``).
"""

from __future__ import annotations

import json
from typing import Any

from provisioner.catalog.pcs import ROOT_DEVICE, slurm_prefix
from provisioner.render.context import ClusterContext, PcsContext
from provisioner.render.placeholders import placeholder
from provisioner.render.pools import PoolContext
from provisioner.render.slurm import health_env, monitoring_files

LOGIN = "login"
#: Where the bootstrap syncs slurm/ on every node (as on ParallelCluster's nodes).
HOME = "/opt/fmctl/slurm"
#: Every prolog.d script (a glob, as ParallelCluster's own Prolog setting is). slurmd runs
#: a glob's scripts in reverse alphabetical order (slurm.conf(5), Prolog; seen with a real
#: slurmd 24.11 in the stand-in), so the names put the node check (90-) before IMEX (80-).
PROLOG = f"{HOME}/prolog.d/*"
EPILOG = f"{HOME}/epilog.d/50-fmctl-cleanup.sh"
#: UltraServer clusters: the prolog runs on every node at allocation (Alloc: IMEX must know
#: the job's nodes before any step) and the job is not held while it does (NoHold), as the
#: AWS PCS User Guide's "Configure UltraServer instances" sets them.
ULTRASERVER_PROLOG_FLAGS = ("PrologFlags", "Alloc,NoHold")

_PURCHASE = {
    "on-demand": "ONDEMAND",
    "reservation": "ONDEMAND",
    "spot": "SPOT",
    "capacity-block": "CAPACITY_BLOCK",
}


def _pcs(c: ClusterContext) -> PcsContext:
    if c.pcs is None:
        raise ValueError(f"{c.name} is not a PCS cluster")
    return c.pcs


def _tags(c: ClusterContext) -> dict[str, str]:
    return dict(c.tags)


def login_architecture(instance_type: str) -> str:
    """The login nodes' architecture (``catalog.architecture_of``)."""
    from provisioner.catalog import architecture_of, load_catalog

    return architecture_of(instance_type, load_catalog())


def cluster_request(c: ClusterContext) -> dict[str, Any]:
    """CreateCluster."""
    pcs = _pcs(c)
    settings = [("Prolog", PROLOG), ("Epilog", EPILOG)]
    if any(pool.itype.ultra_server for pool in c.pools):
        settings.append(ULTRASERVER_PROLOG_FLAGS)
    settings += [kv for kv in pcs.custom_settings if kv[0] != ULTRASERVER_PROLOG_FLAGS[0]]
    return {
        "clusterName": c.name,
        "scheduler": {"type": "SLURM", "version": pcs.slurm_version},
        "size": pcs.size,
        "networking": {
            "subnetIds": [c.private_subnet],
            "securityGroupIds": [placeholder("pcsClusterSecurityGroupId")],
        },
        "slurmConfiguration": {
            "scaleDownIdleTimeInSeconds": c.scaledown_idletime * 60,
            "slurmCustomSettings": [{"parameterName": k, "parameterValue": v} for k, v in settings],
            "accounting": {"mode": pcs.accounting.upper()},
        },
        "tags": _tags(c),
    }


def node_group_request(
    c: ClusterContext, name: str, instance_type: str, low: int, high: int, purchase: str
) -> dict[str, Any]:
    """CreateComputeNodeGroup (fmctl's launch template, never PCS's managed one)."""
    pcs = _pcs(c)
    arch = login_architecture(instance_type) if name == LOGIN else _arch_of(c, name)
    body: dict[str, Any] = {
        "clusterIdentifier": placeholder("pcsClusterId"),
        "computeNodeGroupName": name,
        "amiId": pcs.ami(arch),
        "subnetIds": [c.private_subnet],
        "purchaseOption": purchase,
        "customLaunchTemplate": {
            "id": placeholder(f"launchTemplate.{name}"),
            "version": placeholder(f"launchTemplateVersion.{name}"),
        },
        "iamInstanceProfileArn": placeholder("pcsNodeInstanceProfileArn"),
        "scalingConfiguration": {"minInstanceCount": low, "maxInstanceCount": high},
        "instanceConfigs": [{"instanceType": instance_type}],
        "tags": _tags(c),
    }
    if name == LOGIN and c.head_node_key:
        body["sshKeyName"] = c.head_node_key
    if name != LOGIN:
        body["instanceHealthChecks"] = instance_health_checks(c)
        pool = next(p for p in c.pools if p.name == name)
        actions = lifecycle_actions(c, pool)
        if actions:
            body["nodeLifecycleActions"] = actions
    return body


#: fmctl's scripts for PCS's node lifecycle stages (under slurm/actions/ in the artifacts).
BOOTSTRAPPED_SCRIPT = "pcs-node-bootstrapped.sh"
READY_SCRIPT = "pcs-node-ready.sh"


def _script(c: ClusterContext, name: str) -> dict[str, str]:
    """A ScriptSource: the shipped script in the artifact bucket, pinned by its SHA-256 (PCS
    checks the download against it)."""
    import hashlib

    from provisioner.shipped import shipped_dir

    text = (shipped_dir("slurm") / "actions" / name).read_bytes()
    return {
        "scriptLocation": f"{_prefix(c)}/actions/{name}",
        "checksum": hashlib.sha256(text).hexdigest(),
    }


def lifecycle_actions(c: ClusterContext, pool: PoolContext) -> dict[str, Any]:
    """A GPU node group's nodeLifecycleActions (botocore's PCS model, NodeLifecycleStages):
    fmctl's verify gate, as on ParallelCluster, before the node takes work ({} with health
    off).

    - nodeBootstrapped, "after PCS finishes setting up the compute node and before slurmd
      starts", at every boot (EVERY_BOOT): the node's bootstrap if cloud-init has not run
      it yet (the two take turns), then lib/verify-node.sh; a node that fails is terminated
      (onError TERMINATE), and PCS's deep health check, which "runs after those scripts",
      never starts on it. The stage is also how fmctl's health agent has PCS replace a
      node it drained: it reboots the node, condemned, into this stage, which then fails;
    - nodeReady, "after slurmd starts and the compute node registers": the 2-node NCCL pair
      (lib/verify-pair.sh, as fmctl-verify-pair.service), with health.verify.ncclPair. A
      node the pair drained (slow with two peers) fails the stage and is terminated
      (TERMINATE), as clustermgtd replaces it on ParallelCluster; one held after a slow
      pair with the one idle peer passes the stage, held.

    Each node fetches the scripts once (scriptCachingPolicy CACHE_ONCE, PCS's default) and
    runs its copy at every boot: `up` overwrites the objects before it updates the group,
    and a node fetching the new script at a reboot would fail the old checksum; new actions
    reach new nodes, since PCS replaces a group's nodes when they change (the PCS User
    Guide: "Configuration changes drain and replace existing nodes")."""
    if not c.health_enabled:
        return {}
    stages: dict[str, Any] = {
        "nodeBootstrapped": [
            {
                "name": "fmctl-verify",
                "scriptSource": _script(c, BOOTSTRAPPED_SCRIPT),
                "arguments": bootstrap_args(c, "compute", pool),
                "onError": "TERMINATE",
                "executionPolicy": "EVERY_BOOT",
            }
        ]
    }
    if c.health_verify_nccl_pair:
        stages["nodeReady"] = [
            {
                "name": "fmctl-verify-pair",
                "scriptSource": _script(c, READY_SCRIPT),
                "onError": "TERMINATE",
                "executionPolicy": "EVERY_BOOT",
            }
        ]
    return {"stages": stages, "scriptCachingPolicy": "CACHE_ONCE"}


def instance_health_checks(c: ClusterContext) -> dict[str, Any]:
    """A GPU node group's PCS instance health checks (botocore's InstanceHealthChecksRequest):
    with spec health on, PCS watches running instances (healthMonitoring STANDARD) and runs
    DCGM level 1 (deepHealthChecks onStart QUICK) each time one starts, before it accepts
    jobs. An instance that fails the start-up check is replaced before it takes any job; one
    found faulty while running is repaired as health.repair says (PCS_REPAIR). fmctl's own
    agent runs beside it on the nodes. With health off, both are turned off explicitly (an
    update replaces all of a group's settings)."""
    if not c.health_enabled:
        return {
            "healthMonitoring": {"mode": "NONE"},
            "deepHealthChecks": {"onStart": {"profile": "NONE"}},
        }
    return {
        "healthMonitoring": {"mode": "STANDARD", "repairAction": PCS_REPAIR[c.health_repair]},
        "deepHealthChecks": {"onStart": {"profile": "QUICK", "repairAction": "REPLACE"}},
    }


#: health.repair -> PCS's healthMonitoring repairAction (botocore's PCS model, HealthMonitoring):
#: REPLACE "after running jobs finish"; AUTO "chooses the repair action based on the fault",
#: PCS's own way to reboot what a reboot cures; ISOLATE "stops new jobs on the instance and
#: keeps the instance running until you investigate". A node that fails the start-up check
#: never ran a job: it is replaced whatever the setting.
PCS_REPAIR = {"replace": "REPLACE", "reboot": "AUTO", "drain-only": "ISOLATE"}


def _arch_of(c: ClusterContext, pool: str) -> str:
    return next(p.itype.architecture for p in c.pools if p.name == pool)


def queue_request(c: ClusterContext, pool: PoolContext) -> dict[str, Any]:
    """CreateQueue: the pool's partition, on its node group."""
    return {
        "clusterIdentifier": placeholder("pcsClusterId"),
        "queueName": pool.name,
        "computeNodeGroupConfigurations": [
            {"computeNodeGroupId": placeholder(f"computeNodeGroupId.{pool.name}")}
        ],
        "tags": _tags(c),
    }


def _prefix(c: ClusterContext) -> str:
    """Where the artifacts put slurm/ (the nodes sync it from there)."""
    return f"s3://{placeholder('artifactBucket')}/{c.name}/slurm"


def bootstrap_args(c: ClusterContext, role: str, pool: PoolContext | None) -> list[str]:
    """pcs-node-bootstrap.sh's arguments for a node of ``pool`` (None: the login nodes)."""
    pcs = _pcs(c)
    fsx = "-"
    if c.fsx is not None:
        fsx = f"{placeholder('fsxDnsName')}@tcp:/{placeholder('fsxMountName')}:{c.fsx.mount_path}"
    if pool is None:
        node = ["false", "0", "0", "false"]
        flags = ["--node-exporter"]
        if c.prometheus:
            flags.append("--prometheus")
            if c.grafana:
                flags.append("--grafana")
    else:
        node = [str(pool.efa).lower(), str(pool.gpus), str(pool.efa_devices)]
        node.append(str(pool.efa_rdma_read).lower())
        # --imex first (the bootstrap's own flag): on UltraServers the prolog forms each
        # job's NVLink domain (prolog.d/80-fmctl-imex.sh).
        flags = ["--imex"] if pool.itype.ultra_server else []
        flags.append("--node-exporter")
        if c.gpu_metrics:
            flags.append("--dcgm-exporter")
        if c.efa_metrics and pool.efa:
            flags.append(f"--efa-exporter={pool.efa_devices}")
    return [role, _prefix(c), pcs.slurm_version, *node, fsx, *flags]


def _bootstrap(c: ClusterContext, role: str, pool: PoolContext | None) -> str:
    """The launch template's user data: cloud-init runs it as root on first boot (a MIME
    multi-part document, the form PCS merges its own part into)."""
    pcs = _pcs(c)
    args = bootstrap_args(c, role, pool)
    lines = [
        "MIME-Version: 1.0",
        'Content-Type: multipart/mixed; boundary="FMCTL"',
        "",
        "--FMCTL",
        'Content-Type: text/x-shellscript; charset="us-ascii"',
        "",
        "#!/bin/bash",
        f"# fmctl: bootstrap of a PCS {role} node of {c.name} (Slurm {pcs.slurm_version} in "
        f"{slurm_prefix(pcs.slurm_version)}).",
        "set -euo pipefail",
        f'prefix="{args[1]}"',
        f"install -d -m 0755 {HOME}/actions",
        f'aws s3 cp --only-show-errors "$prefix/actions/pcs-node-bootstrap.sh" '
        f"{HOME}/actions/pcs-node-bootstrap.sh",
        f'exec bash {HOME}/actions/pcs-node-bootstrap.sh {role} "$prefix" ' + " ".join(args[2:]),
        "",
        "--FMCTL--",
        "",
    ]
    return "\n".join(lines)


def _interfaces(c: ClusterContext, pool: PoolContext | None) -> list[dict[str, Any]]:
    cluster_group = placeholder("pcsClusterSecurityGroupId")
    if pool is None:
        groups = [cluster_group]
        if c.ssh_cidr:
            groups.append(placeholder("sshSecurityGroupId"))
        return [
            {
                "NetworkCardIndex": 0,
                "DeviceIndex": 0,
                "InterfaceType": "interface",
                "Groups": groups,
                "DeleteOnTermination": True,
            }
        ]
    out = []
    for i in pool.interfaces:
        groups = [placeholder("efaSecurityGroupId")]
        if i.network_card_index == 0 and i.device_index == 0:
            # The controller reaches slurmd, and the node the controller, on the primary.
            groups.append(cluster_group)
        out.append(
            {
                "NetworkCardIndex": i.network_card_index,
                "DeviceIndex": i.device_index,
                "InterfaceType": i.interface_type,
                "Groups": groups,
                "DeleteOnTermination": True,
            }
        )
    return out


def launch_template(c: ClusterContext, name: str, pool: PoolContext | None) -> dict[str, Any]:
    """CreateLaunchTemplate of a node group (as ``aws/launch-templates`` is for EKS)."""
    itype = c.head_node_type if pool is None else pool.instance_type
    pool_tag = [{"Key": "fmctl.dev/pool", "Value": name}]
    tags = [{"Key": k, "Value": v} for k, v in c.tags]
    data: dict[str, Any] = {
        "InstanceType": itype,
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            # 2 hops: containers (enroot) on the node reach IMDSv2 through it.
            "HttpPutResponseHopLimit": 2,
        },
        "BlockDeviceMappings": [
            {
                "DeviceName": ROOT_DEVICE,
                "Ebs": {
                    "VolumeSize": c.head_node_root_gib if pool is None else 200,
                    "VolumeType": "gp3",
                    "Encrypted": True,
                    "DeleteOnTermination": True,
                },
            }
        ],
        "NetworkInterfaces": _interfaces(c, pool),
    }
    if pool is not None and pool.capacity == "capacity-block":
        data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    if pool is not None and pool.reservation_id:
        data["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": pool.reservation_id}
        }
    if pool is not None and pool.placement_group:
        data["Placement"] = {"GroupName": pool.placement_group_name}
    data["TagSpecifications"] = [
        {"ResourceType": kind, "Tags": tags + pool_tag}
        for kind in ("instance", "volume", "network-interface")
    ]
    data["UserData"] = _bootstrap(c, "login" if pool is None else "compute", pool)
    return {
        "LaunchTemplateName": f"{c.name}-pcs-{name}",
        "TagSpecifications": [{"ResourceType": "launch-template", "Tags": tags}],
        "LaunchTemplateData": data,
    }


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2) + "\n"


def render_pcs(c: ClusterContext) -> dict[str, str]:
    """Files of a Slurm deployment folder on AWS PCS."""
    pcs = _pcs(c)
    files = {"pcs/cluster.json": _dump(cluster_request(c))}
    groups: list[tuple[str, str, int, int, str, PoolContext | None]] = [
        (LOGIN, c.head_node_type, pcs.login_count, pcs.login_count, "ONDEMAND", None)
    ]
    for each in c.pools:
        purchase = _PURCHASE[each.capacity]
        groups.append((each.name, each.instance_type, each.min_count, each.count, purchase, each))
    for name, itype, low, high, purchase, pool in groups:
        request = node_group_request(c, name, itype, low, high, purchase)
        files[f"pcs/compute-node-groups/{name}.json"] = _dump(request)
        files[f"pcs/launch-templates/{name}.json"] = _dump(launch_template(c, name, pool))
    for pool_ in c.pools:
        files[f"pcs/queues/{pool_.name}.json"] = _dump(queue_request(c, pool_))
    files.update(monitoring_files(c))
    files["slurm/health.env"] = health_env(c)
    return files
