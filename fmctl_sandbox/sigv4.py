"""Who may call the sandbox: every request must be signed with the sandbox's own credentials.

The emulator listens on loopback, where any local user can reach it, and it runs scripts
for SSM SendCommand and commands for its kubelet's pods. So it checks each request's AWS
Signature Version 4 as AWS does, recomputing the signature with botocore's own signer over
the request as it arrived (method, path and query as sent, the headers the client signed,
the body or the payload hash it declared) and comparing in constant time; an EKS bearer
token (a presigned STS GetCallerIdentity URL) is checked the same way, and must name its
cluster and be no older than EKS allows.

Refusals use AWS's codes and statuses (the "Common Errors" page of the AWS API references:
MissingAuthenticationToken 403, IncompleteSignature 400, InvalidClientTokenId 403,
SignatureDoesNotMatch 403, RequestExpired 400 — more than 15 minutes off the request's
date stamp; S3's own InvalidAccessKeyId and AccessDenied, both 403; EC2's AuthFailure, 401).
"""

from __future__ import annotations

import base64
import hmac
import json
import secrets
import string
import time
from calendar import timegm
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

#: How far a request's date stamp may be from now (AWS: 15 minutes either way).
SKEW_S = 15 * 60
#: How long EKS accepts a token after it was signed (aws-iam-authenticator: 15 minutes).
TOKEN_S = 15 * 60
TOKEN_PREFIX = "k8s-aws-v1."


