"""The compute side of an EKS cluster as kinds of the plan: launch templates, managed node
groups and add-ons, each from what ``render`` wrote under ``aws/`` (see ``plan.eks``)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from provisioner.drivers.aws import error_code
from provisioner.drivers.ec2_base import Ec2Kind, is_gone
from provisioner.plan.context import RESOURCE_TAG, Engine
from provisioner.plan.eks import (
    EksCluster,
    EksFailed,
    created_or_found,
    filled,
    issues,
    ours,
    unless_gone,
)
from provisioner.plan.graph import Found, Node, Outputs


class ClusterPart:
    """What node groups and add-ons share: looked up by name in the cluster, waited for until
    ACTIVE, found by their tags, deleted and waited for. ``api`` is (resource, name
    parameter, list key) in EKS's API: describe_RESOURCE / list_LISTKEY / delete_RESOURCE."""

    name = ""
    api: tuple[str, str, str] = ("", "", "")
    what = ""
    create_seconds = 0.0
    delete_seconds = 0.0
    delete_timeout = 0.0

    def _describe(self, engine: Engine, part: str) -> dict[str, Any] | None:
        resource, key, _ = self.api
        describe = getattr(engine.aws.client("eks"), f"describe_{resource}")
        item: dict[str, Any] | None = unless_gone(
            lambda: describe(clusterName=engine.cluster, **{key: part})[resource]
        )
        return item

    def _wait_active(
        self,
        engine: Engine,
        node: Node,
        part: str,
        outputs: Callable[[dict[str, Any]], Outputs],
        timeout: float,
    ) -> Outputs:
        """Wait until ``part`` is ACTIVE (its ``outputs`` then); failed or gone is an error."""

        def probe() -> Outputs | None:
            item = self._describe(engine, part)
            if item is None:
                raise EksFailed(f"{self.what} {part} disappeared while creating")
            if item["status"] in ("CREATE_FAILED", "DEGRADED"):
                raise EksFailed(f"{self.what} {part} is {item['status']}: {issues(item)}")
            return outputs(item) if item["status"] == "ACTIVE" else None

        result: Outputs = engine.wait_until(
            f"{self.what} {part} to be ACTIVE", probe, self.create_seconds, timeout, node.id
        )
        return result

    def find_all(self, engine: Engine) -> list[Found]:
        """The cluster's parts carrying its tag (none when the cluster is not fmctl's)."""
        if not EksCluster().find_all(engine):
            return []
        listed = getattr(engine.aws.client("eks"), f"list_{self.api[2]}")(
            clusterName=engine.cluster
        )[self.api[2]]
        out = []
        for part in listed:
            item = self._describe(engine, part)
            if item is not None and ours(engine, item.get("tags")):
                out.append(Found(self.name, item["tags"].get(RESOURCE_TAG, "?"), part))
        return out

    def delete(self, engine: Engine, found: Found) -> None:
        """Delete it and wait until EKS no longer knows it."""
        resource, key, _ = self.api
        try:
            getattr(engine.aws.client("eks"), f"delete_{resource}")(
                clusterName=engine.cluster, **{key: found.id}
            )
        except Exception as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return
            raise
        engine.wait_until(
            f"{self.what} {found.id} to be deleted",
            lambda: True if self._describe(engine, found.id) is None else None,
            self.delete_seconds,
            self.delete_timeout,
            found.logical_id,
        )


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


class Nodegroup(ClusterPart):
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
    api, what, delete_timeout = ("nodegroup", "nodegroupName", "nodegroups"), "node group", 3600

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        ng = self._describe(engine, node.params["group"])
        if ng is None:
            return None
        if not ours(engine, ng.get("tags")):
            raise RuntimeError(f"node group {node.params['group']} exists and is not fmctl's")
        if ng["status"] in ("CREATE_FAILED", "DELETING", "DELETE_FAILED"):
            raise EksFailed(
                f"node group {node.params['group']} is {ng['status']}: {issues(ng)}; "
                f"`fmctl down {engine.cluster}` and `fmctl up` again"
            )
        return {"id": ng["nodegroupName"], "status": ng["status"]}

    def create(self, engine: Engine, node: Node) -> Outputs:
        data = filled(engine, node.params["text"])
        data["tags"] = engine.tags_for(node.id)
        eks = engine.aws.client("eks")

        def create() -> Outputs:
            ng = eks.create_nodegroup(**data, clientRequestToken=engine.token(node.id))
            return {"id": ng["nodegroup"]["nodegroupName"], "status": ng["nodegroup"]["status"]}

        return created_or_found(create, lambda: self.discover(engine, node))

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        group = node.params["group"]
        return self._wait_active(
            engine,
            node,
            group,
            lambda ng: {
                "id": group,
                "status": "ACTIVE",
                "desired": ng["scalingConfig"]["desiredSize"],
            },
            3600,
        )


class Addon(ClusterPart):
    """A managed add-on, made once nodes exist (an add-on with pods and no node to run them
    goes DEGRADED), at the version pinned in the spec or the default for the cluster."""

    name = "eks-addon"
    after: tuple[str, ...] = ("eks-cluster", "iam-role")
    create_seconds, delete_seconds = 60.0, 30.0
    api, what, delete_timeout = ("addon", "addonName", "addons"), "add-on", 1200

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
                tags=engine.tags_for(node.id),
                clientRequestToken=engine.token(node.id),
                **extra,
            )
        except Exception as exc:
            if error_code(exc) != "ResourceInUseException":
                raise
        return {"id": addon, "version": version}

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        addon = node.params["addon"]
        return self._wait_active(
            engine, node, addon, lambda item: {"id": addon, "version": item["addonVersion"]}, 1200
        )
