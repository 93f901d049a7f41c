"""ValidatingAdmissionPolicies in the sandbox's Kubernetes API: a bound policy is evaluated,
in CEL, on the writes of callers the sandbox can name, and a failed validation refuses the
write as the API server does.

What it follows (Kubernetes' "Validating Admission Policy" page, kubernetes.io/docs/reference/
access-authn-authz/validating-admission-policy, and the admissionregistration.k8s.io/v1 API):

- A policy applies through a ValidatingAdmissionPolicyBinding (``spec.policyName``) whose
  ``validationActions`` include ``Deny`` (Warn and Audit never refuse, and are not kept).
- ``matchConstraints.resourceRules`` (and the binding's ``matchResources``) pick the request:
  apiGroups, apiVersions, operations and resources, where ``*`` is every resource but no
  subresource, ``nodes/status`` a subresource, ``nodes/*`` each of its subresources and
  ``*/*`` everything; ``excludeResourceRules`` take some out again. Of the selectors, only
  ``matchLabels`` is read (a policy that asks more is refused loudly, as is ``paramKind``).
- ``matchConditions`` must all hold; then ``variables`` are bound in order, and each of
  ``validations`` must hold. Expressions see ``object``, ``oldObject``, ``request``
  (operation, name, namespace, resource, subResource, userInfo) and ``variables``.
- A failed validation answers with its ``reason`` (Invalid unless it says: 422) and the
  dispatcher's message, ``RESOURCE "NAME" is forbidden: ValidatingAdmissionPolicy 'P' with
  binding 'B' denied request: MESSAGE`` (kubernetes staging/src/k8s.io/apiserver/pkg/
  admission/plugin/policy/validating/dispatcher.go); an expression that errs is a denial
  under ``failurePolicy: Fail`` (the default) and skipped under ``Ignore``.

Who asks: a program the sandbox runs (``kube_programs``) is its pod's service account, with
``authentication.kubernetes.io/node-name`` among its extra when it runs on a node (a
projected token's claim: the ServiceAccountTokenPodNodeInfo feature, on by default since
Kubernetes 1.30, GA in 1.32, kubernetes pkg/features/kube_features.go). A caller with an
EKS token is a person or fmctl, whose IAM-mapped name the sandbox does not know: an empty
user. Checked on create and patch (what the programs do), not on server-side apply or
delete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fmctl_sandbox.crd_schema import compiled
from fmctl_sandbox.kube_model import ApiError, Cluster

#: The extra key a pod-bound service account token carries its node's name in.
NODE_NAME = "authentication.kubernetes.io/node-name"
#: A validation's reason -> the status code it answers with (the dispatcher's reasonToCode).
CODES = {"Invalid": 422, "Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}


@dataclass(frozen=True)
class Caller:
    """Who makes a request: its user name, groups and extra, as ``request.userInfo``."""

    username: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def service_account(cls, namespace: str, account: str, node: str = "") -> Caller:
        """A pod's service account, on ``node`` when it runs on one."""
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")
        extra = ((NODE_NAME, (node,)),) if node else ()
        return cls(f"system:serviceaccount:{namespace}:{account}", groups, extra)

    def user_info(self) -> dict[str, Any]:
        """As CEL sees it."""
        return {
            "username": self.username,
            "groups": list(self.groups),
            "extra": {key: list(values) for key, values in self.extra},
        }


@dataclass(frozen=True)
class Request:
    """One write, as admission sees it."""

    group: str
    version: str
    resource: str
    subresource: str
    operation: str  # CREATE or UPDATE
    namespace: str
    name: str
    caller: Caller


