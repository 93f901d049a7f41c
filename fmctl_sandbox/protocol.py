"""Just enough of the AWS wire protocols for the sandbox's shims.

EC2 speaks the query protocol (form-encoded ``Action=...``, XML answers); FSx and Service
Quotas speak JSON 1.1 (``X-Amz-Target: Prefix.Operation``). The shims read requests and
write answers in exactly the shapes botocore parses.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs, unquote
from xml.sax.saxutils import escape

EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
#: The signing name of the sandbox's own service (``server``'s docstring).
SANDBOX_SERVICE = "fmctl-sandbox"


@dataclass(frozen=True)
class Call:
    """One API request: service, operation and parameters."""

    service: str
    action: str
    params: dict[str, Any]
    protocol: str  # "query" | "json" | "rest" | "rest-json"
    region: str = "us-east-1"
    #: The account the signing key belongs to (``account_of``); AWS keeps each account's
    #: resources apart, and so does every shim.
    account: str = "123456789012"


def _scope(environ: dict[str, Any]) -> list[str]:
    """KEY/DATE/REGION/SERVICE/aws4_request of the SigV4 Authorization header."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    if "Credential=" in auth:
        return str(auth.split("Credential=", 1)[1].split(",", 1)[0]).split("/")
    return []


def service_of(environ: dict[str, Any]) -> str:
    """The signing service name in the SigV4 Authorization header (``.../ec2/aws4_request``)."""
    scope = _scope(environ)
    return str(scope[3]) if len(scope) >= 4 else ""


def region_of(environ: dict[str, Any]) -> str:
    """The region a request was signed for."""
    scope = _scope(environ)
    return str(scope[2]) if len(scope) >= 4 else "us-east-1"


