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


def test_gpu_groups_run_fmctls_verify_gate_through_lifecycle_actions() -> None:
    """nodeBootstrapped: the gate, with the user data's own bootstrap arguments, terminating
    a node that fails, at every boot; nodeReady: the NCCL pair, with health.verify.ncclPair;
    each script pinned by the SHA-256 of what fmctl ships (and uploads); none with health off
    and none on the login nodes."""
    import hashlib

    from provisioner.render.pcs import bootstrap_args, lifecycle_actions
    from provisioner.render.placeholders import find

    spec, c = _context()
    files = render(spec, load_catalog()).files
    login = json.loads(files["pcs/compute-node-groups/login.json"])
    assert "nodeLifecycleActions" not in login
    body = json.loads(files["pcs/compute-node-groups/train.json"])
    actions = body["nodeLifecycleActions"]
    # Fetched once a node (a reboot runs the node's copy: no new object against the group's
    # old checksum); a change replaces the nodes.
    assert actions["scriptCachingPolicy"] == "CACHE_ONCE"
    (gate,) = actions["stages"]["nodeBootstrapped"]
    (pair,) = actions["stages"]["nodeReady"]
    assert (gate["onError"], gate["executionPolicy"]) == ("TERMINATE", "EVERY_BOOT")
    assert (pair["onError"], pair["executionPolicy"]) == ("TERMINATE", "EVERY_BOOT")
    user_data = json.loads(files["pcs/launch-templates/train.json"])["LaunchTemplateData"][
        "UserData"
    ]
    pool = c.pools[0]
    assert gate["arguments"] == bootstrap_args(c, "compute", pool)
    assert " ".join(gate["arguments"][2:]) in user_data
    for script, name in ((gate, "pcs-node-bootstrapped.sh"), (pair, "pcs-node-ready.sh")):
        source = script["scriptSource"]
        assert source["scriptLocation"].endswith(f"/{spec.metadata.name}/slurm/actions/{name}")
        assert find(source["scriptLocation"]) == {"artifactBucket"}
        shipped = (ROOT / "slurm/actions" / name).read_bytes()
        assert source["checksum"] == hashlib.sha256(shipped).hexdigest()
    no_pair = lifecycle_actions(dataclasses.replace(c, health_verify_nccl_pair=False), pool)
    assert set(no_pair["stages"]) == {"nodeBootstrapped"}
    assert lifecycle_actions(dataclasses.replace(c, health_enabled=False), pool) == {}


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda s: s["nodeBootstrapped"].append(dict(s["nodeBootstrapped"][0])), "not unique"),
        (
            lambda s: s["nodeReady"][0]["scriptSource"].update(
                scriptLocation="https://example.com/ready.sh", s3VersionId="v1"
            ),
            "only valid when scriptLocation is an Amazon S3 URI",
        ),
        (lambda s: s["nodeReady"][0].update(onError="REBOOT"), "is not one of TERMINATE"),
        (lambda s: s["nodeReady"][0].update(arguments=["x" * 257]), "at most 256"),
        (lambda s: s["nodeReady"][0].update(name="-fmctl"), "the first a letter"),
    ],
)
def test_the_sandbox_refuses_lifecycle_actions_pcs_would(edit: object, why: str) -> None:
    """Each rule from botocore's PCS model (NodeLifecycleScript and its members); the
    rendered request itself passes."""
    from fmctl_sandbox.pcs_lifecycle import lifecycle_actions as _lifecycle
    from fmctl_sandbox.pcs_model import validate
    from fmctl_sandbox.protocol import Call
    from tests.render.test_pcs import _filled

    spec, _ = _context()
    body = _filled(render(spec, load_catalog()).files["pcs/compute-node-groups/train.json"])

    def check(request: dict[str, object]) -> None:
        validate(Call("pcs", "CreateComputeNodeGroup", request, "json"))
        _lifecycle(request.get("nodeLifecycleActions"))  # type: ignore[arg-type]

    check(body)
    assert callable(edit)
    edit(body["nodeLifecycleActions"]["stages"])
    with pytest.raises(PcsError, match=why):
        check(body)
