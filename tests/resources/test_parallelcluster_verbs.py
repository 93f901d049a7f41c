"""The ParallelCluster cluster's and its early validation step's verbs against the stand-in
`pcluster` (tests/tools/fake_pcluster.py: ParallelCluster's JSON shapes, statuses and exit
codes, dry runs' 1-on-success included) and recorded EC2 answers. Read: the cluster as
describe-cluster gives it (a failed create says why, one on its way is waited for); diff:
ParallelCluster's own changeSet and update policy (update-cluster --dryrun); a create whose
answer was lost is found by the next read, on its way, and waited for, never created twice;
delete waits until ParallelCluster no longer knows the cluster, then terminates the compute
nodes Slurm launched that outlived its stack. The validation step runs the validators once,
and passes for good once the cluster exists."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from provisioner.drivers.pcluster import PclusterError
from provisioner.graph.ref import Ref
from provisioner.resources.base import How, Owned, Request
from provisioner.resources.compute import SgOut
from provisioner.resources.context import Context
from provisioner.resources.network import SubnetOut, VpcOut
from provisioner.resources.parallelcluster import ParallelClusterKind, PclusterOut, PclusterParams
from provisioner.resources.pcluster_check import (
    CheckOut,
    CheckParams,
    ConfigRefs,
    ParallelClusterCheck,
)
from provisioner.resources.storage import ArtifactsOut, BucketOut
from tests.resources.contract import covers
from tests.resources.recorded import RecordedAws

FAKE = Path(__file__).resolve().parents[1] / "tools" / "fake_pcluster.py"
CLUSTER = "llm"
CONFIG = """Region: us-east-1
HeadNode:
  Networking: {SubnetId: <fmctl:publicSubnetId>}
Scheduling:
  Scheduler: slurm
  SlurmQueues:
    - Name: train
      Networking:
        SubnetIds: [<fmctl:privateSubnetId>]
        SecurityGroups: [<fmctl:efaSecurityGroupId>]
      ComputeResources:
        - {Name: p5, InstanceType: p5.48xlarge, MinCount: 0, MaxCount: MAX}
"""


class PclusterAws(RecordedAws):
    """Recorded AWS, and the stand-in `pcluster`'s environment (its state file, scenario)."""

    def __init__(self, folder: Path, scenario: str = "ok", steps: int = 2) -> None:
        super().__init__()
        self.folder = folder
        self.scenario, self.steps = scenario, steps

    def child_env(self) -> dict[str, str]:
        return {
            "FAKE_PCLUSTER_STATE": str(self.folder / "pcluster-state.json"),
            "FAKE_PCLUSTER_SCENARIO": self.scenario,
            "FAKE_PCLUSTER_STEPS": str(self.steps),
            "PATH": "/usr/bin:/bin",
        }

    def calls(self) -> list[str]:
        """The pcluster commands run so far (a dry run marked)."""
        state = json.loads((self.folder / "pcluster-state.json").read_text())
        return [c[0] + (" --dryrun" if c[2] == "true" else "") for c in state["calls"]]


def _ctx(aws: PclusterAws) -> Context:
    ctx = Context(
        aws=aws,  # type: ignore[arg-type]
        cluster=CLUSTER,
        region="us-east-1",
        time_scale=0.001,
        pcluster=[sys.executable, str(FAKE)],
    )
    ctx.record("vpc", VpcOut("vpc-a01106c2", "10.0.0.0/16"))
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-east-1a"))
    ctx.record("subnet/public", SubnetOut("subnet-847e4dc2", "us-east-1a"))
    ctx.record("sg/efa", SgOut("sg-903004f8"))
    ctx.record("bucket", BucketOut("fmctl-llm-123456789012-us-east-1"))
    ctx.record("artifacts", ArtifactsOut("s3://fmctl-llm-123456789012-us-east-1/llm/slurm"))
    ctx.record("parallelcluster-check", CheckOut("accepted"))
    return ctx


