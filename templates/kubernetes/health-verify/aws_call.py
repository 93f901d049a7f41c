"""The one AWS call fmctl's verify controller makes, with Python's standard library only:
``autoscaling:TerminateInstanceInAutoScalingGroup`` of a node that failed the verify gate, so
that its managed node group launches a replacement (``ShouldDecrementDesiredCapacity`` false:
the Amazon EC2 Auto Scaling API Reference, TerminateInstanceInAutoScalingGroup).

Credentials are the pod's, from EKS Pod Identity: the webhook gives a pod whose service
account has an association ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` and
``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`` (aws/amazon-eks-pod-identity-webhook,
pkg/handler/testdata/containercredentials/rawPodWithoutVolumes.pod.yaml at 0d3fed4), and the
agent answers a GET carrying the token file's contents as ``Authorization`` with
``AccessKeyId``, ``SecretAccessKey``, ``Token`` and ``Expiration`` (what botocore's
ContainerProvider reads, botocore/credentials.py). They are fetched again five minutes
before they expire; the token file is re-read each time (the kubelet rotates it).

Where the call goes, as the AWS SDKs decide it: ``AWS_ENDPOINT_URL_AUTO_SCALING``, else
``AWS_ENDPOINT_URL``, else ``https://autoscaling.REGION.amazonaws.com``; the certificates it
trusts: ``AWS_CA_BUNDLE``, else the system's (the SDKs' shared settings, "Service-specific
endpoints" and "ca_bundle"). Requests are signed with Signature Version 4 (the IAM User
Guide, "Create a signed AWS API request"); the query protocol's form body, version
2011-01-01.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from xml.sax.saxutils import unescape

#: Credentials are fetched again this long before they expire.
REFRESH_S = 300
VERSION = "2011-01-01"


class AwsError(Exception):
    """AWS refused the call, or it could not be made; ``code`` as AWS says it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


@dataclass(frozen=True)
class Keys:
    """A session's credentials and when they expire (epoch seconds)."""

    access_key: str
    secret_key: str
    token: str
    expires: float


def _tls() -> ssl.SSLContext:
    bundle = os.environ.get("AWS_CA_BUNDLE")
    return ssl.create_default_context(cafile=bundle) if bundle else ssl.create_default_context()


def _expiry(text: str) -> float:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return time.time() + REFRESH_S * 2  # unparsed: used for a short while only


def pod_credentials() -> Keys:
    """The pod's credentials from EKS Pod Identity's agent."""
    uri = os.environ.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    token_file = os.environ.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
    if not uri or not token_file:
        raise AwsError(
            "NoCredentials",
            "no EKS Pod Identity credentials in this pod (is the pod identity association "
            "for its service account there?)",
        )
    request = urllib.request.Request(uri)
    request.add_header("Authorization", Path(token_file).read_text().strip())
    try:
        with urllib.request.urlopen(request, timeout=10, context=_tls()) as answer:
            data = json.loads(answer.read().decode())
    except urllib.error.HTTPError as err:
        raise AwsError("CredentialsRefused", err.read().decode(errors="replace")[:300]) from None
    except (OSError, ValueError) as err:
        raise AwsError("CredentialsUnreachable", str(err)) from None
    return Keys(
        str(data["AccessKeyId"]),
        str(data["SecretAccessKey"]),
        str(data.get("Token", "")),
        _expiry(str(data.get("Expiration", ""))),
    )


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_headers(
    keys: Keys, url: str, region: str, service: str, body: bytes, at: datetime
) -> dict[str, str]:
    """The headers of a SigV4-signed POST of ``body`` (a form) to ``url``."""
    parts = urllib.parse.urlsplit(url)
    stamp = at.strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    headers = {
        "content-type": "application/x-www-form-urlencoded; charset=utf-8",
        "host": parts.netloc,
        "x-amz-date": stamp,
    }
    if keys.token:
        headers["x-amz-security-token"] = keys.token
    names = sorted(headers)
    canonical = "\n".join(
        [
            "POST",
            urllib.parse.quote(parts.path or "/", safe="/~"),
            "",  # no query string: the parameters are the body
            "".join(f"{n}:{headers[n].strip()}\n" for n in names),
            ";".join(names),
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(("AWS4" + keys.secret_key).encode(), day)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={keys.access_key}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return headers


class AutoScaling:
    """Amazon EC2 Auto Scaling in one region, as the pod's role."""

    def __init__(self, region: str) -> None:
        self.region = region
        self.keys: Keys | None = None
        self.url = (
            os.environ.get("AWS_ENDPOINT_URL_AUTO_SCALING")
            or os.environ.get("AWS_ENDPOINT_URL")
            or f"https://autoscaling.{region}.amazonaws.com"
        ).rstrip("/") + "/"

    def _keys(self) -> Keys:
        if self.keys is None or self.keys.expires - time.time() < REFRESH_S:
            self.keys = pod_credentials()
        return self.keys

    def call(self, action: str, params: dict[str, str]) -> str:
        """One query-protocol call; the answer's XML."""
        body = urllib.parse.urlencode({"Action": action, "Version": VERSION, **params}).encode()
        headers = signed_headers(
            self._keys(), self.url, self.region, "autoscaling", body, datetime.now(UTC)
        )
        request = urllib.request.Request(self.url, data=body, method="POST")
        for name, value in headers.items():
            if name != "host":
                request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=30, context=_tls()) as answer:
                return str(answer.read().decode())
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            code = re.search(r"<Code>([^<]*)</Code>", text)
            message = re.search(r"<Message>([^<]*)</Message>", text)
            raise AwsError(
                code.group(1) if code else str(err.code),
                unescape(message.group(1), {"&apos;": "'", "&quot;": '"'})
                if message
                else text[:300],
            ) from None
        except OSError as err:
            raise AwsError("Unreachable", str(err)) from None

    def replace(self, instance: str) -> None:
        """Terminate ``instance``; its Auto Scaling group launches another in its place."""
        self.call(
            "TerminateInstanceInAutoScalingGroup",
            {"InstanceId": instance, "ShouldDecrementDesiredCapacity": "false"},
        )