def access_key_of(environ: dict[str, Any]) -> str:
    """The access key id a request was signed with (tests check it is the sandbox's)."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    if "Credential=" in auth:
        return str(auth.split("Credential=", 1)[1].split("/", 1)[0])
    return ""


@functools.lru_cache(maxsize=256)
def account_of(access_key: str) -> str:
    """The account an access key belongs to, as moto decides it (its IAM's keys, else its
    default account): the shims and moto's own services must agree on whose a resource is.
    Cached: moto's lookup walks every account's IAM (0.2 ms a call), and a key's account
    never changes once it signs requests."""
    from moto.iam.models import get_account_id_from

    return str(get_account_id_from(access_key))


def parse(environ: dict[str, Any], body: bytes) -> Call:
    """Identify the call a request makes, and whose account it is made in."""
    return replace(_parse(environ, body), account=account_of(access_key_of(environ)))


def _parse(environ: dict[str, Any], body: bytes) -> Call:
    service, region = service_of(environ), region_of(environ)
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        params = json.loads(body or b"{}")
        return Call(service, target.rsplit(".", 1)[-1], params, "json", region)
    ctype = environ.get("CONTENT_TYPE", "")
    if "x-www-form-urlencoded" in ctype:
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8"), keep_blank_values=True).items()}
        return Call(service, form.get("Action", ""), form, "query", region)
    path = environ.get("PATH_INFO", "")
    query = environ.get("QUERY_STRING", "")
    if service == "eks":
        # REST-JSON: the operation is method + path. The raw path keeps %2F inside an ARN.
        raw = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or path).split("?", 1)[0]
        params = json.loads(body or b"{}")
        params["_query"] = query
        method = str(environ.get("REQUEST_METHOD", "GET"))
        name, args = eks_operation(method, raw)
        params["_args"] = args
        return Call(service, name, params, "rest-json", region)
    keys = {part.split("=", 1)[0] for part in query.split("&") if part}
    action = f"{environ.get('REQUEST_METHOD', 'GET')} {path}"
    if service == "s3" and "policy" in keys:
        return Call(service, f"{action}?policy", {"body": body.decode("utf-8", "replace")}, "rest")
    return Call(service, action, {}, rest_protocol(service), region)


@functools.cache
def rest_protocol(service: str) -> str:
    """A REST service's protocol, as botocore's model of it says: "rest-json" (EventBridge
    Scheduler, ...) answers errors in JSON, "rest" (S3, REST-XML) in XML; a signing name
    botocore does not know is taken for REST-XML."""
    import botocore.session
    from botocore.exceptions import UnknownServiceError

    try:
        model = botocore.session.get_session().get_service_model(service)
    except UnknownServiceError:
        return "rest"
    return "rest-json" if model.protocol == "rest-json" else "rest"


_SEGMENT = r"([^/]+)"
#: EKS's REST routes (botocore's service model): (method, path pattern, operation).
EKS_ROUTES = [
    (method, re.compile(path.replace("{}", _SEGMENT)), name)
    for method, path, name in (
        ("POST", "/clusters", "CreateCluster"),
        ("GET", "/clusters", "ListClusters"),
        ("GET", "/clusters/{}", "DescribeCluster"),
        ("DELETE", "/clusters/{}", "DeleteCluster"),
        ("POST", "/clusters/{}/updates", "UpdateClusterVersion"),
        ("GET", "/clusters/{}/updates", "ListUpdates"),
        ("GET", "/clusters/{}/updates/{}", "DescribeUpdate"),
        ("POST", "/clusters/{}/update-config", "UpdateClusterConfig"),
        ("POST", "/clusters/{}/node-groups/{}/update-config", "UpdateNodegroupConfig"),
        ("POST", "/clusters/{}/node-groups/{}/update-version", "UpdateNodegroupVersion"),
        ("POST", "/clusters/{}/addons/{}/update", "UpdateAddon"),
        ("POST", "/tags/{}", "TagResource"),
        ("DELETE", "/tags/{}", "UntagResource"),
        ("GET", "/tags/{}", "ListTagsForResource"),
        (
            "DELETE",
            "/clusters/{}/access-entries/{}/access-policies/{}",
            "DisassociateAccessPolicy",
        ),
        ("POST", "/clusters/{}/node-groups", "CreateNodegroup"),
        ("GET", "/clusters/{}/node-groups", "ListNodegroups"),
        ("GET", "/clusters/{}/node-groups/{}", "DescribeNodegroup"),
        ("DELETE", "/clusters/{}/node-groups/{}", "DeleteNodegroup"),
        ("GET", "/addons/supported-versions", "DescribeAddonVersions"),
        ("POST", "/clusters/{}/addons", "CreateAddon"),
        ("GET", "/clusters/{}/addons", "ListAddons"),
        ("GET", "/clusters/{}/addons/{}", "DescribeAddon"),
        ("DELETE", "/clusters/{}/addons/{}", "DeleteAddon"),
        ("POST", "/clusters/{}/access-entries", "CreateAccessEntry"),
        ("GET", "/clusters/{}/access-entries", "ListAccessEntries"),
        ("GET", "/clusters/{}/access-entries/{}", "DescribeAccessEntry"),
        ("DELETE", "/clusters/{}/access-entries/{}", "DeleteAccessEntry"),
        ("POST", "/clusters/{}/access-entries/{}/access-policies", "AssociateAccessPolicy"),
        ("GET", "/clusters/{}/access-entries/{}/access-policies", "ListAssociatedAccessPolicies"),
        ("POST", "/clusters/{}/pod-identity-associations", "CreatePodIdentityAssociation"),
        ("GET", "/clusters/{}/pod-identity-associations", "ListPodIdentityAssociations"),
        ("GET", "/clusters/{}/pod-identity-associations/{}", "DescribePodIdentityAssociation"),
        ("POST", "/clusters/{}/pod-identity-associations/{}", "UpdatePodIdentityAssociation"),
        ("DELETE", "/clusters/{}/pod-identity-associations/{}", "DeletePodIdentityAssociation"),
    )
]


def eks_operation(method: str, raw_path: str) -> tuple[str, list[str]]:
    """The EKS operation a REST request is, and its path arguments (decoded)."""
    for verb, pattern, name in EKS_ROUTES:
        m = pattern.fullmatch(raw_path)
        if m and verb == method:
            return name, [unquote(a) for a in m.groups()]
    return f"{method} {raw_path}", []


def indexed(params: dict[str, str], prefix: str) -> list[str]:
    """Values of ``Prefix.1``, ``Prefix.2``, ... in query parameters."""
    out, i = [], 1
    while f"{prefix}.{i}" in params:
        out.append(params[f"{prefix}.{i}"])
        i += 1
    return out


def query_filters(params: dict[str, str]) -> dict[str, list[str]]:
    """``Filter.N.Name`` / ``Filter.N.Value.M`` as {name: [values]}."""
    out, i = {}, 1
    while f"Filter.{i}.Name" in params:
        out[params[f"Filter.{i}.Name"]] = indexed(params, f"Filter.{i}.Value")
        i += 1
    return out


def query_tags(params: dict[str, str]) -> dict[str, str]:
    """Tags of ``TagSpecification.1.Tag.N.Key/Value``."""
    out, i = {}, 1
    while f"TagSpecification.1.Tag.{i}.Key" in params:
        out[params[f"TagSpecification.1.Tag.{i}.Key"]] = params.get(
            f"TagSpecification.1.Tag.{i}.Value", ""
        )
        i += 1
    return out


def matches(tags: dict[str, str], filters: dict[str, list[str]]) -> bool:
    """EC2 tag filters: ``tag:KEY`` (values) and ``tag-key``."""
    for name, values in filters.items():
        if name.startswith("tag:"):
            if tags.get(name[4:]) not in values:
                return False
        elif name == "tag-key" and not set(values) & set(tags):
            return False
    return True


def xml_value(value: Any) -> str:
    """Render a value as EC2 XML: dicts as elements, lists as ``<item>`` sets."""
    if isinstance(value, dict):
        return "".join(f"<{k}>{xml_value(v)}</{k}>" for k, v in value.items())
    if isinstance(value, list):
        return "".join(f"<item>{xml_value(v)}</item>" for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape(str(value))


def tag_set(tags: dict[str, str]) -> list[dict[str, str]]:
    """EC2's tagSet items."""
    return [{"key": k, "value": v} for k, v in sorted(tags.items())]