REFS = ConfigRefs(
    Ref("vpc", VpcOut),
    Ref("subnet/private", SubnetOut),
    Ref("subnet/public", SubnetOut),
    Ref("sg/efa", SgOut),
    Ref("bucket", BucketOut),
    Ref("artifacts", ArtifactsOut),
)


def _params(folder: Path, max_count: int = 4) -> PclusterParams:
    return PclusterParams(
        CONFIG.replace("MAX", str(max_count)),
        str(folder / "cluster-config.yaml"),
        REFS,
        Ref("parallelcluster-check", CheckOut),
    )


def _made(tmp_path: Path, **kw: object) -> PclusterAws:
    """A cluster made through the stand-in and settled (CREATE_COMPLETE)."""
    aws = PclusterAws(tmp_path, **kw)  # type: ignore[arg-type]
    out = ParallelClusterKind().create(Request(_ctx(aws), "parallelcluster", _params(tmp_path)))
    assert out.status.endswith("COMPLETE") or out.status.endswith("FAILED")
    return aws


@covers("parallelcluster", "read", "diff")
def test_the_cluster_is_read_as_described_and_diffed_by_parallelclusters_own_dry_run(
    tmp_path: Path,
) -> None:
    aws = _made(tmp_path)
    ctx = _ctx(aws)
    req = Request(ctx, "parallelcluster", _params(tmp_path))
    observed = ParallelClusterKind().read(req)
    assert observed is not None and observed.pending is None
    assert observed.outputs == PclusterOut(
        CLUSTER, "CREATE_COMPLETE", "i-0123456789abcdef0", "10.0.0.10"
    )
    assert ParallelClusterKind().diff(req, observed) == []  # "No changes found"
    bigger = Request(ctx, "parallelcluster", _params(tmp_path, 8))
    (change,) = ParallelClusterKind().diff(bigger, observed)
    assert change.path == "Scheduling.SlurmQueues[train].ComputeResources[p5].MaxCount"
    assert (change.before, change.after, change.how) == ("4", "8", How.UPDATE)
    assert aws.calls()[-1] == "update-cluster --dryrun"
    # The same change where ParallelCluster's policy needs the compute fleet stopped: refused,
    # and said how (fmctl never stops a fleet itself).
    aws.scenario = "update-needs-stop"
    (refused,) = ParallelClusterKind().diff(bigger, observed)
    assert refused.how == How.IMMUTABLE and "update-compute-fleet" in refused.reason
    assert "update-cluster" not in aws.calls()  # a dry run only: diff never writes


def test_a_failed_create_is_said_with_parallelclusters_failure(tmp_path: Path) -> None:
    aws = PclusterAws(tmp_path, "bootstrap-failure")
    with pytest.raises(PclusterError, match="HeadNodeBootstrapFailure"):
        ParallelClusterKind().create(Request(_ctx(aws), "parallelcluster", _params(tmp_path)))
    with pytest.raises(PclusterError, match=r"CREATE_FAILED.*fmctl down llm"):
        ParallelClusterKind().read(Request(_ctx(aws), "parallelcluster", _params(tmp_path)))


@covers("parallelcluster", "create-adopts")
def test_a_create_whose_answer_was_lost_is_found_on_its_way_and_waited_for(tmp_path: Path) -> None:
    aws = PclusterAws(tmp_path, steps=3)
    ctx = _ctx(aws)
    params = _params(tmp_path)
    # The first run: create-cluster started the stack, then the run was lost.
    from provisioner.resources.pcluster_check import pcluster, write_config

    pcluster(ctx).create(
        CLUSTER, write_config(params.config_path, params.config.replace("<fmctl:", "x-"))
    )
    # The next run reads it on its way and waits: no second create-cluster.
    again = _ctx(aws)
    observed = ParallelClusterKind().read(Request(again, "parallelcluster", params))
    assert observed is not None and observed.pending == "CREATE_IN_PROGRESS"
    out = ParallelClusterKind().wait(Request(again, "parallelcluster", params), observed)
    assert out.status == "CREATE_COMPLETE"
    assert aws.calls().count("create-cluster") == 1


