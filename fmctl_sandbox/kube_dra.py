"""The sandbox's stand-in for NVIDIA's DRA driver's ComputeDomains, once its chart runs in
the sandbox cluster (the ComputeDomain CRD served, its controller Deployment available).

After NVIDIA/k8s-dra-driver-gpu v25.12.0:
- a ComputeDomain gets the ResourceClaimTemplate its ``spec.channel.resourceClaimTemplate``
  names, in its namespace, requesting one device of the
  ``compute-domain-default-channel.nvidia.com`` class (``templates/compute-domain-workload-
  claim-template.tmpl.yaml``; the API server fills ``allocationMode: ExactCount`` and
  ``count: 1``), at the resource.k8s.io version the cluster serves;
- a pod claiming it is placed only on a node where the driver's kubelet plugin runs (it is
  what publishes the channel devices a claim is allocated from), and not while the template
  is missing;
- the domain's status lists each node one of its pods runs on, with the node's clique
  (``<cluster UUID>.<clique id>``), an index per clique and Ready when the driver's kubelet
  plugin is ready there; the domain is Ready when it lists at least ``numNodes`` nodes and
  none is NotReady (``cmd/compute-domain-controller/computedomain.go``,
  ``calculateGlobalStatus``: with ``numNodes: 0`` an empty domain counts as Ready, so a
  check must look at the nodes).

Left out: the IMEX daemons themselves (their DaemonSet per domain), ResourceClaims and
ResourceSlices as objects, the cleanup finalizers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fmctl_sandbox.kube_model import Cluster
from fmctl_sandbox.kube_resources import dra_version

Put = Callable[[str, str, dict[str, Any]], None]
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
DRIVER = "compute-domain.nvidia.com"
IMAGE = "k8s-dra-driver-gpu:"


def _running(c: Cluster) -> bool:
    if "computedomains" not in c.crds:
        return False
    for (plural, _, _), obj in c.objects.items():
        if plural != "deployments":
            continue
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        if any(IMAGE in ct.get("image", "") for ct in pod.get("containers", [])):
            return int((obj.get("status") or {}).get("availableReplicas", 0) or 0) >= 1
    return False


def plugin_nodes(c: Cluster) -> set[str]:
    """Nodes where the driver's kubelet plugin (its DaemonSet's pod) is Ready."""
    out = set()
    for (plural, _, _), pod in c.objects.items():
        if plural != "pods" or not pod["spec"].get("nodeName"):
            continue
        if not any(IMAGE in ct.get("image", "") for ct in pod["spec"].get("containers", [])):
            continue
        if "DaemonSet" not in {r.get("kind") for r in pod["metadata"].get("ownerReferences") or []}:
            continue
        conditions = (pod.get("status") or {}).get("conditions") or []
        if any(x.get("type") == "Ready" and x.get("status") == "True" for x in conditions):
            out.add(pod["spec"]["nodeName"])
    return out


def claims_allow(c: Cluster, pod: dict[str, Any], node: str) -> bool:
    """Whether the pod's resource claims can be allocated on ``node``: every template it
    names exists and, for a ComputeDomain channel, the driver's kubelet plugin serves the
    node."""
    claims = pod["spec"].get("resourceClaims") or []
    if not claims:
        return True
    namespace = pod["metadata"].get("namespace", "")
    for claim in claims:
        name = claim.get("resourceClaimTemplateName")
        if not name:
            continue
        template = c.objects.get(("resourceclaimtemplates", namespace, name))
        if template is None:
            return False
        devices = ((template.get("spec") or {}).get("spec") or {}).get("devices") or {}
        classes = {
            (r.get("exactly") or {}).get("deviceClassName") for r in devices.get("requests") or []
        }
        if CHANNEL_CLASS in classes and node not in plugin_nodes(c):
            return False
    return True


def reconcile(c: Cluster, put: Put) -> None:
    """Templates for new ComputeDomains, and every domain's status from its pods."""
    if not _running(c):
        return
    served = plugin_nodes(c)
    domains = {
        str(d["metadata"].get("uid", ""))
        for (p, _, _), d in c.objects.items()
        if p == "computedomains"
    }
    for key, obj in list(c.objects.items()):
        owner = (obj["metadata"].get("labels") or {}).get("resource.nvidia.com/computeDomain")
        if key[0] == "resourceclaimtemplates" and owner and owner not in domains:
            del c.objects[key]  # its domain was deleted
    for (plural, ns, _), domain in sorted(c.objects.items()):
        if plural != "computedomains":
            continue
        spec = domain.get("spec") or {}
        channel = ((spec.get("channel") or {}).get("resourceClaimTemplate") or {}).get("name", "")
        if channel and ("resourceclaimtemplates", ns, channel) not in c.objects:
            put("resourceclaimtemplates", ns, _template(c, ns, channel, domain))
        nodes: list[dict[str, Any]] = []
        indexes: dict[str, int] = {}
        for (p, pns, _), pod in sorted(c.objects.items()):
            node = pod["spec"].get("nodeName") if p == "pods" and pns == ns else None
            if not node or any(n["name"] == node for n in nodes):
                continue
            claims = pod["spec"].get("resourceClaims") or []
            if channel not in {x.get("resourceClaimTemplateName") for x in claims}:
                continue
            if (pod.get("status") or {}).get("phase") not in ("Running", "Succeeded"):
                continue
            clique = c.hardware[node].clique if node in c.hardware else ""
            index = indexes.get(clique, 0)
            indexes[clique] = index + 1
            nodes.append(
                {
                    "name": node,
                    "ipAddress": f"10.0.{len(nodes) // 250}.{len(nodes) % 250 + 1}",
                    "cliqueID": clique,
                    "index": index,
                    "status": "Ready" if node in served else "NotReady",
                }
            )
        ready = len(nodes) >= int(spec.get("numNodes", 0) or 0) and all(
            n["status"] == "Ready" for n in nodes
        )
        domain["status"] = {"status": "Ready" if ready else "NotReady", "nodes": nodes}


def _template(c: Cluster, namespace: str, name: str, domain: dict[str, Any]) -> dict[str, Any]:
    uid = str(domain["metadata"].get("uid", ""))
    mode = ((domain.get("spec") or {}).get("channel") or {}).get("allocationMode", "Single")
    return {
        "apiVersion": f"resource.k8s.io/{dra_version(c.version)}",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "resource.nvidia.com/computeDomain": uid,
                "resource.nvidia.com/computeDomainTarget": "Workload",
            },
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "channel",
                            "exactly": {
                                "deviceClassName": CHANNEL_CLASS,
                                "allocationMode": "ExactCount",
                                "count": 1,
                            },
                        }
                    ],
                    "config": [
                        {
                            "requests": ["channel"],
                            "opaque": {
                                "driver": DRIVER,
                                "parameters": {
                                    "apiVersion": "resource.nvidia.com/v1beta1",
                                    "kind": "ComputeDomainChannelConfig",
                                    "domainID": uid,
                                    "allocationMode": mode,
                                },
                            },
                        }
                    ],
                }
            }
        },
    }
