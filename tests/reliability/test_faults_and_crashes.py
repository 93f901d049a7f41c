"""Crashes and faults: `up` and `down` SIGKILLed at every step of the plan in turn and run
again; throttling, 5xx, connection resets and slow answers injected into a share of calls at
the HTTP layer. The end state must equal a clean run's, with no duplicate and nothing left
after down."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.harness import (
    Sandbox,
    kill_after,
    owned,
    region_of,
    spec_file,
)
from tests.engine.harness import duplicates as _duplicates
from tests.engine.harness import raw_leftovers as _raw_leftovers
from tests.engine.test_lifecycle import P5EN_RESOURCES
from tests.reliability.campaign import tally


def raw_leftovers(sandbox: Sandbox, name: str, region: str) -> list[str]:
    """What is left tagged as the cluster's (counted for the campaign's report)."""
    left = _raw_leftovers(sandbox, name, region)
    tally.add(orphans_found=len(left))
    return left


def duplicates(items: list[tuple[str, str, str]]) -> dict[tuple[str, str], int]:
    """Logical ids that exist more than once (counted for the campaign's report)."""
    found = _duplicates(items)
    tally.add(duplicates_found=sum(n - 1 for n in found.values()))
    return found


#: Kill `up` after the Nth resource started being created, and `down` after the Nth started
#: being deleted: every step of the plan in turn.
KILL_POINTS = list(range(1, len(P5EN_RESOURCES) + 1))
#: Crash points run this many at a time (each one its own cluster): the runs mostly wait on
#: the emulator's clock, and one after another they took longer than the rest of the suite.
CRASH_PARALLELISM = 4


def _crash_point(sandbox: Sandbox, tmp_path: Path, point: int) -> None:
    """`up` SIGKILLed after the Nth create started, run again: the clean run's resources,
    none twice, none replaced. Then `down` SIGKILLed after the Nth delete started, run again:
    nothing left. (One cluster per step serves both crashes.)"""
    name = f"e2e-crash-{point}"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    proc = sandbox.spawn("up", "-f", str(spec), "--sandbox", "--yes")
    lines = kill_after(proc, " creating", point)
    assert proc.returncode == -9, "".join(lines)
    tally.add(crashes_tried=1)
    partial = owned(sandbox, name, region)
    assert duplicates(partial) == {}
    rerun = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    items = owned(sandbox, name, region)
    assert {logical for _, logical, _ in items} == P5EN_RESOURCES
    assert duplicates(items) == {}
    # What existed before the crash was kept, not replaced.
    assert {i[2] for i in partial} <= {i[2] for i in items}

    proc = sandbox.spawn("down", name, "--region", region, "--sandbox", "--yes")
    lines = kill_after(proc, " deleting", point)
    assert proc.returncode == -9, "".join(lines)
    tally.add(crashes_tried=1)
    again = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert raw_leftovers(sandbox, name, region) == []


@pytest.fixture(scope="module")
def crash_runs(
    sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, BaseException | None]:
    """Every crash point, CRASH_PARALLELISM at a time; what each one raised."""
    from concurrent.futures import ThreadPoolExecutor

    tmp = tmp_path_factory.mktemp("crashes")

    def run(point: int) -> BaseException | None:
        try:
            _crash_point(sandbox, tmp, point)
        except BaseException as exc:  # reported by the point's own test
            return exc
        return None

    with ThreadPoolExecutor(CRASH_PARALLELISM, thread_name_prefix="crash") as pool:
        return dict(zip(KILL_POINTS, pool.map(run, KILL_POINTS), strict=True))


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("point", KILL_POINTS)
def test_killed_at_each_step_then_rerun(
    crash_runs: dict[int, BaseException | None], point: int
) -> None:
    """See ``_crash_point``: killed at step ``point`` of `up`, then of `down`."""
    error = crash_runs[point]
    if error is not None:
        raise error


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