def ec2_response(action: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    """A successful EC2 answer."""
    xml = (
        f'<?xml version="1.0" encoding="UTF-8"?><{action}Response xmlns="{EC2_NS}">'
        f"<requestId>{uuid.uuid4()}</requestId>{xml_value(body)}</{action}Response>"
    )
    return 200, {"Content-Type": "text/xml"}, xml.encode()


def ec2_error(status: int, code: str, message: str) -> tuple[int, dict[str, str], bytes]:
    """An EC2 error answer."""
    xml = (
        f'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code>'
        f"<Message>{escape(message)}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    )
    return status, {"Content-Type": "text/xml"}, xml.encode()


def json_response(body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    """A successful JSON 1.1 answer."""
    return 200, {"Content-Type": "application/x-amz-json-1.1"}, json.dumps(body).encode()


def json_error(status: int, code: str, message: str) -> tuple[int, dict[str, str], bytes]:
    """A JSON 1.1 error answer."""
    return (
        status,
        {"Content-Type": "application/x-amz-json-1.1", "x-amzn-ErrorType": code},
        json.dumps({"__type": code, "message": message}).encode(),
    )


def rest_json_error(status: int, code: str, message: str) -> tuple[int, dict[str, str], bytes]:
    """A REST-JSON error answer (EKS): the code in the x-amzn-ErrorType header."""
    payload = json.dumps({"message": message}).encode()
    return status, {"Content-Type": "application/json", "x-amzn-ErrorType": code}, payload


def error_for(
    call: Call, status: int, code: str, message: str
) -> tuple[int, dict[str, str], bytes]:
    """An error in the protocol of ``call``."""
    if call.protocol == "query":
        return ec2_error(status, code, message)
    if call.protocol == "rest-json":
        return rest_json_error(status, code, message)
    if call.protocol == "rest":  # S3 and the other REST-XML services
        xml = f"<Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>"
        return status, {"Content-Type": "application/xml"}, xml.encode()
    return json_error(status, code, message)
