"""The sandbox Kubernetes API's protocol helpers: request bodies (JSON or YAML), which served
resource a URL names, the discovery documents (/api, /apis, /version and each group's
resource list, as the API server answers them) and JSON answers.
"""

from __future__ import annotations

import json
from typing import Any

from fmctl_sandbox.kube_model import Answer, ApiError
from fmctl_sandbox.kube_resources import VERBS, Served


def load(body: bytes) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.load(body.decode(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ApiError(400, "BadRequest", f"body does not parse: {exc}") from exc
    if not isinstance(data, dict):
        raise ApiError(400, "BadRequest", "body is not an object")
    return data


def target(parts: list[str], known: dict[str, Served]) -> tuple[Served, str, str, str]:
    """(resource, version, namespace, name) of a resource path; 404 for a resource the
    cluster does not serve at that group and version."""
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise ApiError(404, "NotFound", f"the server could not find /{'/'.join(parts)}")
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        namespace, rest = rest[1], rest[2:]
    res = known.get(rest[0]) if rest else None
    if res is None or res.group != group or version not in res.versions:
        raise ApiError(
            404,
            "NotFound",
            f"the server could not find the requested resource (/{'/'.join(parts)})",
        )
    return res, version, namespace, rest[1] if len(rest) > 1 else ""


def discovery(parts: list[str], known: dict[str, Served], kube: str) -> dict[str, Any] | None:
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if parts == ["apis"]:
        groups: dict[str, list[str]] = {}
        for res in known.values():
            if res.group:
                seen = groups.setdefault(res.group, [])
                seen += [v for v in res.versions if v not in seen]
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in versions],
                    "preferredVersion": {
                        "groupVersion": f"{g}/{versions[0]}",
                        "version": versions[0],
                    },
                }
                for g, versions in sorted(groups.items())
            ],
        }
    if parts == ["api", "v1"] or (len(parts) == 3 and parts[0] == "apis"):
        group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}".lstrip("/"),
            "resources": [
                {
                    "name": res.plural,
                    "kind": res.kind,
                    "namespaced": res.namespaced,
                    "singularName": res.kind.lower(),
                    "verbs": VERBS,
                    **({"shortNames": res.short_names} if res.short_names else {}),
                }
                for res in known.values()
                if res.group == group and version in res.versions
            ],
        }
    if parts == ["version"]:
        minor = kube.split(".")[1]
        return {"major": "1", "minor": minor, "gitVersion": f"v{kube}.0-fmctl-sandbox"}
    return None


def json_answer(status: int, data: Any) -> Answer:
    return status, {"Content-Type": "application/json"}, json.dumps(data).encode()
