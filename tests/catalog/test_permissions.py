"""The caller's permissions (provisioner/catalog/permissions.py) against the product's source,
botocore's models and IAM's rules. The sandbox tiers check the other direction: each call
fmctl makes there is listed (tests/tools/permissions.py, in tests/engine/conftest.py)."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore import xform_name
from click.testing import CliRunner

from provisioner.blueprint.infra import ROLES
from provisioner.catalog import pcs as pcs_catalog
from provisioner.catalog import permissions as p
from provisioner.resources.iam import POLICY_PATH, role_name
from tests.tools.permissions import check, operation

ROOT = Path(__file__).resolve().parents[2]
#: Method names the scan below finds that are not AWS calls.
NOT_AWS = {
    "get_template": "jinja2's Environment.get_template (render/engine.py)",
    "invoke": "click's Command.invoke (cli/common.py)",
}
CLIENT_CALL = re.compile(r"\.([a-z][a-z0-9_]*)\(|get_paginator\(\s*\"([a-z0-9_]+)\"")


@cache
def _models() -> dict[str, frozenset[str]]:
    session = botocore.session.get_session()
    return {s: frozenset(session.get_service_model(s).operation_names) for s in p.CALLS}


@cache
def _source() -> str:
    return "\n".join(f.read_text() for f in sorted((ROOT / "provisioner").rglob("*.py")))


def _listed() -> list[tuple[str, str]]:
    return [(s, op) for s, ops in p.CALLS.items() for op in ops.split()]


def test_every_listed_call_is_an_operation_of_its_service() -> None:
    unknown = [f"{s}:{op}" for s, op in _listed() if op not in _models()[s]]
    assert not unknown, f"not operations in botocore's models: {unknown}"


def test_every_aws_call_in_the_product_is_listed() -> None:
    """A client method anywhere in provisioner/ whose name is an operation of a service fmctl
    uses: some service's operation of that name is listed (a name shared by services, like
    tag_resource, cannot say which, so the sandbox tiers check those)."""
    by_name: dict[str, set[tuple[str, str]]] = {}
    for service, operations in _models().items():
        for op in operations:
            by_name.setdefault(xform_name(op), set()).add((service, op))
    listed = set(_listed())
    missing = set()
    for match in CLIENT_CALL.finditer(_source()):
        name = match.group(1) or match.group(2)
        if name in by_name and name not in NOT_AWS and not by_name[name] & listed:
            missing.add(name)
    assert not missing, f"called in provisioner/ but not in CALLS: {sorted(missing)}"


def test_every_listed_call_is_made_by_the_product() -> None:
    """No stale grant: each listed operation is named somewhere in provisioner/, as a method
    or paginator name or in the tables that name calls as data (the leftover listings)."""
    words = set(re.findall(r"\b[A-Za-z][A-Za-z0-9_]*\b", _source()))
    stale = [f"{s}:{op}" for s, op in _listed() if xform_name(op) not in words and op not in words]
    assert not stale, f"listed but never called by provisioner/: {stale}"


def test_s3_actions_are_the_ones_botocore_documents() -> None:
    """Each S3 row's actions are named in that operation's documentation in botocore's model
    (which carries the S3 API reference's "Permissions" paragraphs)."""
    model = botocore.session.get_session().get_service_model("s3")
    for call, actions in p.ACTIONS.items():
        service, op = call.split(":")
        if service == "s3":
            doc = model.operation_model(op).documentation
            assert all(a in doc for a in actions), (call, actions)


def test_extra_rows_name_listed_calls() -> None:
    listed = {f"{p.prefix(s)}:{op}" for s, op in _listed()}
    assert set(p.ACTIONS) <= listed
    assert {also.call for also in p.ALSO} <= listed
    assert all(also.source for also in p.ALSO)


def test_policies_fit_iams_limit_and_grant_every_action() -> None:
    docs = p.policies()
    granted: list[str] = []
    for _, doc in docs:
        assert len("".join(json.dumps(doc).split())) <= p.POLICY_LIMIT
        sids = [s["Sid"] for s in doc["Statement"]]
        assert len(sids) == len(set(sids))
        granted += [a for s in doc["Statement"] for a in s["Action"]]
    # Every action, each once but iam:PassRole (fmctl's roles and PCS's node roles apart).
    assert sorted(set(granted)) == p.required_actions()
    assert [a for a in granted if granted.count(a) > 1] == ["iam:PassRole"] * 2
    assert "sts:GetCallerIdentity" not in granted  # needs no permission
    assert {"s3:ListBucket", "budgets:ModifyBudget", "iam:PassRole"} <= set(granted)
    assert "s3:HeadBucket" not in granted  # not an IAM action


def test_iam_writes_reach_fmctls_own_names_only() -> None:
    statements = [s for _, doc in p.policies() for s in doc["Statement"]]
    for statement in statements:
        iam = [a for a in statement["Action"] if a.startswith("iam:")]
        if statement["Resource"] == "*" and iam:
            # Reads of no resource, and service-linked roles of the listed services only.
            assert set(iam) <= p.IAM_ANY | {"iam:CreateServiceLinkedRole"}, statement
            if "iam:CreateServiceLinkedRole" in iam:
                names = statement["Condition"]["StringEquals"]["iam:AWSServiceName"]
                assert set(names) == set(p.SERVICE_LINKED)
    passing = [s for s in statements if s["Action"] == ["iam:PassRole"]]
    for statement in passing:
        resources = statement["Resource"]
        assert all(
            "fmctl-" in r for r in ([resources] if isinstance(resources, str) else resources)
        )
    # fmctl's roles go only to the services fmctl hands them to; PCS's node roles (their
    # path) with their instance profile, which PCS documents without the service.
    own = next(s for s in passing if s["Resource"] == "arn:*:iam::*:role/fmctl-*")
    services = own["Condition"]["StringEquals"]["iam:PassedToService"]
    assert sorted(services) == sorted({to for to, _ in p.PASSED_TO.values()})
    pcs = next(s for s in passing if s is not own)
    assert pcs["Resource"] == f"arn:*:iam::*:role{pcs_catalog.ROLE_PATH}fmctl-*"


def test_every_call_that_passes_a_role_says_to_which_service() -> None:
    """Each call that needs iam:PassRole (but PCS's, see PASSED_TO) has its service, the
    one the sandbox's check judges it by (written there from AWS's documents)."""
    from tests.tools.permissions import PASSED_TO_SERVICE

    passing = {a.call for a in p.ALSO if "iam:PassRole" in a.actions}
    assert passing - {"pcs:CreateComputeNodeGroup", "pcs:UpdateComputeNodeGroup"} == set(
        p.PASSED_TO
    )
    for call, (service, source) in p.PASSED_TO.items():
        assert PASSED_TO_SERVICE[call] == service and source, call


def test_fmctls_iam_names_fall_under_the_granted_patterns() -> None:
    long = role_name("a" * 40, "ap-southeast-2", "cluster-autoscaler")  # bounded to 64
    for name in (role_name("c", "us-west-2", "eks-node"), long):
        assert name.startswith("fmctl-") and len(name) <= 64
    assert f"arn:*:iam::*:policy{POLICY_PATH}fmctl-*" in p.OWN_IAM
    assert f"arn:*:iam::*:role{pcs_catalog.ROLE_PATH}fmctl-*" in p.OWN_IAM


def test_attachable_policies_are_the_ones_fmctls_roles_carry() -> None:
    carried = {policy for _, managed in ROLES.values() for policy in managed}
    assert carried == set(p.MANAGED_POLICIES)


def test_the_sandbox_check_fails_on_an_unlisted_call_of_fmctls_only() -> None:
    ours, theirs = "fmctl/0.1.0", "fmctl-tests/harness"
    entries: list[dict[str, Any]] = [
        {"service": "ec2", "action": "RunInstances", "agent": ours},
        {"service": "ec2", "action": "CreateVpc", "agent": ours},
        {"service": "ec2", "action": "AcceptVpcPeeringConnection", "agent": theirs},
        {"service": "ec2", "action": "ImportKeyPair", "agent": None},
        {"service": "kubernetes", "action": "GET /api/v1/nodes", "agent": ours},
        {"service": "s3", "action": "GET /b/k", "query": "", "agent": ours},
        {"service": "s3", "action": "PUT /b", "query": "acl", "agent": ours},
    ]
    assert check(entries, "t") == ["ec2:RunInstances", "s3:PutBucketAcl"]


def test_the_sandbox_check_holds_fmctls_iam_calls_to_its_own_names() -> None:
    def iam(action: str, **names: str) -> dict[str, Any]:
        return {"service": "iam", "action": action, "agent": "fmctl/0.1.0", "names": names}

    admin = "arn:aws:iam::aws:policy/AdministratorAccess"
    cni = "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"
    fine = [
        iam("CreateRole", RoleName="fmctl-c-us-west-2-pcs-node", Path="/aws-pcs/"),
        iam(
            "AttachRolePolicy",
            RoleName="fmctl-c-r-eks-node",
            PolicyArn=cni,
        ),
        iam("CreatePolicy", PolicyName="fmctl-c-r-amp", Path="/parallelcluster/"),
        iam("PutRolePolicy", RoleName="fmctl-c-r-x", PolicyName="inline"),
        iam("GetRole", RoleName="someone-elses"),  # a read of any role
    ]
    assert check(fine, "t") == []
    wrong = [
        iam("DeleteRole", RoleName="ops-admin"),
        iam("AttachRolePolicy", RoleName="fmctl-c-r-eks-node", PolicyArn=admin),
        iam("CreatePolicy", PolicyName="fmctl-c-r-amp", Path="/"),
    ]
    assert len(check(wrong, "t")) == 3


def test_the_sandbox_check_judges_the_roles_fmctl_passes() -> None:
    def create(role: str) -> dict[str, Any]:
        return {
            "service": "eks",
            "action": "CreateCluster",
            "agent": "fmctl/0.1.0",
            "passes": [f"arn:aws:iam::123456789012:role/{role}"],
        }

    assert check([create("fmctl-c-us-west-2-eks-cluster")], "t") == []
    (said,) = check([create("platform-admin")], "t")
    assert said.startswith("not granted by its policies: iam:PassRole of ") and "admin" in said
    # fmctl's own role, handed to a service fmctl never hands it to, is not granted either.
    from tests.tools.permissions import _granted

    role = "arn:aws:iam::123456789012:role/fmctl-c-us-west-2-eks-cluster"
    assert _granted("iam:PassRole", role, None, "eks.amazonaws.com")
    assert not _granted("iam:PassRole", role, None, "codebuild.amazonaws.com")
    assert not _granted("iam:PassRole", role, None, None)


def test_the_sandbox_check_judges_the_printed_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listed call the documents do not grant (here: S3's statement lost) is caught."""
    from tests.tools import permissions as checker

    def without_s3(name: str = "fmctl-caller") -> list[tuple[str, dict[str, Any]]]:
        return [
            (n, {**d, "Statement": [s for s in d["Statement"] if s["Sid"] != "S3"]})
            for n, d in real(name)
        ]

    real = p.policies
    monkeypatch.setattr(p, "policies", without_s3)
    checker._statements.cache_clear()
    try:
        head = {"service": "s3", "action": "HEAD /b", "query": "", "agent": "fmctl/0.1.0"}
        said = check([head], "t")
    finally:
        monkeypatch.undo()
        checker._statements.cache_clear()
    assert said == ["not granted by its policies: s3:ListBucket on its resource"]
    assert check([head], "t") == []


@pytest.mark.parametrize(
    ("service", "action", "query", "expected"),
    [
        ("s3", "HEAD /b", "", "HeadBucket"),
        ("s3", "GET /b", "list-type=2&prefix=x", "ListObjectsV2"),
        ("s3", "GET /b", "versions", "ListObjectVersions"),
        ("s3", "POST /b", "delete", "DeleteObjects"),
        ("s3", "PUT /b/k/l.json", "", "PutObject"),  # not CopyObject: no copy-source header
        ("s3", "DELETE /b/k", "", "DeleteObject"),  # not AbortMultipartUpload: no uploadId
        ("s3", "PUT /b", "publicAccessBlock", "PutPublicAccessBlock"),
        ("s3", "PUT /b", "lifecycle", "PutBucketLifecycleConfiguration"),  # not deprecated
        ("lambda", "GET /2015-03-31/functions/f/configuration", "", "GetFunctionConfiguration"),
        ("scheduler", "POST /tags/arn:aws:scheduler:r:1:schedule-group/g", "", "TagResource"),
        ("ec2", "DescribeVpcs", "", "DescribeVpcs"),
    ],
)
def test_rest_calls_are_named_by_botocores_request_templates(
    service: str, action: str, query: str, expected: str
) -> None:
    assert operation(service, action, query) == expected


def test_permissions_command() -> None:
    from provisioner.cli.main import cli

    runner = CliRunner()
    out = runner.invoke(cli, ["permissions", "-o", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    names = [d["name"] for d in data["policies"]]
    assert names == [f"fmctl-caller-{i}" for i in range(1, len(names) + 1)]
    assert data["calls"]["s3:HeadBucket"] == ["s3:ListBucket"]
    assert "iam:PassRole" in data["calls"]["eks:CreateCluster"]
    text = runner.invoke(cli, ["permissions", "--name", "ml-infra"])
    assert text.exit_code == 0 and "ml-infra-1:" in text.output
    bad = runner.invoke(cli, ["permissions", "--name", "ml infra"])
    assert bad.exit_code == 1 and "--name: 'ml infra' cannot name an IAM policy" in bad.output
