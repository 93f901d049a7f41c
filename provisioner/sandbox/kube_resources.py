"""What the sandbox's Kubernetes API serves: its resources, as discovery lists them."""

from __future__ import annotations

#: Kinds whose objects the Job controller and kubelet move on (``kube_jobs``).
JOBS = {"jobs", "pods"}
#: plural -> (group, version, kind, namespaced): what the server knows.
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
}


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
}
#: What the server does with each resource.
VERBS = ["create", "delete", "get", "list", "patch"]
