"""The EKS control plane and what hangs on it directly: the secrets key, access entries and
Pod Identity associations.

What may change in place is EKS's (Amazon EKS API Reference: UpdateClusterVersion,
UpdateClusterConfig, TagResource): the Kubernetes version, one minor version at a time and
never down; endpoint access and its CIDRs; control-plane logging; the upgrade policy. The
cluster's role, its secrets key and (in fmctl) its subnets are fixed: changing them means a
new cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

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
from provisioner.resources.compute import SgOut
from provisioner.resources.context import Context
from provisioner.resources.eks_api import created_or_found, eks_retag, health, unless_gone
from provisioner.resources.eks_upgrade import catch_up
from provisioner.resources.eks_upgrade import minor as _minor
from provisioner.resources.errors import Foreign, ResourceError
from provisioner.resources.iam import RoleOut
from provisioner.resources.kms import KmsOut
from provisioner.resources.logs import LogGroupOut
from provisioner.resources.network import SubnetOut
from provisioner.resources.tags import (
    CREATED_TAG,
    OWNER_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
)

if TYPE_CHECKING:
    from types_boto3_eks.type_defs import (
        ClusterTypeDef,
        CreateClusterRequestTypeDef,
        VpcConfigRequestTypeDef,
    )


# -- the control plane -------------------------------------------------------------------
# EKS's names (its CreateCluster model); the params' fields are read at run time (the graph's
# references), so these are defined here rather than taken from the stubs, and mypy checks
# them against the stubs' at the call.
ControlPlaneLog = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]
AuthenticationMode = Literal["API", "API_AND_CONFIG_MAP", "CONFIG_MAP"]
SupportType = Literal["STANDARD", "EXTENDED"]


@dataclass(frozen=True)
class EksOut:
    """The control plane: name, ARN, endpoint, CA and version."""

    id: str
    arn: str
    endpoint: str
    ca: str
    version: str


@dataclass(frozen=True)
class EksParams:
    """The EKS control plane, as ``render`` writes it in aws/eks-cluster.yaml."""

    cluster_name: str
    version: str
    role: Ref[RoleOut]
    subnets: tuple[Ref[SubnetOut], ...]
    security_groups: tuple[Ref[SgOut], ...]
    endpoint_private: bool
    endpoint_public: bool
    public_cidrs: tuple[str, ...]
    logging: tuple[ControlPlaneLog, ...]
    #: The key fmctl made, or the ARN of the spec's (kubernetes.secretsKeyArn).
    key: Ref[KmsOut] | str
    authentication_mode: AuthenticationMode
    support_type: SupportType
    tags: DesiredTags
    #: The group the enabled log types go to, made before the cluster, deleted after it.
    log_group: Ref[LogGroupOut] | None = None


@dataclass(frozen=True)
class EksLive:
    """What fmctl manages of the control plane."""

    version: str
    role: Any
    subnets: Any
    security_groups: Any
    endpoint_private: bool
    endpoint_public: bool
    public_cidrs: Any
    logging: Any
    key: Any
    authentication_mode: str
    support_type: str
    tags: Tags


class EksCluster(Kind[EksParams, EksOut, EksLive]):
    """The EKS control plane."""

    name, params, outputs = "eks-cluster", EksParams, EksOut
    create_seconds, update_seconds, delete_seconds = 600.0, 600.0, 300.0
    policy = policies(
        version=Policy(How.UPDATE, "UpdateClusterVersion, one minor version at a time"),
        role=Policy(How.REPLACE, "a cluster's IAM role is fixed at creation"),
        subnets=Policy(How.REPLACE, "fmctl keeps a control plane in the subnets it made it in"),
        security_groups=Policy(
            How.REPLACE, "fmctl keeps a control plane's security groups as made"
        ),
        endpoint_private=Policy(How.UPDATE, "UpdateClusterConfig resourcesVpcConfig"),
        endpoint_public=Policy(How.UPDATE, "UpdateClusterConfig resourcesVpcConfig"),
        public_cidrs=Policy(How.UPDATE, "UpdateClusterConfig resourcesVpcConfig"),
        logging=Policy(How.UPDATE, "UpdateClusterConfig logging"),
        key=Policy(
            How.IMMUTABLE,
            "secrets encryption cannot be turned off or moved to another key once on",
        ),
        authentication_mode=Policy(How.UPDATE, "UpdateClusterConfig accessConfig"),
        support_type=Policy(How.UPDATE, "UpdateClusterConfig upgradePolicy"),
    )

    def describe(self, ctx: Context) -> ClusterTypeDef | None:
        """The cluster as EKS describes it, or None."""
        eks = ctx.aws.client("eks")
        return unless_gone(lambda: eks.describe_cluster(name=ctx.cluster)["cluster"])

    def _described(self, ctx: Context) -> ClusterTypeDef | None:
        return ctx.cached("eks:cluster", lambda: self.describe(ctx))

    @staticmethod
    def out_of(c: Mapping[str, Any]) -> EksOut:
        """The outputs of a described cluster."""
        return EksOut(
            c["name"],
            c["arn"],
            c.get("endpoint", ""),
            (c.get("certificateAuthority") or {}).get("data", ""),
            c.get("version", ""),
        )

    def read(self, req: Request[EksParams]) -> Observed[EksOut, EksLive] | None:
        c = self._described(req.ctx)
        if c is None:
            return None
        tags = Tags.of(c.get("tags") or {})
        if tags.get(OWNER_TAG) != req.ctx.cluster:
            raise Foreign(
                f"an EKS cluster named {req.ctx.cluster} exists and is not fmctl's (no "
                "fmctl.dev/cluster tag): fmctl will not take it over",
                hint="pick another cluster name",
            )
        if c["status"] in ("FAILED", "DELETING"):
            raise ResourceError(
                f"EKS cluster {req.ctx.cluster} is {c['status']}",
                hint=f"`fmctl down {req.ctx.cluster}` and `fmctl up` again",
            )
        vpc = c.get("resourcesVpcConfig", {})
        logging = frozenset(
            t
            for entry in (c.get("logging") or {}).get("clusterLogging", [])
            if entry.get("enabled")
            for t in entry.get("types", [])
        )
        keys = [e["provider"]["keyArn"] for e in c.get("encryptionConfig") or []]
        live = EksLive(
            str(c.get("version", "")),
            c.get("roleArn"),
            frozenset(vpc.get("subnetIds", [])),
            frozenset(vpc.get("securityGroupIds", [])),
            bool(vpc.get("endpointPrivateAccess")),
            bool(vpc.get("endpointPublicAccess")),
            frozenset(vpc.get("publicAccessCidrs", []))
            if vpc.get("endpointPublicAccess")
            else (frozenset()),
            logging,
            keys[0] if keys else None,
            str((c.get("accessConfig") or {}).get("authenticationMode", "")),
            str((c.get("upgradePolicy") or {}).get("supportType", "STANDARD")),
            tags,
        )
        pending = None if c["status"] == "ACTIVE" else str(c["status"])
        return Observed(self.out_of(c), live, c["name"], pending)

    def desired(self, req: Request[EksParams], observed: Observed[EksOut, EksLive]) -> EksLive:
        key = (
            req.params.key
            if isinstance(req.params.key, str)
            else req.ctx.resolve(req.params.key, "arn")
        )
        return EksLive(
            req.params.version,
            req.ctx.resolve(req.params.role, "arn"),
            frozenset(req.ctx.resolve(s) for s in req.params.subnets)
            if all(req.ctx.known(s) for s in req.params.subnets)
            else UNKNOWN,
            frozenset(req.ctx.resolve(g) for g in req.params.security_groups)
            if all(req.ctx.known(g) for g in req.params.security_groups)
            else UNKNOWN,
            req.params.endpoint_private,
            req.params.endpoint_public,
            frozenset(req.params.public_cidrs) if req.params.endpoint_public else frozenset(),
            frozenset(req.params.logging),
            key,
            req.params.authentication_mode,
            req.params.support_type,
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def diff(
        self, req: Request[EksParams], observed: Observed[EksOut, EksLive]
    ) -> list[FieldChange]:
        out = []
        for change in super().diff(req, observed):
            if change.path == "version" and _minor(change.after) < _minor(change.before):
                change = FieldChange(
                    change.path,
                    change.before,
                    change.after,
                    How.IMMUTABLE,
                    "EKS cannot downgrade a cluster's Kubernetes version",
                )
            elif change.path == "version":
                steps = self.steps(change.before, change.after)
                change = FieldChange(
                    change.path,
                    change.before,
                    change.after,
                    How.UPDATE,
                    f"UpdateClusterVersion, one minor version at a time: {' -> '.join(steps)}"
                    + (
                        "; at each minor the node groups and add-ons follow before the next"
                        if len(steps) > 2
                        else ""
                    ),
                )
            out.append(change)
        return out

    @staticmethod
    def steps(current: str, target: str) -> list[str]:
        """The versions an upgrade goes through, one minor at a time."""
        major, minor = _minor(current)
        _, last = _minor(target)
        return [f"{major}.{m}" for m in range(minor, last + 1)]

    def create(self, req: Request[EksParams]) -> EksOut:
        eks = req.ctx.aws.client("eks")
        key = req.params.key if isinstance(req.params.key, str) else req.ctx.get(req.params.key).arn
        vpc: VpcConfigRequestTypeDef = {
            "subnetIds": [req.ctx.get(s).id for s in req.params.subnets],
            "securityGroupIds": [req.ctx.get(g).id for g in req.params.security_groups],
            "endpointPrivateAccess": req.params.endpoint_private,
            "endpointPublicAccess": req.params.endpoint_public,
        }
        if req.params.endpoint_public:
            vpc["publicAccessCidrs"] = list(req.params.public_cidrs)
        request: CreateClusterRequestTypeDef = {
            "name": req.params.cluster_name,
            "version": req.params.version,
            "roleArn": req.ctx.get(req.params.role).arn,
            "resourcesVpcConfig": vpc,
            "accessConfig": {
                "authenticationMode": req.params.authentication_mode,
                "bootstrapClusterCreatorAdminPermissions": True,
            },
            "logging": {"clusterLogging": [{"types": list(req.params.logging), "enabled": True}]},
            "encryptionConfig": [{"resources": ["secrets"], "provider": {"keyArn": key}}],
            "upgradePolicy": {"supportType": req.params.support_type},
            "tags": req.params.tags.at_creation(),
        }

        def again() -> EksOut | None:
            req.ctx.forget("eks:cluster")
            found = self.read(req)
            return found.outputs if found else None

        request["clientRequestToken"] = req.ctx.token(req.rid)
        created_or_found(lambda: eks.create_cluster(**request), again)
        return self._active(req.ctx, req.rid, self.create_seconds, "ACTIVE")

    def _active(self, ctx: Context, rid: str, expected: float, what: str) -> EksOut:
        def probe() -> EksOut | None:
            c = self.describe(ctx)
            if c is None:
                raise ResourceError(f"EKS cluster {ctx.cluster} disappeared while {what}")
            if c["status"] == "FAILED":
                raise ResourceError(f"EKS cluster {ctx.cluster} FAILED: {health(c)}")
            return self.out_of(c) if c["status"] == "ACTIVE" else None

        return ctx.wait_until(f"EKS cluster {ctx.cluster} to be {what}", probe, expected, 1800, rid)

    def wait(self, req: Request[EksParams], observed: Observed[EksOut, EksLive]) -> EksOut:
        return self._active(req.ctx, req.rid, self.create_seconds, "ACTIVE")

    def update(
        self,
        req: Request[EksParams],
        observed: Observed[EksOut, EksLive],
        changes: Sequence[FieldChange],
    ) -> EksOut:
        paths = {c.path for c in changes}
        out = observed.outputs
        if paths & {"endpoint_private", "endpoint_public", "public_cidrs"}:
            vpc: dict[str, Any] = {
                "endpointPrivateAccess": req.params.endpoint_private,
                "endpointPublicAccess": req.params.endpoint_public,
            }
            if req.params.endpoint_public:
                vpc["publicAccessCidrs"] = list(req.params.public_cidrs)
            self._config(req.ctx, req.rid, resourcesVpcConfig=vpc)
        if "logging" in paths:
            self._config(
                req.ctx,
                req.rid,
                logging={"clusterLogging": [{"types": list(req.params.logging), "enabled": True}]},
            )
        if "authentication_mode" in paths:
            self._config(
                req.ctx,
                req.rid,
                accessConfig={"authenticationMode": req.params.authentication_mode},
            )
        if "support_type" in paths:
            self._config(req.ctx, req.rid, upgradePolicy={"supportType": req.params.support_type})
        if "version" in paths:
            out = self._upgrade(req.ctx, req.rid, req.params.version)
        eks_retag(req.ctx, observed.outputs.arn, changes)
        return self._active(req.ctx, req.rid, 5.0, "ACTIVE") if paths - {"tags"} else out

    def _config(self, ctx: Context, rid: str, **change: Any) -> None:
        eks = ctx.aws.client("eks")
        eks.update_cluster_config(name=ctx.cluster, **change)
        ctx.emit(rid, "updating", ", ".join(sorted(change)))
        self._active(ctx, rid, 60.0, "updated")

    def _upgrade(self, ctx: Context, rid: str, target: str) -> EksOut:
        """One minor version at a time, from whatever the cluster runs now (a run stopped
        halfway resumes where it was)."""
        eks = ctx.aws.client("eks")
        out = self._active(ctx, rid, 5.0, "ACTIVE")
        while _minor(out.version) < _minor(target):
            major, minor = _minor(out.version)
            step = f"{major}.{minor + 1}"
            # EKS refuses the step while a node group lags the control plane (a run that
            # upgraded two minors before this one, or was killed between its steps).
            catch_up(ctx, rid, out.version)
            ctx.emit(rid, "updating", f"Kubernetes {out.version} -> {step}")
            eks.update_cluster_version(
                name=ctx.cluster, version=step, clientRequestToken=ctx.token(f"{rid}/{step}")
            )
            out = self._active(ctx, rid, self.update_seconds, f"running {step}")
        return out

    def find_owned(self, ctx: Context) -> list[Owned]:
        c = self._described(ctx)
        if c is None or (c.get("tags") or {}).get(OWNER_TAG) != ctx.cluster:
            return []
        return [self.owned_item((c.get("tags") or {}).get(RESOURCE_TAG, "eks"), c["name"])]

    def delete(self, ctx: Context, owned: Owned) -> None:
        eks = ctx.aws.client("eks")
        if unless_gone(lambda: eks.delete_cluster(name=owned.id)) is None:
            return
        ctx.wait_until(
            f"EKS cluster {owned.id} to be deleted",
            lambda: True if self.describe(ctx) is None else None,
            self.delete_seconds,
            1800,
            owned.resource,
        )


def cluster_ours(ctx: Context) -> bool:
    """True when the cluster's EKS control plane exists and is fmctl's (its parts can only
    be listed through it)."""
    c = EksCluster()._described(ctx)
    return c is not None and (c.get("tags") or {}).get(OWNER_TAG) == ctx.cluster
