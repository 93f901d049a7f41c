"""Faults: throttling, 5xx, connection resets and slow answers injected into a share of calls
at the HTTP layer, failures of given calls, lost answers, a stop mid-way. The end state must
equal a clean run's, with no duplicate and nothing left after down. (The crashes are in
test_crashes.py.)"""

from __future__ import annotations

from pathlib import Path

from tests.engine.harness import (
    Sandbox,
    owned,
    region_of,
    spec_file,
)
from tests.engine.test_lifecycle import P5EN_RESOURCES
from tests.reliability.campaign import duplicates, raw_leftovers

FAULTS = [
    {"action": "*", "share": 0.12, "kind": "error", "status": 503, "code": "ServiceUnavailable"},
    {"action": "*", "share": 0.08, "kind": "error", "status": 500, "code": "InternalError"},
    {"action": "*", "share": 0.08, "kind": "error", "status": 400, "code": "Throttling"},
    {"action": "*", "share": 0.05, "kind": "error", "status": 503, "code": "RequestLimitExceeded"},
    {"action": "*", "share": 0.04, "kind": "reset"},
    {"action": "*", "share": 0.04, "kind": "slow", "delay": 0.3},
]


def test_up_and_down_survive_faults(sandbox: Sandbox, tmp_path: Path) -> None:
    name = "e2e-faults"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    before = len(sandbox.requests())
    sandbox.faults(FAULTS)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    sandbox.faults([])
    items = owned(sandbox, name, region)
    assert {logical for _, logical, _ in items} == P5EN_RESOURCES
    assert duplicates(items) == {}
    sandbox.faults(FAULTS)
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    sandbox.faults([])
    assert raw_leftovers(sandbox, name, region) == []
    injected = [r for r in sandbox.requests()[before:] if r["fault"]]
    kinds = {r["fault"] for r in injected}
    assert len(injected) >= 10 and kinds >= {"error", "reset", "slow"}


def test_faults_on_every_create_are_retried(sandbox: Sandbox, tmp_path: Path) -> None:
    name = "e2e-faults-create"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    creates = [
        "CreateVpc",
        "CreateSubnet",
        "CreateInternetGateway",
        "AllocateAddress",
        "CreateNatGateway",
        "CreateRouteTable",
        "CreateVpcEndpoint",
        "CreateSecurityGroup",
        "CreatePlacementGroup",
        "CreateFileSystem",
        "CreateDataRepositoryAssociation",
        "DescribeFileSystems",
        "CreateKey",
        "CreateCluster",
        "CreateAccessEntry",
        "CreateLaunchTemplate",
        "CreateNodegroup",
        "CreateAddon",
    ]
    sandbox.faults(
        [
            {"action": a, "times": 2, "kind": "error", "status": 503, "code": "ServiceUnavailable"}
            for a in creates
        ]
    )
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    sandbox.faults([])
    assert up.returncode == 0, up.stdout + up.stderr
    items = owned(sandbox, name, region)
    assert duplicates(items) == {} and {i[1] for i in items} == P5EN_RESOURCES
    assert sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes").returncode == 0
    assert raw_leftovers(sandbox, name, region) == []


def test_a_failure_that_does_not_pass_stops_cleanly(sandbox: Sandbox, tmp_path: Path) -> None:
    name = "e2e-hard-fail"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    sandbox.faults(
        [
            {
                "action": "CreateFileSystem",
                "kind": "error",
                "status": 400,
                "code": "ServiceLimitExceeded",
            }
        ]
    )
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    sandbox.faults([])
    assert up.returncode == 1
    assert "error: fsx: ServiceLimitExceeded" in up.stderr
    assert "`fmctl up` again resumes" in up.stderr and "Traceback" not in up.stderr
    resumed = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert resumed.returncode == 0, resumed.stderr
    assert duplicates(owned(sandbox, name, region)) == {}
    sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert raw_leftovers(sandbox, name, region) == []


#: Creates that take no client token: a lost answer must not become a second resource.
TOKENLESS = [
    "CreateVpc",
    "CreateSubnet",
    "CreateInternetGateway",
    "AllocateAddress",
    "CreateRouteTable",
    "CreateSecurityGroup",
    "CreatePlacementGroup",
    "CreateKey",
]


