"""The EKS side of a Kubernetes cluster as kinds of the plan: the secrets key, the control
plane, access entries, launch templates, managed node groups and add-ons.

Each is created from what ``render`` wrote under ``aws/`` (the same files a user commits),
with the ``<fmctl:...>`` placeholders filled from the outputs of the nodes it depends on,
so what `up` sends is what `render` shows. Names are the idempotency keys EKS offers (one
cluster, node group or add-on per name) and creates also pass a client request token.
"""

from __future__ import annotations

import base64
from typing import Any

import yaml

from provisioner.drivers.aws import error_code
from provisioner.drivers.ec2_base import Ec2Kind, create_or_adopt, is_gone, retry_dependency
from provisioner.plan.context import OWNER_TAG, RESOURCE_TAG, Engine
from provisioner.plan.graph import Found, Node, Outputs
from provisioner.render.placeholders import fill

#: Add-ons whose pods run on nodes, in the order EKS documents them.
ADDONS = ("vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent", "aws-fsx-csi-driver")
#: Service account of the FSx CSI controller (its pod identity association).
FSX_CSI_ACCOUNT = "fsx-csi-controller-sa"
ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


class EksFailed(Exception):
    """An EKS resource reached a failed state; the message carries EKS's health issues."""


def placeholder_values(engine: Engine) -> dict[str, str]:
    """Every placeholder value the outputs so far can fill."""
    out = engine.outputs
    values: dict[str, str] = {}
    pairs = {
        "privateSubnetId": ("subnet/private", "id"),
        "publicSubnetId": ("subnet/public", "id"),
        "secondarySubnetId": ("subnet/secondary", "id"),
        "efaSecurityGroupId": ("sg/efa", "id"),
        "fsxSecurityGroupId": ("sg/fsx", "id"),
        "clusterRoleArn": ("iam/eks-cluster", "arn"),
        "nodeRoleArn": ("iam/eks-node", "arn"),
        "fileSystemId": ("fsx", "id"),
        "fsxDnsName": ("fsx", "dns"),
        "fsxMountName": ("fsx", "mount_name"),
        "artifactBucket": ("bucket", "id"),
    }
    for name, (node, key) in pairs.items():
        if key in out.get(node, {}):
            values[name] = str(out[node][key])
    for node, data in out.items():
        if node.startswith("launch-template/"):
            values[f"launchTemplate.{node.split('/', 1)[1]}"] = str(data["id"])
    return values


def filled(engine: Engine, text: str) -> dict[str, Any]:
    """A rendered AWS file with its placeholders filled, as API parameters."""
    data: dict[str, Any] = yaml.safe_load(fill(text, placeholder_values(engine)))
    return data


def _tags(engine: Engine, node_id: str) -> dict[str, str]:
    return engine.tags_for(node_id)


def _ours(engine: Engine, tags: dict[str, str] | None) -> bool:
    return (tags or {}).get(OWNER_TAG) == engine.cluster


def _issues(item: dict[str, Any]) -> str:
    issues = (item.get("health") or {}).get("issues") or []
    return "; ".join(f"{i.get('code')}: {i.get('message')}" for i in issues) or "no details"


