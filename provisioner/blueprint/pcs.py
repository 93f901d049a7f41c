"""Slurm on AWS PCS, read off the files ``render`` writes under ``pcs/`` (the same files a user
commits), so what `up` sends is what `render` shows.

Order, and why: the cluster security group and the nodes' instance profile first (seconds);
the PCS cluster (the long pole, tens of minutes) as soon as its subnet and group exist, in
parallel with FSx; the launch templates and the sample AMIs meanwhile; each node group once
the cluster is ACTIVE, its template exists and the private subnet has its way out (nodes
download at bootstrap); each queue on its node group.
"""

from __future__ import annotations

import json
from typing import Any

from provisioner.blueprint.files import Doc, launch_template, load, tags_match
from provisioner.blueprint.infra import INLINE_PCS_NODE, Parts, way_out
from provisioner.blueprint.model import BlueprintError
from provisioner.catalog.pcs import ROLE_PATH
from provisioner.graph.ref import Ref
from provisioner.render.pcs import LOGIN, login_architecture, render_pcs
from provisioner.render.placeholders import PATTERN, find
from provisioner.resources.compute import ANYWHERE, Rule, SecurityGroup, SgOut, SgParams
from provisioner.resources.fsx import FsxOut
from provisioner.resources.iam import RoleOut
from provisioner.resources.launch_template import LtOut
from provisioner.resources.network import SubnetOut, VpcOut
from provisioner.resources.pcs import (
    NodeGroupOut,
    PcsAmiOut,
    PcsAmiParams,
    PcsCluster,
    PcsClusterOut,
    PcsClusterParams,
    PcsSampleAmi,
)
from provisioner.resources.pcs_nodes import NodeGroupParams, PcsNodeGroup
from provisioner.resources.pcs_queues import PcsQueue, QueueParams
from provisioner.resources.storage import ArtifactsOut, BucketOut

SG = "sg/pcs-cluster"
SSH_SG = "sg/pcs-ssh"
ROLE = "iam/pcs-node"
CLUSTER = "pcs/cluster"


#: Placeholder of pcs/ -> (logical id, its outputs, the output field) that fills it.
SOURCES: dict[str, tuple[str, type, str]] = {
    "privateSubnetId": ("subnet/private", SubnetOut, "id"),
    "efaSecurityGroupId": ("sg/efa", SgOut, "id"),
    "pcsClusterSecurityGroupId": (SG, SgOut, "id"),
    "sshSecurityGroupId": (SSH_SG, SgOut, "id"),
    "pcsClusterId": (CLUSTER, PcsClusterOut, "id"),
    "pcsNodeInstanceProfileArn": (ROLE, RoleOut, "arn"),
    "artifactBucket": ("bucket", BucketOut, "id"),
    "fsxDnsName": ("fsx", FsxOut, "dns"),
    "fsxMountName": ("fsx", FsxOut, "mount_name"),
}
#: Families (NAME.KEY): the logical id's pattern, its outputs and field.
FAMILIES: dict[str, tuple[str, type, str]] = {
    "launchTemplate": ("launch-template/pcs/{}", LtOut, "id"),
    "launchTemplateVersion": ("launch-template/pcs/{}", LtOut, "version"),
    "computeNodeGroupId": ("pcs/node-group/{}", NodeGroupOut, "id"),
    "pcsAmiId": ("pcs/ami/{}", PcsAmiOut, "id"),
}


def source(name: str) -> tuple[str, type, str] | None:
    """What fills a placeholder of pcs/ (None: nothing of PCS's)."""
    if name in SOURCES:
        return SOURCES[name]
    family, _, key = name.partition(".")
    if family in FAMILIES and key:
        pattern, outputs, attribute = FAMILIES[family]
        return pattern.format(key), outputs, attribute
    return None