def test_lost_answers_to_creates_make_no_duplicates(sandbox: Sandbox, tmp_path: Path) -> None:
    name = "e2e-lost-answers"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    before = len(sandbox.requests())
    sandbox.faults([{"action": a, "times": 1, "kind": "reset-after"} for a in TOKENLESS])
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    sandbox.faults([])
    executed = [r["action"] for r in sandbox.requests()[before:] if r["fault"] == "reset-after"]
    assert up.returncode == 0, up.stdout + up.stderr
    assert set(executed) == set(TOKENLESS), executed
    items = owned(sandbox, name, region)
    assert duplicates(items) == {}
    assert {logical for _, logical, _ in items} == P5EN_RESOURCES
    assert sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes").returncode == 0
    assert raw_leftovers(sandbox, name, region) == []


def test_down_after_a_stop_between_the_instance_profile_steps(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Found by killing `down` at every step: stopped after taking the node role out of its
    instance profile and before deleting the profile, the next `down` no longer found the
    profile through the role, and it stayed. The exact state, made by hand."""
    name = "e2e-profile-stop"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    assert sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes").returncode == 0
    iam = sandbox.aws(region).client("iam")
    profile = f"fmctl-{name}-{region}-eks-node"
    iam.remove_role_from_instance_profile(InstanceProfileName=profile, RoleName=profile)
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []
    # And with the role itself gone too (deleted by hand): the profile is still found.
    assert sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes").returncode == 0
    iam.remove_role_from_instance_profile(InstanceProfileName=profile, RoleName=profile)
    for policy in iam.list_attached_role_policies(RoleName=profile)["AttachedPolicies"]:
        iam.detach_role_policy(RoleName=profile, PolicyArn=policy["PolicyArn"])
    iam.delete_role(RoleName=profile)
    again = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert raw_leftovers(sandbox, name, region) == []


#: The calls `down` deletes with, and the ones waits poll with.
DELETES = [
    "DeleteVpc",
    "DeleteSubnet",
    "DetachInternetGateway",
    "DeleteInternetGateway",
    "ReleaseAddress",
    "DeleteNatGateway",
    "DeleteRouteTable",
    "DeleteVpcEndpoints",
    "DeleteSecurityGroup",
    "DeletePlacementGroup",
    "DeleteFileSystem",
    "DeleteDataRepositoryAssociation",
    "DeleteRole",
    "DeleteInstanceProfile",
    "DeleteNodegroup",
    "DeleteAddon",
    "DeleteAccessEntry",
    "DeleteCluster",
    "DeleteLaunchTemplate",
    "ScheduleKeyDeletion",
]
WAITS = [
    "DescribeNatGateways",
    "DescribeFileSystems",
    "DescribeDataRepositoryAssociations",
    "DescribeCluster",
    "DescribeNodegroup",
    "DescribeAddon",
]


def test_faults_on_every_delete_and_wait(sandbox: Sandbox, tmp_path: Path) -> None:
    """Each delete and each wait's poll throttled, failed or cut twice: same end state."""
    name = "e2e-faults-delete"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    waits = [
        {"action": a, "times": 2, "kind": "error", "status": 400, "code": "ThrottlingException"}
        for a in WAITS
    ]
    sandbox.faults(waits)
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    sandbox.faults([])
    assert up.returncode == 0, up.stdout + up.stderr
    assert duplicates(owned(sandbox, name, region)) == {}
    before = len(sandbox.requests())
    rules = (
        [
            {
                "action": a,
                "times": 1,
                "kind": "error",
                "status": 503,
                "code": "RequestLimitExceeded",
            }
            for a in DELETES
        ]
        + [{"action": a, "times": 1, "kind": "reset"} for a in DELETES]
        + waits
    )
    sandbox.faults(rules)
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes", timeout=300)
    sandbox.faults([])
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []
    hit = {r["action"] for r in sandbox.requests()[before:] if r["fault"]}
    assert {
        "DeleteVpc",
        "DeleteFileSystem",
        "DeleteRole",
        "DeleteCluster",
        "DeleteNodegroup",
    } <= hit
