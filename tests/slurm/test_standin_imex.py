"""IMEX on a GB200 UltraServer queue (ParallelCluster), as its nodes run it: the compute
nodes' OnNodeStart with the rendered Args, OnNodeConfigured (prolog.d from the artifact
bucket), then real jobs through slurmd's prolog, which writes each node's IMEX peer list
from the job's nodes and restarts nvidia-imex until `nvidia-imex-ctl -q` says READY.

The AMI's IMEX is laid out as the ParallelCluster cookbook installs it (config, unit, a
placeholder peer list; tests/tools/standin/layout.sh); the daemon and its client are
stand-ins (no NVLink fabric here), each node with an address of its own on loopback.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from provisioner.catalog import load_catalog
from provisioner.render import render
from provisioner.render.context import build_context
from provisioner.render.slurm import cluster_slurm_settings, node_names
from tests.conftest import ROOT, set_path, validate_data
from tests.render.helpers import FILLED, fill_all
from tests.tools.standin import recorded, rootfs
from tests.tools.standin.node import CLOUD_INIT_ENV, SSM_ENV, StandinNode
from tests.tools.standin.slurm import ComputeNode, StandinSlurm

pytestmark = rootfs.required()
EXAMPLE = ROOT / "examples/p5-slurm-capacity-block.yaml"
POOL = ("compute", "gpuPools", 0)
BUCKET = FILLED["artifactBucket"]
PEERS = "/etc/nvidia-imex/nodes_config.cfg"
FABRIC = "/var/lib/standin-imex-fabric"
#: The major the driver registers nvidia-caps-imex-channels under (any number: the kernel
#: picks it at load; the prolog must read it from the device table).
MAJOR, CAPS = 507, "nvidia-caps-imex-channels"
CHANNELS = "/var/lib/standin-dev/nvidia-caps-imex-channels"
USER = {"user": "ubuntu", "env": {"PATH": "/usr/bin:/bin", "HOME": "/home/ubuntu"}}


@dataclass
class Cluster:
    head: StandinNode
    computes: list[ComputeNode]
    slurm: StandinSlurm
    start_args: list[str]


def _config(edits: list[tuple[tuple[Any, ...], Any]]) -> tuple[Any, dict[str, str], Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    for path, value in edits:
        data = set_path(data, path, value)
    result = validate_data(data)
    assert result.ok and result.resolved is not None, result.problems
    files = render(result.resolved, load_catalog()).files
    text = fill_all(files["parallelcluster/cluster-config.yaml"])
    return build_context(result.resolved, load_catalog()), files, yaml.safe_load(text)


def _run_action(node: StandinNode, step: dict[str, Any]) -> None:
    """ParallelCluster downloads the action's Script and runs it with its Args (as root,
    from cinc's environment)."""
    script = step["Script"].split("/slurm/", 1)[1]
    node.write("/var/tmp/action.sh", (ROOT / "slurm" / script).read_text(), 0o755)
    args = [str(a) for a in step.get("Args", [])]
    done = node.run(["/bin/bash", "/var/tmp/action.sh", *args], env=CLOUD_INIT_ENV, timeout=120)
    assert done.returncode == 0, (script, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    image = rootfs.ensure()
    c, files, config = _config(
        [
            ((*POOL, "instanceType"), "p6e-gb200.36xlarge"),
            ((*POOL, "count"), 18),
            (("compute", "headNode", "instanceType"), "m7g.4xlarge"),
        ]
    )
    pool = c.pools[0]
    queue = config["Scheduling"]["SlurmQueues"][0]
    start = queue["CustomActions"]["OnNodeStart"]["Sequence"][0]
    configured = queue["CustomActions"]["OnNodeConfigured"]["Sequence"][0]
    # Only what this test needs of the node's bootstrap: prolog.d, not the exporters.
    configured = {**configured, "Args": configured["Args"][:2]}
    # The queue's 18 node names; slurmd serves the first two, the rest are declared only.
    base = node_names(c, pool).split("[", 1)[0]
    head = StandinNode(image, "ip-10-0-0-10")
    # The UltraServer's NVLink fabric, as the stand-in IMEX daemons see each other through it.
    shares = ("opt/slurm", "home", FABRIC.lstrip("/"))
    nodes = [
        StandinNode(image, f"ip-10-0-16-{i}", shared_from=head, shares=shares) for i in (21, 22)
    ]
    try:
        # No topology.conf of fmctl's: ParallelCluster writes GB200 clusters' blocks itself.
        assert "slurm/topology.conf" not in files
        prefix = f"/var/lib/standin-s3/{BUCKET}/{c.name}/slurm"
        computes = []
        for i, node in enumerate(nodes, 1):
            shutil.copytree(ROOT / "slurm", node.path(prefix), dirs_exist_ok=True)
            node.write("/etc/standin/addresses", f"127.0.16.{20 + i}\n")
            node.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(16), 2))
            row = "{0}, NVIDIA GB200, GPU-{0}, 0000:0{0}:00.0, 189471, 0\n"
            gpus = "".join(row.format(g) for g in range(4))
            node.write("/etc/standin/nvidia-smi.csv", gpus)
            computes.append(
                ComputeNode(
                    node,
                    f"{base}{i}",
                    pool.name,
                    pool.itype.cpu.sockets,
                    pool.itype.cpu.cores_per_socket,
                    pool.itype.cpu.threads_per_core,
                    addr=f"127.0.16.{20 + i}",
                )
            )
        declared = [(f"{base}[3-{pool.count}]", pool.name)]
        slurm = StandinSlurm(head, computes, cluster_slurm_settings(c), declared)
        for node in nodes:
            _run_action(node, start)
            _run_action(node, configured)
            # The driver's device table (this machine has no NVIDIA driver) and a /dev of the
            # node's own for the channel device (the stand-in's /dev is the machine's).
            node.write("/etc/standin/proc-devices", f"Character devices:\n{MAJOR} {CAPS}\n")
            env = node.path("/etc/fmctl/node.env")
            env.write_text(
                env.read_text()
                + "FMCTL_PROC_DEVICES=/etc/standin/proc-devices\n"
                + f"FMCTL_IMEX_CHANNELS={CHANNELS}\n"
                # A domain that does not form fails its job in 10 s here, not the 60 s default.
                + "FMCTL_IMEX_READY_TIMEOUT=10\n"
            )
        slurm.start_slurmd()
        yield Cluster(head, computes, slurm, [str(a) for a in start["Args"]])
    finally:
        head.stop()
        for node in nodes:
            node.stop()


