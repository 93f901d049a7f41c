"""The Slurm side checked by a real slurmctld (Debian's slurm-wlm): the queues ParallelCluster
would create for each example, fmctl's cluster settings and topology.conf, and every job
script in slurm/jobs/ against the cluster's shape."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.catalog import load_catalog
from provisioner.render.context import ClusterContext, build_context
from provisioner.render.slurm import silent_gres_problems
from provisioner.spec.source import load_source
from provisioner.validate import validate_document
from tests.conftest import EXAMPLES
from tests.tools.slurm_cluster import SlurmCluster, missing_binaries, slurm_conf, start

ROOT = Path(__file__).resolve().parents[2]
JOBS = sorted((ROOT / "slurm/jobs").glob("*.sbatch"))


def _context(example: Path) -> ClusterContext:
    doc, _ = load_source(str(example))
    spec = validate_document(doc, "slurm").resolved
    assert spec is not None
    return build_context(spec, load_catalog())


@pytest.fixture(params=EXAMPLES, ids=lambda p: p.stem)
def cluster(request: pytest.FixtureRequest) -> Iterator[tuple[ClusterContext, SlurmCluster]]:
    missing = missing_binaries()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{missing} missing: `make tools` installs slurm-wlm and munge")
        pytest.skip(f"{missing} not installed (`make tools` installs slurm-wlm and munge)")
    context = _context(request.param)
    running = start(context)
    yield context, running
    running.stop()


def test_queues_nodes_and_gres(cluster: tuple[ClusterContext, SlurmCluster]) -> None:
    context, slurm = cluster
    rows = slurm.run("sinfo", "-h", "-o", "%R|%D|%G|%z").stdout.split()
    seen = {row.split("|")[0]: row.split("|")[1:] for row in rows}
    for pool in context.pools:
        count, gres, shape = seen[pool.name]
        cpu = pool.itype.cpu
        assert int(count) == pool.count
        assert gres == f"gpu:{pool.gpu_type}:{pool.gpus}"
        assert shape == f"{cpu.sockets}:{cpu.cores_per_socket}:{cpu.threads_per_core}"


def test_every_job_script_fits_the_cluster(cluster: tuple[ClusterContext, SlurmCluster]) -> None:
    context, slurm = cluster
    pool = context.pools[0]
    assert JOBS
    for job in JOBS:
        args = ["sbatch", "--test-only", "-p", pool.name]
        if pool.gpus != 8:  # the scripts assume 8-GPU nodes unless told otherwise
            args += [f"--gpus-per-node={pool.gpus}", f"--ntasks-per-node={pool.gpus}"]
        result = slurm.run(*args, str(job))
        assert result.returncode == 0, (job.name, result.stderr, slurm.log()[-2000:])
        assert "to start at" in result.stderr


def test_a_job_that_cannot_fit_is_refused(cluster: tuple[ClusterContext, SlurmCluster]) -> None:
    context, slurm = cluster
    pool = context.pools[0]
    result = slurm.run(
        "sbatch",
        "--test-only",
        "-p",
        pool.name,
        f"--gpus-per-node={pool.gpus * 2}",
        "--wrap",
        "true",
    )
    assert result.returncode != 0
    too_many = slurm.run(
        "sbatch", "--test-only", "-p", pool.name, f"--nodes={pool.count + 1}", "--wrap", "true"
    )
    assert too_many.returncode != 0


def test_topology(cluster: tuple[ClusterContext, SlurmCluster]) -> None:
    context, slurm = cluster
    shown = slurm.run("scontrol", "show", "topology").stdout
    if context.topology_aware:
        for pool in context.pools:
            assert f"SwitchName=leaf-{pool.name}" in shown
        assert "SwitchName=spine" in shown
    else:
        assert "leaf-" not in shown


def test_gres_without_gres_types_is_caught_by_fmctl(tmp_path: Path) -> None:
    context = _context(EXAMPLES[0])
    good = slurm_conf(context, tmp_path, (6817, 6818))
    assert silent_gres_problems(good) == []
    bad = slurm_conf(context, tmp_path, (6817, 6818), gres_types=False)
    problems = silent_gres_problems(bad)
    assert problems and "GresTypes=gpu" in problems[0]
    if missing_binaries():
        pytest.skip("slurm-wlm not installed: the rule is checked, Slurm's silence is not")
    # ...and Slurm itself starts on such a config without a word: the reason for the rule.
    running = start(context, gres_types=False)
    try:
        assert "is UP" in running.run("scontrol", "ping").stdout
        assert "GresTypes" not in running.conf.read_text()
    finally:
        running.stop()


def _hostnames(slurm: SlurmCluster, hostlist: str) -> list[str]:
    return slurm.run("scontrol", "show", "hostnames", hostlist).stdout.split()


@pytest.fixture
def topology_cluster() -> Iterator[tuple[ClusterContext, SlurmCluster]]:
    """The topology-aware example's cluster."""
    if missing_binaries():
        if os.environ.get("CI"):
            pytest.fail("slurm-wlm missing: `make tools` installs it")
        pytest.skip("slurm-wlm not installed (`make tools` installs it)")
    context = _context(ROOT / "examples/p5-slurm-capacity-block.yaml")
    assert context.topology_aware
    running = start(context)
    yield context, running
    running.stop()


def test_topology_from_ec2_instance_topology(
    topology_cluster: tuple[ClusterContext, SlurmCluster],
) -> None:
    """What the head node's timer does: nodes get their addresses as ParallelCluster's resume
    sets them, slurm/lib/topology.py maps EC2's network nodes to them, slurmctld reloads."""
    import json
    import subprocess
    import sys

    from provisioner.render.slurm import node_names

    context, slurm = topology_cluster
    pool = context.pools[0]
    names = _hostnames(slurm, node_names(context, pool))[:6]
    instances = []
    for i, name in enumerate(names):
        ip = f"10.0.1.{10 + i}"
        update = slurm.run("scontrol", "update", f"NodeName={name}", f"NodeAddr={ip}")
        assert update.returncode == 0, update.stderr
        instances.append({"ip": ip, "networkNodes": ["nn-spine", f"nn-b{i // 3}", f"nn-l{i // 2}"]})
    folder = slurm.conf.parent
    (folder / "topology.json").write_text(json.dumps({"readAt": "now", "instances": instances}))
    (folder / "nodes.txt").write_text(slurm.run("scontrol", "show", "nodes", "-o").stdout)
    made = subprocess.run(
        [
            sys.executable,
            str(ROOT / "slurm/lib/topology.py"),
            str(folder / "topology.json"),
            str(folder / "nodes.txt"),
            "--style=tree",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    (folder / "topology.conf").write_text(made.stdout)
    assert slurm.run("scontrol", "reconfigure").returncode == 0
    shown = {
        line.split()[0].split("=")[1]: line
        for line in slurm.run("scontrol", "show", "topology").stdout.splitlines()
        if line.startswith("SwitchName=")
    }
    assert f"Nodes={names[0]},{names[1]}" in shown["nn-l0"]
    assert "Level=0" in shown["nn-l0"] and "Level=1" in shown["nn-b0"]
    assert "Switches=nn-l0,nn-l1" in shown["nn-b0"] and "Level=2" in shown["nn-spine"]
    assert f"unplaced-{pool.name}" in shown  # the nodes EC2 has not placed, still usable
    assert "fmctl-root" in shown
    fits = slurm.run(
        "sbatch", "--test-only", "-p", pool.name, f"--nodes={pool.count}", "--wrap", "true"
    )
    assert fits.returncode == 0, (fits.stderr, slurm.log()[-2000:])