@dataclass(frozen=True)
class Credentials:
    """The one key pair a sandbox accepts."""

    access_key: str
    secret_key: str

    @staticmethod
    def generate(prefix: str = "AKIA") -> Credentials:
        """A fresh pair in the shape of an IAM user's (AKIA + 16, a 40-character secret), or
        of a session's (``prefix`` ASIA: what STS hands out)."""
        upper = string.ascii_uppercase + "234567"
        key = prefix + "".join(secrets.choice(upper) for _ in range(16))
        alphabet = string.ascii_letters + string.digits + "+/"
        return Credentials(key, "".join(secrets.choice(alphabet) for _ in range(40)))

    def save(self, path: Path) -> None:
        """Write the pair readable by its owner only (0600, made so before it is written)."""
        import os

        tmp = path.with_name(f".{path.name}.tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"accessKeyId": self.access_key, "secretAccessKey": self.secret_key}, fh)
        os.replace(tmp, path)

    @staticmethod
    def load(path: Path) -> Credentials:
        """The pair ``save`` wrote."""
        data = json.loads(path.read_text())
        return Credentials(str(data["accessKeyId"]), str(data["secretAccessKey"]))


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused, as AWS would say it."""

    status: int
    code: str
    message: str


_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check "
    "your AWS Secret Access Key and signing method."
)


def _refusal(service: str, kind: str) -> Refusal:
    """The answer of ``service`` to a request that is unsigned, signed with an unknown key,
    or signed wrongly (``kind``: "missing", "unknown", "mismatch", "expired", "malformed")."""
    if service == "s3":
        return {
            "missing": Refusal(403, "AccessDenied", "Access Denied"),
            "unknown": Refusal(
                403,
                "InvalidAccessKeyId",
                "The AWS Access Key Id you provided does not exist in our records.",
            ),
            "expired": Refusal(
                403,
                "RequestTimeTooSkewed",
                "The difference between the request time and the current time is too large.",
            ),
        }.get(kind, Refusal(403, "SignatureDoesNotMatch", _MISMATCH))
    if service == "ec2":
        return Refusal(
            401, "AuthFailure", "AWS was not able to validate the provided access credentials"
        )
    return {
        "missing": Refusal(403, "MissingAuthenticationToken", "Missing Authentication Token"),
        "unknown": Refusal(
            403, "InvalidClientTokenId", "The security token included in the request is invalid."
        ),
        "expired": Refusal(400, "RequestExpired", "Request has expired."),
        "malformed": Refusal(
            400, "IncompleteSignature", "The request signature does not conform to AWS standards."
        ),
    }.get(kind, Refusal(403, "SignatureDoesNotMatch", _MISMATCH))


def _header(environ: dict[str, Any], name: str) -> str | None:
    """A request header as WSGI holds it (Content-Type and Content-Length without HTTP_)."""
    key = name.upper().replace("-", "_")
    if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        value = environ.get(key)
    else:
        value = environ.get(f"HTTP_{key}")
    return None if value is None else str(value)


def _stamp_seconds(stamp: str) -> float | None:
    try:
        return float(timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ")))
    except ValueError:
        return None


def _expected(
    creds: Credentials,
    service: str,
    region: str,
    stamp: str,
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes,
) -> str:
    """The signature botocore's signer computes for this request with ``creds``."""
    from botocore.auth import S3SigV4Auth, SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    signer_class = S3SigV4Auth if service == "s3" else SigV4Auth
    signer = signer_class(BotoCredentials(creds.access_key, creds.secret_key), service, region)
    request = AWSRequest(method=method, url=url, headers=headers, data=body)
    request.context["timestamp"] = stamp
    canonical = signer.canonical_request(request)
    return str(signer.signature(signer.string_to_sign(request, canonical), request))


def check_request(
    environ: dict[str, Any], body: bytes, creds: Credentials, now: float
) -> Refusal | None:
    """None when the request carries a valid signature by ``creds``; else AWS's refusal."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    if not auth:
        return _refusal(_service_hint(environ), "missing")
    try:
        algorithm, rest = auth.split(" ", 1)
        fields = dict(part.strip().split("=", 1) for part in rest.split(","))
        key, day, region, service, terminal = fields["Credential"].split("/")
        signed = fields["SignedHeaders"].split(";")
        given = fields["Signature"]
    except (ValueError, KeyError):
        return _refusal(_service_hint(environ), "malformed")
    if algorithm != "AWS4-HMAC-SHA256" or terminal != "aws4_request":
        return _refusal(service, "malformed")
    if not hmac.compare_digest(key, creds.access_key):
        return _refusal(service, "unknown")
    stamp = _header(environ, "x-amz-date") or ""
    when = _stamp_seconds(stamp)
    if when is None or stamp[:8] != day:
        return _refusal(service, "malformed")
    if abs(now - when) > SKEW_S:
        return _refusal(service, "expired")
    headers: dict[str, str] = {}
    for name in signed:
        value = _header(environ, name)
        if value is None:
            return _refusal(service, "mismatch")
        headers[name] = value
    raw = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO"))
    url = f"https://{headers.get('host', environ.get('HTTP_HOST', ''))}{raw}"
    expected = _expected(
        creds, service, region, stamp, str(environ.get("REQUEST_METHOD")), url, headers, body
    )
    if not hmac.compare_digest(expected, given):
        return _refusal(service, "mismatch")
    return None


def _service_hint(environ: dict[str, Any]) -> str:
    """Which service an unsigned request was meant for, for the shape of the refusal: S3's
    REST calls carry no X-Amz-Target and no form body; EC2's are forms with Version=2016-."""
    if environ.get("HTTP_X_AMZ_TARGET"):
        return "json"
    if "x-www-form-urlencoded" in str(environ.get("CONTENT_TYPE", "")):
        return "query"
    return "s3"


def check_token(header: str, creds: Credentials, cluster: str, now: float) -> str | None:
    """None when ``header`` is ``Bearer k8s-aws-v1.…`` signed by ``creds`` for ``cluster``
    and still fresh; else why not (the API server answers 401 either way)."""
    if not header.startswith(f"Bearer {TOKEN_PREFIX}"):
        return "a bearer token k8s-aws-v1.* is required"
    raw = header.removeprefix(f"Bearer {TOKEN_PREFIX}")
    try:
        url = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return "the token is not base64url"
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    one = {k: v[0] for k, v in query.items()}
    signed = one.get("X-Amz-SignedHeaders", "").split(";")
    if one.get("Action") != "GetCallerIdentity" or "x-k8s-aws-id" not in signed:
        return "the token is not a presigned GetCallerIdentity signing x-k8s-aws-id"
    try:
        key, _day, region, service, _ = one["X-Amz-Credential"].split("/")
        stamp, given = one["X-Amz-Date"], one["X-Amz-Signature"]
    except (KeyError, ValueError):
        return "the token lacks its signature"
    if not hmac.compare_digest(key, creds.access_key):
        return "the token is signed with a key this sandbox does not know"
    when = _stamp_seconds(stamp)
    if when is None or now - when > TOKEN_S or when - now > SKEW_S:
        return "the token has expired"
    # The signature covers every query parameter but itself (SigV4 presigning), and the
    # headers it names: the host and the cluster's name.
    unsigned = "&".join(
        pair for pair in parts.query.split("&") if not pair.startswith("X-Amz-Signature=")
    )
    headers = {"host": parts.netloc, "x-k8s-aws-id": cluster}
    bare = parts._replace(query=unsigned).geturl()
    expected = _expected(creds, service, region, stamp, "GET", bare, headers, b"")
    if not hmac.compare_digest(expected, given):
        return "the token's signature does not match (or it is for another cluster)"
    return None


def token_key(header: str) -> str | None:
    """The access key an EKS bearer token was signed with, if it names one."""
    try:
        raw = header.removeprefix(f"Bearer {TOKEN_PREFIX}")
        url = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    credential = parse_qs(urlsplit(url).query).get("X-Amz-Credential", [""])[0]
    return credential.split("/", 1)[0] or None
