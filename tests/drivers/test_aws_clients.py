"""Clients of the AWS driver: one process parses each service's model once, however many
``Aws`` it makes (an `up` makes seven), and the clients stay each ``Aws``'s own."""

from __future__ import annotations

import pytest

from provisioner.drivers import aws
from provisioner.drivers.aws import Aws


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # Clients are made, never called: no endpoint is reached. Still, nothing real is found.
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(key, value)


def _parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every model file botocore parses from here on."""
    from botocore.loaders import JSONFileLoader

    seen: list[str] = []
    original = JSONFileLoader.load_file

    def load_file(self: JSONFileLoader, file_path: str) -> object:
        seen.append(file_path)
        return original(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", load_file)
    return seen


def test_each_model_is_parsed_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aws, "_loader", None)  # as a fresh process
    parsed = _parses(monkeypatch)
    local = Aws("us-west-2", endpoint_url="https://127.0.0.1:9", credentials=("k", "s"))
    first = local.client("ec2")
    ec2_models = [p for p in parsed if "/ec2/" in p]
    assert any(p.endswith("service-2") for p in ec2_models), parsed
    before = len(parsed)
    # Another Aws (another region, read-only, the sandbox's isolated session): no parsing.
    other = Aws("us-east-1", sandbox=True, credentials=("k", "s"), read_only=True)
    second = other.client("ec2")
    assert parsed[before:] == []
    assert second is not first and second.meta.region_name == "us-east-1"
    # Each keeps its own hooks: the read-only one refuses a write before it is sent.
    with pytest.raises(aws.WriteRefused):
        second.run_instances(MinCount=1, MaxCount=1)


def test_only_real_aws_gets_the_client_side_rate_limiter() -> None:
    """Against AWS, botocore's adaptive mode (backoff and a rate limiter that slows a client
    after throttling answers); against the sandbox, standard mode: the same backoff and
    retried errors, no limiter waiting by AWS's clock on an emulator without rate limits."""
    real = Aws("us-west-2").client("sts")
    sandbox = Aws(
        "us-west-2", "https://127.0.0.1:1", sandbox=True, credentials=("key", "secret")
    ).client("sts")
    assert real.meta.config.retries["mode"] == "adaptive"
    assert sandbox.meta.config.retries["mode"] == "standard"
    for client in (real, sandbox):
        assert client.meta.config.retries["total_max_attempts"] == 10
