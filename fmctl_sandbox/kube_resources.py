"""What the sandbox's Kubernetes API serves: its built-in resources, as discovery lists them,
and the kinds the CustomResourceDefinitions applied to it add.

A built-in group is served at the version the cluster's Kubernetes serves it: DRA's
``resource.k8s.io`` at ``v1`` from 1.34 (DRA is GA there), ``v1beta2`` on 1.33 and
``v1beta1`` before (the Kubernetes API reference of each release); the rest at ``v1``.
A request for another version is answered 404, as by a real server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fmctl_sandbox.crd_schema import Crd

#: Kinds whose objects the Job controller and kubelet move on (``kube_jobs``).
JOBS = {"jobs", "pods"}
#: Kinds Kueue's and the DRA driver's stand-ins keep (``kube_kueue``, ``kube_dra``).
QUEUED = {
    "workloads",
    "clusterqueues",
    "localqueues",
    "computedomains",
    "resourceclaimtemplates",
    "admissionchecks",
    "provisioningrequestconfigs",
    "provisioningrequests",
}
#: plural -> (group, version, kind, namespaced) of the built-in resources (the version of
#: ``resource.k8s.io`` is the cluster's: ``dra_version``).
RESOURCES: dict[str, tuple[str, str, str, bool]] = {
    "namespaces": ("", "v1", "Namespace", False),
    "nodes": ("", "v1", "Node", False),
    "persistentvolumes": ("", "v1", "PersistentVolume", False),
    "configmaps": ("", "v1", "ConfigMap", True),
    "secrets": ("", "v1", "Secret", True),
    "services": ("", "v1", "Service", True),
    "serviceaccounts": ("", "v1", "ServiceAccount", True),
    "persistentvolumeclaims": ("", "v1", "PersistentVolumeClaim", True),
    "pods": ("", "v1", "Pod", True),
    "podtemplates": ("", "v1", "PodTemplate", True),
    "daemonsets": ("apps", "v1", "DaemonSet", True),
    "deployments": ("apps", "v1", "Deployment", True),
    "statefulsets": ("apps", "v1", "StatefulSet", True),
    "jobs": ("batch", "v1", "Job", True),
    "poddisruptionbudgets": ("policy", "v1", "PodDisruptionBudget", True),
    "networkpolicies": ("networking.k8s.io", "v1", "NetworkPolicy", True),
    "ingresses": ("networking.k8s.io", "v1", "Ingress", True),
    "storageclasses": ("storage.k8s.io", "v1", "StorageClass", False),
    "clusterroles": ("rbac.authorization.k8s.io", "v1", "ClusterRole", False),
    "clusterrolebindings": ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", False),
    "roles": ("rbac.authorization.k8s.io", "v1", "Role", True),
    "rolebindings": ("rbac.authorization.k8s.io", "v1", "RoleBinding", True),
    "customresourcedefinitions": (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        False,
    ),
    "apiservices": ("apiregistration.k8s.io", "v1", "APIService", False),
    "mutatingwebhookconfigurations": (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        False,
    ),
    "validatingwebhookconfigurations": (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        False,
    ),
    "validatingadmissionpolicies": (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        False,
    ),
    "validatingadmissionpolicybindings": (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        False,
    ),
    "priorityclasses": ("scheduling.k8s.io", "v1", "PriorityClass", False),
    "deviceclasses": ("resource.k8s.io", "v1", "DeviceClass", False),
    "resourceclaimtemplates": ("resource.k8s.io", "v1", "ResourceClaimTemplate", True),
    "resourceclaims": ("resource.k8s.io", "v1", "ResourceClaim", True),
}
DRA_GROUP = "resource.k8s.io"


def dra_version(kubernetes: str) -> str:
    """The version a cluster of ``kubernetes`` ("1.35") serves resource.k8s.io at."""
    minor = int(kubernetes.split(".")[1])
    return "v1" if minor >= 34 else "v1beta2" if minor == 33 else "v1beta1"


#: plural -> the short names discovery gives (`kubectl api-resources`, Kubernetes 1.33).
SHORT_NAMES: dict[str, list[str]] = {
    "namespaces": ["ns"],
    "nodes": ["no"],
    "persistentvolumes": ["pv"],
    "configmaps": ["cm"],
    "services": ["svc"],
    "serviceaccounts": ["sa"],
    "persistentvolumeclaims": ["pvc"],
    "pods": ["po"],
    "poddisruptionbudgets": ["pdb"],
    "daemonsets": ["ds"],
    "deployments": ["deploy"],
    "statefulsets": ["sts"],
    "networkpolicies": ["netpol"],
    "ingresses": ["ing"],
    "storageclasses": ["sc"],
    "customresourcedefinitions": ["crd", "crds"],
    "priorityclasses": ["pc"],
}
#: What the server does with each resource.
VERBS = ["create", "delete", "get", "list", "patch"]


@dataclass(frozen=True)
class Served:
    """One resource as the cluster serves it."""

    plural: str
    group: str
    versions: tuple[str, ...]
    kind: str
    namespaced: bool
    #: The CRD that defines it (None: built in).
    crd: Crd | None = None

    def api_version(self, version: str) -> str:
        """group/version, or the version alone for the core group."""
        return f"{self.group}/{version}" if self.group else version

    @property
    def short_names(self) -> list[str]:
        """kubectl's short names for it."""
        if self.crd is not None:
            return list(self.crd.short_names)
        return SHORT_NAMES.get(self.plural, [])


def served(kubernetes: str, crds: dict[str, Crd]) -> dict[str, Served]:
    """Every resource a cluster of ``kubernetes`` serves, with its CRDs' (by plural)."""
    out = {}
    for plural, (group, version, kind, namespaced) in RESOURCES.items():
        if group == DRA_GROUP:
            version = dra_version(kubernetes)
        out[plural] = Served(plural, group, (version,), kind, namespaced)
    for plural, crd in crds.items():
        versions = tuple(sorted((v.name for v in crd.versions if v.served), key=_priority))
        out[plural] = Served(plural, crd.group, versions, crd.kind, crd.namespaced, crd)
    return out


def _priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version priority, highest first: GA before beta before alpha, then the
    higher major, then the higher minor (v1 > v1beta2 > v1beta1 > v1alpha1)."""
    import re

    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if match is None:
        return (9, 0, 0)
    stage = {None: 0, "beta": 1, "alpha": 2}[match.group(2)]
    return (stage, -int(match.group(1)), -int(match.group(3) or 0))
