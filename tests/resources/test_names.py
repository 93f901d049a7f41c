"""The names fmctl gives what lives in account-wide (IAM) and global (S3) namespaces: over
every cluster-name length the spec allows and every region the catalog accepts, each is
within AWS's limits, valid, stable, and distinct for distinct clusters, regions and roles."""

from __future__ import annotations

import re

from provisioner.blueprint.infra import ROLES
from provisioner.catalog.regions import REGIONS
from provisioner.resources.iam import role_name, role_prefix
from provisioner.resources.names import BUCKET_NAME_LIMIT, ROLE_NAME_LIMIT, bounded
from provisioner.resources.storage import bucket_name
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