class KmsKey:
    """The KMS key that encrypts the cluster's Kubernetes secrets (envelope encryption)."""

    name = "kms-key"
    after: tuple[str, ...] = ()
    create_seconds, delete_seconds = 2.0, 2.0

    def _owned_keys(self, engine: Engine) -> list[tuple[str, dict[str, str]]]:
        """Usable keys tagged as the cluster's, through the tagging API (one call, however
        many keys the account holds); keys pending deletion are left out."""
        tagging = engine.aws.client("resourcegroupstaggingapi")
        kms = engine.aws.client("kms")
        out = []
        pages = tagging.get_paginator("get_resources").paginate(
            TagFilters=[{"Key": OWNER_TAG, "Values": [engine.cluster]}],
            ResourceTypeFilters=["kms:key"],
        )
        for page in pages:
            for item in page["ResourceTagMappingList"]:
                tags = {t["Key"]: t["Value"] for t in item.get("Tags", [])}
                if not _ours(engine, tags):
                    continue
                try:
                    meta = kms.describe_key(KeyId=item["ResourceARN"])["KeyMetadata"]
                except Exception as exc:
                    if error_code(exc) == "NotFoundException":
                        continue
                    raise
                if meta["KeyState"] not in ("PendingDeletion", "PendingReplicaDeletion"):
                    out.append((meta["Arn"], tags))
        return out

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        for arn, tags in self._owned_keys(engine):
            if tags.get(RESOURCE_TAG) == node.id:
                return {"id": arn.rsplit("/", 1)[-1], "arn": arn}
        return None

    def create(self, engine: Engine, node: Node) -> Outputs:
        once = engine.aws.client("kms", retries=False)

        def make() -> Outputs:
            meta = once.create_key(
                Description=f"fmctl {engine.cluster}: EKS secrets encryption",
                KeyUsage="ENCRYPT_DECRYPT",
                KeySpec="SYMMETRIC_DEFAULT",
                Tags=engine.tag_list(node.id, "TagKey", "TagValue"),
            )["KeyMetadata"]
            return {"id": meta["KeyId"], "arn": meta["Arn"]}

        # CreateKey takes no client token: after a lost answer, look before trying again.
        outputs = create_or_adopt(engine, node.id, make, lambda: self.discover(engine, node))
        engine.aws.client("kms").enable_key_rotation(KeyId=outputs["id"])
        return outputs

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        return outputs

    def find_all(self, engine: Engine) -> list[Found]:
        return [
            Found(self.name, tags.get(RESOURCE_TAG, "?"), arn.rsplit("/", 1)[-1])
            for arn, tags in self._owned_keys(engine)
        ]

    def delete(self, engine: Engine, found: Found) -> None:
        # KMS never deletes at once; 7 days is the shortest window, and a key pending
        # deletion is neither billed nor usable (and `down` no longer finds it).
        try:
            engine.aws.client("kms").schedule_key_deletion(KeyId=found.id, PendingWindowInDays=7)
        except Exception as exc:
            if error_code(exc) not in ("NotFoundException", "KMSInvalidStateException"):
                raise


class EksCluster:
    """The EKS control plane."""

    name = "eks-cluster"
    after: tuple[str, ...] = (
        "iam-role",
        "subnet",
        "sg",
        "kms-key",
        "vpc",
        "route-table",
        "natgw",
        "igw",
        "eks-sweep",
    )
    create_seconds, delete_seconds = 600.0, 300.0

    def _describe(self, engine: Engine) -> dict[str, Any] | None:
        try:
            cluster: dict[str, Any] = engine.aws.client("eks").describe_cluster(
                name=engine.cluster
            )["cluster"]
        except Exception as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return None
            raise
        return cluster

    def _outputs(self, c: dict[str, Any]) -> Outputs:
        return {
            "id": c["name"],
            "arn": c["arn"],
            "status": c["status"],
            "endpoint": c.get("endpoint", ""),
            "ca": (c.get("certificateAuthority") or {}).get("data", ""),
            "version": c.get("version", ""),
        }

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        c = self._describe(engine)
        if c is None:
            return None
        if not _ours(engine, c.get("tags")):
            raise RuntimeError(
                f"an EKS cluster named {engine.cluster} exists and is not fmctl's "
                "(no fmctl.dev/cluster tag): fmctl will not take it over; pick another name"
            )
        if c["status"] in ("FAILED", "DELETING"):
            raise EksFailed(
                f"EKS cluster {engine.cluster} is {c['status']}: `fmctl down {engine.cluster}` "
                "and `fmctl up` again"
            )
        return self._outputs(c)

    def create(self, engine: Engine, node: Node) -> Outputs:
        data = filled(engine, node.params["text"])
        data.pop("addons", None)  # made after the nodes, by eks-addon nodes
        key_arn = node.params.get("key_arn") or engine.output("kms/secrets", "arn")
        data["encryptionConfig"] = [{"resources": ["secrets"], "provider": {"keyArn": key_arn}}]
        data["tags"] = _tags(engine, node.id)
        try:
            c = engine.aws.client("eks").create_cluster(
                **data, clientRequestToken=engine.token(node.id)
            )["cluster"]
        except Exception as exc:
            if error_code(exc) != "ResourceInUseException":
                raise
            found = self.discover(engine, node)  # our own create whose answer was lost
            if found is None:
                raise
            return found
        return self._outputs(c)

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        def probe() -> Outputs | None:
            c = self._describe(engine)
            if c is None:
                raise EksFailed(f"EKS cluster {engine.cluster} disappeared while creating")
            if c["status"] == "FAILED":
                raise EksFailed(f"EKS cluster {engine.cluster} FAILED: {_issues(c)}")
            return self._outputs(c) if c["status"] == "ACTIVE" else None

        result: Outputs = engine.wait_until(
            f"EKS cluster {engine.cluster} to be ACTIVE", probe, self.create_seconds, 1800, node.id
        )
        return result

    def find_all(self, engine: Engine) -> list[Found]:
        c = self._describe(engine)
        if c is None or not _ours(engine, c.get("tags")):
            return []
        return [Found(self.name, c["tags"].get(RESOURCE_TAG, "eks"), c["name"])]

    def delete(self, engine: Engine, found: Found) -> None:
        eks = engine.aws.client("eks")
        try:
            eks.delete_cluster(name=found.id)
        except Exception as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return
            raise
        engine.wait_until(
            f"EKS cluster {found.id} to be deleted",
            lambda: True if self._describe(engine) is None else None,
            self.delete_seconds,
            1800,
            found.logical_id,
        )


