"""The update campaign: a changed spec's `up` — a pool scaled, a pool removed, Kubernetes
upgraded (control plane, node groups, add-ons), the file system grown — SIGKILLed at every
step in turn and run again, and run under injected faults. Each time the end state is what
the spec says: nothing left to change, none twice, nothing of the removed pool left.
(Its own file: `make test` gives each file to one worker.)"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.engine.harness import ROOT, Sandbox, owned
from tests.reliability.campaign import duplicates, raw_leftovers, run_points, tally
from tests.reliability.test_faults import FAULTS
from tests.sampling import selected_params

REGION = "us-west-2"
#: What a step of `up` prints when it starts.
STARTS = (" creating", " updating", " deleting", " waiting")
#: The steps of the update below: node group scaled and rolled, control plane, system node
#: group, kube-proxy, file system, stack, and the removed pool's three resources.
KILL_POINTS = list(range(1, 10))
PARALLELISM = 4
#: `make test` tries one point in this many (a different slice each commit).
SAMPLE_STRIDE = 3
TEST = "test_an_update_killed_at_each_step_converges"


def _spec(name: str, changed: bool) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "examples" / "p5en-eks-fsx-s3.yaml").read_text())
    data["metadata"]["name"] = name
    pools = [
        {"name": "gpu", "instanceType": "p5en.48xlarge", "count": 3 if changed else 2},
        {"name": "extra", "instanceType": "p5.48xlarge", "count": 1},
    ]
    data["compute"]["gpuPools"] = pools[:1] if changed else pools
    data["storage"]["fsxLustre"].update(capacityGiB=2400 if changed else 1200, throughputPerTiB=250)
    data["kubernetes"] = {"version": "1.34" if changed else "1.33"}
    return data


def _write(folder: Path, name: str, changed: bool) -> Path:
    path = folder / f"{name}-{'after' if changed else 'before'}.yaml"
    path.write_text(yaml.safe_dump(_spec(name, changed), sort_keys=False))
    return path


def _kill_at_step(sandbox: Sandbox, spec: Path, point: int) -> list[str]:
    """`up` of ``spec``, SIGKILLed once ``point`` steps have started; its output."""
    proc = sandbox.spawn("up", "-f", str(spec), "--sandbox", "--yes")
    assert proc.stdout is not None
    seen, lines = 0, []
    for line in proc.stdout:
        lines.append(line)
        if any(marker in line for marker in STARTS):
            seen += 1
            if seen >= point:
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait(timeout=120)
    return lines


def _converged(sandbox: Sandbox, spec: Path, name: str) -> None:
    """Nothing left to change, the spec's state in AWS, none twice."""
    planned = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    acting = [
        c for c in json.loads(planned.stdout)["changes"] if c["action"] not in ("unchanged", "use")
    ]
    assert acting == [], acting
    items = owned(sandbox, name, REGION)
    assert duplicates(items) == {}
    logical = {i[1] for i in items}
    assert not {"nodegroup/extra", "launch-template/extra", "placement-group/extra"} & logical
    aws = sandbox.aws(REGION)
    eks = aws.client("eks")
    assert eks.describe_cluster(name=name)["cluster"]["version"] == "1.34"
    group = eks.describe_nodegroup(clusterName=name, nodegroupName="gpu")["nodegroup"]
    assert group["scalingConfig"]["desiredSize"] == 3 and group["version"] == "1.34"
    fs_id = next(i[2] for i in items if i[1] == "fsx")
    (fs,) = aws.client("fsx").describe_file_systems(FileSystemIds=[fs_id])["FileSystems"]
    assert fs["StorageCapacity"] == 2400


def _crash_point(sandbox: Sandbox, folder: Path, point: int) -> None:
    name = f"e2e-upd-crash-{point}"
    before, after = _write(folder, name, False), _write(folder, name, True)
    first = sandbox.fmctl("up", "-f", str(before), "--sandbox", "--yes")
    assert first.returncode == 0, first.stdout + first.stderr
    lines = _kill_at_step(sandbox, after, point)
    assert not any(" existed (" in line for line in lines), "the update ended before its kill"
    tally.add(crashes_tried=1)
    rerun = sandbox.fmctl("up", "-f", str(after), "--sandbox", "--yes")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    _converged(sandbox, after, name)
    down = sandbox.fmctl("down", name, "--region", REGION, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, REGION) == []


@pytest.fixture(scope="module")
def crash_runs(
    sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[int, BaseException | None]:
    """This run's kill points (tests/sampling.py), PARALLELISM at a time; what each raised."""
    chosen = [int(str(p["point"])) for p in selected_params(request.session, request.module, TEST)]
    folder = tmp_path_factory.mktemp("update-crashes")
    return run_points(
        chosen, lambda point: _crash_point(sandbox, folder, point), PARALLELISM, "update-crash"
    )


@pytest.mark.timeout(1200)
@pytest.mark.campaign(stride=SAMPLE_STRIDE)
@pytest.mark.parametrize("point", KILL_POINTS)
def test_an_update_killed_at_each_step_converges(
    crash_runs: dict[int, BaseException | None], point: int
) -> None:
    """See ``_crash_point``."""
    error = crash_runs[point]
    if error is not None:
        raise error


def test_an_update_survives_faults(sandbox: Sandbox, tmp_path: Path) -> None:
    """Throttling, 5xx, resets and slow answers on a share of every call, and each update
    call failing twice first: the update still lands once, exactly as planned."""
    name = "e2e-upd-faults"
    before, after = _write(tmp_path, name, False), _write(tmp_path, name, True)
    assert sandbox.fmctl("up", "-f", str(before), "--sandbox", "--yes").returncode == 0
    updates = [
        "UpdateNodegroupConfig",
        "UpdateNodegroupVersion",
        "UpdateClusterVersion",
        "UpdateAddon",
        "UpdateFileSystem",
        "DeleteNodegroup",
        "DeleteLaunchTemplate",
        "DeletePlacementGroup",
    ]
    start = len(sandbox.requests())
    sandbox.faults(
        [
            {"action": a, "times": 2, "kind": "error", "status": 503, "code": "ServiceUnavailable"}
            for a in updates
        ]
        + FAULTS
    )
    done = sandbox.fmctl("up", "-f", str(after), "--sandbox", "--yes", timeout=300)
    sandbox.faults([])
    if done.returncode != 0:  # a fault that outlasted the retries: says so, resumes
        assert "`fmctl up` again resumes" in done.stderr and "Traceback" not in done.stderr
        again = sandbox.fmctl("up", "-f", str(after), "--sandbox", "--yes")
        assert again.returncode == 0, again.stdout + again.stderr
    _converged(sandbox, after, name)
    # Carried out: not faulted, or only slowed down.
    calls = [r for r in sandbox.requests()[start:] if r["fault"] in (None, "slow")]
    landed = [r["action"] for r in calls if r["action"] == "UpdateClusterVersion"]
    assert landed == ["UpdateClusterVersion"], "one upgrade, however many tries"
    assert sandbox.fmctl("down", name, "--region", REGION, "--sandbox", "--yes").returncode == 0
    assert raw_leftovers(sandbox, name, REGION) == []
