"""The sandbox's PCS health monitoring (fmctl_sandbox/pcs_repair.py) against the
botocore PCS model's words for each repairAction, on the module's own state: REPLACE and
AUTO end the instance (the group launches another), ISOLATE keeps it isolated, NONE only
records, mode NONE looks at nothing; what AWS's GPU monitor calls a warning is left alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from fmctl_sandbox import pcs_repair
from fmctl_sandbox.pcs_model import PcsError, Thing


@dataclass
class FakePcs:
    things: dict[tuple[str, str], Thing]
    faults: dict[tuple[str, str], pcs_repair.InstanceFault] = field(default_factory=dict)
    ended: list[str] = field(default_factory=list)

    def advance(self, region: str, now: float) -> None:
        pcs_repair.repair(self, region)

    def terminate(self, region: str, group: Thing, instance: str) -> None:
        self.ended.append(instance)
        group.instances[group.instances.index(instance)] = f"{instance}-new"


def _world(checks: dict[str, Any] | None) -> FakePcs:
    cluster = Thing({"name": "c", "id": "pcs_c000000000", "status": "ACTIVE"}, "cluster", 0.0)
    data: dict[str, Any] = {"clusterId": "pcs_c000000000", "status": "ACTIVE"}
    if checks is not None:
        data["instanceHealthChecks"] = checks
    group = Thing(data, "group", 0.0, instances=["i-1", "i-2"])
    return FakePcs({("r", "pcs_c000000000"): cluster, ("r", "pcs_g000000000"): group})


def _monitoring(action: str | None) -> dict[str, Any]:
    on: dict[str, Any] = {"mode": "STANDARD"}
    if action is not None:
        on["repairAction"] = action
    return {"healthMonitoring": on}


@pytest.mark.parametrize("action", ["REPLACE", "AUTO", None])
def test_replace_and_auto_end_the_instance(action: str | None) -> None:
    pcs = _world(_monitoring(action))
    said = pcs_repair.inject(pcs, "r", "c", "i-1", {"xid": 79})
    assert "replaced it" in said and pcs.ended == ["i-1"]
    assert pcs.faults == {}


@pytest.mark.parametrize(("action", "outcome"), [("ISOLATE", "isolated"), ("NONE", "recorded")])
def test_isolate_and_none_keep_the_instance(action: str, outcome: str) -> None:
    pcs = _world(_monitoring(action))
    said = pcs_repair.inject(pcs, "r", "pcs_c000000000", "i-2", {"gpuMissing": 1})
    assert f"{outcome} it ({action})" in said and pcs.ended == []
    pcs.advance("r", 0.0)  # acted on once: looking again changes nothing
    assert pcs.ended == [] and pcs.faults[("r", "i-2")].outcome == outcome


def test_warnings_and_monitoring_off_leave_the_instance() -> None:
    pcs = _world(_monitoring("REPLACE"))
    assert "a warning" in pcs_repair.inject(pcs, "r", "c", "i-1", {"xid": 13})
    assert "a warning" in pcs_repair.inject(pcs, "r", "c", "i-1", {"efaDown": 2})
    assert pcs.ended == []
    off = _world({"healthMonitoring": {"mode": "NONE"}})
    assert "monitoring is off" in pcs_repair.inject(off, "r", "c", "i-1", {"eccDbe": True})
    none = _world(None)
    assert "monitoring is off" in pcs_repair.inject(none, "r", "c", "i-1", {"xid": 79})
    assert off.ended == none.ended == []
    assert "healthy again" in pcs_repair.inject(off, "r", "c", "i-1", {"clear": True})
    assert off.faults == {}


def test_unknown_cluster_or_instance_is_not_found() -> None:
    pcs = _world(_monitoring("REPLACE"))
    with pytest.raises(PcsError, match="no PCS cluster other"):
        pcs_repair.inject(pcs, "r", "other", "i-1", {"xid": 79})
    with pytest.raises(PcsError, match="no instance i-9"):
        pcs_repair.inject(pcs, "r", "c", "i-9", {"xid": 79})
