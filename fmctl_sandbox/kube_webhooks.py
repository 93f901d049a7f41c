"""Admission webhooks in the sandbox's Kubernetes API: what happens when nothing answers one.

The API server calls every mutating and validating webhook whose rules match a request
(group, resource, operation; the namespace by its ``namespaceSelector``). A webhook whose
``failurePolicy`` is ``Fail`` (the default in admissionregistration.k8s.io/v1) and whose
service has no ready pod behind it fails the request: "Internal error occurred: failed
calling webhook ...". That is what a chart's CRs meet when they are applied before its
controller runs (Kueue's webhooks cover its own kinds and every Job). The sandbox does not
run the webhooks' logic: it only refuses as the real server does when they cannot be
reached. (Kubernetes documentation, "Dynamic Admission Control": matching requests, failure
policy.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fmctl_sandbox.kube_controllers import _term
from fmctl_sandbox.kube_model import ApiError, Cluster
from fmctl_sandbox.kube_resources import Served

CONFIGS = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")


def refuse_by_webhook(
    c: Cluster,
    res: Served,
    namespace: str,
    operation: str,
    settle: Callable[[], None] = lambda: None,
) -> None:
    """500 when a Fail-policy webhook matching the request has no ready pod behind it
    (``settle`` first brings the workloads' pods up to date, only when one matches)."""
    matching = [
        hook
        for (plural, _, _), config in sorted(c.objects.items())
        if plural in CONFIGS
        for hook in config.get("webhooks") or []
        if hook.get("failurePolicy", "Fail") == "Fail"
        and _matches(c, hook, res, namespace, operation)
    ]
    if not matching:
        return
    settle()
    for hook in matching:
        service = (hook.get("clientConfig") or {}).get("service") or {}
        if not service or _answers(c, service):
            continue
        where = f"{service.get('name')}.{service.get('namespace')}.svc"
        raise ApiError(
            500,
            "InternalError",
            f'Internal error occurred: failed calling webhook "{hook.get("name")}": failed to '
            f'call webhook: Post "https://{where}:{service.get("port", 443)}'
            f'{service.get("path", "/")}": dial tcp: connect: connection refused',
        )


def _matches(c: Cluster, hook: dict[str, Any], res: Served, namespace: str, op: str) -> bool:
    rules = hook.get("rules") or []
    if not any(_rule(rule, res, op) for rule in rules):
        return False
    selector = hook.get("namespaceSelector") or {}
    if not namespace or not selector:
        return True
    ns = c.objects.get(("namespaces", "", namespace)) or {}
    labels = {
        **((ns.get("metadata") or {}).get("labels") or {}),
        # The API server's own label on every namespace.
        "kubernetes.io/metadata.name": namespace,
    }
    wanted = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    return _term({"matchExpressions": selector.get("matchExpressions") or []}, labels)


def _rule(rule: dict[str, Any], res: Served, op: str) -> bool:
    def has(values: list[str] | None, value: str) -> bool:
        return bool(values) and ("*" in values or value in values)  # type: ignore[operator]

    return (
        has(rule.get("apiGroups"), res.group)
        and has(rule.get("resources"), res.plural)
        and has(rule.get("operations"), op)
    )


def _answers(c: Cluster, service: dict[str, Any]) -> bool:
    """A ready pod matches the service's selector in its namespace."""
    svc = c.objects.get(("services", service.get("namespace", ""), service.get("name", "")))
    if svc is None:
        return False
    selector = (svc.get("spec") or {}).get("selector") or {}
    if not selector:
        return False
    for (plural, namespace, _), pod in c.objects.items():
        if plural != "pods" or namespace != service.get("namespace"):
            continue
        labels = pod["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            continue
        conditions = (pod.get("status") or {}).get("conditions") or []
        if any(x.get("type") == "Ready" and x.get("status") == "True" for x in conditions):
            return True
    return False