def _submit(cluster: Cluster, *args: str) -> Any:
    cluster.head.write("/home/ubuntu/true.sh", "#!/bin/bash\ntrue\n", 0o755)
    argv = ["/opt/slurm/bin/sbatch", "--chdir=/home/ubuntu", *args, "/home/ubuntu/true.sh"]
    return cluster.head.run(argv, timeout=120, **USER)  # type: ignore[arg-type]


def test_ultraserver_nodes_are_told_to_form_nvlink_domains(cluster: Cluster) -> None:
    """The rendered OnNodeStart gives GB200 nodes IMEX; the node records it for the prolog."""
    assert cluster.start_args[-1] == "true" and len(cluster.start_args) == 5
    env = cluster.computes[0].node.path("/etc/fmctl/node.env").read_text()
    assert "FMCTL_IMEX=true" in env and "FMCTL_EXPECTED_EFA=16" in env


def test_a_two_node_job_forms_the_nvlink_domain(cluster: Cluster) -> None:
    """Each node's IMEX peer list is the job's two addresses (not the AMI's placeholder),
    its daemon restarted on it, bound to the node's own address."""
    done = _submit(cluster, "--wait", "--exclusive", "-N", "2")
    assert done.returncode == 0, done.stderr + cluster.slurm.log()
    addresses = sorted(c.addr for c in cluster.computes)
    for c in cluster.computes:
        peers = c.node.path(PEERS).read_text().split()
        assert sorted(peers) == addresses
        # /run is the node's own tmpfs: read it on the node.
        daemon = c.node.run(["cat", "/run/standin-imex/daemon"], env=SSM_ENV).stdout
        assert f"bind={c.addr}" in daemon and f"peer={addresses[0]}" in daemon
        assert cluster.slurm.node_state(c.name).startswith("IDLE")
        # The IMEX channel CUDA's fabric handles open: a character device of the driver's
        # major, minor 0 (without it NCCL leaves NVLink for EFA without a word).
        shown = c.node.run(["stat", "-c", "%F %t:%T", f"{CHANNELS}/channel0"], env=SSM_ENV)
        assert shown.stdout.strip() == f"character special file {MAJOR:x}:0", shown