def caller_principal(engine: Engine) -> str:
    """The IAM principal of the credentials `up` runs with (an assumed role's role ARN)."""
    arn = str(engine.aws.client("sts").get_caller_identity()["Arn"])
    if ":user/" in arn:  # an IAM user (moto answers with an sts-style ARN for one)
        return arn.replace(":sts:", ":iam:")
    if ":assumed-role/" in arn:  # arn:aws:sts::ACCT:assumed-role/ROLE/SESSION
        head, rest = arn.split(":assumed-role/", 1)
        return f"{head.replace(':sts:', ':iam:')}:role/{rest.split('/', 1)[0]}"
    return arn


class AccessEntry:
    """An EKS access entry: the node role (EC2_LINUX) or the caller (cluster admin)."""

    name = "eks-access-entry"
    after: tuple[str, ...] = ("eks-cluster", "iam-role")
    create_seconds, delete_seconds = 2.0, 2.0

    def _principal(self, engine: Engine, node: Node) -> str:
        if node.params["principal"] == "caller":
            return caller_principal(engine)
        return str(engine.output(node.params["principal"], "arn"))

    def _describe(self, engine: Engine, principal: str) -> dict[str, Any] | None:
        try:
            entry: dict[str, Any] = engine.aws.client("eks").describe_access_entry(
                clusterName=engine.cluster, principalArn=principal
            )["accessEntry"]
        except Exception as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return None
            raise
        return entry

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        principal = self._principal(engine, node)
        entry = self._describe(engine, principal)
        if entry is None:
            return None
        self._policy(engine, node, principal)
        return {"id": principal, "type": entry["type"]}

    def _policy(self, engine: Engine, node: Node, principal: str) -> None:
        if node.params.get("policy"):
            engine.aws.client("eks").associate_access_policy(
                clusterName=engine.cluster,
                principalArn=principal,
                policyArn=node.params["policy"],
                accessScope={"type": "cluster"},
            )

    def create(self, engine: Engine, node: Node) -> Outputs:
        principal = self._principal(engine, node)
        try:
            engine.aws.client("eks").create_access_entry(
                clusterName=engine.cluster,
                principalArn=principal,
                type=node.params["type"],
                tags=_tags(engine, node.id),
                clientRequestToken=engine.token(f"{node.id}/{principal}"),
            )
        except Exception as exc:
            # The cluster's creator has an entry from bootstrapClusterCreatorAdminPermissions.
            if error_code(exc) != "ResourceInUseException":
                raise
        self._policy(engine, node, principal)
        return {"id": principal, "type": node.params["type"]}

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        return outputs

    def find_all(self, engine: Engine) -> list[Found]:
        eks = engine.aws.client("eks")
        if not EksCluster().find_all(engine):
            return []
        out = []
        for principal in eks.list_access_entries(clusterName=engine.cluster)["accessEntries"]:
            entry = self._describe(engine, principal)
            if entry is not None and _ours(engine, entry.get("tags")):
                out.append(Found(self.name, entry["tags"].get(RESOURCE_TAG, "?"), principal))
        return out

    def delete(self, engine: Engine, found: Found) -> None:
        try:
            engine.aws.client("eks").delete_access_entry(
                clusterName=engine.cluster, principalArn=found.id
            )
        except Exception as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise


