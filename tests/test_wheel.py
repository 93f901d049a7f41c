"""What the installed wheel contains: the product, and none of the tests' doubles (fault
injection, the request log, the seeding and control endpoints)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What `--sandbox` needs, and nothing else of the sandbox ships.
SANDBOX_FILES = {
    "__init__.py",
    "block_events.py",
    "crd_schema.py",
    "daemon.py",
    "ec2_mend.py",
    "ec2_capacity.py",
    "eks.py",
    "eks_asg.py",
    "eks_autoscaler.py",
    "eks_autoscaler_view.py",
    "eks_identity.py",
    "eks_model.py",
    "eks_network.py",
    "eks_parts.py",
    "eks_repair.py",
    "fsx_update.py",
    "kube.py",
    "kube_apply.py",
    "kube_controllers.py",
    "kube_crds.py",
    "kube_dra.py",
    "kube_evict.py",
    "kube_jobs.py",
    "kube_kueue.py",
    "kube_kueue_checks.py",
    "kube_kueue_tas.py",
    "kube_kueue_model.py",
    "kube_model.py",
    "kube_patch.py",
    "kube_policies.py",
    "kube_programs.py",
    "node_gpus.py",
    "node_tools.py",
    "kube_protocol.py",
    "kube_resources.py",
    "kube_webhooks.py",
    "kube_workloads.py",
    "pcs.py",
    "pod_identity.py",
    "pcs_health.py",
    "pcs_lifecycle.py",
    "pcs_repair.py",
    "pricing.py",
    "scheduler_run.py",
    "cost_explorer.py",
    "budgets.py",
    "iam_eval.py",
    "lambda_run.py",
    "lambda_host.py",
    "pcs_model.py",
    "pcs_queues.py",
    "protocol.py",
    "server.py",
    "shims.py",
    "sigv4.py",
    "ssm_agent.py",
    "tls.py",
    "topology.py",
}
#: Marks of the tests' doubles (tests/tools/sandbox_doubles.py).
TEST_ONLY = ("/_fmctl/", "FaultRule", "reset-after", "X-Fmctl-Secret", "node-tools")


def test_the_wheel_ships_no_test_doubles(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("fmctl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        sandbox = {
            n.removeprefix("fmctl_sandbox/") for n in names if n.startswith("fmctl_sandbox/")
        }
        assert sandbox == SANDBOX_FILES
        assert not [n for n in names if n.startswith("tests/")]
        for name in names:
            if name.endswith(".py"):
                text = archive.read(name).decode()
                found = [mark for mark in TEST_ONLY if mark in text]
                assert not found, (name, found)
