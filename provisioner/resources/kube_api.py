"""The way into an EKS cluster's Kubernetes API that every kind shares."""

from __future__ import annotations

from provisioner.drivers.kube import KubeApi, KubeClient
from provisioner.resources.context import Context


def connect(ctx: Context, endpoint: str, ca: str) -> KubeApi:
    """The cluster's API, authenticated with a fresh EKS token (never written down), as
    read-only and fenced as the run's AWS clients are."""
    from provisioner.drivers.eks_auth import token

    return KubeClient.for_eks(
        endpoint,
        ca,
        lambda: token(ctx.aws, ctx.cluster),
        read_only=ctx.aws.read_only,
        fence=ctx.aws.fence,
    )


def close(api: KubeApi) -> None:
    """Release the client's connections and CA file (a test's double may have none)."""
    release = getattr(api, "close", None)
    if release is not None:
        release()
