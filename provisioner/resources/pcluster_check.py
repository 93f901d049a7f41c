"""ParallelCluster's validators as a resource of the plan, run as early as they can be, and
what the cluster's config is filled from (shared with the cluster kind)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.drivers.pcluster import ParallelCluster, PclusterError
from provisioner.graph.ref import Ref
from provisioner.render.placeholders import fill
from provisioner.resources.base import Check, Request
from provisioner.resources.compute import PlacementGroupOut, SgOut
from provisioner.resources.context import Context
from provisioner.resources.iam import PolicyOut
from provisioner.resources.network import SubnetOut, VpcOut
from provisioner.resources.routes import EndpointOut, RouteTableOut
from provisioner.resources.storage import ArtifactsOut, BucketOut

#: Validators fmctl suppresses when the AWS behind the run is the sandbox's emulator, because
#: moto's answers break them, not the config. Everything else runs.
SANDBOX_SUPPRESSED = (
    # Checks KeyName with DescribeKeyPairs; without one it warns, and a key pair a user names
    # exists in their account, never in the emulator.
    "KeyPairValidator",
    # Both call RunInstances with DryRun=True on the whole launch specification; moto answers
    # "The request must contain the parameter ebs" where EC2 answers DryRunOperation.
    "HeadNodeLaunchTemplateValidator",
    "ComputeResourceLaunchTemplateValidator",
)


@dataclass(frozen=True)
class ConfigRefs:
    """What a rendered ParallelCluster config's placeholders are filled from."""

    vpc: Ref[VpcOut]
    private_subnet: Ref[SubnetOut]
    public_subnet: Ref[SubnetOut]
    efa_group: Ref[SgOut]
    bucket: Ref[BucketOut]
    artifacts: Ref[ArtifactsOut]
    placement_groups: tuple[Ref[PlacementGroupOut], ...] = ()
    amp_policy: Ref[PolicyOut] | None = None
    #: The way out: head and compute nodes download at bootstrap.
    routes: tuple[Ref[RouteTableOut], ...] = ()
    endpoint: Ref[EndpointOut] | None = None


def config_values(ctx: Context, refs: ConfigRefs, fsx: Ref[Any] | None) -> dict[str, Any]:
    """Placeholder -> value (``UNKNOWN`` for what is not made yet)."""
    values = {
        "privateSubnetId": ctx.resolve(refs.private_subnet),
        "publicSubnetId": ctx.resolve(refs.public_subnet),
        "efaSecurityGroupId": ctx.resolve(refs.efa_group),
        "artifactBucket": ctx.resolve(refs.bucket),
        "vpcCidr": ctx.resolve(refs.vpc, "cidr"),
    }
    if refs.amp_policy is not None:
        values["ampWritePolicyArn"] = ctx.resolve(refs.amp_policy, "arn")
    if fsx is not None:
        values["fileSystemId"] = ctx.resolve(fsx)
    return values


def pcluster(ctx: Context) -> ParallelCluster:
    if not ctx.pcluster:
        raise PclusterError(
            "ParallelCluster's `pcluster` command was not found; run "
            "`fmctl setup parallelcluster` or put pcluster on PATH"
        )
    return ParallelCluster(ctx.pcluster, ctx.region, env=ctx.aws.child_env())


def write_config(path: str, text: str) -> Path:
    config = Path(path)
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text)
    return config


def validate_config(ctx: Context, config: Path) -> str:
    """Run ParallelCluster's validators on ``config``; raise with their messages if they
    refuse it. Returns the warnings, for the log."""
    suppress = SANDBOX_SUPPRESSED if ctx.aws.sandbox else ()
    dry = pcluster(ctx).dryrun(ctx.cluster, config, suppress)
    if not dry.ok:
        detail = "; ".join(f"{m.type}: {m.message}" for m in dry.messages if m.level == "ERROR")
        raise PclusterError(
            f"ParallelCluster's validators refused the config ({config}): {detail or dry.error}"
        )
    return "; ".join(f"{m.type}: {m.message}" for m in dry.messages)


@dataclass(frozen=True)
class CheckOut:
    """The early validation: accepted (or the cluster exists already)."""

    id: str


@dataclass(frozen=True)
class CheckParams:
    """ParallelCluster's validators on the config with ParallelCluster's own FSx settings
    (the file system does not exist yet when they run)."""

    config: str
    config_path: str
    refs: ConfigRefs


class ParallelClusterCheck(Check[CheckParams, CheckOut]):
    """ParallelCluster's validators, as early as they can run: once the network, security
    groups, placement groups and artifact bucket exist (seconds, no cost) and before the
    file system and the cluster (tens of minutes, billed).

    It cannot run before anything exists: loading a config, ParallelCluster looks its
    subnets up (DescribeSubnets) and refuses one that does not exist, so stand-in ids fail.
    """

    name, params, outputs = "parallelcluster-check", CheckParams, CheckOut
    create_seconds = 5.0

    def passed(self, req: Request[CheckParams]) -> tuple[CheckOut, str] | None:
        """Once the cluster exists, ParallelCluster has validated its config already."""
        if described(req.ctx) is not None:
            return CheckOut("cluster exists"), req.ctx.cluster
        return None

    def run(self, req: Request[CheckParams]) -> CheckOut:
        text = fill(req.params.config, config_values(req.ctx, req.params.refs, None))
        warnings = validate_config(req.ctx, write_config(req.params.config_path, text))
        if warnings:
            req.ctx.emit(req.rid, "note", f"ParallelCluster warns: {warnings}")
        return CheckOut("accepted")


def described(ctx: Context) -> dict[str, Any] | None:
    return ctx.cached("pcluster:describe", lambda: pcluster(ctx).describe(ctx.cluster))