class Refs:
    """Placeholders of pcs/ (and ids the spec names) -> the resources that fill them."""

    def __init__(self, p: Parts) -> None:
        self.by_name: dict[str, tuple[Ref[Any], str]] = {}
        for name, (rid, outputs, attribute) in SOURCES.items():
            if p.has(rid):
                self.by_name[name] = (Ref(rid, outputs), attribute)
        keys = {
            "launchTemplate": [LOGIN, *(pool.name for pool in p.c.pools)],
            "launchTemplateVersion": [LOGIN, *(pool.name for pool in p.c.pools)],
            "computeNodeGroupId": [LOGIN, *(pool.name for pool in p.c.pools)],
            "pcsAmiId": [a for a in ("x86_64", "arm64") if p.has(f"pcs/ami/{a}")],
        }
        for family, names in keys.items():
            for key in names:
                found = source(f"{family}.{key}")
                assert found is not None
                self.by_name[f"{family}.{key}"] = (Ref(found[0], found[1]), found[2])
        self.literal: dict[str, Ref[Any]] = {}
        if p.spec.network.subnet_id:
            self.literal[p.spec.network.subnet_id] = Ref("subnet/private", SubnetOut)

    def __call__(self, value: Any, where: str) -> Ref[Any]:
        text = str(value)
        match = PATTERN.fullmatch(text)
        if match and match.group(1) in self.by_name:
            return self.by_name[match.group(1)][0]
        if text in self.literal:
            return self.literal[text]
        raise BlueprintError(
            f"{where}: {text!r} is neither a placeholder fmctl fills nor a known id"
        )

    def fills(self, text: str, where: str) -> tuple[tuple[str, Ref[Any], str], ...]:
        """What fills each placeholder of a text (a launch template's user data)."""
        out = []
        for name in sorted(find(text)):
            if name not in self.by_name:
                raise BlueprintError(f"{where}: <fmctl:{name}> is not filled by any resource")
            ref, attribute = self.by_name[name]
            out.append((name, ref, attribute))
        return tuple(out)


def _groups(p: Parts) -> None:
    """The cluster security group (all traffic to and from itself, out to anywhere: the AWS
    PCS recipes' cluster group), and SSH to the login nodes from network.sshCidr only."""
    c = p.c
    vpc = p.ref("vpc", VpcOut)
    everything = Rule("-1")
    params = SgParams(
        vpc,
        f"{c.name}-pcs",
        f"fmctl {c.name}: PCS controller and nodes",
        ingress=(everything,),
        egress=(everything, Rule("-1", cidr=ANYWHERE)),
        tags=p.tags(SG),
    )
    p.add(SG, SecurityGroup, params)
    if c.ssh_cidr:
        ssh = SgParams(
            vpc,
            f"{c.name}-pcs-ssh",
            f"fmctl {c.name}: SSH to the PCS login nodes",
            ingress=(Rule("tcp", 22, 22, cidr=c.ssh_cidr),),
            egress=(),
            tags=p.tags(SSH_SG),
        )
        p.add(SSH_SG, SecurityGroup, ssh, ingress="network.sshCidr")


def _role(p: Parts) -> None:
    """The nodes' role: PCS registration, SSM (``fmctl check`` runs through it), reading the
    uploaded scripts, finding the cluster's nodes by tag (Prometheus on the login node)."""
    c = p.c
    document = json.loads(json.dumps(INLINE_PCS_NODE))
    scripts = f"arn:aws:s3:::fmctl-{c.name}-*-{c.region}"
    for statement in document["Statement"]:
        if statement["Sid"] == "Scripts":
            statement["Resource"] = [scripts, f"{scripts}/{c.name}/*"]
        elif statement["Sid"] == "CheckOutput":
            statement["Resource"] = [f"{scripts}/{c.name}-check/*"]
    p.role(ROLE, "pcs-node", inline=document, path=ROLE_PATH)


def _cluster(p: Parts, files: dict[str, str], refs: Refs) -> None:
    path = "pcs/cluster.json"
    doc = load(files, path)
    scheduler = doc.sub("scheduler")
    net = doc.sub("networking")
    slurm = doc.sub("slurmConfiguration")
    accounting = slurm.sub("accounting")
    tags_match(p, doc, path)
    if scheduler.take("type") != "SLURM":
        raise BlueprintError(f"{path}: scheduler.type is not SLURM")
    params = PcsClusterParams(
        cluster_name=str(doc.take("clusterName")),
        slurm_version=str(scheduler.take("version")),
        size=str(doc.take("size")),
        subnets=tuple(refs(s, f"{path}.networking.subnetIds") for s in net.take("subnetIds")),
        security_groups=tuple(
            refs(g, f"{path}.networking.securityGroupIds") for g in net.take("securityGroupIds")
        ),
        scale_down_seconds=int(slurm.take("scaleDownIdleTimeInSeconds")),
        custom_settings=tuple(
            (str(s["parameterName"]), str(s["parameterValue"]))
            for s in slurm.take("slurmCustomSettings")
        ),
        accounting=str(accounting.take("mode")),
        tags=p.tags(CLUSTER),
    )
    for part in (scheduler, net, accounting, slurm, doc):
        part.done()
    at = "slurm.pcs"
    p.add(
        CLUSTER,
        PcsCluster,
        params,
        slurm_version=f"{at}.slurmVersion",
        size=f"{at}.size",
        subnets="network.availabilityZone",
        custom_settings=f"{at}.customSettings",
        accounting=f"{at}.accounting",
        scale_down_seconds="slurm.scaledownIdletime",
    )


