"""The sandbox serves its owner only: a request that is unsigned, or signed with any key but
the sandbox's own, is refused with AWS's error and changes nothing; a Run Command sent that
way runs nothing; the Kubernetes API wants a token the sandbox's key signed for that very
cluster. And the key pair itself is the owner's alone (0600 in a 0700 folder).
"""

from __future__ import annotations

import json
import ssl
import stat
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from fmctl_sandbox import daemon
from provisioner.drivers.aws import Aws
from provisioner.drivers.eks_auth import token
from tests.engine.harness import Sandbox, subnets

REGION = "eu-central-1"


def _stranger(sandbox: Sandbox, secret: str | None = None) -> Aws:
    """Clients with another key pair (or the sandbox's key id with another secret)."""
    key = sandbox.credentials[0] if secret else "AKIAIOSFODNN7EXAMPLE"
    return Aws(
        REGION,
        sandbox.endpoint,
        sandbox=True,
        ca_bundle=sandbox.info["ca"],
        credentials=(key, secret or "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        max_attempts=1,
    )


def _raw(sandbox: Sandbox, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=sandbox.info["ca"])
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_the_key_pair_is_private(sandbox: Sandbox) -> None:
    path = daemon.credentials_path(sandbox.home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert sandbox.credentials[0].startswith("AKIA") and len(sandbox.credentials[1]) == 40


def test_unsigned_and_foreign_requests_are_refused(sandbox: Sandbox) -> None:
    form = b"Action=CreateVpc&Version=2016-11-15&CidrBlock=10.66.0.0%2F16"
    status, text = _raw(
        sandbox,
        f"{sandbox.endpoint}/",
        form,
        {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )
    assert (status, "<Code>MissingAuthenticationToken</Code>" in text) == (403, True)
    status, text = _raw(
        sandbox,
        f"{sandbox.endpoint}/",
        b"{}",
        {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "FmctlSandbox.Health"},
    )
    assert status == 403 and "MissingAuthenticationToken" in text

    cases = [
        ("ec2", lambda c: c.create_vpc(CidrBlock="10.66.0.0/16"), "AuthFailure"),
        ("s3", lambda c: c.create_bucket(Bucket=f"stranger-{uuid.uuid4().hex[:8]}"), "Invalid"),
        ("sts", lambda c: c.get_caller_identity(), "InvalidClientTokenId"),
        ("fsx", lambda c: c.describe_file_systems(), "InvalidClientTokenId"),
        ("eks", lambda c: c.list_clusters(), "InvalidClientTokenId"),
    ]
    for stranger in (_stranger(sandbox), _stranger(sandbox, secret="not-the-secret")):
        for service, make, code in cases:
            with pytest.raises(ClientError) as caught:
                make(stranger.client(service))
            got = caught.value.response["Error"]["Code"]
            if stranger.credentials and stranger.credentials[0] == sandbox.credentials[0]:
                # The right key id with a wrong secret: the signature does not match.
                assert got in ("SignatureDoesNotMatch", "AuthFailure"), (service, got)
            else:
                assert got.startswith(code), (service, got)
    # Nothing was made: no VPC of that CIDR, no stranger's bucket.
    ec2 = sandbox.aws(REGION).client("ec2")
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": ["10.66.0.0/16"]}])["Vpcs"]
    assert vpcs == []
    names = [b["Name"] for b in sandbox.aws(REGION).client("s3").list_buckets()["Buckets"]]
    assert not [n for n in names if n.startswith("stranger-")]


def test_a_run_command_from_a_stranger_runs_nothing(sandbox: Sandbox, tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    sandbox.node_tools(tools)
    try:
        ec2 = sandbox.aws(REGION).client("ec2")
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0][
            "InstanceId"
        ]
        mark = tmp_path / "ran"
        params = {
            "InstanceIds": [instance],
            "DocumentName": "AWS-RunShellScript",
            "Parameters": {"commands": [f"touch {mark}"]},
        }
        with pytest.raises(ClientError) as caught:
            _stranger(sandbox).client("ssm").send_command(**params)
        assert caught.value.response["Error"]["Code"] == "InvalidClientTokenId"
        time.sleep(1)
        assert not mark.exists()
        # The owner's command runs: the check above could have failed.
        ssm = sandbox.aws(REGION).client("ssm")
        command = ssm.send_command(**params)["Command"]["CommandId"]
        deadline = time.monotonic() + 20
        while not mark.exists():
            assert time.monotonic() < deadline, ssm.get_command_invocation(
                CommandId=command, InstanceId=instance
            )
            time.sleep(0.2)
        # A command is its region's: another region does not know it.
        elsewhere = sandbox.aws("us-east-2").client("ssm")
        with pytest.raises(ClientError) as caught:
            elsewhere.get_command_invocation(CommandId=command, InstanceId=instance)
        assert caught.value.response["Error"]["Code"] == "InvocationDoesNotExist"
        ec2.terminate_instances(InstanceIds=[instance])
    finally:
        sandbox.node_tools(None)


def test_the_kubernetes_api_wants_the_clusters_own_token(sandbox: Sandbox) -> None:
    aws = sandbox.aws(REGION)
    eks = aws.client("eks")
    name = f"guarded-{uuid.uuid4().hex[:6]}"
    eks.create_cluster(
        name=name,
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": subnets(sandbox, REGION, 67)},
    )
    endpoint = eks.describe_cluster(name=name)["cluster"]["endpoint"]
    context = ssl.create_default_context(cafile=sandbox.info["ca"])

    def status(authorization: str | None) -> int:
        headers = {"Authorization": authorization} if authorization else {}
        request = urllib.request.Request(f"{endpoint}/api/v1/namespaces", headers=headers)
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as reply:
                assert json.loads(reply.read())["kind"] == "NamespaceList"
                return int(reply.status)
        except urllib.error.HTTPError as err:
            return err.code

    assert status(None) == 401
    assert status("Bearer not-a-token") == 401
    assert status(f"Bearer {token(_stranger(sandbox), name)}") == 401
    assert status(f"Bearer {token(aws, 'another-cluster')}") == 401
    assert status(f"Bearer {token(aws, name)}") == 200
    eks.delete_cluster(name=name)


def test_the_test_controls_want_the_secret(sandbox: Sandbox) -> None:
    """The doubles' control endpoints (tests only) refuse callers without the secret."""
    context = ssl.create_default_context(cafile=sandbox.info["ca"])
    request = urllib.request.Request(
        f"{sandbox.endpoint}/_fmctl/seed/node-tools",
        data=json.dumps({"path": "/tmp"}).encode(),
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, context=context, timeout=10)
    assert caught.value.code == 403
