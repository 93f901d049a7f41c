"""pcs/: every rendered request checked against botocore's own request shapes (the ``pcs``
model for the cluster, node groups and queues, ``ec2`` for the launch templates), and the
facts that matter: the same spec renders on either provider, EFA layouts, capacity blocks,
and the node bootstrap names scripts that exist."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import botocore.session
import pytest
import yaml
from botocore.validate import ParamValidator

from fmctl_sandbox.pcs_model import pattern_errors
from provisioner.catalog import load_catalog
from provisioner.render import Rendered, render
from provisioner.render.placeholders import fill
from tests.conftest import EXAMPLES, ROOT, set_path, validate_data
from tests.render.helpers import FILLED

SLURM_EXAMPLES = [e for e in EXAMPLES if "slurm" in e.stem]
CATALOG = load_catalog()
SESSION = botocore.session.get_session()
PCS_MODEL = SESSION.get_service_model("pcs")
EC2_MODEL = SESSION.get_service_model("ec2")
#: Values for the PCS placeholders, shaped as PCS and IAM write them.
PCS_FILLED = {
    **FILLED,
    "pcsClusterId": "pcs_0123456789",
    "pcsClusterSecurityGroupId": "sg-0123456789abcdef3",
    "sshSecurityGroupId": "sg-0123456789abcdef4",
    "pcsNodeInstanceProfileArn": (
        "arn:aws:iam::123456789012:instance-profile/aws-pcs/fmctl-c-us-east-1-pcs-node"
    ),
}


def _value(name: str) -> str:
    if name in PCS_FILLED:
        return PCS_FILLED[name]
    family = name.split(".", 1)[0]
    return {
        "launchTemplate": "lt-0123456789abcdef0",
        "launchTemplateVersion": "1",
        "computeNodeGroupId": "pcs_abcdef0123",
        "pcsAmiId": "ami-0123456789abcdef0",
        "placementGroup": "pg",
    }[family]


def _pcs_spec(example: Path, **edits: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(example.read_text())
    data = set_path(data, ("slurm", "provider"), "pcs")
    data = set_path(data, ("slurm", "topologyAware"), False)
    for dotted, value in edits.items():
        data = set_path(data, tuple(dotted.split("__")), value)
    return data


def _render(data: dict[str, Any]) -> Rendered:
    result = validate_data(data)
    assert result.ok, [(p.code, p.dotted_path, p.message) for p in result.problems]
    assert result.resolved is not None
    return render(result.resolved, CATALOG)


def _filled(text: str) -> Any:
    from provisioner.render.placeholders import find

    return json.loads(fill(text, {n: _value(n) for n in find(text)}))


def _check(model: Any, operation: str, params: dict[str, Any]) -> None:
    """Every key known to the request shape, every required one present, types and lengths
    as botocore checks them before sending, and every string against its pattern."""
    shape = model.operation_model(operation).input_shape
    report = ParamValidator().validate(params, shape)
    assert not report.has_errors(), report.generate_report()
    assert pattern_errors(shape, params, operation) == []


@pytest.fixture(scope="module", params=SLURM_EXAMPLES, ids=[e.stem for e in SLURM_EXAMPLES])
def folder(request: pytest.FixtureRequest) -> Rendered:
    return _render(_pcs_spec(request.param))


def test_requests_match_botocores_shapes(folder: Rendered) -> None:
    files = folder.files
    _check(PCS_MODEL, "CreateCluster", _filled(files["pcs/cluster.json"]))
    groups = [p for p in files if p.startswith("pcs/compute-node-groups/")]
    queues = [p for p in files if p.startswith("pcs/queues/")]
    templates = [p for p in files if p.startswith("pcs/launch-templates/")]
    assert groups and queues and len(templates) == len(groups)
    for path in groups:
        _check(PCS_MODEL, "CreateComputeNodeGroup", _filled(files[path]))
    for path in queues:
        _check(PCS_MODEL, "CreateQueue", _filled(files[path]))
    for path in templates:
        _check(EC2_MODEL, "CreateLaunchTemplate", _filled(files[path]))


def test_every_placeholder_is_one_fmctl_fills(folder: Rendered) -> None:
    """Each ``<fmctl:`` in pcs/ is a placeholder find() sees (so up and --from-cluster fill
    it), never text that passes for a literal value."""
    from provisioner.render.placeholders import find

    for path, text in folder.files.items():
        if path.startswith("pcs/"):
            assert text.count("<fmctl:") == sum(text.count(f"<fmctl:{n}>") for n in find(text))


def test_a_wrong_field_is_caught_by_the_shape_check() -> None:
    with pytest.raises(AssertionError, match="ami-"):
        _check(
            PCS_MODEL,
            "CreateComputeNodeGroup",
            {
                "clusterIdentifier": "pcs_0123456789",
                "computeNodeGroupName": "train",
                "amiId": "<fmctl:pcsAmiId.x86_64>",
                "subnetIds": ["subnet-0123456789abcdef0"],
                "iamInstanceProfileArn": PCS_FILLED["pcsNodeInstanceProfileArn"],
                "scalingConfiguration": {"minInstanceCount": 0, "maxInstanceCount": 1},
                "instanceConfigs": [{"instanceType": "p5.48xlarge"}],
            },
        )
    with pytest.raises(AssertionError, match="Unknown parameter"):
        _check(PCS_MODEL, "CreateQueue", {"clusterIdentifier": "c1", "queueName": "q1", "x": 1})
    with pytest.raises(AssertionError, match="Missing required parameter"):
        _check(PCS_MODEL, "CreateCluster", {"clusterName": "abc"})


def test_the_same_spec_renders_on_either_provider() -> None:
    example = SLURM_EXAMPLES[0]
    pcluster = _render(yaml.safe_load(example.read_text()))
    pcs = _render(_pcs_spec(example))
    assert "parallelcluster/cluster-config.yaml" in pcluster.files
    assert not any(p.startswith("pcs/") for p in pcluster.files)
    assert "pcs/cluster.json" in pcs.files
    assert not any(p.startswith("parallelcluster/") for p in pcs.files)
    # Prometheus and Grafana come with either: the login node runs them on PCS.
    assert "slurm/monitoring/prometheus.yml" in pcs.files


def test_every_efa_interface_and_the_cluster_group_on_the_primary(folder: Rendered) -> None:
    for path, text in folder.files.items():
        if not path.startswith("pcs/launch-templates/") or path.endswith("/login.json"):
            continue
        data = json.loads(text)["LaunchTemplateData"]
        itype = CATALOG[data["InstanceType"]]
        nics = data["NetworkInterfaces"]
        cards = {n["NetworkCardIndex"] for n in nics if n["InterfaceType"] in ("efa", "efa-only")}
        assert cards == set(itype.network.efa_cards), path
        primary = [n for n in nics if n["NetworkCardIndex"] == 0 and n["DeviceIndex"] == 0]
        assert "<fmctl:pcsClusterSecurityGroupId>" in primary[0]["Groups"]
        assert data["MetadataOptions"]["HttpTokens"] == "required"
        assert all(v["Ebs"]["Encrypted"] for v in data["BlockDeviceMappings"])


def test_a_capacity_block_is_bought_as_one() -> None:
    files = _render(_pcs_spec(SLURM_EXAMPLES[0])).files
    group = json.loads(files["pcs/compute-node-groups/train.json"])
    template = json.loads(files["pcs/launch-templates/train.json"])["LaunchTemplateData"]
    # AWS PCS User Guide, "Configure an AWS PCS compute node group to use a Capacity Block".
    assert group["purchaseOption"] == "CAPACITY_BLOCK"
    assert template["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    target = template["CapacityReservationSpecification"]["CapacityReservationTarget"]
    assert target["CapacityReservationId"].startswith("cr-")


def test_the_prolog_and_bootstrap_are_fmctls_shipped_scripts(folder: Rendered) -> None:
    cluster = json.loads(folder.files["pcs/cluster.json"])
    settings = {
        s["parameterName"]: s["parameterValue"]
        for s in cluster["slurmConfiguration"]["slurmCustomSettings"]
    }
    for name in ("Prolog", "Epilog"):
        shipped = settings[name].removeprefix("/opt/fmctl/slurm/")
        # A glob (slurmd runs every script it matches) names shipped scripts only.
        matched = sorted((ROOT / "slurm").glob(shipped))
        assert matched and all(m.is_file() for m in matched), settings[name]
    prologs = sorted((ROOT / "slurm").glob(settings["Prolog"].removeprefix("/opt/fmctl/slurm/")))
    # slurmd runs a glob's scripts in reverse alphabetical order (seen with a real slurmd:
    # tests/slurm/test_standin_imex.py): the node check first, then IMEX.
    assert [m.name for m in reversed(prologs)] == ["90-fmctl-node-check.sh", "80-fmctl-imex.sh"]
    usage = (ROOT / "slurm/actions/pcs-node-bootstrap.sh").read_text()
    positional = int(re.search(r'\[ "\$#" -ge (\d+) \]', usage).group(1))  # type: ignore[union-attr]
    for path, text in folder.files.items():
        if not path.startswith("pcs/launch-templates/"):
            continue
        user_data = json.loads(text)["LaunchTemplateData"]["UserData"]
        line = next(
            x for x in user_data.splitlines() if "pcs-node-bootstrap.sh " in x and "exec" in x
        )
        words = shlex.split(line.replace('"$prefix"', "PREFIX"))
        args = words[words.index("/opt/fmctl/slurm/actions/pcs-node-bootstrap.sh") + 1 :]
        assert len(args) >= positional and args[0] in ("login", "compute"), line
        assert re.fullmatch(r"\d+\.\d+", args[2])


def test_a_pool_of_a_name_pcs_refuses_is_a_located_error() -> None:
    result = validate_data(
        _pcs_spec(
            SLURM_EXAMPLES[0],
            compute__gpuPools=[{"name": "gp", "instanceType": "p5.48xlarge", "count": 2}],
        )
    )
    assert not result.ok
    hit = next(p for p in result.problems if p.code == "pcs-names")
    assert hit.dotted_path == "compute.gpuPools[0].name"


def test_the_same_spec_plans_on_either_provider(tmp_path: Path) -> None:
    """`fmctl plan --offline` of the one spec: ParallelCluster's cluster on one provider,
    PCS's cluster, node groups and queues on the other, on the same infrastructure."""
    from tests.cli.helpers import fmctl

    example = SLURM_EXAMPLES[0]
    pcs = tmp_path / "pcs.yaml"
    pcs.write_text(yaml.safe_dump(_pcs_spec(example)))
    plans = {}
    for label, path in (("parallelcluster", example), ("pcs", pcs)):
        done = fmctl("plan", "-f", str(path), "--offline", "-o", "json")
        assert done.returncode == 0, done.stdout + done.stderr
        plans[label] = {c["resource"] for c in json.loads(done.stdout)["changes"]}
    assert "parallelcluster" in plans["parallelcluster"]
    assert not any(r.startswith("pcs/") for r in plans["parallelcluster"])
    assert {"pcs/cluster", "pcs/node-group/login", "pcs/node-group/train", "pcs/queue/train"} <= (
        plans["pcs"]
    )
    assert not any("parallelcluster" in r for r in plans["pcs"])
    shared = {"vpc", "subnet/private", "sg/efa", "fsx", "bucket", "artifacts"}
    assert shared <= plans["parallelcluster"] & plans["pcs"]
