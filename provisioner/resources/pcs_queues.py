"""AWS PCS queues (Slurm partitions), one per GPU pool, on its node group
(``resources.pcs_nodes``); see ``resources.pcs``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.graph.ref import UNKNOWN, Ref
from provisioner.resources.base import (
    FieldChange,
    How,
    Kind,
    Observed,
    Owned,
    Policy,
    Request,
    policies,
)
from provisioner.resources.context import Context, DrainSettings
from provisioner.resources.errors import ResourceError
from provisioner.resources.pcs import NodeGroupOut, PcsClusterOut, children, split_id
from provisioner.resources.pcs_api import (
    FAILED,
    client,
    digest,
    errors_of,
    patiently,
    retag,
    tags_of,
    unless_gone,
)
from provisioner.resources.pcs_drain import drain_group, group_note
from provisioner.resources.tags import (
    CREATED_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
)


# -- queues --------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueOut:
    """A queue by id."""

    id: str


@dataclass(frozen=True)
class QueueParams:
    """CreateQueue, as ``render`` writes it in pcs/queues/NAME.json."""

    cluster: Ref[PcsClusterOut]
    queue_name: str
    node_groups: tuple[Ref[NodeGroupOut], ...]
    tags: DesiredTags


@dataclass(frozen=True)
class QueueLive:
    """What fmctl manages of a queue."""

    node_groups: Any
    tags: Tags


class PcsQueue(Kind[QueueParams, QueueOut, QueueLive]):
    """A queue (Slurm partition) on its pool's node group."""

    name, params, outputs = "pcs-queue", QueueParams, QueueOut
    create_seconds, update_seconds, delete_seconds = 30.0, 30.0, 30.0
    policy = policies(
        node_groups=Policy(How.UPDATE, "UpdateQueue computeNodeGroupConfigurations"),
    )

    def queues(self, ctx: Context) -> list[dict[str, Any]]:
        return children(ctx, "pcs:queues", "list_queues", "queues", "get_queue", "queueIdentifier")

    def read(self, req: Request[QueueParams]) -> Observed[QueueOut, QueueLive] | None:
        mine = [
            q
            for q in self.queues(req.ctx)
            if tags_of(req.ctx, q["arn"]).get(RESOURCE_TAG) == req.rid and q["status"] != "DELETING"
        ]
        if not mine:
            return None
        q = mine[0]
        if q["status"] in FAILED:
            raise ResourceError(f"PCS queue {q['name']} is {q['status']}: {errors_of(q)}")
        live = QueueLive(
            frozenset(
                c.get("computeNodeGroupId") for c in q.get("computeNodeGroupConfigurations") or []
            ),
            tags_of(req.ctx, q["arn"]),
        )
        pending = None if q["status"] == "ACTIVE" else str(q["status"])
        return Observed(QueueOut(str(q["id"])), live, f"{q['clusterId']}/{q['id']}", pending)

    def desired(
        self, req: Request[QueueParams], observed: Observed[QueueOut, QueueLive]
    ) -> QueueLive:
        groups = (
            frozenset(req.ctx.resolve(g) for g in req.params.node_groups)
            if all(req.ctx.known(g) for g in req.params.node_groups)
            else UNKNOWN
        )
        return QueueLive(groups, req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)))

    def _configs(self, ctx: Context, params: QueueParams) -> list[dict[str, str]]:
        return [{"computeNodeGroupId": ctx.get(g).id} for g in params.node_groups]

    def create(self, req: Request[QueueParams]) -> QueueOut:
        pcs = client(req.ctx)
        cluster = req.ctx.get(req.params.cluster).id
        request = {
            "clusterIdentifier": cluster,
            "queueName": req.params.queue_name,
            "computeNodeGroupConfigurations": self._configs(req.ctx, req.params),
            "clientToken": req.ctx.token(f"{req.rid}/{cluster}"),
            "tags": req.params.tags.at_creation(),
        }
        item = patiently(
            req.ctx,
            req.rid,
            f"queue {req.params.queue_name}",
            lambda: pcs.create_queue(**request)["queue"],
        )
        return self._active(req.ctx, req.rid, cluster, str(item["id"]), self.create_seconds)

    def _active(
        self, ctx: Context, rid: str, cluster: str, queue: str, expected: float
    ) -> QueueOut:
        pcs = client(ctx)

        def probe() -> QueueOut | None:
            q = unless_gone(
                lambda: pcs.get_queue(clusterIdentifier=cluster, queueIdentifier=queue)["queue"]
            )
            if q is None:
                raise ResourceError(f"PCS queue {queue} disappeared while being made")
            if q["status"] in FAILED:
                raise ResourceError(f"PCS queue {q['name']} is {q['status']}: {errors_of(q)}")
            return QueueOut(queue) if q["status"] == "ACTIVE" else None

        ctx.forget("pcs:queues")
        return ctx.wait_until(f"PCS queue {queue} to be ACTIVE", probe, expected, 3600, rid)

    def wait(self, req: Request[QueueParams], observed: Observed[QueueOut, QueueLive]) -> QueueOut:
        cluster = req.ctx.get(req.params.cluster).id
        return self._active(req.ctx, req.rid, cluster, observed.outputs.id, self.create_seconds)

    def update(
        self,
        req: Request[QueueParams],
        observed: Observed[QueueOut, QueueLive],
        changes: Sequence[FieldChange],
    ) -> QueueOut:
        cluster = req.ctx.get(req.params.cluster).id
        queue = observed.outputs.id
        pcs = client(req.ctx)
        if any(c.path == "node_groups" for c in changes):
            req.ctx.emit(req.rid, "updating", "node groups")
            configs = self._configs(req.ctx, req.params)
            patiently(
                req.ctx,
                req.rid,
                f"the update of queue {queue}",
                lambda: pcs.update_queue(
                    clusterIdentifier=cluster,
                    queueIdentifier=queue,
                    computeNodeGroupConfigurations=configs,
                    clientToken=req.ctx.token(f"{req.rid}/update/{queue}/{digest(configs)}"),
                ),
            )
            self._active(req.ctx, req.rid, cluster, queue, self.update_seconds)
        q = unless_gone(
            lambda: pcs.get_queue(clusterIdentifier=cluster, queueIdentifier=queue)["queue"]
        )
        if q is not None:
            retag(req.ctx, str(q["arn"]), changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(
                tags_of(ctx, q["arn"]).get(RESOURCE_TAG) or "?", f"{q['clusterId']}/{q['id']}"
            )
            for q in self.queues(ctx)
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        pcs = client(ctx)
        cluster, queue = split_id(ctx, owned)
        if cluster is None:
            return
        patiently(
            ctx,
            owned.resource,
            f"the deletion of queue {queue}",
            lambda: unless_gone(
                lambda: pcs.delete_queue(
                    clusterIdentifier=cluster,
                    queueIdentifier=queue,
                    clientToken=ctx.token(f"{owned.resource}/delete/{cluster}/{queue}"),
                )
            ),
        )

        def absent() -> bool | None:
            q = unless_gone(lambda: pcs.get_queue(clusterIdentifier=cluster, queueIdentifier=queue))
            return True if q is None else None

        ctx.wait_until(
            f"PCS queue {queue} to be deleted", absent, self.delete_seconds, 3600, owned.resource
        )
        ctx.forget("pcs:queues")

    def before_delete(self, ctx: Context, owned: Owned) -> None:
        cluster, queue = split_id(ctx, owned)
        if cluster is not None and ctx.drain is not None:
            # `up` takes the pool away: its jobs leave before the partition does.
            self._drain(ctx, owned, cluster, queue, ctx.drain)

    def displaces(self, ctx: Context, owned: Owned) -> str | None:
        """The queue's Slurm nodes, which `up` drains before the partition goes."""
        cluster, queue = split_id(ctx, owned)
        if cluster is None:
            return None
        q = unless_gone(
            lambda: client(ctx).get_queue(clusterIdentifier=cluster, queueIdentifier=queue)
        )
        groups = ((q or {}).get("queue") or {}).get("computeNodeGroupConfigurations") or []
        notes = [
            group_note(
                ctx, Owned("pcs-node-group", owned.resource, f"{cluster}/{g['computeNodeGroupId']}")
            )
            for g in groups
            if g.get("computeNodeGroupId")
        ]
        return "; ".join(n for n in notes if n) or None

    def _drain(
        self, ctx: Context, owned: Owned, cluster: str, queue: str, settings: DrainSettings
    ) -> None:
        """Every node group of the queue drained: deleting the partition would end what
        runs there."""
        q = unless_gone(
            lambda: client(ctx).get_queue(clusterIdentifier=cluster, queueIdentifier=queue)
        )
        for config in ((q or {}).get("queue") or {}).get("computeNodeGroupConfigurations") or []:
            group = config.get("computeNodeGroupId")
            if group:
                drain_group(ctx, owned.resource, cluster, str(group), settings)
