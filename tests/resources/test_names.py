"""The names fmctl gives what lives in account-wide (IAM) and global (S3) namespaces: over
every cluster-name length the spec allows and every region the catalog accepts, each is
within AWS's limits, valid, stable, and distinct for distinct clusters, regions and roles."""

from __future__ import annotations

import json
import re

from provisioner.blueprint.infra import ROLES
from provisioner.catalog.regions import REGIONS
from provisioner.resources.iam import owned_here, role_name, role_prefix
from provisioner.resources.names import BUCKET_NAME_LIMIT, ROLE_NAME_LIMIT, bounded
from provisioner.resources.storage import bucket_name
from provisioner.resources.tags import DesiredTags, Tags
from provisioner.validate.rules.general import NAME_RE

ACCOUNT = "123456789012"
#: IAM's characters for role names (IAM API reference, CreateRole: [\w+=,.@-]+).
ROLE_RE = re.compile(r"^[\w+=,.@-]{1,64}$")
#: S3's general purpose bucket naming rules (lowercase letters, digits, hyphens here).
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
#: Every role fmctl makes: the blueprint's, and the policy named like a role.
ROLE_KINDS = (*ROLES, "amp-write")


def _clusters() -> list[str]:
    """Names of every allowed length, and pairs that differ only at their end (what cutting
    at a limit would lose)."""
    names = []
    for length in range(3, 41):
        base = ("gpu-training-" * 4)[: length - 1] + "x"
        names += [base, base[:-1] + "z"]
    assert all(NAME_RE.match(n) for n in names), [n for n in names if not NAME_RE.match(n)]
    return sorted(set(names))


def test_role_names_are_valid_distinct_and_found_by_prefix() -> None:
    seen: dict[str, tuple[str, str, str]] = {}
    for cluster in _clusters():
        for region in REGIONS:
            prefix = role_prefix(cluster, region)
            for role in ROLE_KINDS:
                name = role_name(cluster, region, role)
                assert ROLE_RE.match(name) and len(name) <= ROLE_NAME_LIMIT, name
                assert name == role_name(cluster, region, role)
                assert name.startswith(prefix), (name, prefix)
                assert seen.setdefault(name, (cluster, region, role)) == (cluster, region, role)
    assert len(seen) == len(_clusters()) * len(REGIONS) * len(ROLE_KINDS)


def test_bucket_names_are_valid_distinct_and_keep_the_region_apart() -> None:
    seen: dict[str, tuple[str, str]] = {}
    for cluster in _clusters():
        for region in REGIONS:
            name = bucket_name(cluster, ACCOUNT, region)
            assert BUCKET_RE.match(name) and len(name) <= BUCKET_NAME_LIMIT, name
            assert seen.setdefault(name, (cluster, region)) == (cluster, region)
    assert len(seen) == len(_clusters()) * len(REGIONS)


def test_names_that_fit_are_the_readable_ones() -> None:
    # Clusters made before names were bounded keep theirs: a fitting name is unchanged.
    assert role_name("demo", "us-east-1", "eks-node") == "fmctl-demo-us-east-1-eks-node"
    assert bucket_name("demo", ACCOUNT, "us-east-1") == f"fmctl-demo-{ACCOUNT}-us-east-1"
    cut = bounded("x" * 70, 64)
    assert len(cut) == 64 and cut.startswith("x" * 55 + "-")


# -- ownership across regions: IAM is one namespace for the account ------------------------


def _made(cluster: str, region: str, role: str, legacy: bool) -> tuple[str, Tags]:
    """The name and tags of role ``role`` fmctl made for ``cluster`` in ``region`` (legacy:
    as fmctl made it before it wrote the region tag)."""
    desired = DesiredTags((), cluster, f"iam/{role}", region=None if legacy else region)
    return role_name(cluster, region, role), desired.resolve("2026-12-01T00:00:00Z")


def test_find_owned_never_takes_another_regions_iam_object() -> None:
    """Over every cluster-name length and every pair of regions: an IAM object fmctl made
    for the cluster in one region is never owned in another, though its name may start with
    the other region's prefix (cut names: ``fmctl-NAME-ap-north…`` in ap-northeast-1 and -2);
    in its own region it is. Both with the region tag and without (objects made before it)."""
    shared = 0
    for cluster in _clusters():
        for here in REGIONS:
            for role in ROLE_KINDS:
                for legacy in (False, True):
                    name, tags = _made(cluster, here, role, legacy)
                    assert owned_here(name, tags, cluster, here), (cluster, here, role, legacy)
                    for there in REGIONS:
                        if there == here:
                            continue
                        shared += name.startswith(role_prefix(cluster, there))
                        assert not owned_here(name, tags, cluster, there), (cluster, here, there)
    # The grid reaches the case that lost data: names listed under the other region's prefix.
    assert shared > 0


def test_find_owned_of_roles_and_policies_in_the_emulator() -> None:
    """The worst case end to end, in moto's IAM: a 40-character cluster in ap-northeast-1
    and ap-northeast-2 (the same cut prefix); each region's find_owned returns its own role,
    profile and policy, never the other's; a same-tagged object of another cluster neither."""
    import boto3
    from moto import mock_aws

    from provisioner.resources.context import Context
    from provisioner.resources.iam import POLICY_PATH, ManagedPolicy, Role

    cluster = ("gpu-training-" * 4)[:40]
    regions = ("ap-northeast-1", "ap-northeast-2")
    assert role_prefix(cluster, regions[0]) == role_prefix(cluster, regions[1])

    class Aws:
        def __init__(self, region: str) -> None:
            self.region = region

        def client(self, service: str, retries: bool = True) -> object:
            return boto3.client(service, region_name=self.region)

    with mock_aws():
        iam = boto3.client("iam", region_name="us-east-1")
        for region in regions:
            for role in ("eks-node", "amp-write"):
                name, tags = _made(cluster, region, role, legacy=region == regions[1])
                pairs = [{"Key": k, "Value": v} for k, v in tags.as_dict().items()]
                if role == "amp-write":
                    document = {
                        "Version": "2012-10-17",
                        "Statement": [
                            {"Effect": "Allow", "Action": "aps:RemoteWrite", "Resource": "*"}
                        ],
                    }
                    iam.create_policy(
                        PolicyName=name,
                        Path=POLICY_PATH,
                        PolicyDocument=json.dumps(document),
                        Tags=pairs,
                    )
                    continue
                iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}", Tags=pairs)
                iam.create_instance_profile(InstanceProfileName=name, Tags=pairs)
        for region in regions:
            ctx = Context(aws=Aws(region), cluster=cluster, region=region)  # type: ignore[arg-type]
            roles = {o.id for o in Role().find_owned(ctx)}
            policies = {o.id.rsplit("/", 1)[1] for o in ManagedPolicy().find_owned(ctx)}
            assert roles == {role_name(cluster, region, "eks-node")}, (region, roles)
            assert policies == {role_name(cluster, region, "amp-write")}, (region, policies)
        # Roles gone, a profile left behind (a `down` cut short): still only its region's.
        for region in regions:
            iam.delete_role(RoleName=role_name(cluster, region, "eks-node"))
        for region in regions:
            ctx = Context(aws=Aws(region), cluster=cluster, region=region)  # type: ignore[arg-type]
            assert {o.id for o in Role().find_owned(ctx)} == {
                role_name(cluster, region, "eks-node")
            }