def admit(c: Cluster, request: Request, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Refuse the write (ApiError) when a bound policy's validation fails."""
    policies = {
        name: policy
        for (plural, _, name), policy in c.objects.items()
        if plural == "validatingadmissionpolicies"
    }
    bindings = [
        (name, b)
        for (plural, _, name), b in sorted(c.objects.items())
        if plural == "validatingadmissionpolicybindings"
    ]
    for binding_name, binding in bindings:
        spec = binding.get("spec") or {}
        policy = policies.get(str(spec.get("policyName", "")))
        if policy is None or "Deny" not in (spec.get("validationActions") or []):
            continue
        policy_spec = policy.get("spec") or {}
        if not _matches(policy_spec.get("matchConstraints") or {}, request, c, obj):
            continue
        if spec.get("matchResources") and not _matches(spec["matchResources"], request, c, obj):
            continue
        if policy_spec.get("paramKind"):
            raise ApiError(
                500,
                "InternalError",
                f"sandbox: ValidatingAdmissionPolicy {policy['metadata']['name']} takes "
                "parameters (paramKind), which the sandbox does not evaluate",
            )
        denied = _evaluate(policy_spec, request, obj, old)
        if denied is not None:
            message, reason = denied
            said = (
                f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding "
                f"'{binding_name}' denied request: {message}"
            )
            raise ApiError(
                CODES.get(reason, 422),
                reason,
                f'{request.resource} "{request.name}" is forbidden: {said}',
            )


def _matches(match: dict[str, Any], request: Request, c: Cluster, obj: dict[str, Any]) -> bool:
    rules = match.get("resourceRules")
    if rules is not None and not any(_rule(r, request) for r in rules):
        return False
    if any(_rule(r, request) for r in match.get("excludeResourceRules") or []):
        return False
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if not _labels(match.get("objectSelector"), labels):
        return False
    if request.namespace:
        namespace = c.objects.get(("namespaces", "", request.namespace)) or {}
        ns_labels = (namespace.get("metadata") or {}).get("labels") or {}
        ns_labels = {"kubernetes.io/metadata.name": request.namespace, **ns_labels}
        if not _labels(match.get("namespaceSelector"), ns_labels):
            return False
    return True


def _rule(rule: dict[str, Any], request: Request) -> bool:
    def among(values: Any, value: str) -> bool:
        return "*" in (values or []) or value in (values or [])

    if not (
        among(rule.get("apiGroups"), request.group)
        and among(rule.get("apiVersions"), request.version)
        and among(rule.get("operations"), request.operation)
    ):
        return False
    for entry in rule.get("resources") or []:
        main, _, sub = str(entry).partition("/")
        if (main in ("*", request.resource)) and (
            sub == request.subresource or (sub == "*" and request.subresource)
        ):
            return True
        if entry == "*/*":
            return True
    return False


def _labels(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if not selector:
        return True
    if selector.get("matchExpressions"):
        raise ApiError(
            500,
            "InternalError",
            "sandbox: an admission policy's selector with matchExpressions is not evaluated "
            "by the sandbox (matchLabels only)",
        )
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _evaluate(
    spec: dict[str, Any], request: Request, obj: dict[str, Any], old: dict[str, Any] | None
) -> tuple[str, str] | None:
    """(message, reason) of the first failed validation, or None when the policy allows."""
    from celpy.adapter import json_to_cel
    from celpy.celtypes import MapType, StringType

    fail = spec.get("failurePolicy", "Fail") != "Ignore"
    facts: dict[str, Any] = {
        "object": obj,
        "oldObject": old,
        "request": {
            "operation": request.operation,
            "name": request.name,
            "namespace": request.namespace,
            "resource": {
                "group": request.group,
                "version": request.version,
                "resource": request.resource,
            },
            "subResource": request.subresource,
            "userInfo": request.caller.user_info(),
        },
    }
    # Converted once (a node is some hundred values); each variable, a CEL value already, is
    # added to ``variables`` as it is bound, for the expressions after it.
    variables = MapType()
    activation = {k: json_to_cel(v) for k, v in facts.items()} | {"variables": variables}

    def run(text: str) -> Any:
        from celpy.evaluation import CELEvalError

        try:
            result = compiled(text).evaluate(activation)
        except CELEvalError as exc:
            result = exc
        if isinstance(result, CELEvalError):
            raise _Erred(f"expression '{text}' resulted in error: {result.args[0]}")
        return result

    try:
        for condition in spec.get("matchConditions") or []:
            if not bool(run(str(condition["expression"]))):
                return None
        for variable in spec.get("variables") or []:
            variables[StringType(variable["name"])] = run(str(variable["expression"]))
        for check in spec.get("validations") or []:
            if bool(run(str(check["expression"]))):
                continue
            message = check.get("message") or f"failed expression: {check['expression']}"
            if check.get("messageExpression"):
                message = str(run(str(check["messageExpression"])))
            return str(message), str(check.get("reason") or "Invalid")
    except _Erred as err:
        return (str(err), "Invalid") if fail else None
    return None


class _Erred(Exception):
    """An expression that could not be evaluated (CEL's error)."""
