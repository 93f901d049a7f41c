"""The EKS drain loop against a slow API: what it reports at the deadline is what is still
on the nodes, not what was there before its last round of evictions."""

from __future__ import annotations

import time
from typing import Any

import pytest

from provisioner.resources import eks_drain
from provisioner.resources.context import DrainSettings
from provisioner.resources.errors import ResourceError


class _SlowApi:
    """Evictions succeed (or are refused by a budget) and take longer than the drain's
    whole timeout, as on a loaded API server."""

    def __init__(self, pods: list[str], refuse: bool = False) -> None:
        self.pods = {name: "node-a" for name in pods}
        self.refuse = refuse

    def cordon(self, node: str, labels: dict[str, str]) -> None:
        pass

    def list(self, api_version: str, kind: str) -> list[dict[str, Any]]:
        return [
            {"metadata": {"name": n, "namespace": "train"}, "spec": {"nodeName": node}}
            for n, node in self.pods.items()
        ]

    def evict(self, namespace: str, name: str) -> bool:
        time.sleep(0.05)
        if self.refuse:
            return False
        del self.pods[name]
        return True


class _Ctx:
    time_scale = 0.0001

    def emit(self, *args: Any) -> None:
        pass

    def fence(self) -> None:
        pass


def test_evicted_at_the_deadline_is_a_drain_done() -> None:
    api = _SlowApi(["trainer-a"])
    leaving = [eks_drain.Leaving("node-a", "i-0")]
    eks_drain.drain(_Ctx(), "nodegroup/gpu", api, leaving, DrainSettings(60))  # type: ignore[arg-type]
    assert api.pods == {}


def test_a_budget_that_holds_is_named_at_the_deadline() -> None:
    api = _SlowApi(["trainer-a"], refuse=True)
    leaving = [eks_drain.Leaving("node-a", "i-0")]
    with pytest.raises(ResourceError) as held:
        eks_drain.drain(_Ctx(), "nodegroup/gpu", api, leaving, DrainSettings(60))  # type: ignore[arg-type]
    assert "train/trainer-a" in str(held.value)
