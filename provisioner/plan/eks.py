"""The EKS side of a Kubernetes cluster as kinds of the plan: the secrets key, the control
plane, access entries, launch templates, managed node groups and add-ons.

Each is created from what ``render`` wrote under ``aws/`` (the same files a user commits),
with the ``<fmctl:...>`` placeholders filled from the outputs of the nodes it depends on,
so what `up` sends is what `render` shows. Names are the idempotency keys EKS offers (one
cluster, node group or add-on per name) and creates also pass a client request token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from provisioner.drivers.aws import error_code
from provisioner.drivers.ec2_base import create_or_adopt, retry_dependency
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


def ours(engine: Engine, tags: dict[str, str] | None) -> bool:
    """True when EKS tags say the resource is this cluster's."""
    return (tags or {}).get(OWNER_TAG) == engine.cluster


def issues(item: dict[str, Any]) -> str:
    """EKS's health issues of a resource, as one line."""
    found = (item.get("health") or {}).get("issues") or []
    return "; ".join(f"{i.get('code')}: {i.get('message')}" for i in found) or "no details"


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
                if not ours(engine, tags):
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
        if not ours(engine, c.get("tags")):
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
        data["tags"] = engine.tags_for(node.id)
        eks = engine.aws.client("eks")
        return created_or_found(
            lambda: self._outputs(
                eks.create_cluster(**data, clientRequestToken=engine.token(node.id))["cluster"]
            ),
            lambda: self.discover(engine, node),
        )

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        def probe() -> Outputs | None:
            c = self._describe(engine)
            if c is None:
                raise EksFailed(f"EKS cluster {engine.cluster} disappeared while creating")
            if c["status"] == "FAILED":
                raise EksFailed(f"EKS cluster {engine.cluster} FAILED: {issues(c)}")
            return self._outputs(c) if c["status"] == "ACTIVE" else None

        result: Outputs = engine.wait_until(
            f"EKS cluster {engine.cluster} to be ACTIVE", probe, self.create_seconds, 1800, node.id
        )
        return result

    def find_all(self, engine: Engine) -> list[Found]:
        c = self._describe(engine)
        if c is None or not ours(engine, c.get("tags")):
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


def created_or_found(create: Callable[[], Outputs], find: Callable[[], Outputs | None]) -> Outputs:
    """``create()``; when EKS answers that it exists already, what ``find()`` finds: our own
    create whose answer was lost (the client token makes a retry the same request, but a
    re-run of `up` after a crash is a new one). Nothing found: the conflict stands."""
    try:
        return create()
    except Exception as exc:
        if error_code(exc) != "ResourceInUseException":
            raise
        found = find()
        if found is None:
            raise
        return found


def unless_gone(call: Callable[[], Any]) -> Any:
    """``call()``, or None when EKS answers that what it names does not exist."""
    try:
        return call()
    except Exception as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return None
        raise


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
        eks = engine.aws.client("eks")
        entry: dict[str, Any] | None = unless_gone(
            lambda: eks.describe_access_entry(clusterName=engine.cluster, principalArn=principal)[
                "accessEntry"
            ]
        )
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
                tags=engine.tags_for(node.id),
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
            if entry is not None and ours(engine, entry.get("tags")):
                out.append(Found(self.name, entry["tags"].get(RESOURCE_TAG, "?"), principal))
        return out

    def delete(self, engine: Engine, found: Found) -> None:
        eks = engine.aws.client("eks")
        unless_gone(
            lambda: eks.delete_access_entry(clusterName=engine.cluster, principalArn=found.id)
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