def _node_group(p: Parts, files: dict[str, str], refs: Refs, name: str, index: int | None) -> None:
    path = f"pcs/compute-node-groups/{name}.json"
    doc = load(files, path)
    if doc.take("computeNodeGroupName") != name:
        raise BlueprintError(f"{path}: computeNodeGroupName is not {name}")
    refs(doc.take("clusterIdentifier"), f"{path}.clusterIdentifier")
    template = doc.sub("customLaunchTemplate")
    lt = refs(template.take("id"), f"{path}.customLaunchTemplate.id")
    refs(template.take("version"), f"{path}.customLaunchTemplate.version")
    scaling = doc.sub("scalingConfiguration")
    configs = doc.take("instanceConfigs")
    if len(configs) != 1:
        raise BlueprintError(f"{path}: one instance type per node group, found {configs}")
    ami = str(doc.take("amiId"))
    health = doc.take("instanceHealthChecks", None)
    actions = doc.take("nodeLifecycleActions", None)
    lifecycle = json.dumps(actions, sort_keys=True) if actions else ""
    tags_match(p, doc, path)
    routes, endpoint = way_out(p)
    rid = f"pcs/node-group/{name}"
    params = NodeGroupParams(
        cluster=p.ref(CLUSTER, PcsClusterOut),
        group_name=name,
        ami=refs(ami, f"{path}.amiId") if PATTERN.fullmatch(ami) else ami,
        subnets=tuple(refs(s, f"{path}.subnetIds") for s in doc.take("subnetIds")),
        purchase_option=str(doc.take("purchaseOption")),
        launch_template=lt,
        instance_profile=refs(doc.take("iamInstanceProfileArn"), f"{path}.iamInstanceProfileArn"),
        min_count=int(scaling.take("minInstanceCount")),
        max_count=int(scaling.take("maxInstanceCount")),
        instance_type=str(configs[0]["instanceType"]),
        tags=p.tags(rid),
        ssh_key=doc.take("sshKeyName", None),
        routes=routes,
        endpoint=endpoint,
        health_checks=json.dumps(health, sort_keys=True) if health else "",
        lifecycle=lifecycle,
        lifecycle_fills=refs.fills(lifecycle, f"{path}.nodeLifecycleActions"),
        artifacts=p.ref("artifacts", ArtifactsOut) if p.has("artifacts") else None,
    )
    for part in (template, scaling, doc):
        part.done()
    at = f"compute.gpuPools[{index}]" if index is not None else "compute.headNode"
    origins = {
        "instance_type": f"{at}.instanceType",
        "ami": "slurm.amiId",
        "health_checks": "health.enabled",
        "lifecycle": "health",
    }
    if index is not None:
        origins |= {
            "min_count": f"{at}.minCount",
            "max_count": f"{at}.count",
            "purchase_option": f"{at}.capacity.type",
        }
    else:
        origins |= {"min_count": "slurm.pcs.loginCount", "max_count": "slurm.pcs.loginCount"}
    p.add(rid, PcsNodeGroup, params, **origins)


def _queue(p: Parts, files: dict[str, str], refs: Refs, name: str) -> None:
    path = f"pcs/queues/{name}.json"
    doc = load(files, path)
    refs(doc.take("clusterIdentifier"), f"{path}.clusterIdentifier")
    groups = tuple(
        refs(Doc(g, path).data.get("computeNodeGroupId"), f"{path}.computeNodeGroupConfigurations")
        for g in doc.take("computeNodeGroupConfigurations")
    )
    tags_match(p, doc, path)
    rid = f"pcs/queue/{name}"
    params = QueueParams(
        p.ref(CLUSTER, PcsClusterOut), str(doc.take("queueName")), groups, p.tags(rid)
    )
    doc.done()
    p.add(rid, PcsQueue, params)


def cluster(p: Parts) -> None:
    """The PCS cluster, its node groups and queues, on the shared infrastructure."""
    c = p.c
    _groups(p)
    _role(p)
    if c.pcs is not None and c.pcs.ami_id is None:
        archs = {login_architecture(c.head_node_type)} | {q.itype.architecture for q in c.pools}
        for arch in sorted(archs):
            params = PcsAmiParams(c.pcs.slurm_version, arch)
            p.add(f"pcs/ami/{arch}", PcsSampleAmi, params, slurm_version="slurm.pcs.slurmVersion")
    files = render_pcs(c)
    refs = Refs(p)
    _cluster(p, files, refs)
    for name in [LOGIN, *(pool.name for pool in c.pools)]:
        launch_template(
            p,
            files,
            refs,
            name,
            path=f"pcs/launch-templates/{name}.json",
            rid=f"launch-template/pcs/{name}",
            fills=refs.fills,
        )
    refs = Refs(p)
    for index, name in enumerate([LOGIN, *(pool.name for pool in c.pools)]):
        _node_group(p, files, refs, name, index - 1 if index else None)
    for pool in c.pools:
        _queue(p, files, refs, pool.name)
