"""How fast an AWS-compatible endpoint that is not AWS (``AWS_ENDPOINT_URL``: a sandbox
another home started, a moto server, LocalStack) carries out what AWS takes minutes for.

fmctl paces its waits by AWS's documented durations (a first look at a new file system after
most of its ten minutes). An emulator finishes in seconds, so those waits would be all
there is to a run: FMCTL_TIME_SCALE says the factor, or the endpoint says it itself when it
is fmctl's sandbox (its own Health operation answers with its scale, signed as every call
to it must be). Against AWS itself neither applies.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.request

from provisioner import FmctlError

#: The signing name of the sandbox's own operations (``fmctl_sandbox.protocol``'s
#: SANDBOX_SERVICE: drivers import nothing of fmctl's, so it is said again here).
SANDBOX_SIGNING_NAME = "fmctl-sandbox"
SETTING = "FMCTL_TIME_SCALE"


class BadTimeScale(FmctlError, ValueError):
    """FMCTL_TIME_SCALE is not a factor fmctl can use; the message says which are."""

    default_hint = "unset it to pace waits as on AWS; it applies with AWS_ENDPOINT_URL only"


def configured_scale() -> float | None:
    """FMCTL_TIME_SCALE, when set: a factor in (0, 1]."""
    text = os.environ.get(SETTING, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise BadTimeScale(
            f"{SETTING}={text!r} is not a factor in (0, 1]: the share of AWS's durations the "
            "endpoint takes (0.01: a hundred times faster)"
        )
    return value


def endpoint_scale(endpoint: str, ca_bundle: str | None, timeout: float = 3.0) -> float | None:
    """The endpoint's own word on its scale (an fmctl sandbox's Health answer), or None:
    it is not one, gave no answer, or there are no credentials to sign the question."""
    import botocore.session
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    try:
        creds = botocore.session.get_session().get_credentials()
    except Exception:  # noqa: BLE001 - a broken profile: the run's own first call says it properly
        return None
    if creds is None:
        return None
    url, payload = endpoint.rstrip("/") + "/", b"{}"
    request = AWSRequest(
        method="POST",
        url=url,
        data=payload,
        headers={
            "Content-Type": "application/x-amz-json-1.1",
            "X-Amz-Target": "FmctlSandbox.Health",
        },
    )
    SigV4Auth(creds, SANDBOX_SIGNING_NAME, "us-east-1").add_auth(request)
    prepared = urllib.request.Request(
        url, data=payload, headers=dict(request.headers.items()), method="POST"
    )
    context = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else None
    try:
        with urllib.request.urlopen(prepared, timeout=timeout, context=context) as answer:
            said = json.loads(answer.read())
    except Exception:  # noqa: BLE001 - not a sandbox (LocalStack, a proxy), or no answer: AWS's pace
        return None
    scale = said.get("scale") if isinstance(said, dict) else None
    return float(scale) if isinstance(scale, int | float) and 0 < scale <= 1 else None