@covers("parallelcluster", "delete")
def test_delete_waits_for_the_stack_then_terminates_the_nodes_slurm_left(tmp_path: Path) -> None:
    aws = _made(tmp_path)
    left = {
        "Reservations": [
            {
                "Instances": [
                    {
                        "InstanceId": "i-0aaaaaaaaaaaaaaa1",
                        "Tags": [{"Key": "parallelcluster:cluster-name", "Value": CLUSTER}],
                    }
                ]
            }
        ]
    }
    filters = [
        {"Name": "tag:parallelcluster:cluster-name", "Values": [CLUSTER]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
    ]
    aws.answer("ec2", "DescribeInstances", left, {"Filters": filters})
    aws.answer("ec2", "TerminateInstances", {}, {"InstanceIds": ["i-0aaaaaaaaaaaaaaa1"]})
    gone = {
        "Reservations": [
            {
                "Instances": [
                    {
                        "InstanceId": "i-0aaaaaaaaaaaaaaa1",
                        "State": {"Name": "terminated", "Code": 48},
                    }
                ]
            }
        ]
    }
    aws.answer("ec2", "DescribeInstances", gone, {"InstanceIds": ["i-0aaaaaaaaaaaaaaa1"]})
    ParallelClusterKind().delete(_ctx(aws), Owned("parallelcluster", "parallelcluster", CLUSTER))
    aws.done()
    assert "delete-cluster" in aws.calls()
    assert (
        ParallelClusterKind().read(Request(_ctx(aws), "parallelcluster", _params(tmp_path))) is None
    )


def _check_params(folder: Path) -> CheckParams:
    return CheckParams(CONFIG.replace("MAX", "4"), str(folder / "check-config.yaml"), REFS)


@covers("parallelcluster-check", "read", "diff", "create-adopts")
def test_the_validators_run_once_and_pass_for_good_once_the_cluster_exists(tmp_path: Path) -> None:
    aws = PclusterAws(tmp_path)
    req = Request(_ctx(aws), "parallelcluster-check", _check_params(tmp_path))
    assert ParallelClusterCheck().read(req) is None  # no cluster yet: the step runs
    assert ParallelClusterCheck().create(req) == CheckOut("accepted")
    assert aws.calls() == ["describe-cluster", "create-cluster --dryrun"]
    # Its config has every placeholder filled: ParallelCluster refuses one left in.
    assert "<fmctl:" not in (tmp_path / "check-config.yaml").read_text()
    refused = PclusterAws(tmp_path / "refused", "invalid-config")
    (tmp_path / "refused").mkdir()
    with pytest.raises(PclusterError, match="EfaValidator"):
        ParallelClusterCheck().create(
            Request(_ctx(refused), "parallelcluster-check", _check_params(tmp_path))
        )
    # Once the cluster exists (made by an earlier run), the step has passed: nothing runs,
    # and there is nothing to change (a check has no live state).
    (tmp_path / "made").mkdir()
    made = _made(tmp_path / "made")
    req = Request(_ctx(made), "parallelcluster-check", _check_params(tmp_path))
    observed = ParallelClusterCheck().read(req)
    assert observed is not None and observed.outputs == CheckOut("cluster exists")
    assert ParallelClusterCheck().diff(req, observed) == []


@covers("parallelcluster-check", "delete")
def test_the_validation_step_made_nothing_so_its_delete_calls_nothing(tmp_path: Path) -> None:
    aws = PclusterAws(tmp_path)
    ParallelClusterCheck().delete(_ctx(aws), Owned("parallelcluster-check", "check", CLUSTER))
    assert not (tmp_path / "pcluster-state.json").exists()
    aws.done()
