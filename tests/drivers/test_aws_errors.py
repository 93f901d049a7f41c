"""AWS's error codes become typed errors in one place (drivers.aws_errors): each row of the
table is checked against the service's own botocore model where it cites it, and a typed
error stays the ClientError, the modeled exception and the waiter's answer it was."""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from provisioner.drivers import aws_errors
from provisioner.drivers.aws import error_code
from provisioner.drivers.aws_errors import (
    RULES,
    AlreadyExists,
    AwsProblem,
    BucketNotFound,
    Conflict,
    InUse,
    KeyNotFound,
    NotFound,
    typed_errors,
)
from tests.conftest import ROOT

_session = botocore.session.get_session()


def _codes(service: str) -> set[str]:
    """The error codes ``service``'s botocore model names (each shape's code, which for the
    query protocol differs from its name: IAM's NoSuchEntityException is NoSuchEntity)."""
    from botocore.model import StructureShape

    model = _session.get_service_model(service)
    return {
        str(shape.error_code) for shape in model.error_shapes if isinstance(shape, StructureShape)
    }


def _services_fmctl_calls() -> set[str]:
    import re

    driver = (ROOT / "provisioner" / "drivers" / "aws.py").read_text()
    return set(re.findall(r"""service: Literal\["([a-z0-9-]+)"\]""", driver))


def test_every_row_cited_to_the_model_is_in_the_model() -> None:
    services = _services_fmctl_calls()
    wrong = []
    for rule in RULES:
        assert rule.source == "model" or rule.source.startswith("https://docs.aws.amazon.com/")
        assert rule.service == "*" or rule.service in services, rule
        if rule.source != "model":
            continue
        where = [rule.service] if rule.service != "*" else sorted(services)
        if not any(rule.code in _codes(s) for s in where):
            wrong.append(rule)
    assert wrong == []


def test_a_row_that_cites_the_model_for_a_code_it_lacks_is_caught() -> None:
    """The check above can fail: IAM's model has no ResourceNotFoundException."""
    assert "ResourceNotFoundException" not in _codes("iam")
    assert "NoSuchEntity" in _codes("iam")


def test_the_specific_rows_come_before_the_general_ones() -> None:
    classify = aws_errors.classify
    assert classify("eks", "CreateAddon", "ResourceInUseException") is AlreadyExists
    assert classify("eks", "AssociateAccessPolicy", "ResourceInUseException") is AlreadyExists
    assert classify("eks", "DeleteCluster", "ResourceInUseException") is InUse
    assert classify("s3", "HeadBucket", "404") is BucketNotFound
    assert classify("s3", "HeadObject", "404") is KeyNotFound
    assert issubclass(KeyNotFound, NotFound) and issubclass(BucketNotFound, NotFound)
    assert classify("ec2", "DescribeNatGateways", "NatGatewayNotFound") is NotFound
    assert classify("ec2", "DeletePlacementGroup", "InvalidPlacementGroup.InUse") is InUse
    assert classify("pcs", "CreateCluster", "ConflictException") is Conflict
    assert classify("iam", "GetRole", "ResourceNotFoundException") is NotFound
    assert classify("iam", "GetRole", "SomethingElse") is None
    # A message condition: Auto Scaling's ValidationError is "not found" only when it says so.
    op = "TerminateInstanceInAutoScalingGroup"
    assert classify("autoscaling", op, "ValidationError", "Instance Id not found") is NotFound
    assert classify("autoscaling", op, "ValidationError", "bad value") is None


def _stubbed(service: str) -> tuple[Any, Stubber]:
    client = typed_errors(
        _session.create_client(
            service,
            region_name="us-east-1",
            aws_access_key_id="k",
            aws_secret_access_key="s",
            endpoint_url="https://127.0.0.1:9",  # never reached: the stubber answers
        )
    )
    stub = Stubber(client)
    stub.activate()
    return client, stub


def test_a_typed_error_is_still_the_client_error_and_the_modeled_exception() -> None:
    iam, stub = _stubbed("iam")
    stub.add_client_error("get_role", "NoSuchEntity", "no role", 404)
    with pytest.raises(NotFound) as caught:
        iam.get_role(RoleName="gone")
    exc = caught.value
    assert isinstance(exc, ClientError)
    assert isinstance(exc, iam.exceptions.NoSuchEntityException)
    assert error_code(exc) == exc.code == "NoSuchEntity"
    assert exc.operation_name == "GetRole"
    assert "An error occurred (NoSuchEntity) when calling the GetRole operation" in str(exc)
    # Two equal errors are of one class (made once per pair).
    stub.add_client_error("get_role", "NoSuchEntity", "no role", 404)
    with pytest.raises(NotFound) as again:
        iam.get_role(RoleName="gone")
    assert type(again.value) is type(exc)


def test_a_code_of_no_known_meaning_stays_botocores_own() -> None:
    iam, stub = _stubbed("iam")
    stub.add_client_error("get_role", "ServiceFailure", "boom", 500)
    with pytest.raises(ClientError) as caught:
        iam.get_role(RoleName="x")
    assert not isinstance(caught.value, AwsProblem)
    assert type(caught.value) is iam.exceptions.ServiceFailureException


def test_an_unmodeled_code_is_typed_on_botocores_plain_client_error() -> None:
    ec2, stub = _stubbed("ec2")
    stub.add_client_error("create_security_group", "InvalidGroup.Duplicate", "exists", 400)
    with pytest.raises(AlreadyExists) as caught:
        ec2.create_security_group(GroupName="g", Description="d")
    assert isinstance(caught.value, ClientError)


def test_botocores_waiters_still_see_the_error_they_wait_out() -> None:
    """IAM's role_exists waiter retries on NoSuchEntity: a typed NotFound is still the
    ClientError its acceptor reads."""
    iam, stub = _stubbed("iam")
    stub.add_client_error("get_role", "NoSuchEntity", "not yet", 404)
    stub.add_response(
        "get_role",
        {
            "Role": {
                "Path": "/",
                "RoleName": "r",
                "RoleId": "AROAEXAMPLEEXAMPLE123",
                "Arn": "arn:aws:iam::123456789012:role/r",
                "CreateDate": "2026-12-05T00:00:00Z",
            },
            # What the waiter's success acceptor reads (the stubber adds no status of its own).
            "ResponseMetadata": {"HTTPStatusCode": 200},
        },
    )
    iam.get_waiter("role_exists").wait(RoleName="r", WaiterConfig={"Delay": 0, "MaxAttempts": 3})
    stub.assert_no_pending_responses()
