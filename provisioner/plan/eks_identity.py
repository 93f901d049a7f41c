"""EKS Pod Identity associations as a kind of the plan: a service account of the cluster
assumes one of fmctl's roles (Prometheus remote-writing to Amazon Managed Service for
Prometheus). The EKS Pod Identity Agent add-on hands the role's credentials to the pods."""

from __future__ import annotations

from typing import Any

from provisioner.plan.context import RESOURCE_TAG, Engine
from provisioner.plan.eks import EksCluster, created_or_found, ours, unless_gone
from provisioner.plan.graph import Found, Node, Outputs


class PodIdentity:
    """One association: ``namespace``/``service_account`` -> the role ``role`` (a plan node)."""

    name = "eks-pod-identity"
    after: tuple[str, ...] = ("eks-cluster", "iam-role", "eks-addon")
    create_seconds, delete_seconds = 2.0, 2.0

    def _describe(self, engine: Engine, association: str) -> dict[str, Any] | None:
        eks = engine.aws.client("eks")
        item: dict[str, Any] | None = unless_gone(
            lambda: eks.describe_pod_identity_association(
                clusterName=engine.cluster, associationId=association
            )["association"]
        )
        return item

    def _listed(self, engine: Engine, **where: str) -> list[dict[str, Any]]:
        eks = engine.aws.client("eks")
        return list(
            eks.list_pod_identity_associations(clusterName=engine.cluster, **where)["associations"]
        )

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        namespace, account = node.params["namespace"], node.params["service_account"]
        for summary in self._listed(engine, namespace=namespace, serviceAccount=account):
            item = self._describe(engine, summary["associationId"])
            if item is None:
                continue
            if not ours(engine, item.get("tags")):
                raise RuntimeError(
                    f"service account {namespace}/{account} of {engine.cluster} already has a "
                    f"Pod Identity association fmctl did not make ({item['associationId']}); "
                    "delete it or let fmctl's Prometheus go without remote write"
                )
            role = str(engine.output(node.params["role"], "arn"))
            if item["roleArn"] != role:  # changed by hand: point it back at fmctl's role
                engine.aws.client("eks").update_pod_identity_association(
                    clusterName=engine.cluster, associationId=item["associationId"], roleArn=role
                )
            return {"id": item["associationId"]}
        return None

    def create(self, engine: Engine, node: Node) -> Outputs:
        eks = engine.aws.client("eks")

        def create() -> Outputs:
            item = eks.create_pod_identity_association(
                clusterName=engine.cluster,
                namespace=node.params["namespace"],
                serviceAccount=node.params["service_account"],
                roleArn=str(engine.output(node.params["role"], "arn")),
                tags=engine.tags_for(node.id),
                clientRequestToken=engine.token(node.id),
            )["association"]
            return {"id": item["associationId"]}

        return created_or_found(create, lambda: self.discover(engine, node))

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        return outputs

    def find_all(self, engine: Engine) -> list[Found]:
        if not EksCluster().find_all(engine):
            return []
        out = []
        for summary in self._listed(engine):
            item = self._describe(engine, summary["associationId"])
            if item is not None and ours(engine, item.get("tags")):
                tag = item["tags"].get(RESOURCE_TAG, "?")
                out.append(Found(self.name, tag, item["associationId"]))
        return out

    def delete(self, engine: Engine, found: Found) -> None:
        eks = engine.aws.client("eks")
        unless_gone(
            lambda: eks.delete_pod_identity_association(
                clusterName=engine.cluster, associationId=found.id
            )
        )
