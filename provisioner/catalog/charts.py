"""The upstream Helm charts fmctl installs on EKS, pinned: where a real install pulls each
from, the Kubernetes versions it runs on, and the image it runs, each with its source.

- Kueue 0.19.2: the chart is published at ``oci://registry.k8s.io/kueue/charts/kueue``
  (kubernetes-sigs/kueue, ``site/content/en/docs/installation``, "Install by Helm"); the
  published chart's image is ``registry.k8s.io/kueue/kueue:v0.19.2`` with pull policy
  IfNotPresent (``hack/helm-chart-package.sh`` rewrites the source tree's staging image to
  it on release), so fmctl sets that image in its values and a chart rendered from the
  source tree (the mirror tests use) runs what the published one runs. "Requires Kubernetes
  1.29 or newer" (its README); its CI tests 1.34, 1.35 and 1.36 (``hack/make/test.mk``,
  ``E2E_K8S_VERSIONS``). v1beta2 is the API it serves and stores; v1beta1 is deprecated
  (its CRDs). Topology Aware Scheduling is beta and on by default since 0.14
  (``pkg/features/kube_features.go``).
- NVIDIA DRA driver for GPUs 25.12.0: NGC's Helm repository ``https://helm.ngc.nvidia.com/
  nvidia``, chart ``nvidia-dra-driver-gpu`` (NVIDIA/k8s-dra-driver-gpu README and the EKS
  User Guide, "Use P6e-GB200 UltraServers with Amazon EKS"); ``kubeVersion: >=1.32.0-0``
  (its Chart.yaml); image ``nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0`` (its values: the
  tag is ``v`` + appVersion).

Tests and the sandbox render the same charts from a local copy (``FMCTL_CHART_MIRROR``: a
folder holding ``<name>-<version>/``, the upstream release unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chart:
    """One upstream chart at the version fmctl installs."""

    name: str
    version: str
    #: ``oci://...`` (an OCI registry; the chart is its last path part) or an ``https://``
    #: Helm repository.
    repository: str
    #: The namespace and release name fmctl installs it as.
    namespace: str
    release: str
    #: The oldest Kubernetes minor it runs on.
    min_kubernetes: str
    image: str
    source: str

    @property
    def oci(self) -> bool:
        """Whether the chart comes from an OCI registry (else a Helm repository)."""
        return self.repository.startswith("oci://")

    @property
    def reference(self) -> str:
        """What `helm template` is given for a real install: the OCI reference, or the
        chart's name with ``--repo``."""
        return self.repository if self.oci else self.name

    @property
    def folder(self) -> str:
        """The chart's folder in a chart mirror."""
        return f"{self.name}-{self.version}"


KUEUE = Chart(
    name="kueue",
    version="0.19.2",
    repository="oci://registry.k8s.io/kueue/charts/kueue",
    namespace="kueue-system",
    release="kueue",
    min_kubernetes="1.29",
    image="registry.k8s.io/kueue/kueue:v0.19.2",
    source="kubernetes-sigs/kueue v0.19.2: README (Kubernetes 1.29+), charts/kueue, "
    "hack/helm-chart-package.sh (the published chart's image)",
)

DRA_DRIVER = Chart(
    name="nvidia-dra-driver-gpu",
    version="25.12.0",
    repository="https://helm.ngc.nvidia.com/nvidia",
    namespace="nvidia-dra-driver-gpu",
    release="nvidia-dra-driver-gpu",
    min_kubernetes="1.32",
    image="nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0",
    source="NVIDIA/k8s-dra-driver-gpu v25.12.0: deployments/helm/nvidia-dra-driver-gpu "
    "(Chart.yaml kubeVersion >=1.32.0-0); EKS User Guide, ml-eks-nvidia-ultraserver",
)

#: The Kubernetes minor from which EKS runs P6e-GB200 UltraServers with DRA on (the EKS User
#: Guide, "Use P6e-GB200 UltraServers with Amazon EKS": 1.33 and above; DRA is required).
GB200_DRA_KUBERNETES = "1.33"

CHARTS = {c.name: c for c in (KUEUE, DRA_DRIVER)}


def minor(version: str) -> tuple[int, int]:
    """ "1.33" -> (1, 33), for comparing Kubernetes minors."""
    major, _, rest = version.partition(".")
    return int(major), int(rest.split(".")[0] or 0)
