"""slurm/ on a stand-in node laid out as an AWS PCS AMI: Slurm under
/opt/aws/pcs/scheduler/slurm-VERSION for the spec's default version (the PCS installer's
prefix, AWS PCS User Guide "Install SPANK plugins on AWS PCS"; the binaries are the
stand-in's Debian 13 Slurm 24.11, a version PCS no longer makes clusters on) and no
/opt/slurm. The launch template's user data, exactly as `render` writes it for a compute
node group, runs as cloud-init runs it (root, `env -i`); then the cluster's Prolog, as PCS's
slurmCustomSettings name it, runs as slurmd runs it and drains a node short of a GPU
through the scontrol of PCS's prefix.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.catalog import load_catalog
from provisioner.catalog.pcs import slurm_prefix
from provisioner.render import render
from provisioner.render.placeholders import fill, find
from provisioner.spec.defaults import pcs_slurm_version
from tests.conftest import set_path, validate_data
from tests.tools.standin import recorded, rootfs
from tests.tools.standin.node import CLOUD_INIT_ENV, StandinNode

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
BUCKET = "fmctl-artifacts-standin"
PREFIX = slurm_prefix(pcs_slurm_version())

pytestmark = rootfs.required()

#: As PCS's AMI has it: Slurm in the installer's prefix; scontrol recording what it is asked
#: (the controller is AWS's, not on the node) beside the real one.
LAYOUT = f"""
set -e
install -d /opt/aws/pcs/scheduler
mv /opt/slurm {PREFIX}
ln -sfn {PREFIX}/etc /etc/slurm
ln -sfn {PREFIX}/sbin/slurmstepd /usr/sbin/slurmstepd
mv {PREFIX}/bin/scontrol {PREFIX}/bin/scontrol.real
cat > {PREFIX}/bin/scontrol <<'EOF'
#!/bin/sh
echo "$*" >> /var/log/fmctl-scontrol.log
EOF
chmod 0755 {PREFIX}/bin/scontrol
"""


def _files(*edits: tuple[tuple[Any, ...], Any]) -> dict[str, str]:
    data: dict[str, Any] = yaml.safe_load(
        (ROOT / "examples/p5-slurm-capacity-block.yaml").read_text()
    )
    for path, value in (
        (("slurm",), {"provider": "pcs"}),
        (("storage",), {"localNvme": {"mountPath": "/scratch"}}),
        *edits,
    ):
        data = set_path(data, path, value)
    result = validate_data(data)
    assert result.ok and result.resolved is not None, result.problems
    return render(result.resolved, load_catalog()).files


def _shell_part(user_data: str) -> str:
    """The text/x-shellscript part of the MIME user data, as cloud-init extracts it."""
    part = user_data.split('Content-Type: text/x-shellscript; charset="us-ascii"\n\n', 1)[1]
    return part.split("\n--FMCTL--", 1)[0]


def pcs_node(name: str, files: dict[str, str]) -> StandinNode:
    """A stand-in node laid out as PCS's AMI, a healthy p5 (its GPUs and EFA devices), with
    the artifact bucket as `up` fills it: the shipped slurm/ and the rendered slurm/ files."""
    pcs = StandinNode(rootfs.ensure(), name)
    try:
        laid = pcs.run(["/bin/bash", "-c", LAYOUT])
        assert laid.returncode == 0, laid.stderr
        s3 = f"/var/lib/standin-s3/{BUCKET}/llm-pretrain/slurm"
        shutil.copytree(ROOT / "slurm", pcs.path(s3), dirs_exist_ok=True)
        for path, text in files.items():
            if path.startswith("slurm/"):
                pcs.write(f"{s3}/{path.removeprefix('slurm/')}", text)
        pcs.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(32), 2))
        healthy = (DATA / "check/nvidia-smi-healthy.csv").read_text()
        pcs.write("/etc/standin/nvidia-smi.csv", healthy)
    except BaseException:
        pcs.stop()
        raise
    return pcs


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[StandinNode, dict[str, str], Any]]:
    files = _files()
    pcs = pcs_node("ip-10-0-16-30", files)
    try:
        template = json.loads(files["pcs/launch-templates/train.json"])
        text = template["LaunchTemplateData"]["UserData"]
        script = fill(_shell_part(text), {n: BUCKET for n in find(_shell_part(text))})
        pcs.write("/var/lib/cloud/instance/scripts/part-001", script, 0o700)
        booted = pcs.run(
            ["/var/lib/cloud/instance/scripts/part-001"], env=CLOUD_INIT_ENV, timeout=300
        )
        yield pcs, files, booted
    finally:
        pcs.stop()


def test_the_user_data_bootstraps_a_pcs_node(node: tuple[StandinNode, dict[str, str], Any]) -> None:
    pcs, _, booted = node
    assert booted.returncode == 0, f"{booted.stdout}\n{booted.stderr}"
    assert pcs.path("/etc/fmctl/slurm.env").read_text() == f"FMCTL_SLURM_PREFIX={PREFIX}\n"
    env = pcs.path("/etc/fmctl/node.env").read_text()
    assert "FMCTL_EXPECTED_GPUS=8" in env and "FMCTL_EXPECTED_EFA=32" in env
    # Nothing of ParallelCluster's layout is made on a PCS node.
    assert not pcs.path("/opt/slurm").exists()
    assert pcs.path("/opt/fmctl/slurm/prolog.d/90-fmctl-node-check.sh").is_file()
    assert "fmctl on-node-configured: compute done" in booted.stdout


def test_the_clusters_prolog_drains_through_pcss_scontrol(
    node: tuple[StandinNode, dict[str, str], Any],
) -> None:
    pcs, files, _ = node
    settings = {
        s["parameterName"]: s["parameterValue"]
        for s in json.loads(files["pcs/cluster.json"])["slurmConfiguration"]["slurmCustomSettings"]
    }
    # The setting is a glob: slurmd runs every script it matches, in order, and the first
    # that fails fails the prolog.
    assert settings["Prolog"].endswith("/prolog.d/*")
    prolog = ["/bin/bash", "-c", "for s in " + settings["Prolog"] + '; do "$s" || exit; done']
    healthy = pcs.run(prolog, env={"SLURMD_NODENAME": "train-1", "SLURM_JOB_ID": "7"})
    assert healthy.returncode == 0, healthy.stderr
    pcs.write("/etc/standin/nvidia-smi.csv", (DATA / "check/nvidia-smi-lost-gpu.csv").read_text())
    short = pcs.run(prolog, env={"SLURMD_NODENAME": "train-1", "SLURM_JOB_ID": "8"})
    assert short.returncode == 1 and "expected 8" in short.stderr, short.stderr
    drained = pcs.path("/var/log/fmctl-scontrol.log").read_text()
    assert "update NodeName=train-1 State=DRAIN Reason=fmctl prolog: sees 7 GPUs" in drained
    epilog = pcs.run([settings["Epilog"]], env={"SLURMD_NODENAME": "train-1", "SLURM_JOB_ID": "8"})
    assert epilog.returncode == 0, epilog.stderr


def test_an_ultraserver_node_group_bootstraps_for_imex(
    node: tuple[StandinNode, dict[str, str], Any],
) -> None:
    """A GB200 node group's user data (Slurm 25.11: PCS asks 25.05+ for UltraServers, and an
    AMI of the user's with nvidia-imex, which no sample AMI has) tells
    the node it forms NVLink domains: the prolog's IMEX step runs there (runs last: the node
    is re-bootstrapped as a GB200 node)."""
    pcs, _, _ = node
    files = _files(
        (
            ("slurm",),
            {"provider": "pcs", "pcs": {"slurmVersion": "25.11"}, "amiId": "ami-0123456789abcdef0"},
        ),
        (("compute", "gpuPools", 0, "instanceType"), "p6e-gb200.36xlarge"),
        (("compute", "gpuPools", 0, "count"), 18),
        (("compute", "headNode", "instanceType"), "m7g.4xlarge"),
    )
    text = json.loads(files["pcs/launch-templates/train.json"])["LaunchTemplateData"]["UserData"]
    script = fill(_shell_part(text), {n: BUCKET for n in find(_shell_part(text))})
    assert " - --imex --node-exporter" in script, script
    # The 25.11 prefix, as PCS's installer lays it out (the fixture's node has the default's).
    if slurm_prefix("25.11") != PREFIX:
        link = f"ln -sfn {PREFIX} {slurm_prefix('25.11')}"
        laid = pcs.run(["/bin/bash", "-c", link])
        assert laid.returncode == 0, laid.stderr
    pcs.write("/etc/standin/fi_info.txt", recorded.fi_info(recorded.p5_domains(16), 2))
    # Only the bootstrap's own part: the exporters were installed and checked above.
    script = script.split(" --imex ", 1)[0] + " --imex\n"
    pcs.write("/var/lib/cloud/instance/scripts/part-002", script, 0o700)
    # A GB200 instance is a new one: this node's first bootstrap is not its.
    pcs.path("/var/lib/fmctl/bootstrapped").unlink()
    booted = pcs.run(["/var/lib/cloud/instance/scripts/part-002"], env=CLOUD_INIT_ENV, timeout=300)
    assert booted.returncode == 0, f"{booted.stdout}\n{booted.stderr}"
    env = pcs.path("/etc/fmctl/node.env").read_text()
    assert "FMCTL_IMEX=true" in env and "FMCTL_EXPECTED_GPUS=4" in env
    assert pcs.path("/opt/fmctl/slurm/prolog.d/80-fmctl-imex.sh").is_file()