class LaunchTemplate(Ec2Kind):
    """A GPU pool's launch template: every EFA interface, IMDSv2, encrypted root volume,
    capacity-block market options, NodeConfig user data (from aws/launch-templates/)."""

    name = "launch-template"
    after: tuple[str, ...] = ("sg", "placement-group")
    describe_call, result_key, id_field = (
        "describe_launch_templates",
        "LaunchTemplates",
        "LaunchTemplateId",
    )

    def create(self, engine: Engine, node: Node) -> Outputs:
        data = filled(engine, node.params["text"])
        data["TagSpecifications"] = engine.tag_spec("launch-template", node.id)
        body = data["LaunchTemplateData"]
        body["UserData"] = base64.b64encode(body["UserData"].encode()).decode()
        ec2 = engine.aws.client("ec2")
        try:
            made = ec2.create_launch_template(**data, ClientToken=engine.token(node.id))
        except Exception as exc:
            if "AlreadyExists" not in (error_code(exc) or ""):
                raise
            found = self.discover(engine, node)
            if found is None:
                raise RuntimeError(
                    f"launch template {data['LaunchTemplateName']} exists and is not fmctl's"
                ) from exc
            return found
        return {"id": made["LaunchTemplate"]["LaunchTemplateId"]}

    def delete(self, engine: Engine, found: Found) -> None:
        try:
            engine.aws.client("ec2").delete_launch_template(LaunchTemplateId=found.id)
        except Exception as exc:
            if not is_gone(exc):
                raise


class Nodegroup:
    """A managed node group: the system group, or one per GPU pool (aws/nodegroups/)."""

    name = "eks-nodegroup"
    # Node groups go before the add-ons (the CNI must outlive the pods' interfaces) and
    # before the sweep of what the CNI left behind.
    after: tuple[str, ...] = (
        "eks-cluster",
        "launch-template",
        "iam-role",
        "subnet",
        "sg",
        "placement-group",
        "eks-access-entry",
        "eks-addon",
        "eks-sweep",
        "route-table",
        "natgw",
    )
    create_seconds, delete_seconds = 300.0, 300.0

    def _describe(self, engine: Engine, group: str) -> dict[str, Any] | None:
        try:
            ng: dict[str, Any] = engine.aws.client("eks").describe_nodegroup(
                clusterName=engine.cluster, nodegroupName=group
            )["nodegroup"]
        except Exception as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return None
            raise
        return ng

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        ng = self._describe(engine, node.params["group"])
        if ng is None:
            return None
        if not _ours(engine, ng.get("tags")):
            raise RuntimeError(f"node group {node.params['group']} exists and is not fmctl's")
        if ng["status"] in ("CREATE_FAILED", "DELETING", "DELETE_FAILED"):
            raise EksFailed(
                f"node group {node.params['group']} is {ng['status']}: {_issues(ng)}; "
                f"`fmctl down {engine.cluster}` and `fmctl up` again"
            )
        return {"id": ng["nodegroupName"], "status": ng["status"]}

    def create(self, engine: Engine, node: Node) -> Outputs:
        data = filled(engine, node.params["text"])
        data["tags"] = _tags(engine, node.id)
        try:
            ng = engine.aws.client("eks").create_nodegroup(
                **data, clientRequestToken=engine.token(node.id)
            )["nodegroup"]
        except Exception as exc:
            if error_code(exc) != "ResourceInUseException":
                raise
            found = self.discover(engine, node)
            if found is None:
                raise
            return found
        return {"id": ng["nodegroupName"], "status": ng["status"]}

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        group = node.params["group"]

        def probe() -> Outputs | None:
            ng = self._describe(engine, group)
            if ng is None:
                raise EksFailed(f"node group {group} disappeared while creating")
            if ng["status"] in ("CREATE_FAILED", "DEGRADED"):
                raise EksFailed(f"node group {group} is {ng['status']}: {_issues(ng)}")
            if ng["status"] != "ACTIVE":
                return None
            return {"id": group, "status": "ACTIVE", "desired": ng["scalingConfig"]["desiredSize"]}

        result: Outputs = engine.wait_until(
            f"node group {group} to be ACTIVE", probe, self.create_seconds, 3600, node.id
        )
        return result

    def find_all(self, engine: Engine) -> list[Found]:
        if not EksCluster().find_all(engine):
            return []
        eks = engine.aws.client("eks")
        out = []
        for group in eks.list_nodegroups(clusterName=engine.cluster)["nodegroups"]:
            ng = self._describe(engine, group)
            if ng is not None and _ours(engine, ng.get("tags")):
                out.append(Found(self.name, ng["tags"].get(RESOURCE_TAG, "?"), group))
        return out

    def delete(self, engine: Engine, found: Found) -> None:
        try:
            engine.aws.client("eks").delete_nodegroup(
                clusterName=engine.cluster, nodegroupName=found.id
            )
        except Exception as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return
            raise
        engine.wait_until(
            f"node group {found.id} to be deleted",
            lambda: True if self._describe(engine, found.id) is None else None,
            self.delete_seconds,
            3600,
            found.logical_id,
        )


