"""PCS's instance health checks (issue 33): what fmctl asks of each node group, and the
sandbox's rules for them, written from botocore's PCS model documentation, so a request PCS
would refuse fails here (the e2e scenario is in tests/engine/test_pcs.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fmctl_sandbox.pcs_health import health_checks as _health_checks
from fmctl_sandbox.pcs_model import PcsError
from provisioner.catalog import load_catalog
from provisioner.render import render
from provisioner.render.context import ClusterContext, build_context
from provisioner.render.pcs import instance_health_checks
from provisioner.spec.model import ClusterSpec
from tests.conftest import ROOT, validate_text


def _context() -> tuple[ClusterSpec, ClusterContext]:
    """The p5 Slurm example on PCS."""
    validation = validate_text((ROOT / "examples/p5-slurm-capacity-block.yaml").read_text())
    assert validation.ok and validation.resolved is not None
    spec = validation.resolved.model_copy(
        update={"slurm": validation.resolved.slurm.model_copy(update={"provider": "pcs"})}
    )
    return spec, build_context(spec, load_catalog())


def test_gpu_groups_ask_for_monitoring_and_dcgm_at_start_login_none() -> None:
    spec, c = _context()
    files = render(spec, load_catalog()).files
    groups = {
        path.rsplit("/", 1)[1]: json.loads(text)
        for path, text in files.items()
        if path.startswith("pcs/compute-node-groups/")
    }
    assert "instanceHealthChecks" not in groups.pop("login.json")
    for body in groups.values():
        assert body["instanceHealthChecks"] == {
            "healthMonitoring": {"mode": "STANDARD", "repairAction": "REPLACE"},
            "deepHealthChecks": {"onStart": {"profile": "QUICK", "repairAction": "REPLACE"}},
        }
        _health_checks(body["instanceHealthChecks"], body["instanceConfigs"][0]["instanceType"])
    # health.repair: PCS's own repair for a fault found while the node runs (botocore's PCS
    # model: AUTO chooses by the fault, ISOLATE keeps the instance for a person).
    for repair, action in (("reboot", "AUTO"), ("drain-only", "ISOLATE")):
        checks = instance_health_checks(dataclasses.replace(c, health_repair=repair))
        assert checks["healthMonitoring"] == {"mode": "STANDARD", "repairAction": action}
        _health_checks(checks, "p5.48xlarge")
    off = instance_health_checks(dataclasses.replace(c, health_enabled=False))
    _health_checks(off, "p5.48xlarge")
    assert off["healthMonitoring"] == {"mode": "NONE"}


@pytest.mark.parametrize(
    ("checks", "itype", "why"),
    [
        ({}, "p5.48xlarge", "empty object"),
        ({"healthMonitoring": {"repairAction": "REPLACE"}}, "p5.48xlarge", "mode is required"),
        (
            {"healthMonitoring": {"mode": "NONE", "repairAction": "REPLACE"}},
            "p5.48xlarge",
            "when mode is NONE",
        ),
        (
            {"deepHealthChecks": {"onStart": {"profile": "NONE", "repairAction": "AUTO"}}},
            "p5.48xlarge",
            "with profile NONE",
        ),
        (
            {"deepHealthChecks": {"onStart": {"profile": "QUICK"}}},
            "m7i.4xlarge",
            "requires NVIDIA GPUs",
        ),
        ({"deepHealthChecks": {"onStart": {"profile": "FAST"}}}, "p5.48xlarge", "one of"),
    ],
)
def test_the_sandbox_refuses_what_pcs_documents_it_refuses(
    checks: dict[str, object], itype: str, why: str
) -> None:
    with pytest.raises(PcsError) as refused:
        _health_checks(checks, itype)
    assert why in str(refused.value)