def test_the_node_check_records_the_domain(cluster: Cluster) -> None:
    """`fmctl check`'s node-check.sh on a GB200 node, as SSM runs it, after a two-node job
    formed the domain: imex.txt holds the local word and the domain's, which fmctl reads as
    formed (every peer READY and connected), not merely this daemon up."""
    from provisioner.check.outputs import parse_imex

    done = _submit(cluster, "--wait", "--exclusive", "-N", "2")
    assert done.returncode == 0, done.stderr + cluster.slurm.log()
    node = cluster.computes[0]
    run = node.node.run(
        ["/bin/bash", "/opt/fmctl/slurm/lib/node-check.sh", "/var/tmp/check", node.name],
        env={**SSM_ENV, "NODE_NAME": node.name, "FMCTL_CHECK_PARTS": "gpu"},
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    said = node.node.path(f"/var/tmp/check/nodes/{node.name}/imex.txt").read_text()
    state = parse_imex(said)
    assert state.ready and state.domain == "UP" and state.said == "domain UP, 2 nodes", said


def test_a_one_node_job_gets_a_domain_of_one(cluster: Cluster) -> None:
    """The next job's list replaces the last one's: a peer from an earlier job would make
    IMEX wait for a node that is not in the job."""
    name = cluster.computes[1].name
    done = _submit(cluster, "--wait", "--exclusive", "-N", "1", "-w", name)
    assert done.returncode == 0, done.stderr + cluster.slurm.log()
    assert cluster.computes[1].node.path(PEERS).read_text().split() == [cluster.computes[1].addr]


def test_a_shared_job_leaves_the_domain_alone(cluster: Cluster) -> None:
    """A job that may share its nodes does not restart IMEX: that would tear down the NVLink
    memory of the jobs beside it (PCS's UltraServer prolog exits unless the job is
    exclusive). slurmd's own SLURM_JOB_OVERSUBSCRIBE decides, here from a real slurmd."""
    node = cluster.computes[0]
    node.node.path(PEERS).write_text("sentinel\n")
    done = _submit(cluster, "--wait", "--oversubscribe", "-N", "1", "-w", node.name)
    assert done.returncode == 0, done.stderr + cluster.slurm.log()
    assert node.node.path(PEERS).read_text() == "sentinel\n"
    done = _submit(cluster, "--wait", "--exclusive", "-N", "1", "-w", node.name)
    assert done.returncode == 0, done.stderr + cluster.slurm.log()
    assert node.node.path(PEERS).read_text().split() == [node.addr]


def test_srun_places_ranks_in_the_hostfiles_order(cluster: Cluster) -> None:
    """What nccl-tests.sbatch relies on, with the real srun: SLURM_HOSTFILE and
    --distribution=arbitrary put rank 0 on the file's first host (here the job's second)."""
    first, second = (c.name for c in cluster.computes)
    job = (
        "#!/bin/bash\n"
        'printf "%s\\n" ' + f"{second} {first}" + ' > "$HOME/hosts.$SLURM_JOB_ID"\n'
        'export SLURM_HOSTFILE="$HOME/hosts.$SLURM_JOB_ID"\n'
        "/opt/slurm/bin/srun --distribution=arbitrary --ntasks=2 "
        "/bin/bash -c 'echo rank=$SLURM_PROCID node=$SLURMD_NODENAME'\n"
    )
    cluster.head.write("/home/ubuntu/ranks.sh", job, 0o755)
    argv = [
        "/opt/slurm/bin/sbatch",
        "--wait",
        "-N",
        "2",
        "--chdir=/home/ubuntu",
        "-o",
        "/home/ubuntu/ranks.out",
        "/home/ubuntu/ranks.sh",
    ]
    done = cluster.head.run(argv, timeout=120, **USER)  # type: ignore[arg-type]
    assert done.returncode == 0, done.stderr + cluster.slurm.log()
    out = cluster.computes[0].node.path("/home/ubuntu/ranks.out").read_text()
    assert f"rank=0 node={second}" in out and f"rank=1 node={first}" in out, out


def test_a_local_ready_is_not_a_domain(cluster: Cluster) -> None:
    """A peer whose daemon does not come up: this node's own daemon says READY (`-q`), but
    the domain is not UP (`-N -j`), so this node is drained too, naming the peer; then both
    are returned to service for the tests after."""
    good, bad = cluster.computes
    broken = bad.node.path("/etc/standin/addresses")
    saved = broken.read_text()
    broken.write_text("127.0.99.99\n")  # none of its addresses listed: its daemon cannot bind
    # Its daemon is gone from the fabric (a record left by an earlier job would count).
    cluster.head.path(f"{FABRIC}/{bad.node.hostname}").unlink(missing_ok=True)
    try:
        done = _submit(cluster, "--parsable", "--exclusive", "-N", "2")
        assert done.returncode == 0, done.stderr
        cluster.slurm.wait_state(good.name, ("DRAIN", "IDLE+DRAIN", "DOWN+DRAIN"))
        shown = cluster.slurm.scontrol("show", "node", good.name)
        assert "IMEX domain is not UP" in shown and f"{bad.addr} UNAVAILABLE" in shown, shown
        # The peer's own daemon could not start: its reason carries systemctl's words.
        cluster.slurm.wait_state(bad.name, ("DRAIN", "IDLE+DRAIN", "DOWN+DRAIN"))
        theirs = cluster.slurm.scontrol("show", "node", bad.name)
        assert (
            "systemctl restart nvidia-imex failed: Job for nvidia-imex.service failed because "
            "the control process exited with error code" in theirs
        ), theirs
        local = good.node.run(["nvidia-imex-ctl", "-q"], env=SSM_ENV)
        assert local.stdout.strip() == "READY"  # what the prolog no longer takes for a domain
    finally:
        broken.write_text(saved)
        cluster.head.run(["/opt/slurm/bin/scancel", "--user=ubuntu"], env=SSM_ENV)
        for c in cluster.computes:
            cluster.slurm.scontrol("update", f"NodeName={c.name}", "State=RESUME")


def test_a_node_without_imex_is_drained_with_the_reason(cluster: Cluster) -> None:
    """nvidia-imex gone from one node: the job does not start there, the node is drained and
    says the NVLink domain did not form (runs last: the node stays drained)."""
    broken = cluster.computes[1]
    broken.node.path("/usr/bin/nvidia-imex").unlink()
    done = _submit(cluster, "--parsable", "--exclusive", "-N", "1", "-w", broken.name)
    assert done.returncode == 0, done.stderr
    state = cluster.slurm.wait_state(broken.name, ("DRAIN", "IDLE+DRAIN", "DOWN+DRAIN"))
    assert "DRAIN" in state
    shown = cluster.slurm.scontrol("show", "node", broken.name)
    assert "NVLink domain not formed: nvidia-imex is not installed" in shown, shown


def test_slurmd_runs_the_node_check_before_imex(cluster: Cluster) -> None:
    """Slurm runs a Prolog glob's scripts in an order of its own (slurm.conf(5), Prolog:
    reverse alphabetical for several); a real slurmd says which here, and fmctl's names must
    put the node check first under it: IMEX is re-formed only on a node that passed it."""
    node = cluster.computes[0]
    scripts = "/opt/slurm/etc/scripts/prolog.d"
    record = "/var/tmp/prolog-order"
    for name in ("00-order-first-by-name.sh", "zz-order-last-by-name.sh"):
        node.node.write(f"{scripts}/{name}", f"#!/bin/bash\necho {name} >> {record}\n", 0o755)
    try:
        done = _submit(cluster, "--wait", "--exclusive", "-N", "1", "-w", node.name)
        assert done.returncode == 0, done.stderr + cluster.slurm.log()
        ran = node.node.path(record).read_text().split()
    finally:
        for name in ("00-order-first-by-name.sh", "zz-order-last-by-name.sh"):
            node.node.path(f"{scripts}/{name}").unlink()
        node.node.path(record).unlink(missing_ok=True)
    reverse = ran == ["zz-order-last-by-name.sh", "00-order-first-by-name.sh"]
    assert reverse or ran == ["00-order-first-by-name.sh", "zz-order-last-by-name.sh"], ran
    ours = sorted(p.name for p in (ROOT / "slurm" / "prolog.d").glob("*.sh"))
    order = list(reversed(ours)) if reverse else ours
    check = next(n for n in order if "node-check" in n)
    imex = next(n for n in order if "imex" in n)
    assert order.index(check) < order.index(imex), (order, "reverse" if reverse else "forward")