class Addon:
    """A managed add-on, made once nodes exist (an add-on with pods and no node to run them
    goes DEGRADED), at the version pinned in the spec or the default for the cluster."""

    name = "eks-addon"
    after: tuple[str, ...] = ("eks-cluster", "iam-role")
    create_seconds, delete_seconds = 60.0, 30.0

    def _describe(self, engine: Engine, addon: str) -> dict[str, Any] | None:
        try:
            item: dict[str, Any] = engine.aws.client("eks").describe_addon(
                clusterName=engine.cluster, addonName=addon
            )["addon"]
        except Exception as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return None
            raise
        return item

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        item = self._describe(engine, node.params["addon"])
        if item is None:
            return None
        return {"id": item["addonName"], "version": item["addonVersion"]}

    def version(self, engine: Engine, addon: str, pinned: str | None) -> str:
        """The pinned version, or EKS's default for the cluster's Kubernetes version."""
        if pinned:
            return pinned
        cluster_version = engine.output("eks", "version")
        found = engine.aws.client("eks").describe_addon_versions(
            kubernetesVersion=cluster_version, addonName=addon
        )["addons"]
        for item in found:
            for v in item["addonVersions"]:
                if any(
                    c.get("defaultVersion") and c.get("clusterVersion") == cluster_version
                    for c in v.get("compatibilities", [])
                ):
                    return str(v["addonVersion"])
        raise EksFailed(f"EKS offers no default version of {addon} for {cluster_version}")

    def create(self, engine: Engine, node: Node) -> Outputs:
        addon = node.params["addon"]
        version = self.version(engine, addon, node.params.get("version"))
        extra: dict[str, Any] = {}
        if node.params.get("role"):
            extra["podIdentityAssociations"] = [
                {
                    "serviceAccount": node.params["service_account"],
                    "roleArn": engine.output(node.params["role"], "arn"),
                }
            ]
        try:
            engine.aws.client("eks").create_addon(
                clusterName=engine.cluster,
                addonName=addon,
                addonVersion=version,
                # EKS installed self-managed vpc-cni, kube-proxy and coredns with the cluster.
                resolveConflicts="OVERWRITE",
                tags=_tags(engine, node.id),
                clientRequestToken=engine.token(node.id),
                **extra,
            )
        except Exception as exc:
            if error_code(exc) != "ResourceInUseException":
                raise
        return {"id": addon, "version": version}

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        addon = node.params["addon"]

        def probe() -> Outputs | None:
            item = self._describe(engine, addon)
            if item is None:
                raise EksFailed(f"add-on {addon} disappeared while creating")
            if item["status"] in ("CREATE_FAILED", "DEGRADED"):
                raise EksFailed(f"add-on {addon} is {item['status']}: {_issues(item)}")
            if item["status"] != "ACTIVE":
                return None
            return {"id": addon, "version": item["addonVersion"]}

        result: Outputs = engine.wait_until(
            f"add-on {addon} to be ACTIVE", probe, self.create_seconds, 1200, node.id
        )
        return result

    def find_all(self, engine: Engine) -> list[Found]:
        if not EksCluster().find_all(engine):
            return []
        out = []
        for addon in engine.aws.client("eks").list_addons(clusterName=engine.cluster)["addons"]:
            item = self._describe(engine, addon)
            if item is not None and _ours(engine, item.get("tags")):
                out.append(Found(self.name, item["tags"].get(RESOURCE_TAG, "?"), addon))
        return out

    def delete(self, engine: Engine, found: Found) -> None:
        try:
            engine.aws.client("eks").delete_addon(clusterName=engine.cluster, addonName=found.id)
        except Exception as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return
            raise
        engine.wait_until(
            f"add-on {found.id} to be deleted",
            lambda: True if self._describe(engine, found.id) is None else None,
            self.delete_seconds,
            1200,
            found.logical_id,
        )


