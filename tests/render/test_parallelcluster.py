"""The ParallelCluster config through ParallelCluster's own schema, and the facts that matter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.catalog import load_catalog
from provisioner.render import render
from provisioner.render.slurm import FORBIDDEN_NODE_SETTINGS, FORBIDDEN_SLURM_SETTINGS
from tests.conftest import validate_text
from tests.render.helpers import CASE_IDS, CASES, fill_all, rendered
from tests.tools.pcluster_venv import run_json

ROOT = Path(__file__).resolve().parents[2]
PCLUSTER_PY = ROOT / ".venv-pcluster/bin/python"
SLURM_CASES = [(e, s) for e, s in CASES if s == "slurm"]
SLURM_IDS = [i for i in CASE_IDS if i.endswith(":slurm")]
CATALOG = load_catalog()


def _config(example: Path) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(
        rendered(example, "slurm").files["parallelcluster/cluster-config.yaml"]
    )
    return config


def _schema_check(paths: list[Path]) -> dict[str, str | None]:
    out: dict[str, str | None] = run_json("pcluster_schema.py", *map(str, paths))
    return out


def test_configs_load_through_parallelclusters_schema(tmp_path: Path) -> None:
    paths = []
    for example, _ in SLURM_CASES:
        text = rendered(example, "slurm").files["parallelcluster/cluster-config.yaml"]
        path = tmp_path / f"{example.stem}.yaml"
        path.write_text(fill_all(text))
        paths.append(path)
    # With a key pair for SSH (compute.headNode.keyName -> HeadNode.Ssh.KeyName).
    keyed = yaml.safe_load(SLURM_CASES[0][0].read_text())
    keyed["compute"]["headNode"]["keyName"] = "ops"
    keyed_spec = tmp_path / "keyed-spec.yaml"
    keyed_spec.write_text(yaml.safe_dump(keyed))
    text = rendered(keyed_spec, "slurm").files["parallelcluster/cluster-config.yaml"]
    assert yaml.safe_load(text)["HeadNode"]["Ssh"]["KeyName"] == "ops"
    path = tmp_path / "keyed.yaml"
    path.write_text(fill_all(text))
    paths.append(path)
    # One UltraServer Capacity Block of 18 p6e-gb200, with the head node's default (arm64).
    gb200 = yaml.safe_load(SLURM_CASES[0][0].read_text())
    gb200["compute"].pop("headNode")
    gb200["compute"]["gpuPools"][0].update(instanceType="p6e-gb200.36xlarge", count=18)
    gb200_spec = tmp_path / "gb200-spec.yaml"
    gb200_spec.write_text(yaml.safe_dump(gb200))
    text = rendered(gb200_spec, "slurm").files["parallelcluster/cluster-config.yaml"]
    config = yaml.safe_load(text)
    assert config["HeadNode"]["InstanceType"] == "m7g.4xlarge"
    queue = config["Scheduling"]["SlurmQueues"][0]
    assert queue["CapacityType"] == "CAPACITY_BLOCK"
    assert queue["ComputeResources"][0]["InstanceType"] == "p6e-gb200.36xlarge"
    path = tmp_path / "gb200.yaml"
    path.write_text(fill_all(text))
    paths.append(path)
    # A negative control, so a schema check that accepts anything cannot pass this test.
    broken = yaml.safe_load(paths[0].read_text())
    broken["Scheduling"]["SlurmQueues"][0]["ComputeResources"][0]["Efa"]["Gdr"] = True
    bad = tmp_path / "broken.yaml"
    bad.write_text(yaml.safe_dump(broken))
    results = _schema_check([*paths, bad])
    for path in paths:
        assert results[str(path)] is None, results[str(path)]
    assert results[str(bad)] is not None and "Gdr" in results[str(bad)]


@pytest.mark.parametrize(("example", "scheduler"), SLURM_CASES, ids=SLURM_IDS)
def test_queues(example: Path, scheduler: str) -> None:
    spec = yaml.safe_load(example.read_text())
    config = _config(example)
    assert config["Imds"]["ImdsSupport"] == "v2.0"
    queues = {q["Name"]: q for q in config["Scheduling"]["SlurmQueues"]}
    for pool in spec["compute"]["gpuPools"]:
        queue = queues[pool["name"]]
        itype = CATALOG[pool["instanceType"]]
        (resource,) = queue["ComputeResources"]
        kind = pool.get("capacity", {}).get("type", "on-demand")
        assert queue["CapacityType"] == {"capacity-block": "CAPACITY_BLOCK", "spot": "SPOT"}.get(
            kind, "ONDEMAND"
        )
        assert "Enabled" in queue["Networking"]["PlacementGroup"]
        assert queue["JobExclusiveAllocation"] is True
        assert resource["MaxCount"] == pool["count"]
        if kind == "capacity-block":
            assert resource["MinCount"] == resource["MaxCount"] > 0
        if "reservationId" in pool.get("capacity", {}):
            assert resource["CapacityReservationTarget"] == {
                "CapacityReservationId": pool["capacity"]["reservationId"]
            }
        # GdrSupport has had no effect since ParallelCluster 3.0.2: not written.
        assert resource["Efa"] == {"Enabled": True}
        settings = resource["CustomSlurmSettings"]
        assert (settings["Sockets"], settings["CoresPerSocket"]) == (
            itype.cpu.sockets,
            itype.cpu.cores_per_socket,
        )
        assert not {k.lower() for k in settings} & FORBIDDEN_NODE_SETTINGS
        # ParallelCluster's GPU health check is opt-in (aws-parallelcluster#6777).
        assert "HealthChecks" not in resource and "HealthChecks" not in queue
        start = queue["CustomActions"]["OnNodeStart"]["Sequence"][0]["Args"]
        rdma = str(itype.network.rdma_read).lower()
        assert start == ["true", str(itype.gpu.count), str(itype.network.efa_interfaces), rdma]
        assert queue["ComputeSettings"]["LocalStorage"]["RootVolume"]["Encrypted"] is True


@pytest.mark.parametrize(("example", "scheduler"), SLURM_CASES, ids=SLURM_IDS)
def test_no_forbidden_slurm_settings(example: Path, scheduler: str) -> None:
    settings = _config(example)["Scheduling"]["SlurmSettings"].get("CustomSlurmSettings", [])
    keys = {k.lower() for item in settings for k in item}
    assert "prolog" not in keys and "epilog" not in keys
    assert not keys & FORBIDDEN_SLURM_SETTINGS


@pytest.mark.parametrize(("example", "scheduler"), SLURM_CASES, ids=SLURM_IDS)
def test_head_node_is_never_open_to_the_world(example: Path, scheduler: str) -> None:
    spec = yaml.safe_load(example.read_text())
    head = _config(example)["HeadNode"]
    # ParallelCluster defaults AllowedIps to 0.0.0.0/0 when Ssh is absent: it must be set.
    allowed = head["Ssh"]["AllowedIps"]
    assert allowed != "0.0.0.0/0"
    network = spec["network"]
    inside = network.get("vpcCidr") or ("<fmctl:vpcCidr>" if "vpcId" in network else "10.0.0.0/16")
    assert allowed == network.get("sshCidr", inside)
    assert head["LocalStorage"]["RootVolume"]["Encrypted"] is True


@pytest.mark.parametrize(("example", "scheduler"), SLURM_CASES, ids=SLURM_IDS)
def test_shared_storage(example: Path, scheduler: str) -> None:
    """The config in the folder is the one `up` deploys: the file system by id (the one fmctl
    makes, or the spec's), never ParallelCluster's own settings, with which a committed
    config would make ParallelCluster create a second file system."""
    fsx_spec = yaml.safe_load(example.read_text())["storage"]["fsxLustre"]
    (storage,) = _config(example)["SharedStorage"]
    settings = storage["FsxLustreSettings"]
    assert storage["MountDir"] == fsx_spec.get("mountPath", "/fsx")
    assert settings == {"FileSystemId": fsx_spec.get("fileSystemId", "<fmctl:fileSystemId>")}


@pytest.mark.parametrize(("example", "scheduler"), SLURM_CASES, ids=SLURM_IDS)
def test_early_check_config_has_parallelclusters_own_fsx_settings(
    example: Path, scheduler: str
) -> None:
    """Only for ParallelCluster's validators, before the file system exists."""
    from provisioner.render.context import build_context
    from provisioner.render.slurm import render_slurm
    from tests.conftest import validate_data

    fsx_spec = yaml.safe_load(example.read_text())["storage"]["fsxLustre"]
    spec = validate_data(yaml.safe_load(example.read_text()), "slurm").resolved
    assert spec is not None
    early = render_slurm(build_context(spec, CATALOG), early=True)
    (storage,) = yaml.safe_load(early["parallelcluster/cluster-config.yaml"])["SharedStorage"]
    settings = storage["FsxLustreSettings"]
    if "fileSystemId" in fsx_spec:
        assert settings == {"FileSystemId": fsx_spec["fileSystemId"]}
    else:
        assert settings["DeletionPolicy"] == "Retain"
        assert settings["StorageCapacity"] == fsx_spec.get("capacityGiB", 1200)
        if fsx_spec.get("s3") and settings["DeploymentType"] == "PERSISTENT_2":
            links = settings["DataRepositoryAssociations"]
            assert links[0]["DataRepositoryPath"] == fsx_spec["s3"]["importPath"]


@pytest.mark.parametrize(("example", "scheduler"), SLURM_CASES, ids=SLURM_IDS)
def test_custom_action_scripts_exist(example: Path, scheduler: str) -> None:
    text = rendered(example, "slurm").files["parallelcluster/cluster-config.yaml"]
    for line in text.splitlines():
        if "Script:" in line:
            relative = line.split("/slurm/", 1)[1].strip('"')
            assert (ROOT / "slurm" / relative).is_file(), relative


def test_gpu_health_checks_are_opt_in() -> None:
    example = ROOT / "examples" / "p5-slurm-capacity-block.yaml"
    text = example.read_text().replace(
        "slurm: {os: alinux2023,", "slurm: {gpuHealthChecks: true, os: alinux2023,"
    )
    assert "gpuHealthChecks" in text
    spec = validate_text(text, "slurm").resolved
    assert spec is not None
    files = render(spec, load_catalog()).files
    config = yaml.safe_load(files["parallelcluster/cluster-config.yaml"])
    queue = config["Scheduling"]["SlurmQueues"][0]
    assert queue["HealthChecks"]["Gpu"]["Enabled"] is True
    assert queue["ComputeResources"][0]["HealthChecks"]["Gpu"]["Enabled"] is True


def test_topology_aware_head_node_has_its_topology_before_slurmctld() -> None:
    """TopologyPlugin=topology/tree without topology.conf kills slurmctld: the head node's
    OnNodeStart (before the cookbook starts slurmctld) puts the provisional tree in place."""
    config = _config(ROOT / "examples" / "p5-slurm-capacity-block.yaml")
    start = config["HeadNode"]["CustomActions"]["OnNodeStart"]["Sequence"][0]
    assert start["Script"].endswith("/slurm/actions/on-head-node-start.sh")


def test_head_node_actions_keep_the_args_existing_clusters_have() -> None:
    """HeadNode CustomActions are UNSUPPORTED on update in ParallelCluster (its
    HeadNodeCustomActionsSchema): Args that changed would block every later `up` of a
    cluster made earlier. These are the Args fmctl has always rendered for the p5 example."""
    config = _config(ROOT / "examples" / "p5-slurm-capacity-block.yaml")
    (action,) = config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Sequence"]
    assert action["Args"][0] == "head" and action["Args"][2:] == [
        "--slurm-exporter",
        "--grafana",
        "--topology=tree",
    ]


def test_the_task_prolog_is_where_every_node_sees_it() -> None:
    """TaskProlog names a file in /opt/slurm (the head node's, mounted by every compute
    node), put there at creation and again after every update (OnNodeUpdated, which
    ParallelCluster allows to change)."""
    config = _config(ROOT / "examples" / "p5-slurm-capacity-block.yaml")
    settings = {
        k: v
        for d in config["Scheduling"]["SlurmSettings"]["CustomSlurmSettings"]
        for k, v in d.items()
    }
    assert settings["TaskProlog"] == "/opt/slurm/etc/scripts/fmctl-task-prolog.sh"
    (updated,) = config["HeadNode"]["CustomActions"]["OnNodeUpdated"]["Sequence"]
    assert updated["Script"].endswith("/slurm/actions/on-head-node-updated.sh")


def test_a_long_dcgm_diagnostic_gets_the_bootstrap_time_it_needs(tmp_path: Path) -> None:
    """The verify gate runs in OnNodeConfigured, inside a compute node's bootstrap, which
    ParallelCluster bounds by ComputeNodeBootstrapTimeout (1800 s unless told; its Slurm
    ResumeTimeout and clustermgtd's replacement timeout are the same number). Level 2
    (about two minutes) fits; levels 3 and 4 get their diagnostic's deadline on top, in a
    setting ParallelCluster's own schema takes."""
    timeouts: dict[int, Any] = {}
    paths = []
    for level in (2, 3, 4):
        spec = yaml.safe_load(SLURM_CASES[0][0].read_text())
        spec["health"] = {"verify": {"dcgmLevel": level}}
        path = tmp_path / f"level-{level}-spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        text = rendered(path, "slurm").files["parallelcluster/cluster-config.yaml"]
        config = yaml.safe_load(text)
        timeouts[level] = (config.get("DevSettings") or {}).get("Timeouts")
        out = tmp_path / f"level-{level}.yaml"
        out.write_text(fill_all(text))
        paths.append(out)
    assert timeouts == {
        2: None,
        3: {"ComputeNodeBootstrapTimeout": 3600},
        4: {"ComputeNodeBootstrapTimeout": 16200},
    }
    assert _schema_check(paths) == {str(p): None for p in paths}
    # With the agent off there is no gate to wait for.
    spec = yaml.safe_load(SLURM_CASES[0][0].read_text())
    spec["health"] = {"enabled": False, "verify": {"dcgmLevel": 4}}
    path = tmp_path / "off-spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    config = yaml.safe_load(rendered(path, "slurm").files["parallelcluster/cluster-config.yaml"])
    assert "DevSettings" not in config
