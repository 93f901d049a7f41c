"""Faults on AWS PCS's calls: throttling, 5xx, connection resets and slow answers in a share
of every call, each PCS operation failed twice, and lost answers to PCS's creates. The end
state must equal a clean run's, with no duplicate and nothing left after down."""

from __future__ import annotations

from pathlib import Path

from tests.engine.harness import Sandbox, owned
from tests.engine.test_pcs import PCS_RESOURCES, pcs_spec
from tests.reliability.campaign import duplicates, raw_leftovers
from tests.reliability.test_faults import FAULTS

REGION = "ap-northeast-1"
#: Every PCS operation fmctl calls (botocore's pcs model), in up, a scale and down.
PCS_CALLS = [
    "CreateCluster",
    "GetCluster",
    "ListClusters",
    "DeleteCluster",
    "CreateComputeNodeGroup",
    "GetComputeNodeGroup",
    "ListComputeNodeGroups",
    "UpdateComputeNodeGroup",
    "DeleteComputeNodeGroup",
    "CreateQueue",
    "GetQueue",
    "ListQueues",
    "DeleteQueue",
    "ListTagsForResource",
]


def _cycle(sandbox: Sandbox, tmp: Path, name: str, rules: list[dict[str, object]]) -> set[str]:
    """up, scale, down with ``rules`` in force for each; the actions the faults hit."""
    before = len(sandbox.requests())
    (tmp / "scaled").mkdir()
    spec, scaled = pcs_spec(tmp, name, REGION), pcs_spec(tmp / "scaled", name, REGION, count=3)
    for args in (("up", "-f", str(spec)), ("up", "-f", str(scaled))):
        sandbox.faults(rules)
        run = sandbox.fmctl(*args, "--sandbox", "--yes", timeout=300)
        sandbox.faults([])
        assert run.returncode == 0, run.stdout + run.stderr
        items = owned(sandbox, name, REGION)
        assert {logical for _, logical, _ in items} >= PCS_RESOURCES
        assert duplicates(items) == {}
    sandbox.faults(rules)
    down = sandbox.fmctl("down", name, "--region", REGION, "--sandbox", "--yes", timeout=300)
    sandbox.faults([])
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, REGION) == []
    return {r["action"] for r in sandbox.requests()[before:] if r["fault"]}


def test_pcs_up_scale_down_survive_faults(sandbox: Sandbox, tmp_path: Path) -> None:
    hit = _cycle(sandbox, tmp_path, "e2e-pcs-faults", FAULTS)
    assert hit & set(PCS_CALLS), hit


def test_pcs_every_call_failed_twice_and_creates_answers_lost(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Each PCS call throttled or failed twice, and the first answer to each create lost
    after it was carried out (the retry's client token, or on a re-run the read by tag,
    finds what it made): one cycle for both, to keep CI's time."""
    creates = ["CreateCluster", "CreateComputeNodeGroup", "CreateQueue"]
    rules: list[dict[str, object]] = [
        {"action": a, "times": 1, "kind": "reset-after"} for a in creates
    ]
    for i, action in enumerate(PCS_CALLS):
        error = (503, "ServiceUnavailableException") if i % 2 else (400, "ThrottlingException")
        rules.append(
            {"action": action, "times": 2, "kind": "error", "status": error[0], "code": error[1]}
        )
    before = len(sandbox.requests())
    hit = _cycle(sandbox, tmp_path, "e2e-pcs-every-call", rules)
    assert set(PCS_CALLS) <= hit, sorted(set(PCS_CALLS) - hit)
    executed = {r["action"] for r in sandbox.requests()[before:] if r["fault"] == "reset-after"}
    assert set(creates) <= executed, executed