#: Tags the VPC CNI and the AWS Load Balancer Controller put on what they create.
CNI_TAG = "cluster.k8s.amazonaws.com/name"
LB_TAG = "elbv2.k8s.aws/cluster"


class Sweep:
    """Network interfaces the VPC CNI and security groups the load balancer controller left
    in the cluster's VPC (tagged with the cluster's name by them, never by fmctl): found at
    `down` and deleted once the node groups and the cluster are gone."""

    name = "eks-sweep"
    after: tuple[str, ...] = ("vpc", "subnet", "sg")
    create_seconds, delete_seconds = 0.0, 2.0

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        return {"id": "nothing to create"}

    def create(self, engine: Engine, node: Node) -> Outputs:
        return {"id": "nothing to create"}

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        return outputs

    def find_all(self, engine: Engine) -> list[Found]:
        ec2 = engine.aws.client("ec2")
        vpcs = {
            v["VpcId"]
            for v in ec2.describe_vpcs(Filters=engine.owner_filters())["Vpcs"]
            if {t["Key"]: t["Value"] for t in v.get("Tags", [])}.get(OWNER_TAG) == engine.cluster
        }
        if not vpcs:
            return []
        out = []
        enis = ec2.describe_network_interfaces(
            Filters=[{"Name": f"tag:{CNI_TAG}", "Values": [engine.cluster]}]
        )["NetworkInterfaces"]
        for eni in enis:
            tags = {t["Key"]: t["Value"] for t in eni.get("TagSet", [])}
            if tags.get(CNI_TAG) == engine.cluster and eni.get("VpcId") in vpcs:
                out.append(Found(self.name, "cni-eni", eni["NetworkInterfaceId"]))
        groups = ec2.describe_security_groups(
            Filters=[{"Name": f"tag:{LB_TAG}", "Values": [engine.cluster]}]
        )["SecurityGroups"]
        for group in groups:
            tags = {t["Key"]: t["Value"] for t in group.get("Tags", [])}
            if tags.get(LB_TAG) == engine.cluster and group.get("VpcId") in vpcs:
                out.append(Found(self.name, "lb-security-group", group["GroupId"]))
        return out

    def delete(self, engine: Engine, found: Found) -> None:
        ec2 = engine.aws.client("ec2")
        if found.id.startswith("eni-"):
            retry_dependency(
                lambda: ec2.delete_network_interface(NetworkInterfaceId=found.id), found.id, engine
            )
        else:
            retry_dependency(lambda: ec2.delete_security_group(GroupId=found.id), found.id, engine)
