"""The sandbox keeps its HTTPS connections, as AWS's endpoints do: a client pays one TLS
handshake, not one per call (werkzeug's own handler closes every connection; the
emulator's answers each request whole, with its length)."""

from __future__ import annotations

import logging

import pytest

from provisioner.drivers.aws import Aws
from tests.engine.harness import Sandbox

REGION = "us-west-2"


def _fresh(sandbox: Sandbox) -> Aws:
    """Clients of their own: a connection pool no other test has warmed."""
    return Aws(
        REGION,
        sandbox.endpoint,
        sandbox=True,
        ca_bundle=sandbox.info["ca"],
        credentials=sandbox.credentials,
    )


def _connections(caplog: pytest.LogCaptureFixture) -> int:
    """Connections urllib3 opened (or opened again after the server closed one)."""
    said = [r.getMessage() for r in caplog.records if r.name == "urllib3.connectionpool"]
    return sum(m.startswith(("Starting new HTTPS", "Resetting dropped")) for m in said)


def test_one_connection_serves_many_calls(
    sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    aws = _fresh(sandbox)
    caplog.set_level(logging.DEBUG, logger="urllib3.connectionpool")
    for service, call in (
        ("sts", lambda c: c.get_caller_identity()),  # moto's
        ("eks", lambda c: c.list_clusters()),  # fmctl's own shim
        ("iam", lambda c: c.list_roles(MaxItems=1)),
    ):
        client = aws.client(service)
        before = _connections(caplog)
        for _ in range(4):
            call(client)
        assert _connections(caplog) - before == 1, service


def test_head_answers_keep_their_length_and_the_connection(
    sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    """S3's HeadObject says the object's size in Content-Length with no body: the kept
    connection must neither lose that length nor wait for a body."""
    s3 = _fresh(sandbox).client("s3")
    s3.create_bucket(
        Bucket="keepalive-head", CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    s3.put_object(Bucket="keepalive-head", Key="k", Body=b"x" * 1234)
    caplog.set_level(logging.DEBUG, logger="urllib3.connectionpool")
    before = _connections(caplog)
    for _ in range(3):
        assert s3.head_object(Bucket="keepalive-head", Key="k")["ContentLength"] == 1234
        assert s3.get_object(Bucket="keepalive-head", Key="k")["Body"].read() == b"x" * 1234
    assert _connections(caplog) - before <= 1
